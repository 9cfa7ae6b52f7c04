// Checker: the invariants a simulation checks as it runs, each from what
// README and docs/design-coordination.md state:
//  - Admissions per window. In every window of wall time (aligned, as the
//    nodes' windows are), all nodes together admit on a key at most what a
//    central limiter could (the limit; a token bucket: the burst plus one
//    window's refill) plus the overshoot bound: min(R x S, (N - 1) x limit),
//    where R x S is the most the cluster admitted on the key within any S
//    (one gossip interval, the network's longest delay and twice the largest
//    clock offset); plus limit / 32 (what nodes keep back far from a limit);
//    plus one request per node (a share near a limit passes by one); plus,
//    for each crash in the window or the one before, what the crashed node
//    admitted on the key in its last round. In a window that a fault makes
//    views stale for longer than S (a loss, a cut, a link down, a crash, a
//    clock step, a member joining or leaving) R x S is unbounded and the
//    bound is that of local-only limiting: N x limit, plus the rest.
//  - Views never go back: after a node merges a peer's state, its view of
//    each slot the peer sent is at least what was sent (counting algorithms).
// The simulation checks convergence, crash losses and membership at the end
// of a run (simulation.h).
//
// Thread safety: none (the simulation is single-threaded).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "node/common/key_snapshot.h"
#include "node/engine/limiter.h"
#include "node/sim/workload.h"

namespace tally::sim {

class Checker {
 public:
  struct Options {
    size_t max_nodes = 3;      // the most members the cluster had at once
    int64_t staleness_ms = 0;  // S
    int64_t window_ms = 1'000;
  };
  Checker(const Options& options, const std::vector<SimKey>* keys)
      : options_(options), keys_(keys) {}

  // Admissions by a node / by the central limiter, at the simulation's time.
  // A violation of the window bound is returned.
  std::optional<std::string> NodeAdmitted(size_t key, NodeId node, int64_t at_ms);
  void CentralAdmitted(size_t key, int64_t at_ms);
  // Views are stale beyond S from from_ms to to_ms (a fault).
  void Degrade(int64_t from_ms, int64_t to_ms);
  // A node crashed: what it admitted in its last round counts as lost.
  void Crashed(NodeId node, int64_t at_ms, int64_t round_ms);
  // After `at` merged `entries` from `from`: every slot sent is held.
  static std::optional<std::string> CheckViewHolds(NodeId at, Limiter& limiter, NodeId from,
                                                   std::span<const KeySnapshot> entries);

  struct Totals {
    uint64_t admitted = 0;  // by the cluster
    uint64_t central = 0;
    uint64_t worst_window = 0;  // the most the cluster admitted on one key in one window
    uint64_t windows = 0;
  };
  // By load kind (workload.h), over the whole run.
  const Totals& totals(LoadKind kind) const { return totals_[static_cast<int>(kind)]; }
  uint64_t windows_degraded() const { return windows_degraded_; }

 private:
  struct KeyWindows {
    int64_t window = INT64_MIN;  // the current window's index
    uint64_t admitted = 0, central = 0;
    int64_t central_window = INT64_MIN;
    uint64_t most_within_s = 0;                      // R x S in the window
    std::deque<std::pair<int64_t, NodeId>> recent;   // admissions of the last window, by time
    uint64_t crash_slack = 0, next_crash_slack = 0;  // this window's, and the next one's
  };
  int64_t WindowOf(int64_t at_ms) const;
  bool Degraded(int64_t window) const;
  KeyWindows& Windows(size_t key);

  const Options options_;
  const std::vector<SimKey>* const keys_;
  std::vector<KeyWindows> windows_;
  std::vector<std::pair<int64_t, int64_t>> degraded_;  // [from_ms, to_ms]
  Totals totals_[kLoadKinds];
  uint64_t windows_degraded_ = 0;
};

}  // namespace tally::sim
