#include "node/common/key_snapshot.h"

#include <algorithm>

namespace tally {

int64_t WindowsKept(Algorithm algorithm) {
  return algorithm == Algorithm::kSlidingWindowCounter ? 2 : 1;
}

int64_t ExpiresAtMs(const KeySnapshot& snapshot) {
  const auto window_ms = static_cast<int64_t>(snapshot.window_ms);
  switch (snapshot.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter:
      return (snapshot.counts.window_index + WindowsKept(snapshot.algorithm)) * window_ms;
    case Algorithm::kSlidingWindowLog: {
      int64_t expires_at_ms = 0;
      for (const NodeStamps& node : snapshot.log) {
        if (!node.stamps.empty()) {
          expires_at_ms = std::max(expires_at_ms, node.stamps.back().at_ms + window_ms);
        }
      }
      return expires_at_ms;
    }
    case Algorithm::kTokenBucket: return BucketFullAtMs(snapshot.bucket, snapshot.window_ms);
  }
  return 0;
}

}  // namespace tally
