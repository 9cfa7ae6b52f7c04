#include "node/engine/headroom.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "node/engine/mix.h"

namespace tally {

int64_t DeferralMs(Algorithm algorithm, uint64_t window_ms, int64_t max_delay_ms) {
  if (max_delay_ms <= 0) return 0;
  const auto window = static_cast<int64_t>(window_ms);
  switch (algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter: return std::min(max_delay_ms, window / 4);
    case Algorithm::kTokenBucket: return std::min(max_delay_ms, window / 8);
    case Algorithm::kSlidingWindowLog: return 0;
  }
  return 0;
}

NodeId RelayerFor(uint64_t relay_hash, std::span<const NodeId> members) {
  NodeId relayer = 0;
  uint64_t best = 0;
  for (const NodeId member : members) {
    const uint64_t score = Mix64(relay_hash ^ Mix64(member));
    if (relayer == 0 || score > best || (score == best && member < relayer)) {
      relayer = member;
      best = score;
    }
  }
  return relayer;
}

uint64_t RelayHash(std::string_view key) { return std::hash<std::string_view>{}(key); }

void DeferralLosses::Set(std::span<const int64_t> seen_at_ms) {
  std::vector<int64_t> newest_first(seen_at_ms.begin(), seen_at_ms.end());
  std::sort(newest_first.begin(), newest_first.end(), std::greater<>());
  for (size_t i = 0; i < kSlots; ++i) {
    uint64_t packed = 0;
    if (i < newest_first.size()) {
      // The last slot counts every loss from it on (older), at its time.
      const uint64_t count = i + 1 < kSlots ? 1 : newest_first.size() - i;
      const auto at_ms = static_cast<uint64_t>(
          std::clamp<int64_t>(newest_first[i], 0, static_cast<int64_t>(kAtMask)));
      packed = count << kAtBits | at_ms;
    }
    slots_[i].store(packed, std::memory_order_relaxed);
  }
  newest_ms_.store(newest_first.empty() ? INT64_MIN : newest_first.front(),
                   std::memory_order_relaxed);
}

}  // namespace tally
