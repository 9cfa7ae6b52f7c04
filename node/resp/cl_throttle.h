// CL.THROTTLE, redis-cell's command, on tally's token bucket.
//
// redis-cell (github.com/brandur/redis-cell) limits with GCRA: an emission
// interval T = period / count_per_period and a tolerance of
// (max_burst + 1) * T. That is a token bucket of capacity C = max_burst + 1
// refilled at one token per T, starting full, where a request of `quantity`
// passes when that many tokens are there and takes them. tally's token bucket
// has capacity `limit` refilled at `limit` per `window_ms`, so CL.THROTTLE is
//   limit = C, window_ms = C * period * 1000 / count_per_period.
//
// Precision: the engine counts in milliseconds. When C * period * 1000 is not
// a multiple of count_per_period, window_ms is rounded to the nearest ms, so
// the refill rate is off by at most 0.5 / window_ms of itself (0.1% at
// window_ms >= 500; none for the usual whole-ms intervals). A rate that
// would need window_ms below 1 (more than C tokens per ms), C over 10^9 (or
// over MaxLimitFor the window), or window_ms over 365 days is refused. The
// seconds in the reply are the engine's milliseconds rounded up, where
// redis-cell rounds nanoseconds up only from a whole millisecond: with a
// fractional-ms interval they may be 1 higher than redis-cell's.
//
// The reply, as redis-cell's: limited (0/1), limit (C), remaining (whole
// tokens left), retry_after (seconds until the same request would pass; -1
// when allowed, or when quantity > C: no wait helps), reset_after (seconds
// until the bucket is full). quantity 0 peeks: never limited, nothing taken.
//
// The bucket is the engine's token_bucket key (key, window_ms): CL.THROTTLE
// with other parameters on the same key is another bucket, and TALLY.CHECK
// key token_bucket C window_ms reads the same one.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "node/common/limit.h"
#include "node/common/status.h"

namespace tally {

struct ThrottleArgs {
  int64_t max_burst = 0;
  int64_t count_per_period = 0;
  int64_t period_s = 0;
  int64_t quantity = 1;
};

// The token bucket for `args`; InvalidArgument (the message is for the
// client) for a negative burst or quantity, a zero count or period, or a
// rate the engine cannot represent (above).
Status ThrottleSpec(const ThrottleArgs& args, LimitSpec* spec);

struct ThrottleReply {
  int64_t limited = 0;
  int64_t limit = 0;
  int64_t remaining = 0;
  int64_t retry_after_s = -1;
  int64_t reset_after_s = 0;
};

// redis-cell's reply for the engine's decision on a request of args.quantity.
ThrottleReply ToThrottleReply(const ThrottleArgs& args, const Decision& decision);

}  // namespace tally
