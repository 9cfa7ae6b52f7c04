#include "node/engine/peer_counts.h"

#include <algorithm>
#include <limits>

namespace tally {

void PeerCounts::Merge(const GCounter& from, NodeId except, size_t room, uint32_t Slot::*window,
                       uint64_t* sum) {
  // Both are sorted by node: one walk, inserting what only `from` holds.
  auto mine = slots_.begin();
  for (const GCounter::Slot& theirs : from.slots()) {
    if (theirs.node == except || theirs.count == 0) continue;
    const auto count = static_cast<uint32_t>(
        std::min<uint64_t>(theirs.count, std::numeric_limits<uint32_t>::max()));
    while (mine != slots_.end() && mine->node < theirs.node) ++mine;
    if (mine == slots_.end() || mine->node != theirs.node) {
      if (slots_.size() == kInlinePeers && room > kInlinePeers) {
        const auto at = mine - slots_.begin();
        slots_.reserve(room);
        mine = slots_.begin() + at;
      }
      mine = slots_.insert(mine, Slot{theirs.node, 0, 0});
    }
    if (count > (*mine).*window) {
      *sum += count - (*mine).*window;
      (*mine).*window = count;
    }
    ++mine;
  }
}

void PeerCounts::TakeFirst(const Slot& slot) {
  slots_.assign(1, slot);
  current_sum_ = slot.current;
  previous_sum_ = slot.previous;
}

void PeerCounts::Roll() {
  size_t kept = 0;
  for (const Slot& slot : slots_) {
    if (slot.current > 0) slots_[kept++] = Slot{slot.node, 0, slot.current};
  }
  slots_.resize(kept);
  previous_sum_ = current_sum_;
  current_sum_ = 0;
}

void PeerCounts::ExportTo(WindowCounts* counts) const {
  for (const Slot& slot : slots_) {
    counts->current.MergeSlot(slot.node, slot.current);
    counts->previous.MergeSlot(slot.node, slot.previous);
  }
}

}  // namespace tally
