#include "node/engine/headroom.h"

#include <algorithm>

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

}  // namespace tally
