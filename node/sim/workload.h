// Workload: the clients of a simulation, by the schedules of the accuracy
// benchmark: steady overload (2x and 10x a key's limit), Poisson demand
// below it (0.5x), bursts on fresh keys (5x the limit within 20 ms, at every
// node), and many far keys picked by a zipf law (a key's limit far above its
// demand), for each algorithm asked for. A request goes to a node picked
// uniformly among those that serve; a far key's mostly to its own node
// (far_affinity).
//
// Thread safety: none (the simulation is single-threaded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "node/common/limit.h"
#include "node/sim/random.h"

namespace tally::sim {

struct WorkloadOptions {
  std::vector<Algorithm> algorithms = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                                       Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket};
  uint64_t limit = 100;  // near keys' limit per window
  int64_t window_ms = 1'000;
  size_t far_keys = 250;       // per algorithm
  double far_rate_per_s = 50;  // all far keys of an algorithm together
  uint64_t far_limit = 100'000;
  // The share of a far key's requests that reach the key's own node, as
  // behind a sticky balancer (the rest reach any node): so most far keys
  // are admitted by a few nodes, the common case.
  double far_affinity = 0.9;
  // Far keys' window: an hour, so that their counts outlive a run and the
  // simulation can see every node converge on them.
  int64_t far_window_ms = 3'600'000;
};

// The keys' kinds, for the report: admitted / central by kind.
enum class LoadKind : uint8_t { kOverload2x, kOverload10x, kBelow, kBurst, kFar };
inline constexpr int kLoadKinds = 5;
const char* LoadKindName(LoadKind kind);

struct SimKey {
  std::string key;
  LimitSpec spec;
  LoadKind kind = LoadKind::kFar;
};

// A request due: key index into Workload::keys().
struct Request {
  int64_t at_ms = 0;
  size_t key = 0;
};

class Workload {
 public:
  Workload(const WorkloadOptions& options, Random* random);

  // The requests of [from_ms, to_ms), in time order; fresh burst keys are
  // added to keys() as their bursts come.
  std::vector<Request> Requests(int64_t from_ms, int64_t to_ms);
  const std::vector<SimKey>& keys() const { return keys_; }

 private:
  // A Poisson stream of `rate_per_s` over keys [first, first + count), zipf when count > 1.
  struct Stream {
    size_t first = 0;
    size_t count = 1;
    double rate_per_s = 0;
    int64_t next_ms = 0;
  };
  size_t PickZipf(size_t count);

  const WorkloadOptions options_;
  Random* const random_;
  std::vector<SimKey> keys_;
  std::vector<Stream> streams_;
  std::vector<double> zipf_cdf_;  // over far_keys
  int64_t next_burst_ms_ = 0;
  uint64_t bursts_ = 0;
};

}  // namespace tally::sim
