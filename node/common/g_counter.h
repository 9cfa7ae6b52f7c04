// GCounter: a grow-only counter with one slot per node (a state-based CRDT).
//
// Only node n ever increments slot n. Replicas merge by slot-wise max, so a
// merge is idempotent, commutative and associative: duplicated, reordered or
// replayed state can never double-count. The global count is the sum.
//
// WindowCounts is what gets replicated for one key of a counting algorithm
// (fixed window, sliding-window counter): the G-counters of the window
// `window_index` and of the window before it.
//
// Thread safety: value types; no internal synchronisation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "node/common/node_id.h"

namespace tally {

class GCounter {
 public:
  struct Slot {
    NodeId node = 0;
    uint64_t count = 0;
    bool operator==(const Slot&) const = default;
  };

  uint64_t Get(NodeId node) const;
  // Adds delta to node's own slot. Only the owner of a slot may call this.
  void Increment(NodeId node, uint64_t delta);
  // slot[node] = max(slot[node], count).
  void MergeSlot(NodeId node, uint64_t count);
  // Slot-wise max with every slot of other but except's (0: every slot),
  // in one pass over both (each is sorted by node).
  void Merge(const GCounter& other, NodeId except = 0);
  // Makes room for `slots` slots (a node that knows how many members will
  // write grows the slots once, not one doubling at a time).
  void Reserve(size_t slots) { slots_.reserve(slots); }
  // Empties the counter (keeping its memory, for reuse).
  void Clear() {
    slots_.clear();
    sum_ = 0;
  }

  uint64_t Sum() const { return sum_; }
  bool empty() const { return slots_.empty(); }
  // Sorted by node id; no slot holds a zero count.
  const std::vector<Slot>& slots() const { return slots_; }

  bool operator==(const GCounter& other) const { return slots_ == other.slots_; }

 private:
  std::vector<Slot>::iterator Find(NodeId node);
  void Resum();

  std::vector<Slot> slots_;
  uint64_t sum_ = 0;  // saturating sum of all slots
};

struct WindowCounts {
  int64_t window_index = 0;  // floor(wall_ms / window_ms) of `current`
  GCounter current;
  GCounter previous;  // window_index - 1 (the fixed window's decisions ignore it)

  bool operator==(const WindowCounts&) const = default;
};

}  // namespace tally
