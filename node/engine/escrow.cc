#include "node/engine/escrow.h"

#include <algorithm>
#include <limits>

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
  // Floors of the shares, then the units they leave go one each to the
  // largest remainders (ties: newcomers, then known nodes by lowest id), so
  // that the allowances sum to exactly what remains. Every node applies the
  // same rule to nearly the same view; newcomers first, because nodes that
  // do not know each other yet would each rank themselves first.
  struct Claim {
    uint64_t remainder;
    bool newcomer;
    NodeId node;
    Other* other;  // null: self or a newcomer
  };
  std::vector<Claim> claims;
  uint64_t allotted = 0;
  const auto claim = [&](uint64_t weight, bool newcomer, NodeId node, Other* other) {
    allotted += Share(remaining, weight, total);
    claims.push_back({static_cast<uint64_t>(static_cast<u128>(remaining) * weight % total),
                      newcomer, node, other});
  };
  claim(self_weight, false, self, nullptr);
  for (Other& other : others_) claim(other.allowance, false, other.node, &other);
  for (size_t i = 0; i < newcomers; ++i) claim(floor_weight, true, 0, nullptr);
  std::sort(claims.begin(), claims.end(), [](const Claim& a, const Claim& b) {
    if (a.remainder != b.remainder) return a.remainder > b.remainder;
    if (a.newcomer != b.newcomer) return a.newcomer;
    return a.node < b.node;
  });
  for (Other& other : others_) {
    other.count_at_start = remote_current.Get(other.node);
    other.allowance = Share(remaining, other.allowance, total);
  }
  allowance_ = Share(remaining, self_weight, total);
  newcomers_allowance_ = newcomers * Share(remaining, floor_weight, total);
  const uint64_t leftover = remaining - std::min(remaining, allotted);  // fewer than the claims
  for (size_t i = 0; i < claims.size() && i < leftover; ++i) {
    if (claims[i].other != nullptr) {
      ++claims[i].other->allowance;
    } else if (claims[i].newcomer) {
      ++newcomers_allowance_;
    } else {
      ++allowance_;
    }
  }
  index_ = index;
  window_ = window;
  own_at_start_ = own_current;
}

}  // namespace tally
