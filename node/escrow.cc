#include "node/escrow.h"

#include <algorithm>
#include <limits>

namespace tally {
namespace {

__extension__ typedef unsigned __int128 u128;

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max() : a + b;
}

uint64_t Share(uint64_t remaining, uint64_t weight, uint64_t total) {
  return static_cast<uint64_t>(static_cast<u128>(remaining) * weight / total);
}

}  // namespace

void EscrowEpoch::Begin(int64_t index, int64_t window, uint64_t view_remaining, NodeId self,
                        uint32_t own_current, uint64_t self_recent, const GCounter& remote_current,
                        const GCounter& remote_previous, size_t cluster_size) {
  // What the others were allowed in the epoch just ended and have not been
  // seen to spend: it may still be on its way.
  uint64_t unheard = 0;
  if (index == index_ + 1 && window == window_) {
    uint64_t newcomers_seen = 0;
    for (const GCounter::Slot& slot : remote_current.slots()) {
      auto it = std::find_if(others_.begin(), others_.end(),
                             [&](const Other& other) { return other.node == slot.node; });
      if (it == others_.end()) {
        newcomers_seen = SaturatingAdd(newcomers_seen, slot.count);
        continue;
      }
      const uint64_t seen = slot.count > it->count_at_start ? slot.count - it->count_at_start : 0;
      unheard = SaturatingAdd(unheard, it->allowance > seen ? it->allowance - seen : 0);
    }
    for (const Other& other : others_) {  // no slot now: nothing of it was seen
      if (remote_current.Get(other.node) == 0) unheard = SaturatingAdd(unheard, other.allowance);
    }
    if (newcomers_allowance_ > newcomers_seen) {
      unheard = SaturatingAdd(unheard, newcomers_allowance_ - newcomers_seen);
    }
  }
  const uint64_t remaining = view_remaining > unheard ? view_remaining - unheard : 0;

  // Weights: recent admissions plus a floor of 1/(2N) of all of them (at
  // least 1), which every member gets, those without admissions included.
  others_.clear();
  uint64_t all_recent = self_recent;
  for (const GCounter* counts : {&remote_current, &remote_previous}) {
    for (const GCounter::Slot& slot : counts->slots()) {
      if (slot.node == self) continue;
      all_recent = SaturatingAdd(all_recent, slot.count);
      auto it = std::find_if(others_.begin(), others_.end(),
                             [&](const Other& other) { return other.node == slot.node; });
      if (it == others_.end()) it = others_.insert(others_.end(), {slot.node, 0, 0});
      it->allowance = SaturatingAdd(it->allowance, slot.count);  // recent admissions, for now
    }
  }
  const uint64_t floor_weight = std::max<uint64_t>(1, all_recent / (2 * std::max<size_t>(cluster_size, 1)));
  const uint64_t self_weight = SaturatingAdd(self_recent, floor_weight);
  uint64_t total = self_weight;
  for (Other& other : others_) other.allowance = SaturatingAdd(other.allowance, floor_weight);
  bool self_largest = true;  // ties: the lowest id
  for (const Other& other : others_) {
    total = SaturatingAdd(total, other.allowance);
    if (other.allowance > self_weight || (other.allowance == self_weight && other.node < self)) {
      self_largest = false;
    }
  }
  const size_t known = others_.size() + 1;
  const uint64_t newcomers = cluster_size > known ? (cluster_size - known) * floor_weight : 0;
  total = SaturatingAdd(total, newcomers);
  for (Other& other : others_) {
    other.count_at_start = remote_current.Get(other.node);
    other.allowance = Share(remaining, other.allowance, total);
  }
  newcomers_allowance_ = Share(remaining, newcomers, total);
  allowance_ = Share(remaining, self_weight, total);
  // The last units go to the largest weight rather than to nobody. Newcomers'
  // ids are unknown here: a node without admissions keeps a tie with them, so
  // at a cold start each such node may take the last unit (at most N - 1 over).
  if (allowance_ == 0 && remaining > 0 && self_largest) allowance_ = 1;
  index_ = index;
  window_ = window;
  own_at_start_ = own_current;
}

}  // namespace tally
