// The state one key holds under each algorithm, and how time moves it.
// decide.h judges a request against this state; limiter.cc owns the tables.
//
// Thread safety: plain structs; the owning shard's mutex guards them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "node/common/g_counter.h"
#include "node/common/key_snapshot.h"
#include "node/common/limit.h"
#include "node/engine/compact_key.h"
#include "node/engine/counter_peers.h"
#include "node/engine/decide.h"
#include "node/engine/escrow.h"
#include "node/engine/peer_counts.h"

namespace tally {

// Whether what was sent at sent_at_ms (the wall clock's ms, low 32 bits, as
// RemoteCounts and BucketEntry keep it) may still be on its way at now_ms.
inline bool InFlight(uint32_t sent_at_ms, int64_t now_ms, int64_t delivery_ms) {
  return static_cast<uint32_t>(static_cast<uint32_t>(now_ms) - sent_at_ms) <
         static_cast<uint64_t>(delivery_ms);
}

// Fixed window and sliding-window counter. The own node's slot of the
// current and previous window is inline (a single node needs nothing else),
// and so is one peer's (node/engine/counter_peers.h).
struct CounterEntry {
  CompactKey key;
  int64_t window_index = 0;  // the window `*_current` counts
  uint32_t own_current = 0;  // <= kMaxLimit < 2^32, since only admitted cost counts
  uint32_t own_previous = 0;
  CounterPeers peers;
};
static_assert(sizeof(CounterEntry) == 56, "one entry per key: keep it small");

// Moves the entry forward to `window_index`; a smaller index changes nothing.
void AdvanceTo(CounterEntry& entry, int64_t window_index);
// Cluster-wide totals: the own slot plus every remote slot.
uint64_t CurrentTotal(const CounterEntry& entry);
uint64_t PreviousTotal(const CounterEntry& entry);
// All slots, this node's included, as replicated.
void ExportCounts(const CounterEntry& entry, NodeId self, WindowCounts* counts);
// Slot-wise max with `counts`; windows the entry has left behind are ignored.
// peers: how many other nodes may write slots (room is made for them at once).
void MergeCounts(CounterEntry& entry, NodeId self, size_t peers, const WindowCounts& counts);
// True when nothing the entry holds counts at `now_ms` any more.
bool IsExpired(const CounterEntry& entry, Algorithm algorithm, uint64_t window_ms, int64_t now_ms);

// Counts `cost` this node denied now, in the entry's current window.
void CountDenied(CounterEntry& entry, uint64_t cost);
// Takes a peer's denials (`denied`, for the windows of counts at
// window_index): max per slot; windows the entry has left behind are ignored.
void MergeDenied(CounterEntry& entry, NodeId self, int64_t window_index, const DeniedCost& denied);
// This node's denials for a delta (none: node 0). What it sent the time
// before counts as heard from now on: a send comes at least a delivery time
// after the one before (an early gossip round waits that long).
DeniedCost SendDenied(CounterEntry& entry, NodeId self);

// Demand on a key as every node has heard of it: each node's admissions and
// denials in the current window, and in the previous one weighed by
// `previous_weight` (the part of it the sliding counter still counts); this
// node's without `unheard` (what its peers may not have heard of yet). So
// nodes with alike views compute alike figures.
struct HeardDemand {
  double own = 0;
  double all = 0;     // every node's, own included
  double denied = 0;  // every node's denials: some, while the key is oversubscribed
};
HeardDemand DemandOf(const CounterEntry& entry, NodeId self, uint64_t unheard,
                     double previous_weight);

// One node's sliding-log entries, oldest first; those before `first` have
// left the window and await compaction.
struct StampLog {
  std::vector<LogStamp> stamps;
  uint32_t first = 0;
  uint64_t live_total = 0;  // cost of stamps[first..]
};

// Other nodes' entries of a log key: allocated only once a peer reports some.
struct RemoteLogs {
  std::vector<std::pair<NodeId, StampLog>> nodes;  // sorted by node id
};

// Sliding-window log: this node's admitted (time, cost) entries, and those
// peers reported.
struct LogEntry {
  CompactKey key;
  StampLog own;
  int64_t gossip_from_ms = 0;  // own stamps from this time on are not gossiped yet
  std::unique_ptr<RemoteLogs> remote;
  // What this node admitted and has not sent to its peers yet (meaningful
  // while the entry is marked as having something to send, shard.h), what
  // it sent last and when (the wall clock's ms, low 32 bits), and when it
  // last took a turn: as RemoteCounts has them, for the share of what
  // remains (node/engine/coordination.h).
  uint32_t own_unsent = 0;
  uint32_t own_sent = 0;
  uint32_t sent_at_ms = 0;
  uint32_t turn_at_ms = 0;
};

// Drops every node's entries at or before now_ms - window_ms.
void TrimLog(LogEntry& entry, uint64_t window_ms, int64_t now_ms);
std::span<const LogStamp> LiveStamps(const StampLog& log);
// Every node's live entries, oldest first (without peers: the own ones;
// otherwise merged into *scratch), and their total cost.
std::span<const LogStamp> ClusterStamps(const LogEntry& entry, std::vector<LogStamp>* scratch);
uint64_t ClusterTotal(const LogEntry& entry);
void AppendLog(LogEntry& entry, int64_t now_ms, uint64_t cost);
// Every node's live entries (TrimLog first), the own ones under `self`.
void ExportLog(const LogEntry& entry, NodeId self, std::vector<NodeStamps>* log);
// Max-merges node-tagged entries (each node's oldest first, strictly
// increasing times; costs clamped to kMaxLimit). Entries at or before
// now_ms - window_ms are ignored. Entries under `self` go into the own log:
// that is how a restarted node recovers entries it had not persisted.
void MergeLog(LogEntry& entry, NodeId self, std::span<const NodeStamps> log, uint64_t window_ms,
              int64_t now_ms);
bool IsExpired(const LogEntry& entry, Algorithm algorithm, uint64_t window_ms, int64_t now_ms);

// Token bucket: every node's admitted cost per slice of time and the folded
// base (node/common/bucket_slices.h), this node's slot among them. With
// escrow, its epoch once the key is checked in a cluster.
//
// Beside the slices, the heard debt (token-ms at heard_at_ms): that of a
// central bucket fed each cost when this node heard of it, its own
// admissions at once and what merges add when they arrive. The slices charge
// each cost at its slice's end, so both debts are at least a central
// bucket's fed the same costs at their true times; a decision takes the
// smaller. A lone node's heard debt is exactly the classic bucket's, so it
// decides as a single bucket does, to the millisecond. 16 bytes per key,
// local (neither sent nor stored: a restored key starts from its slices).
struct BucketEntry {
  CompactKey key;
  BucketSlices state;
  uint64_t heard_debt = 0;  // token-ms short of full at heard_at_ms
  int64_t heard_at_ms = 0;
  // The heard debt is exactly a central bucket's fed every cost the slices
  // hold at its true time (no merge has added to the slices since it was last
  // 0): it is then the smaller, and the slices' debt need not be computed.
  bool heard_exact = false;
  // What this node admitted and has not sent to its peers yet, meaningful
  // only while the entry is marked as having something to send (shard.h),
  // and what it sent last and when, as RemoteCounts has them.
  uint32_t own_unsent = 0;
  uint32_t own_sent = 0;
  uint32_t sent_at_ms = 0;
  // When this node last took a turn (coordination.h: a request passed
  // beyond its share; on a rationed bucket, within it too).
  uint32_t turn_at_ms = 0;
  std::unique_ptr<EscrowEpoch> epoch;
  // What the nodes denied, per period of the slices (a quarter window: the
  // current one and the previous), as DeniedCounts has it for a counting
  // key per window. Allocated on the first denial or report of one.
  std::unique_ptr<DeniedCounts> denied;
};

// The heard debt at now_ms, refilled at `capacity` tokens per window (that
// is, capacity token-ms per ms) since heard_at_ms.
uint64_t HeardDebt(const BucketEntry& entry, uint64_t capacity, int64_t now_ms);
// Whether the heard debt (heard_now, at now) is known to be the smaller of
// the two without computing the slices': exact, or 0.
inline bool HeardIsLeast(const BucketEntry& entry, uint64_t heard_now) {
  return entry.heard_exact || heard_now == 0;
}
// The debt this node decides by at now_ms (token-ms): the smaller of the
// heard debt and the slices', refilled at `capacity` per window_ms.
uint64_t DecisionDebt(const BucketEntry& entry, uint64_t capacity, uint64_t window_ms,
                      int64_t now_ms);
// Admits `cost` at now_ms for `self`: its slot of the current slice and the
// heard debt (rebased on the smaller of the two debts, both valid bounds).
void AdmitToBucket(BucketEntry& entry, NodeId self, const LimitSpec& spec, uint64_t cost,
                   int64_t now_ms);
// What `self` admitted in the entry's live slices (folded cost not included).
uint64_t OwnBucketCost(const BucketEntry& entry, NodeId self);
// Joins `from` (a peer's slices, or a stored record) into the entry; what it
// adds is heard at now_ms.
void MergeIntoBucket(BucketEntry& entry, const BucketSlices& from, uint64_t window_ms,
                     int64_t now_ms);

// Folds the entry's slices to base_slice (FoldBucket), and moves its
// denials on with the periods.
void AdvanceBucket(BucketEntry& entry, uint64_t window_ms, int64_t base_slice);
// Denials on a bucket, as on a counting key (above) but per period of its
// slices: CountDenied in the current one; MergeDenied takes a peer's for the
// periods of slices based at base_slice; SendDenied as above.
void CountDenied(BucketEntry& entry, uint64_t cost);
void MergeDenied(BucketEntry& entry, NodeId self, int64_t base_slice, const DeniedCost& denied);
DeniedCost SendDenied(BucketEntry& entry, NodeId self);
// Demand on a bucket as every node has heard of it: each node's cost in the
// live slices (this node's without `unheard`) and the denials of the current
// and previous period.
HeardDemand DemandOf(const BucketEntry& entry, NodeId self, uint64_t unheard);

// Takes a stored heard debt (token-ms at heard_at_ms; kUnknownDebt: none)
// where it is smaller at now_ms than the entry's: both bound the same costs.
void RestoreHeardDebt(BucketEntry& entry, uint64_t heard_debt, int64_t heard_at_ms, int64_t now_ms);

// A bucket full at now_ms by both debts, with every slice folded
// (BucketFullAtMs), stays so: forgetting it changes no decision.
bool IsExpired(const BucketEntry& entry, Algorithm algorithm, uint64_t window_ms, int64_t now_ms);

// The sum of every count an entry replicates (counter: both windows, every
// slot; log: the live cost of every node; bucket: capacity, base debt and
// every slice). Merges take maxima, so a merge that brings anything new
// raises it: for telling whether one did. Denials are not in it.
uint64_t ReplicaWeight(const CounterEntry& entry);
uint64_t ReplicaWeight(const LogEntry& entry);
uint64_t ReplicaWeight(const BucketEntry& entry);

}  // namespace tally
