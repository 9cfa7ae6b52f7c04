// KeySnapshot: the state of one limit (key, algorithm, window_ms) as a value.
// For persistence it is the whole state (Limiter::CollectChanges produces
// them, storage/ writes and reads them, Limiter::Restore takes them back);
// for replication it is what some nodes contributed (Limiter::Merge).
//
// Only the member for the snapshot's algorithm is meaningful. Node-tagged
// state (counts' slots, log stamps, bucket slices) includes the own node's,
// under its id.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "node/common/bucket_slices.h"
#include "node/common/g_counter.h"
#include "node/common/limit.h"

namespace tally {

// One sliding-log entry: the cost a node admitted in the millisecond at_ms.
struct LogStamp {
  int64_t at_ms = 0;
  uint64_t cost = 0;
  bool operator==(const LogStamp&) const = default;
};

// One node's sliding-log entries of a key: (time, cost), oldest first, at
// most one per millisecond (a node adds later cost of the same ms to it, so
// the cost of a stamp only grows: merging takes the max).
struct NodeStamps {
  NodeId node = 0;
  std::vector<LogStamp> stamps;

  bool operator==(const NodeStamps&) const = default;
};

// What one node denied on a counting key in the windows of a snapshot's
// counts: cost asked for and not admitted, by which shares of what remains
// weigh each node's demand (node/engine/coordination.h).
struct DeniedCost {
  NodeId node = 0;  // 0: none
  uint64_t current = 0;
  uint64_t previous = 0;

  bool operator==(const DeniedCost&) const = default;
};

struct KeySnapshot {
  std::string key;
  Algorithm algorithm = Algorithm::kSlidingWindowCounter;
  uint64_t window_ms = 0;
  WindowCounts counts;  // fixed window, sliding counter: every node's slots
  // Fixed window, sliding counter, gossip deltas only: the sender's denials
  // (a node's view of its demand, not state to merge slot by slot: neither
  // stored nor sent in full syncs).
  DeniedCost denied;
  std::vector<NodeStamps> log;  // sliding log: every node's live entries, by node id
  BucketSlices bucket;          // token bucket: every node's slices and the folded base
  // Token bucket, this node's heard debt (node/engine/key_state.h): token-ms
  // at bucket_heard_at_ms. Stored, never sent (it is this node's view, not
  // state to merge); kUnknownDebt where a snapshot does not carry it.
  static constexpr uint64_t kUnknownDebt = UINT64_MAX;
  uint64_t bucket_heard_debt = kUnknownDebt;
  int64_t bucket_heard_at_ms = 0;
  // Limiter::Read only: the token-ms the bucket holds at bucket_level_at_ms,
  // as this node decides.
  uint64_t bucket_level = 0;
  int64_t bucket_level_at_ms = 0;

  bool operator==(const KeySnapshot&) const = default;
};

// Receives snapshots one at a time (Limiter::CollectChanges, CollectAll). The
// snapshot is valid only during the call.
using SnapshotSink = std::function<void(const KeySnapshot&)>;

// How many windows a counting algorithm reads: the current one, and for the
// sliding-window counter the previous one too.
int64_t WindowsKept(Algorithm algorithm);

// The wall time (ms) from which the snapshot holds nothing that counts: a
// store may drop it then. Window-aligned for the counting algorithms.
int64_t ExpiresAtMs(const KeySnapshot& snapshot);

}  // namespace tally
