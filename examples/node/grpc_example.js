// Envoy's rate limit service on tally's gRPC front, from @grpc/grpc-js: four
// ShouldRateLimit calls for one descriptor under examples/policies/example.yaml
// (3 an hour per user). The messages are loaded from tally's copy of Envoy's protos.
// Usage: node grpc_example.js [HOST:PORT [PROTO_DIR]]   (default 127.0.0.1:8081, ../../protocol)
const path = require("path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const target = process.argv[2] ?? "127.0.0.1:8081";
const protoDir = process.argv[3] ?? path.join(__dirname, "..", "..", "protocol");
const definition = protoLoader.loadSync("envoy/service/ratelimit/v3/rls.proto", {
  includeDirs: [protoDir],
  enums: String,
  longs: Number,
  defaults: true, // proto3 leaves zeros out: limitRemaining 0 included
});
const { RateLimitService } = grpc.loadPackageDefinition(definition).envoy.service.ratelimit.v3;
const client = new RateLimitService(target, grpc.credentials.createInsecure());

function shouldRateLimit(request) {
  return new Promise((resolve, reject) => {
    const deadline = Date.now() + 5000;
    client.shouldRateLimit(request, { deadline }, (error, response) =>
      error ? reject(error) : resolve(response));
  });
}

async function main() {
  const request = { domain: "example", descriptors: [{ entries: [{ key: "user", value: "42" }] }] };
  for (let i = 0; i < 4; i++) {
    const response = await shouldRateLimit(request);
    const status = response.statuses[0];
    const wait = status.durationUntilReset; // rounded up to whole seconds
    console.log(response.overallCode === "OK"
      ? `ShouldRateLimit user=42: allowed, remaining ${status.limitRemaining}`
      : `ShouldRateLimit user=42: denied, retry after ${wait.seconds + (wait.nanos > 0)} s`);
  }
  client.close();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
