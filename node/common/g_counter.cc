#include "node/common/g_counter.h"

#include <algorithm>
#include <limits>

namespace tally {
namespace {

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  const uint64_t sum = a + b;
  return sum < a ? std::numeric_limits<uint64_t>::max() : sum;
}

}  // namespace

std::vector<GCounter::Slot>::iterator GCounter::Find(NodeId node) {
  return std::lower_bound(slots_.begin(), slots_.end(), node,
                          [](const Slot& slot, NodeId id) { return slot.node < id; });
}

uint64_t GCounter::Get(NodeId node) const {
  auto it = std::lower_bound(slots_.begin(), slots_.end(), node,
                             [](const Slot& slot, NodeId id) { return slot.node < id; });
  return it != slots_.end() && it->node == node ? it->count : 0;
}

void GCounter::Increment(NodeId node, uint64_t delta) {
  MergeSlot(node, SaturatingAdd(Get(node), delta));
}

void GCounter::MergeSlot(NodeId node, uint64_t count) {
  if (count == 0) return;
  // A slot only grows, so the sum moves by what it gains: adding that,
  // saturated, gives what a recount would (a saturated sum stays saturated).
  if (slots_.empty() || slots_.back().node < node) {  // a decoder's slots come in order
    slots_.push_back(Slot{node, count});
    sum_ = SaturatingAdd(sum_, count);
    return;
  }
  auto it = Find(node);
  if (it != slots_.end() && it->node == node) {
    if (count <= it->count) return;
    sum_ = SaturatingAdd(sum_, count - it->count);
    it->count = count;
  } else {
    slots_.insert(it, Slot{node, count});
    sum_ = SaturatingAdd(sum_, count);
  }
}

void GCounter::Merge(const GCounter& other, NodeId except) {
  // Raise the slots both hold and count the ones only other holds; then, if
  // there are any, place them from the back, so nothing moves twice.
  size_t added = 0;
  bool raised = false;
  auto mine = slots_.begin();
  for (const Slot& slot : other.slots_) {
    if (slot.node == except) continue;
    while (mine != slots_.end() && mine->node < slot.node) ++mine;
    if (mine != slots_.end() && mine->node == slot.node) {
      raised = raised || slot.count > mine->count;
      mine->count = std::max(mine->count, slot.count);
    } else {
      ++added;
    }
  }
  if (added > 0) {
    size_t kept = slots_.size();
    slots_.resize(kept + added);
    size_t to = slots_.size();
    for (size_t from = other.slots_.size(); from > 0; --from) {
      const Slot& slot = other.slots_[from - 1];
      if (slot.node == except) continue;
      while (kept > 0 && slots_[kept - 1].node > slot.node) slots_[--to] = slots_[--kept];
      if (kept > 0 && slots_[kept - 1].node == slot.node) {
        slots_[--to] = slots_[--kept];  // raised above
      } else {
        slots_[--to] = slot;
      }
    }
  }
  if (raised || added > 0) Resum();
}

void GCounter::Resum() {
  // Recompute rather than adjust, so that saturation stays exact.
  sum_ = 0;
  for (const Slot& slot : slots_) sum_ = SaturatingAdd(sum_, slot.count);
}

}  // namespace tally
