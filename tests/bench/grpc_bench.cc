// grpc_bench: closed-loop load against Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on loopback,
// for tests/bench/run_grpc_bench.sh. Not a test: it prints figures.
//
// --concurrency calls are in flight at all times: when a call completes, the
// next one starts at once, until --duration-ms has passed; then the calls in
// flight are waited for. Every call asks about one descriptor,
// (<--descriptor-key>, <i>) with i uniform in [0, --keys), in --domain, with
// hits_addend 0 (a cost of 1): one call is one decision. Latency is the time
// from starting a call to taking its completion off the queue.
//
// gRPC: the async API with one CompletionQueue drained by the main thread
// alone (the generator runs pinned to one core, where more threads would only
// take turns). The calls are spread round-robin over --channels channels,
// each its own HTTP/2 connection (a local subchannel pool; by default gRPC
// shares one connection among channels to the same target). Every channel is
// connected before the clock starts. Every call has a deadline of
// --call-timeout-ms, so a run ends within --duration-ms plus that.
//
// Prints one table row like tally-loadgen's, and the result as a one-line
// JSON object (to --json, or to stdout without it). Exit status: 0 on
// success, 1 when calls failed (non-OK status or an UNKNOWN overall code),
// 2 when the run could not start.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include "cluster/latency_histogram.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "node/common/version.h"

namespace tally {
namespace {

namespace rls = envoy::service::ratelimit::v3;

struct BenchOptions {
  std::string address = "127.0.0.1";
  int port = 0;
  int concurrency = 1;  // calls in flight
  int channels = 1;     // HTTP/2 connections the calls are spread over
  uint64_t duration_ms = 5'000;
  uint64_t keys = 100'000;
  std::string domain = "bench";
  std::string descriptor_key = "tenant";
  uint64_t seed = 1;
  uint64_t call_timeout_ms = 10'000;
  uint64_t connect_timeout_ms = 5'000;
};

struct BenchResult {
  double duration_s = 0;  // from the first call started to the last completed
  uint64_t calls = 0;     // completed, whatever the outcome
  uint64_t allowed = 0;   // overall_code OK
  uint64_t denied = 0;    // overall_code OVER_LIMIT
  uint64_t errors = 0;    // a non-OK status or an UNKNOWN overall code
  std::string first_error;
  cluster::LatencyHistogram latency;
};

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// One of the calls in flight; its address is the completion queue tag.
struct Call {
  rls::RateLimitService::Stub* stub = nullptr;
  rls::RateLimitRequest request;  // one descriptor with one entry; the value changes
  rls::RateLimitResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientContext> context;  // a context serves one call only
  std::unique_ptr<grpc::ClientAsyncResponseReader<rls::RateLimitResponse>> reader;
  uint64_t started_ns = 0;
};

void StartCall(Call* call, const std::string& value, uint64_t timeout_ms,
               grpc::CompletionQueue* queue) {
  call->context = std::make_unique<grpc::ClientContext>();
  call->context->set_deadline(std::chrono::system_clock::now() +
                              std::chrono::milliseconds(timeout_ms));
  call->request.mutable_descriptors(0)->mutable_entries(0)->set_value(value);
  call->response.Clear();
  call->started_ns = NowNs();
  call->reader = call->stub->AsyncShouldRateLimit(call->context.get(), call->request, queue);
  call->reader->Finish(&call->response, &call->status, call);
}

void CountOutcome(const Call& call, BenchResult* result) {
  std::string error;
  if (!call.status.ok()) {
    error =
        "status " + std::to_string(call.status.error_code()) + ": " + call.status.error_message();
  } else if (call.response.overall_code() == rls::RateLimitResponse::OK) {
    ++result->allowed;
  } else if (call.response.overall_code() == rls::RateLimitResponse::OVER_LIMIT) {
    ++result->denied;
  } else {
    error = "overall_code " + rls::RateLimitResponse::Code_Name(call.response.overall_code());
  }
  if (error.empty()) return;
  if (result->errors++ == 0) result->first_error = error;
}

// Connects options.channels channels, then runs the load. False, with a
// message on stderr, when a channel does not connect in time.
bool RunLoad(const BenchOptions& options, BenchResult* result) {
  const std::string target = options.address + ":" + std::to_string(options.port);
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::vector<std::unique_ptr<rls::RateLimitService::Stub>> stubs;
  const auto connect_deadline =
      std::chrono::system_clock::now() + std::chrono::milliseconds(options.connect_timeout_ms);
  for (int i = 0; i < options.channels; ++i) {
    auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments);
    if (!channel->WaitForConnected(connect_deadline)) {
      std::fprintf(stderr, "grpc_bench: cannot connect to %s within %llu ms\n", target.c_str(),
                   static_cast<unsigned long long>(options.connect_timeout_ms));
      return false;
    }
    stubs.push_back(rls::RateLimitService::NewStub(channel));
  }

  std::vector<std::string> values;
  values.reserve(options.keys);
  for (uint64_t i = 0; i < options.keys; ++i) values.push_back(std::to_string(i));
  std::mt19937_64 random(options.seed);
  std::uniform_int_distribution<size_t> pick(0, values.size() - 1);

  std::vector<Call> calls(static_cast<size_t>(options.concurrency));
  for (size_t i = 0; i < calls.size(); ++i) {
    calls[i].stub = stubs[i % stubs.size()].get();
    calls[i].request.set_domain(options.domain);
    calls[i].request.add_descriptors()->add_entries()->set_key(options.descriptor_key);
  }

  grpc::CompletionQueue queue;
  const uint64_t start_ns = NowNs();
  const uint64_t end_ns = start_ns + options.duration_ms * 1'000'000;
  for (Call& call : calls) StartCall(&call, values[pick(random)], options.call_timeout_ms, &queue);
  size_t in_flight = calls.size();
  uint64_t last_ns = start_ns;
  void* tag = nullptr;
  bool ok = false;
  while (in_flight > 0 && queue.Next(&tag, &ok)) {
    Call* call = static_cast<Call*>(tag);
    last_ns = NowNs();
    result->latency.Record(last_ns - call->started_ns);
    ++result->calls;
    CountOutcome(*call, result);
    if (last_ns < end_ns) {
      StartCall(call, values[pick(random)], options.call_timeout_ms, &queue);
    } else {
      --in_flight;
    }
  }
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  result->duration_s = static_cast<double>(last_ns - start_ns) / 1e9;
  return true;
}

double PerSecond(const BenchResult& result) {
  return result.duration_s > 0 ? static_cast<double>(result.calls) / result.duration_s : 0;
}

std::string ResultJson(const std::string& label, const BenchOptions& options,
                       const BenchResult& result) {
  nlohmann::ordered_json json = {{"label", label},
                                 {"target", "grpc"},
                                 {"concurrency", options.concurrency},
                                 {"channels", options.channels},
                                 {"keys", options.keys},
                                 {"duration_s", result.duration_s},
                                 {"requests", result.calls},
                                 {"decisions", result.calls},
                                 {"decisions_per_s", PerSecond(result)},
                                 {"allowed", result.allowed},
                                 {"denied", result.denied},
                                 {"errors", result.errors}};
  json.update(cluster::LatencyJson(result.latency));
  return json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void PrintRow(const std::string& label, const BenchOptions& options, const BenchResult& result,
              bool header) {
  if (header) {
    std::printf("%-24s %-6s %6s %5s %13s %9s %9s %9s %9s %11s %11s %7s\n", "label", "target",
                "concur", "chans", "decisions/s", "p50_us", "p99_us", "p999_us", "max_us",
                "allowed", "denied", "errors");
  }
  std::printf("%-24s %-6s %6d %5d %13.0f %9.1f %9.1f %9.1f %9.1f %11llu %11llu %7llu\n",
              label.c_str(), "grpc", options.concurrency, options.channels, PerSecond(result),
              cluster::Micros(result.latency.PercentileNs(0.5)),
              cluster::Micros(result.latency.PercentileNs(0.99)),
              cluster::Micros(result.latency.PercentileNs(0.999)),
              cluster::Micros(result.latency.max_ns()),
              static_cast<unsigned long long>(result.allowed),
              static_cast<unsigned long long>(result.denied),
              static_cast<unsigned long long>(result.errors));
}

int Main(int argc, char** argv) {
  CLI::App app{"grpc_bench: closed-loop load against Envoy's rate limit service over gRPC."};
  app.set_version_flag("--version", VersionLine("grpc_bench"));
  app.footer(
      "Keeps --concurrency ShouldRateLimit calls in flight for --duration-ms, then waits for\n"
      "them. Exit status: 0 on success, 1 when calls failed, 2 when the run could not start.");
  BenchOptions options;
  std::string label = "grpc";
  std::string json_path;
  bool no_header = false;
  app.add_option("--address", options.address, "host of the gRPC front")->capture_default_str();
  app.add_option("--port", options.port, "port of the gRPC front")
      ->required()
      ->check(CLI::Range(1, 65'535));
  app.add_option("--concurrency", options.concurrency, "calls in flight")
      ->capture_default_str()
      ->check(CLI::Range(1, 100'000));
  app.add_option("--channels", options.channels,
                 "channels (HTTP/2 connections) the calls are spread over; at most --concurrency")
      ->capture_default_str()
      ->check(CLI::Range(1, 1'000));
  app.add_option("--duration-ms", options.duration_ms, "how long calls are started")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{3'600'000}));
  app.add_option("--keys", options.keys, "distinct descriptor values 0 .. <keys-1>")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{10'000'000}));
  app.add_option("--domain", options.domain, "the requests' domain")->capture_default_str();
  app.add_option("--descriptor-key", options.descriptor_key, "the descriptor entry's key")
      ->capture_default_str();
  app.add_option("--seed", options.seed, "seed of the value choice")->capture_default_str();
  app.add_option("--call-timeout-ms", options.call_timeout_ms,
                 "deadline of each call; a call past it counts as an error")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{3'600'000}));
  app.add_option("--connect-timeout-ms", options.connect_timeout_ms,
                 "how long the channels may take to connect")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{3'600'000}));
  app.add_option("--label", label, "the run's name in the table and the JSON")
      ->capture_default_str();
  app.add_option("--json", json_path, "write the JSON object to this file instead of stdout");
  app.add_flag("--no-header", no_header, "print the table row without the header line");
  CLI11_PARSE(app, argc, argv);
  if (options.channels > options.concurrency) {
    std::fprintf(stderr, "grpc_bench: --channels must not exceed --concurrency\n");
    return 2;
  }

  BenchResult result;
  if (!RunLoad(options, &result)) return 2;
  PrintRow(label, options, result, !no_header);
  const std::string json = ResultJson(label, options, result);
  if (json_path.empty()) {
    std::printf("%s\n", json.c_str());
  } else {
    std::ofstream file(json_path);
    file << json << "\n";
    if (!file.flush()) {
      std::fprintf(stderr, "grpc_bench: cannot write %s\n", json_path.c_str());
      return 2;
    }
  }
  if (result.errors > 0) {
    std::fprintf(stderr, "grpc_bench: %s: %llu failed calls, the first: %s\n", label.c_str(),
                 static_cast<unsigned long long>(result.errors), result.first_error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tally

int main(int argc, char** argv) { return tally::Main(argc, argv); }
