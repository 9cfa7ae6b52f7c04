// tally-loadgen: closed-loop or fixed-rate load against tallyd or a Redis baseline, for
// benchmarks on loopback. Prints one table row (and optionally writes a JSON
// object); see --help. Exit status: 0 on success, 1 when replies reported
// errors, 2 when the run could not start or aborted.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cluster/loadgen.h"
#include "node/common/host_port.h"
#include "node/common/version.h"

namespace tally::cluster {
namespace {

constexpr LoadTarget kTargets[] = {LoadTarget::kTally, LoadTarget::kRedisLua,
                                   LoadTarget::kRedisIncr};
constexpr KeyDistribution kDistributions[] = {KeyDistribution::kUniform, KeyDistribution::kZipf};
constexpr Algorithm kAlgorithms[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                                     Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket};
static_assert(std::size(kAlgorithms) == kAlgorithmCount);

// The names of an enum's values, for CLI::IsMember.
template <typename Enum, size_t N>
std::vector<std::string> Names(const Enum (&values)[N], std::string_view (*name_of)(Enum)) {
  std::vector<std::string> names;
  for (const Enum value : values) names.emplace_back(name_of(value));
  return names;
}

// The value called `name`; CLI::IsMember has checked that there is one.
template <typename Enum, size_t N>
Enum Named(const Enum (&values)[N], std::string_view (*name_of)(Enum), std::string_view name) {
  return *std::find_if(std::begin(values), std::end(values),
                       [&](Enum value) { return name_of(value) == name; });
}

double PerSecond(uint64_t count, double duration_s) {
  return duration_s > 0 ? static_cast<double>(count) / duration_s : 0;
}

std::string ResultJson(const std::string& label, const LoadOptions& options,
                       const LoadResult& result) {
  nlohmann::ordered_json json = {
      {"label", label},
      {"target", LoadTargetName(options.target)},
      {"connections", options.connections},
      {"depth", options.depth},
      {"batch", options.batch},
      {"rate_per_s", options.rate_per_s},
      {"keys", options.keys},
      {"distribution", KeyDistributionName(options.distribution)},
      {"duration_s", result.duration_s},
      {"requests", result.requests},
      {"decisions", result.decisions},
      {"requests_per_s", PerSecond(result.requests, result.duration_s)},
      {"decisions_per_s", PerSecond(result.decisions, result.duration_s)},
      {"allowed", result.allowed},
      {"denied", result.denied},
      {"errors", result.errors}};
  if (options.count_denied_keys) json["keys_denied"] = result.keys_denied;
  json.update(LatencyJson(result.latency));
  return json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void PrintRow(const std::string& label, const LoadOptions& options, const LoadResult& result,
              bool header) {
  if (header) {
    std::printf("%-24s %-10s %5s %5s %5s %13s %12s %9s %9s %9s %9s %11s %11s %7s\n", "label",
                "target", "conns", "depth", "batch", "decisions/s", "requests/s", "p50_us",
                "p99_us", "p999_us", "max_us", "allowed", "denied", "errors");
  }
  std::printf(
      "%-24s %-10s %5d %5d %5d %13.0f %12.0f %9.1f %9.1f %9.1f %9.1f %11llu %11llu %7llu\n",
      label.c_str(), std::string(LoadTargetName(options.target)).c_str(), options.connections,
      options.depth, options.batch, PerSecond(result.decisions, result.duration_s),
      PerSecond(result.requests, result.duration_s), Micros(result.latency.PercentileNs(0.5)),
      Micros(result.latency.PercentileNs(0.99)), Micros(result.latency.PercentileNs(0.999)),
      Micros(result.latency.max_ns()), static_cast<unsigned long long>(result.allowed),
      static_cast<unsigned long long>(result.denied),
      static_cast<unsigned long long>(result.errors));
}

int Main(int argc, char** argv) {
  CLI::App app{
      "tally-loadgen: closed-loop or fixed-rate load against tallyd or Redis, for loopback "
      "benchmarks."};
  app.set_version_flag("--version", tally::VersionLine("tally-loadgen"));
  app.footer(
      "Each connection keeps --depth requests in flight (with --rate: sends its share of it)\n"
      "until --duration-ms has passed or --requests have been sent, then waits for the replies\n"
      "and closes. Exit status: 0 on success, 1 when replies reported errors, 2 when a\n"
      "connection failed or a reply was not understood.");
  LoadOptions options;
  std::vector<std::string> addresses;
  std::string algorithm = "sliding_counter";
  std::string label;
  std::string json_path;
  bool no_header = false;

  std::string target = "tally";
  std::string distribution = "uniform";
  app.add_option("--target", target,
                 "tally: the daemon's protocol; redis-lua: EVALSHA of Redis users' sliding window "
                 "counter script; redis-incr: INCR")
      ->capture_default_str()
      ->check(CLI::IsMember(Names(kTargets, LoadTargetName)));
  app.add_option("--address", addresses,
                 "host:port of a server; repeat for several (connections round-robin)")
      ->required();
  app.add_option("--connections", options.connections, "connections in total")
      ->capture_default_str()
      ->check(CLI::Range(1, 100'000));
  app.add_option("--depth", options.depth, "requests in flight per connection (pipelining)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100'000));
  app.add_option("--batch", options.batch, "checks per tally request (Redis targets: always 1)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10'000));
  app.add_option("--keys", options.keys, "distinct keys k:0 .. k:<keys-1>")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{10'000'000}));
  app.add_option("--distribution", distribution, "key popularity")
      ->capture_default_str()
      ->check(CLI::IsMember(Names(kDistributions, KeyDistributionName)));
  app.add_option("--zipf-s", options.zipf_s, "zipf exponent (key of rank r has weight 1/r^s)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  auto* duration =
      app.add_option("--duration-ms", options.duration_ms,
                     "run this long (default 5000 unless --requests is given; 0: no limit)");
  app.add_option("--requests", options.max_requests,
                 "stop after this many requests in total (0: no limit)");
  app.add_option("--rate", options.rate_per_s,
                 "requests per second, all connections together, each sending its share at even "
                 "intervals with fewer than --depth in flight (0: closed loop, as fast as the "
                 "replies come)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{0}, uint64_t{1'000'000'000}));
  app.add_option("--algorithm", algorithm, "tally's algorithm")
      ->capture_default_str()
      ->check(CLI::IsMember(Names(kAlgorithms, AlgorithmName)));
  app.add_option("--limit", options.spec.limit, "the limit per key and window (all targets)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{0}, kMaxLimit));
  app.add_option("--window-ms", options.spec.window_ms, "the window (tally, redis-lua)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, kMaxWindowMs));
  app.add_option("--threads", options.threads, "event-loop threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--seed", options.seed, "seed of the key choice")->capture_default_str();
  app.add_option("--stall-timeout-ms", options.stall_timeout_ms,
                 "abort when a connection gets no reply for this long")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{3'600'000}));
  app.add_option("--label", label,
                 "the run's name in the table and the JSON (default: the target)");
  app.add_option("--json", json_path, "also write the result to this file as a JSON object");
  app.add_flag("--count-denied-keys", options.count_denied_keys,
               "count the keys denied at least once (keys_denied in the JSON; tally only)");
  app.add_flag("--no-header", no_header, "print the table row without the header line");
  CLI11_PARSE(app, argc, argv);

  for (const std::string& address : addresses) {
    HostPort endpoint;
    if (const Status status = ParseHostPort(address, &endpoint); !status.ok()) {
      std::fprintf(stderr, "tally-loadgen: --address: %s\n", std::string(status.message()).c_str());
      return 2;
    }
    options.endpoints.push_back(endpoint);
  }
  options.target = Named(kTargets, LoadTargetName, target);
  options.distribution = Named(kDistributions, KeyDistributionName, distribution);
  options.spec.algorithm = Named(kAlgorithms, AlgorithmName, algorithm);
  if (options.target != LoadTarget::kTally) options.batch = 1;
  if (options.target != LoadTarget::kTally && options.count_denied_keys) {
    std::fprintf(stderr, "tally-loadgen: --count-denied-keys needs --target tally\n");
    return 2;
  }
  if (duration->count() == 0 && options.max_requests > 0) options.duration_ms = 0;
  if (options.duration_ms == 0 && options.max_requests == 0) {
    std::fprintf(stderr, "tally-loadgen: give --duration-ms or --requests a non-zero value\n");
    return 2;
  }
  if (label.empty()) label = LoadTargetName(options.target);

  LoadResult result;
  if (const Status status = RunLoad(options, &result); !status.ok()) {
    std::fprintf(stderr, "tally-loadgen: %s: %s\n", label.c_str(), status.ToString().c_str());
    return 2;
  }
  PrintRow(label, options, result, !no_header);
  if (!json_path.empty()) {
    std::ofstream json(json_path);
    json << ResultJson(label, options, result) << "\n";
    if (!json.flush()) {
      std::fprintf(stderr, "tally-loadgen: cannot write %s\n", json_path.c_str());
      return 2;
    }
  }
  if (result.errors > 0) {
    std::fprintf(stderr, "tally-loadgen: %s: %llu error replies, the first: %s\n", label.c_str(),
                 static_cast<unsigned long long>(result.errors), result.first_error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tally::cluster

int main(int argc, char** argv) { return tally::cluster::Main(argc, argv); }
