// KeySnapshot: the whole state of one limit (key, algorithm, window_ms) as a
// value, for persistence: Limiter::CollectChanges produces them, storage/
// writes and reads them, Limiter::Restore takes them back.
//
// Only the member for the snapshot's algorithm is meaningful.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "node/decide.h"
#include "node/g_counter.h"
#include "node/limit.h"

namespace tally {

struct KeySnapshot {
  std::string key;
  Algorithm algorithm = Algorithm::kSlidingWindowCounter;
  uint64_t window_ms = 0;
  WindowCounts counts;               // fixed window, sliding counter: every node's slots
  std::vector<LogStamp> log_stamps;  // sliding log: the live entries, oldest first
  uint64_t bucket_level = 0;         // token bucket: token-ms, see decide.h
  int64_t bucket_refilled_at_ms = 0;

  bool operator==(const KeySnapshot&) const = default;
};

// Receives snapshots one at a time (Limiter::CollectChanges, CollectAll). The
// snapshot is valid only during the call.
using SnapshotSink = std::function<void(const KeySnapshot&)>;

// The wall time (ms) from which the snapshot holds nothing that counts: a
// store may drop it then. Window-aligned for the counting algorithms.
int64_t ExpiresAtMs(const KeySnapshot& snapshot);

}  // namespace tally
