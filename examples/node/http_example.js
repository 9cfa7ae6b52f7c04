// tally's HTTP API from Node.js's built-in fetch: four checks of one limit
// (3 per minute), with the headers of each answer.
// Usage: node http_example.js [URL]   (default http://127.0.0.1:8080, tallyd --http-port)
async function main() {
  const url = (process.argv[2] ?? "http://127.0.0.1:8080") + "/v1/check";
  const body = JSON.stringify({ key: "user:42", limit: 3, window_ms: 60000 });
  for (let i = 0; i < 4; i++) {
    const response = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body,
      signal: AbortSignal.timeout(5000),
    });
    const decision = await response.json();
    console.log(response.ok
      ? `POST /v1/check user:42: allowed, remaining ${decision.remaining}`
      : `POST /v1/check user:42: denied, retry after ${response.headers.get("retry-after")} s (${response.status})`);
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
