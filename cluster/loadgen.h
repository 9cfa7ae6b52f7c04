// The load generator: drives a tally daemon or a Redis baseline with closed
// loop traffic, or at a fixed rate, and measures throughput and latency.
//
// Each connection keeps exactly `depth` requests in flight: it sends `depth`
// at the start, then one more for every response received, until the run
// ends (duration elapsed or request budget spent); then it waits for the
// requests still in flight and closes. With rate_per_s, each connection
// sends its share of the rate instead, one request at even intervals (the
// connections' sends staggered), as long as it has fewer than `depth` in
// flight; one that falls behind sends what fell due at once. Latency is the
// time from writing a request to reading its response (responses come back
// in order).
//
// Threads: RunLoad starts `threads` event-loop threads, each with its own
// io_context; connection i lives on thread i % threads from connect to close
// and all of its state is owned by that thread. Per-thread counters and
// histograms are merged after the threads have joined. The only state shared
// while running is read-only (key table, options) plus the request budget
// and the abort flag (atomics).
//
// Failures: an error reply (tally: an error response or a per-check error;
// Redis: an error reply) is counted in LoadResult::errors and the run goes
// on. A connection that cannot be opened, breaks, stalls for stall_timeout_ms,
// or receives a reply the generator does not expect aborts the whole run:
// RunLoad returns a non-OK Status saying what happened.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/latency_histogram.h"
#include "node/common/host_port.h"
#include "node/common/limit.h"
#include "node/common/status.h"

namespace tally::cluster {

enum class LoadTarget { kTally, kRedisLua, kRedisIncr };
enum class KeyDistribution { kUniform, kZipf };

struct LoadOptions {
  LoadTarget target = LoadTarget::kTally;
  std::vector<HostPort> endpoints;  // connection i goes to endpoints[i % size]
  int connections = 50;
  int depth = 1;  // requests in flight per connection
  int batch = 1;  // checks per tally request; Redis sends one per request
  uint64_t keys = 100'000;
  KeyDistribution distribution = KeyDistribution::kUniform;
  double zipf_s = 1.0;
  uint64_t duration_ms = 5'000;  // 0: no time limit (then max_requests must be set)
  uint64_t max_requests = 0;     // 0: no request limit
  // Requests per second, all connections together: a fixed load whatever the
  // replies' latency (a sustained load's cost); 0: closed loop, as fast as they come.
  uint64_t rate_per_s = 0;
  LimitSpec spec{Algorithm::kSlidingWindowCounter, kMaxLimit, 60'000};
  int threads = 1;
  uint64_t seed = 1;
  uint64_t stall_timeout_ms = 10'000;  // a connection without any reply this long aborts the run
  // Count the distinct keys denied at least once (LoadResult::keys_denied); tally target only.
  bool count_denied_keys = false;
};

struct LoadResult {
  double duration_s = 0;   // from the first request to the last response
  uint64_t requests = 0;   // requests answered
  uint64_t decisions = 0;  // allowed + denied + errors (an error reply counts once)
  uint64_t allowed = 0;
  uint64_t denied = 0;
  uint64_t errors = 0;
  std::string first_error;   // the first error reply, for the report
  uint64_t keys_denied = 0;  // with count_denied_keys: keys with at least one denial
  LatencyHistogram latency;
};

// Opens options.connections connections (each completes its handshake, e.g.
// SCRIPT LOAD, before the clock starts), runs the load, closes them.
Status RunLoad(const LoadOptions& options, LoadResult* result);

std::string_view LoadTargetName(LoadTarget target);  // "tally", "redis-lua", "redis-incr"
std::string_view KeyDistributionName(KeyDistribution distribution);  // "uniform", "zipf"

}  // namespace tally::cluster
