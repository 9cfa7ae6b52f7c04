// PeerCounts: the other nodes' slots of a counting key (fixed window,
// sliding-window counter), its current and previous window side by side, and
// each window's sum.
//
// One array sorted by node holds both windows' counts of a node, inline for up
// to kInlinePeers nodes (a cluster of three keeps a key's peers' counts inside
// its RemoteCounts, with no allocation of their own), on the heap beyond: one
// allocation for both windows, where a G-counter per window took two. A merge
// of a peer's delta reads the sums and the slots in one or two cache lines.
//
// Counts are 32-bit and saturate: a node admits at most kMaxLimit < 2^32 in a
// window, so only a faulty peer's count can exceed that, and a saturated count
// still exceeds every limit. Merges take each slot's max, so they stay
// idempotent, commutative and duplicate-safe. No slot holds two zero counts.
//
// Thread safety: a value type; the owning shard's mutex guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <absl/container/inlined_vector.h>

#include "node/common/g_counter.h"
#include "node/common/node_id.h"

namespace tally {

class PeerCounts {
 public:
  struct Slot {
    NodeId node = 0;
    uint32_t current = 0;
    uint32_t previous = 0;
  };
  static constexpr size_t kInlinePeers = 2;

  uint64_t current_sum() const { return current_sum_; }
  uint64_t previous_sum() const { return previous_sum_; }
  // Slot-wise max of the current (previous) window with every slot of
  // `from` but except's. Up to kInlinePeers slots live inside this object;
  // the first slot beyond makes room for `room` at once (a key that a third
  // peer reports most likely hears from every peer).
  void MergeCurrent(const GCounter& from, NodeId except, size_t room = 0) {
    Merge(from, except, room, &Slot::current, &current_sum_);
  }
  void MergePrevious(const GCounter& from, NodeId except, size_t room = 0) {
    Merge(from, except, room, &Slot::previous, &previous_sum_);
  }
  // An empty PeerCounts takes `slot` as its only slot (CounterPeers: an
  // inline slot moving to the heap).
  void TakeFirst(const Slot& slot);
  bool empty() const { return slots_.empty(); }
  size_t size() const { return slots_.size(); }
  // The current window becomes the previous one; the new current one is empty.
  void Roll();
  // Adds every slot to the windows of *counts (GCounter::MergeSlot).
  void ExportTo(WindowCounts* counts) const;
  // Sorted by node; a slot may hold a zero count in one of its windows. Its
  // memory is inside this object up to kInlinePeers (for cache hints).
  std::span<const Slot> slots() const { return {slots_.data(), slots_.size()}; }

 private:
  void Merge(const GCounter& from, NodeId except, size_t room, uint32_t Slot::*window,
             uint64_t* sum);

  uint64_t current_sum_ = 0;  // of every slot's current count
  uint64_t previous_sum_ = 0;
  absl::InlinedVector<Slot, kInlinePeers> slots_;  // sorted by node
};

}  // namespace tally
