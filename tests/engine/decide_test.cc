// Unit tests of the pure decision functions (node/engine/decide.h).
#include "node/engine/decide.h"

#include <doctest/doctest.h>

namespace tally {
namespace {

constexpr uint64_t kMinuteMs = 60'000;

// Cloudflare's worked example: 50/min, 42 last minute, 18 in this one 15 s in:
// the estimate is 18 + 42 * 45/60 = 49.5, so the next request is denied.
TEST_CASE("sliding counter reproduces Cloudflare's worked example") {
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 50, kMinuteMs};
  const Decision peek = DecideSlidingCounter(spec, 18, 42, 15'000, 0);
  CHECK_FALSE(peek.allowed);
  CHECK(peek.remaining == 0);  // floor(50 - 49.5)
  const Decision next = DecideSlidingCounter(spec, 18, 42, 15'000, 1);
  CHECK_FALSE(next.allowed);
  CHECK_FALSE(next.never_allowed);
  // 19 + 42 * (45 - t) / 60 <= 50  <=>  t >= 45 - 44.285.. s: 715 ms.
  CHECK(next.retry_after_ms == 715);
  CHECK(DecideSlidingCounter(spec, 18, 42, 15'715, 1).allowed);
  CHECK_FALSE(DecideSlidingCounter(spec, 18, 42, 15'714, 1).allowed);
}

// When the current window alone is at the limit, the wait runs into the next
// window, where this window's count decays from full weight.
TEST_CASE("sliding counter retry_after crosses into the next window") {
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 10, 1'000};
  const Decision denied = DecideSlidingCounter(spec, 10, 0, 400, 1);
  CHECK_FALSE(denied.allowed);
  // Next window: 1 + 10 * (1000 - e) / 1000 <= 10  <=>  e >= 100: 600 + 100 ms.
  CHECK(denied.retry_after_ms == 700);
  CHECK(DecideSlidingCounter(spec, 0, 10, 100, 1).allowed);
  CHECK_FALSE(DecideSlidingCounter(spec, 0, 10, 99, 1).allowed);
  // A request of the full limit has to wait for both windows to drain.
  CHECK(DecideSlidingCounter(spec, 10, 0, 400, 10).retry_after_ms == 1'600);
}

// The seed's bucket: capacity 20, 5 per second. A lone node's heard debt is
// the classic bucket's: full, one token refills in 200 ms; empty, one token
// takes 200 ms and the whole bucket 4 s.
TEST_CASE("token bucket waits are the exact fall of the heard debt") {
  const LimitSpec spec{Algorithm::kTokenBucket, 20, 4'000};
  BucketSlices state;
  state.capacity = 20;
  const Decision full = DecideTokenBucket(spec, &state, 0, 1'000, 1);
  CHECK(full.allowed);
  CHECK(full.remaining == 19);
  CHECK(full.reset_after_ms == 200);
  AddToBucket(state, 1, BucketSliceAt(4'000, 1'000), 20);
  const uint64_t emptied = 20 * 4'000;  // heard at 1'000, refilling 20 token-ms per ms
  const Decision empty = DecideTokenBucket(spec, &state, emptied, 1'000, 1);
  CHECK_FALSE(empty.allowed);
  CHECK(empty.retry_after_ms == 200);
  CHECK(empty.reset_after_ms == 4'000);
  // Where the heard debt is known to be the smaller, the slices may be left out.
  CHECK(DecideTokenBucket(spec, nullptr, emptied, 1'000, 1) == empty);
  CHECK(DecideTokenBucket(spec, nullptr, 0, 1'000, 1) == full);
  CHECK_FALSE(DecideTokenBucket(spec, &state, emptied - 199 * 20, 1'199, 1).allowed);
  CHECK(DecideTokenBucket(spec, &state, emptied - 200 * 20, 1'200, 1).allowed);
}

// The slices charge each cost at its slice's end (125 ms slices here): when
// they are the smaller debt (a restored key, or costs heard late), one token
// takes 125 + 200 ms after the bucket was emptied at a slice's start.
TEST_CASE("token bucket decides by its slices when they owe less") {
  const LimitSpec spec{Algorithm::kTokenBucket, 20, 4'000};
  BucketSlices state;
  state.capacity = 20;
  AddToBucket(state, 1, BucketSliceAt(4'000, 1'000), 20);
  const uint64_t unknown = UINT64_MAX;
  const Decision empty = DecideTokenBucket(spec, &state, unknown, 1'000, 1);
  CHECK_FALSE(empty.allowed);
  CHECK(empty.retry_after_ms == 325);
  CHECK(empty.reset_after_ms == 4'125);
  CHECK_FALSE(DecideTokenBucket(spec, &state, unknown, 1'324, 1).allowed);
  CHECK(DecideTokenBucket(spec, &state, unknown, 1'325, 1).allowed);
  CHECK(DecideTokenBucket(spec, &state, unknown, 1'325, 2).retry_after_ms == 200);
  // Another node's 10 tokens in the next slice count as well.
  AddToBucket(state, 2, BucketSliceAt(4'000, 1'125), 10);
  CHECK(DecideTokenBucket(spec, &state, unknown, 1'125, 0).retry_after_ms == (30 - 19) * 200);
}

// A cost above the limit can never pass; limit 0 denies everything, peeks too.
TEST_CASE("cost over the limit is denied for good") {
  for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingWindowCounter,
                              Algorithm::kTokenBucket, Algorithm::kSlidingWindowLog}) {
    CAPTURE(AlgorithmName(algorithm));
    const LimitSpec spec{algorithm, 5, 1'000};
    const LimitSpec zero{algorithm, 0, 1'000};
    Decision over, zero_peek;
    switch (algorithm) {
      case Algorithm::kFixedWindow:
        over = DecideFixedWindow(spec, 0, 0, 6);
        zero_peek = DecideFixedWindow(zero, 0, 0, 0);
        break;
      case Algorithm::kSlidingWindowCounter:
        over = DecideSlidingCounter(spec, 0, 0, 0, 6);
        zero_peek = DecideSlidingCounter(zero, 0, 0, 0, 0);
        break;
      case Algorithm::kTokenBucket:
        over = DecideTokenBucket(spec, nullptr, 0, 0, 6);
        zero_peek = DecideTokenBucket(zero, nullptr, 0, 0, 0);
        break;
      case Algorithm::kSlidingWindowLog:
        over = DecideSlidingLog(spec, {}, 0, 0, 6);
        zero_peek = DecideSlidingLog(zero, {}, 0, 0, 0);
        break;
    }
    CHECK_FALSE(over.allowed);
    CHECK(over.never_allowed);
    CHECK(over.retry_after_ms == 0);
    CHECK(over.remaining == 5);
    CHECK(over.limit == 5);
    CHECK_FALSE(zero_peek.allowed);
    CHECK(zero_peek.never_allowed);
  }
}

// A peek is judged as a request of 1 but reports remaining unchanged.
TEST_CASE("peek reports without consuming") {
  const LimitSpec spec{Algorithm::kFixedWindow, 3, 1'000};
  const Decision some_left = DecideFixedWindow(spec, 1, 250, 0);
  CHECK(some_left.allowed);
  CHECK(some_left.remaining == 2);
  CHECK(some_left.reset_after_ms == 750);
  const Decision none_left = DecideFixedWindow(spec, 3, 250, 0);
  CHECK_FALSE(none_left.allowed);
  CHECK(none_left.retry_after_ms == 750);
  CHECK(DecideFixedWindow(spec, 0, 250, 0).reset_after_ms == 0);
}

// The log waits until enough of its oldest entries have left the window.
TEST_CASE("sliding log retry_after waits for the oldest entries") {
  const LimitSpec spec{Algorithm::kSlidingWindowLog, 4, 1'000};
  const LogStamp stamps[] = {{100, 1}, {300, 2}, {700, 1}};
  const Decision one = DecideSlidingLog(spec, stamps, 4, 900, 1);
  CHECK_FALSE(one.allowed);
  CHECK(one.retry_after_ms == 200);  // the stamp at 100 leaves at 1100
  const Decision three = DecideSlidingLog(spec, stamps, 4, 900, 3);
  CHECK(three.retry_after_ms == 400);  // needs the stamps at 100 and 300 gone
  CHECK(three.reset_after_ms == 800);  // the stamp at 700 leaves at 1700
}

}  // namespace
}  // namespace tally
