#include "node/engine/escrow.h"

#include <algorithm>
#include <limits>

#include "node/engine/mix.h"

namespace tally {
namespace {

__extension__ typedef unsigned __int128 u128;

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

uint64_t Share(uint64_t remaining, uint64_t weight, uint64_t total) {
  return static_cast<uint64_t>(static_cast<u128>(remaining) * weight / total);
}

}  // namespace

void EscrowEpoch::Begin(int64_t index, int64_t window, uint64_t view_remaining, NodeId self,
                        uint32_t own_current, uint64_t self_recent, const GCounter& remote_current,
                        const GCounter& remote_previous, const GCounter* denied_current,
                        const GCounter* denied_previous, size_t cluster_size) {
  // What the others were allowed in the epoch just ended and have not been
  // seen to spend: it may still be on its way. Their counts since the
  // epoch's start: the current window's, and when the window rolled since
  // (a bucket's period), the previous one's too.
  uint64_t unheard = 0;
  if (index == index_ + 1 && (window == window_ || window == window_ + 1)) {
    const bool rolled = window != window_;
    const auto count_of = [&](NodeId node) {
      return SaturatingAdd(remote_current.Get(node), rolled ? remote_previous.Get(node) : 0);
    };
    uint64_t newcomers_seen = 0;
    for (const GCounter* counts : {&remote_current, rolled ? &remote_previous : nullptr}) {
      if (counts == nullptr) continue;
      for (const GCounter::Slot& slot : counts->slots()) {
        const bool known = std::any_of(others_.begin(), others_.end(),
                                       [&](const Other& other) { return other.node == slot.node; });
        if (!known) newcomers_seen = SaturatingAdd(newcomers_seen, slot.count);
      }
    }
    for (const Other& other : others_) {
      const auto now = static_cast<int64_t>(std::min<uint64_t>(count_of(other.node), INT64_MAX));
      const uint64_t seen = now > other.count_at_start ? now - other.count_at_start : 0;
      unheard = SaturatingAdd(unheard, other.allowance > seen ? other.allowance - seen : 0);
    }
    if (newcomers_allowance_ > newcomers_seen) {
      unheard = SaturatingAdd(unheard, newcomers_allowance_ - newcomers_seen);
    }
  }
  const uint64_t remaining = view_remaining > unheard ? view_remaining - unheard : 0;

  // Weights: recent demand, but at least a floor of 1/(4N) of all of it (at
  // least 1), which every member gets, those without demand included.
  others_.clear();
  uint64_t all_recent = self_recent;
  for (const GCounter* counts :
       {&remote_current, &remote_previous, denied_current, denied_previous}) {
    if (counts == nullptr) continue;
    for (const GCounter::Slot& slot : counts->slots()) {
      if (slot.node == self) continue;
      all_recent = SaturatingAdd(all_recent, slot.count);
      auto it = std::find_if(others_.begin(), others_.end(),
                             [&](const Other& other) { return other.node == slot.node; });
      if (it == others_.end()) it = others_.insert(others_.end(), {slot.node, 0, 0});
      it->allowance = SaturatingAdd(it->allowance, slot.count);  // recent demand, for now
    }
  }
  const uint64_t floor_weight =
      std::max<uint64_t>(1, all_recent / (4 * std::max<size_t>(cluster_size, 1)));
  const size_t known = others_.size() + 1;
  const size_t newcomers = cluster_size > known ? cluster_size - known : 0;
  const uint64_t self_weight = std::max(self_recent, floor_weight);
  uint64_t total = SaturatingAdd(self_weight, newcomers * floor_weight);
  for (Other& other : others_) {
    other.allowance = std::max(other.allowance, floor_weight);  // now the weight
    total = SaturatingAdd(total, other.allowance);
  }
  // Systematic rounding (escrow.h): the block of members without admissions,
  // then self and the others by id; each is allowed floor(C + u) -
  // floor(C_before + u), C its cumulative share, u = offset / total.
  std::sort(others_.begin(), others_.end(),
            [](const Other& a, const Other& b) { return a.node < b.node; });
  const u128 offset = static_cast<u128>(Mix64(static_cast<uint64_t>(index))) * total >> 64;
  u128 weight_before = 0;
  uint64_t units_before = 0;
  const auto allot = [&](uint64_t weight) {
    weight_before = std::min<u128>(weight_before + weight, total);
    const u128 scaled = weight_before * remaining;  // below 2^128: both factors are below 2^64
    const uint64_t units =
        static_cast<uint64_t>(scaled / total) + (scaled % total + offset >= total ? 1 : 0);
    const uint64_t allotted = units - units_before;
    units_before = units;
    return allotted;
  };
  newcomers_allowance_ = allot(newcomers * floor_weight);
  bool self_allotted = false;
  for (Other& other : others_) {
    if (!self_allotted && self < other.node) {
      allowance_ = allot(self_weight);
      self_allotted = true;
    }
    other.count_at_start =
        static_cast<int64_t>(std::min<uint64_t>(remote_current.Get(other.node), INT64_MAX));
    other.allowance = allot(other.allowance);
  }
  if (!self_allotted) allowance_ = allot(self_weight);
  // Knowing no other member yet (a new key), every node would take the last
  // place after the block, and the ceilings of all of them would pass what
  // remains: the floor.
  if (others_.empty()) allowance_ = Share(remaining, self_weight, total);
  index_ = index;
  window_ = window;
  own_at_start_ = own_current;
}

void EscrowEpoch::Continue(int64_t window, uint32_t own_previous, const GCounter& remote_previous) {
  window_ = window;
  own_at_start_ -= own_previous;
  for (Other& other : others_) {
    other.count_at_start -=
        static_cast<int64_t>(std::min<uint64_t>(remote_previous.Get(other.node), INT64_MAX));
  }
}

}  // namespace tally
