#include "node/common/key_snapshot.h"

#include <algorithm>
#include <cstdint>

namespace tally {
namespace {

// a + b and a x b clamped to int64_t's range: a snapshot's numbers may come
// from a peer or a damaged record, and must not overflow on the way to being
// refused or expired.
int64_t ClampedSum(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? INT64_MAX : INT64_MIN;
}

int64_t ClampedProduct(int64_t a, int64_t b) {
  int64_t product = 0;
  if (!__builtin_mul_overflow(a, b, &product)) return product;
  return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
}

}  // namespace

int64_t WindowsKept(Algorithm algorithm) {
  return algorithm == Algorithm::kSlidingWindowCounter ? 2 : 1;
}

int64_t ExpiresAtMs(const KeySnapshot& snapshot) {
  const auto window_ms = static_cast<int64_t>(snapshot.window_ms);
  switch (snapshot.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter:
      return ClampedProduct(
          ClampedSum(snapshot.counts.window_index, WindowsKept(snapshot.algorithm)), window_ms);
    case Algorithm::kSlidingWindowLog: {
      int64_t expires_at_ms = 0;
      for (const NodeStamps& node : snapshot.log) {
        if (!node.stamps.empty()) {
          expires_at_ms = std::max(expires_at_ms, ClampedSum(node.stamps.back().at_ms, window_ms));
        }
      }
      return expires_at_ms;
    }
    case Algorithm::kTokenBucket: return BucketFullAtMs(snapshot.bucket, snapshot.window_ms);
  }
  return 0;
}

}  // namespace tally
