// tally's Redis front from ioredis: CL.THROTTLE (redis-cell's command) and
// TALLY.CHECK, four requests each against a limit of 3.
// Usage: node resp_example.js [HOST:PORT]   (default 127.0.0.1:6380, tallyd --resp-port)
const Redis = require("ioredis");

async function main() {
  const [host, port] = (process.argv[2] ?? "127.0.0.1:6380").split(":");
  const redis = new Redis({ host, port: Number(port), connectTimeout: 5000, commandTimeout: 5000 });
  for (let i = 0; i < 4; i++) {
    // A bucket of 3 (max_burst 2) refilled with 3 tokens per 60 s.
    const [limited, , remaining, retryAfter] = await redis.call("CL.THROTTLE", "user:7", 2, 3, 60);
    console.log(limited ? `CL.THROTTLE user:7: denied, retry after ${retryAfter} s`
                        : `CL.THROTTLE user:7: allowed, remaining ${remaining}`);
  }
  for (let i = 0; i < 4; i++) {
    // A sliding window of 60 s holding 3 requests. RESP2 replies name/value pairs.
    const reply = await redis.call("TALLY.CHECK", "user:42", "sliding_counter", 3, 60000);
    const decision = {};
    for (let j = 0; j < reply.length; j += 2) decision[reply[j]] = reply[j + 1];
    console.log(decision.allowed ? `TALLY.CHECK user:42: allowed, remaining ${decision.remaining}`
                                 : `TALLY.CHECK user:42: denied, retry after ${decision.retry_after_ms} ms`);
  }
  redis.disconnect();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
