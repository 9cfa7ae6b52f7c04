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
  auto it = Find(node);
  if (it != slots_.end() && it->node == node) {
    if (count <= it->count) return;
    it->count = count;
  } else {
    slots_.insert(it, Slot{node, count});
  }
  // Recompute rather than adjust, so that saturation stays exact.
  sum_ = 0;
  for (const Slot& slot : slots_) sum_ = SaturatingAdd(sum_, slot.count);
}

void GCounter::Merge(const GCounter& other) {
  for (const Slot& slot : other.slots_) MergeSlot(slot.node, slot.count);
}

}  // namespace tally
