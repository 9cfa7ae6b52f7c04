// History: every decision a test driver got from a cluster (node, key, when
// it was sent and answered, the window it counted in, allowed or not), and a
// checker that holds each window of each key to the bound README and
// ARCHITECTURE.md state for the conditions the test made.
//
// For a fixed window of `limit` with cost-1 checks, one central node would
// admit min(requests, limit) per window. The cluster must admit:
// - at most limit + excess, where excess is what the requests arriving while
//   views are stale could add: min(requests per ms x staleness_ms,
//   (deciders - 1) x limit). `deciders` is how many nodes, or groups of
//   nodes, decide on views that may miss each other's latest admissions: the
//   cluster's size when connected (ARCHITECTURE.md's overshoot bound), the
//   number of sides of a partition in fail-open mode (then staleness_ms is
//   the whole window: a side never sees the other's admissions);
// - at least min(requests, limit): a node denies only when what it knows of
//   the window has reached the limit, and what it knows never exceeds what
//   was admitted, so a window with a denial admitted the limit (no false 429
//   while the key is under its limit).
// A window that breaks either is a violation; its report names the window
// and quotes the decisions around it.
//
// Thread safety: Record from any thread; the rest once recording is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tally::cluster {

struct Observed {
  size_t node = 0;
  std::string key;
  int64_t sent_ms = 0;       // wall clock, unix ms
  int64_t answered_ms = 0;   // wall clock, unix ms
  int64_t window_index = 0;  // the window the node counted the check in
  bool allowed = false;
};

class History {
 public:
  void Record(Observed observed);
  // Every decision, by the time it was answered.
  std::vector<Observed> Sorted() const;

 private:
  mutable std::mutex mutex_;
  std::vector<Observed> observed_;  // guarded by mutex_
};

struct HistoryBound {
  uint64_t limit = 0;
  int64_t window_ms = 1'000;
  int64_t staleness_ms = 0;  // how old a node's view of the others may be
  size_t deciders = 1;       // nodes or groups deciding on views that may miss each other's
  // Also hold every window to the floor (a window with a denial admitted the
  // limit). Not with clocks that disagree: a node ahead denies in its next
  // window while the others' current one is still under the limit.
  bool floor = true;
};

struct WindowVerdict {
  std::string key;
  int64_t window_index = 0;
  uint64_t requests = 0;
  uint64_t admitted = 0;
  uint64_t central = 0;  // what one central node admits for the same requests
  uint64_t most = 0;     // the bound: at most this many may be admitted
  bool ok = true;
};

struct HistoryVerdict {
  std::vector<WindowVerdict> windows;
  std::vector<std::string> violations;  // each with its window and an excerpt
  double worst_ratio = 0;               // the highest admitted / central of a window with demand
  double mean_ratio = 0;                // over the windows with demand

  bool ok() const { return violations.empty(); }
  // One line per window: key, window, requests, admitted, central, bound.
  std::string Table() const;
};

// The history with each decision's window taken from the time it was sent
// (the driver's clock), rather than the window the node counted it in: what
// clients see when the nodes' clocks disagree.
std::vector<Observed> BySentWindow(std::vector<Observed> history, int64_t window_ms);

// Checks fixed-window, cost-1 decisions against `bound`. Windows in which
// fewer than `min_requests` checks were counted (the partial first and last
// ones of a run) are reported but not checked.
HistoryVerdict CheckFixedWindow(const std::vector<Observed>& history, const HistoryBound& bound,
                                uint64_t min_requests = 1);

}  // namespace tally::cluster
