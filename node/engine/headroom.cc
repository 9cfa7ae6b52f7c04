#include "node/engine/headroom.h"

#include <algorithm>
#include <functional>

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

}  // namespace tally
