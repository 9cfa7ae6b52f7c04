// BucketSlices: a token bucket replicated as a state-based CRDT.
//
// A central token bucket of capacity C tokens refilled at r = C / W per ms
// (W = window_ms) is, in token-ms (a token is W token-ms; the bucket refills
// C token-ms per ms), a debt below full: debt(t) = max(0, max over u <= t of
// A(u, t] W - C (t - u)), A(u, t] the tokens admitted after u (a min-plus
// recurrence clamped only at full: admissions never take it below empty).
// Nodes count what they admit per slice of time (width s = max(1, W /
// kBucketSlicesPerWindow) ms, slice j = [j s, (j + 1) s)) in a G-counter per
// slice: one slot per node, only the owner adds to its slot, merge takes the
// maximum. The debt is then that of a central bucket fed the same merged
// slices, each slice's cost charged at the slice's end (a slice not yet
// ended: now, without refill):
//
//   debt(t) = max(0, base_debt + S_0 W - C (t - b_0),
//                 max over kept slices k of  S_k W - C max(0, t - e_k))
//
// with S_k the cost of kept slice k and every later one (all nodes'), b_0 the
// base slice's start and e_k slice k's end. A request of cost c passes iff
// debt + c W <= C W. Since each cost is charged no earlier than it was
// admitted, the debt is at least a central bucket's fed the same history at
// its true times and at most C s more: the cluster never admits more than
// that central bucket, and at most r s = C / kBucketSlicesPerWindow tokens
// less over any interval. With nothing else admitted, the debt's fall is a
// maximum of such terms, so the wait until a cost passes is exact.
//
// Memory stays bounded by folding: slices before the start of the previous
// period (kBucketSlicesPerPeriod slices, W / 4) are folded into base_debt,
// the debt at base_slice's start from everything before it. Folding is exact
// given the slices; cost of a folded slice that reaches a node only after
// the fold (a delivery later than a period) is folded conservatively: the
// node takes the larger of the two debts, losing neither's own nor counting
// anything twice (it may then miss part of the other's cost).
//
// Merge: fold both to the later base, then take the maximum of the debts
// (the debt is a maximum of terms, each monotone in the history, so more
// history never lowers it), of the capacities and of every slot. Between
// states of the same base this is a join (idempotent, commutative,
// associative); with different bases it is the join after a fold.
//
// Thread safety: value types; no internal synchronisation.
#pragma once

#include <cstdint>
#include <vector>

#include "node/common/node_id.h"

namespace tally {

inline constexpr int64_t kBucketSlicesPerWindow = 32;
inline constexpr int64_t kBucketSlicesPerPeriod = 8;
// base_slice .. base_slice + kBucketMaxSlices - 1: the previous and the
// current period, and one period of a peer's clock running ahead.
inline constexpr int64_t kBucketMaxSlices = 3 * kBucketSlicesPerPeriod;

// One node's admitted cost per slice: counts[i] in slice base_slice + i.
struct NodeSlices {
  NodeId node = 0;
  std::vector<uint32_t> counts;
  bool operator==(const NodeSlices&) const = default;
};

struct BucketSlices {
  uint64_t capacity = 0;          // tokens: the refill rate (per window) folds use; max-merged
  int64_t base_slice = 0;         // slices before it are folded into base_debt
  uint64_t base_debt = 0;         // token-ms short of full at base_slice's start; 0: full
  std::vector<NodeSlices> nodes;  // by node id; at most kBucketMaxSlices counts each

  bool operator==(const BucketSlices&) const = default;
};

// The slice width of a bucket of window_ms (>= 1).
uint64_t BucketSliceMs(uint64_t window_ms);
// The slice holding now_ms.
int64_t BucketSliceAt(uint64_t window_ms, int64_t now_ms);
// The base a state holds while `slice` is the current slice: the start of
// the previous period.
int64_t BucketBaseFor(int64_t slice);

// The debt (token-ms) at now_ms, refilling `capacity` tokens per window_ms,
// with `extra` tokens as if admitted now. Saturates at UINT64_MAX.
uint64_t BucketDebt(const BucketSlices& state, uint64_t capacity, uint64_t window_ms,
                    int64_t now_ms, uint64_t extra = 0);
// The smallest wait after which the debt is at most target_debt if nothing
// else is admitted (`extra` tokens as in BucketDebt). 0 when capacity is 0.
uint64_t BucketWaitMs(const BucketSlices& state, uint64_t capacity, uint64_t window_ms,
                      int64_t now_ms, uint64_t extra, uint64_t target_debt);
// The earliest time from which, if nothing more is admitted, the debt is 0 (at
// the state's own capacity) and every slice with a cost is folded: the state
// can be forgotten then (before, its slices may still add up with another
// node's of the same slices).
int64_t BucketFullAtMs(const BucketSlices& state, uint64_t window_ms);
// BucketFullAtMs(state, window_ms) <= now_ms, without computing the debt's
// terms when a slice with a cost is not folded yet (the usual case).
bool BucketFullBy(const BucketSlices& state, uint64_t window_ms, int64_t now_ms);

// Folds every slice before base_slice into the base debt (nothing if the
// state's base is not earlier). Nodes left without cost are dropped.
void FoldBucket(BucketSlices& state, uint64_t window_ms, int64_t base_slice);
// Adds `cost` to node's slot of `slice` (a slice before the base counts in
// the base slice). Only the owner of a slot may call this.
void AddToBucket(BucketSlices& state, NodeId node, int64_t slice, uint64_t cost);
// Joins `from` into `state` (see above). Counts beyond kBucketMaxSlices past
// the joined base are dropped. Returns what the join added (token-ms,
// saturating): window_ms per token by which a slot grew, plus the growth of
// the base debt. Charging it at once bounds the change of any debt it makes:
// a debt falls by at most as much as it rose, later.
uint64_t MergeBucket(BucketSlices& state, const BucketSlices& from, uint64_t window_ms);

// Cost per node in slices [first, end) (absolute slice indices): what escrow
// weighs and compares.
uint64_t BucketCostIn(const NodeSlices& node, int64_t base_slice, int64_t first, int64_t end);

}  // namespace tally
