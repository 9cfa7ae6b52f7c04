#include "node/resp/cl_throttle.h"

#include <string>

namespace tally {
namespace {

// Products of a capacity (up to 10^9), a period in ms and 2 need more than 64 bits.
__extension__ typedef unsigned __int128 Wide;

int64_t CeilSeconds(uint64_t ms) { return static_cast<int64_t>((ms + 999) / 1000); }

}  // namespace

Status ThrottleSpec(const ThrottleArgs& args, LimitSpec* spec) {
  if (args.max_burst < 0 || args.quantity < 0) {
    return Status::InvalidArgument("max_burst and quantity must not be negative");
  }
  if (args.count_per_period <= 0 || args.period_s <= 0) {
    return Status::InvalidArgument("zero rates are not supported");
  }
  const auto capacity = static_cast<Wide>(args.max_burst) + 1;
  if (capacity > kMaxLimit) {
    return Status::InvalidArgument("max_burst + 1 is over " + std::to_string(kMaxLimit));
  }
  // window_ms = capacity * period_ms / count, rounded to the nearest ms.
  const auto count = static_cast<Wide>(args.count_per_period);
  const Wide window_ms =
      (2 * capacity * static_cast<Wide>(args.period_s) * 1000 + count) / (2 * count);
  if (window_ms < 1) {
    return Status::InvalidArgument(
        "rate too high: tally refills at most max_burst + 1 tokens per millisecond");
  }
  if (window_ms > kMaxWindowMs) {
    return Status::InvalidArgument(
        "rate too low: (max_burst + 1) * period / count_per_period is over 365 days");
  }
  if (const uint64_t max = MaxLimitFor(static_cast<uint64_t>(window_ms)); capacity > max) {
    return Status::InvalidArgument("max_burst + 1 is over " + std::to_string(max) +
                                   ", the most a window of " +
                                   std::to_string(static_cast<uint64_t>(window_ms)) + " ms takes");
  }
  *spec = LimitSpec{Algorithm::kTokenBucket, static_cast<uint64_t>(capacity),
                    static_cast<uint64_t>(window_ms)};
  return Status::OK();
}

ThrottleReply ToThrottleReply(const ThrottleArgs& args, const Decision& decision) {
  ThrottleReply reply;
  const bool peek = args.quantity == 0;  // redis-cell: a peek is never limited
  reply.limited = decision.allowed || peek ? 0 : 1;
  reply.limit = args.max_burst + 1;
  reply.remaining = static_cast<int64_t>(decision.remaining);
  reply.retry_after_s =
      reply.limited == 0 || decision.never_allowed ? -1 : CeilSeconds(decision.retry_after_ms);
  reply.reset_after_s = CeilSeconds(decision.reset_after_ms);
  return reply;
}

}  // namespace tally
