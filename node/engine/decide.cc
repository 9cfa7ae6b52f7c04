#include "node/engine/decide.h"

#include <algorithm>

namespace tally {
namespace {

__extension__ typedef unsigned __int128 u128;  // exact products of two 64-bit values

// Fills limit, never_allowed, allowed and remaining from `available`, the
// largest cost that passes now. A peek (cost 0) is judged as cost 1 and
// consumes nothing. Returns true when the request is denied but could pass
// later, i.e. when the caller must compute retry_after_ms.
bool Settle(const LimitSpec& spec, uint64_t available, uint64_t cost, Decision* decision) {
  const uint64_t probe = cost == 0 ? 1 : cost;
  decision->limit = spec.limit;
  if (probe > spec.limit) {
    decision->never_allowed = true;
    decision->remaining = available;
    return false;
  }
  decision->allowed = probe <= available;
  decision->remaining = decision->allowed ? available - cost : available;
  return !decision->allowed;
}

uint64_t Probe(uint64_t cost) { return cost == 0 ? 1 : cost; }

// The smallest wait after which `probe` passes the sliding-window counter if
// nothing else arrives. Requires probe <= limit.
uint64_t SlidingCounterRetryMs(const LimitSpec& spec, uint64_t current, uint64_t previous,
                               uint64_t elapsed_ms, uint64_t probe) {
  const uint64_t window_ms = spec.window_ms;
  const uint64_t rest_of_window_ms = window_ms - elapsed_ms;
  // Still in this window, at elapsed e + t: the previous window's weight
  // (window - e - t) must drop to at most slack / previous.
  if (current + probe <= spec.limit && previous > 0) {
    const u128 slack = static_cast<u128>(spec.limit - current - probe) * window_ms;
    const u128 weight_allowed = slack / previous;
    if (weight_allowed >= 1) {
      return weight_allowed >= rest_of_window_ms
                 ? 0
                 : rest_of_window_ms - static_cast<uint64_t>(weight_allowed);
    }
  }
  // In the next window this window's count becomes the previous one and
  // decays from full weight: probe * W + current * (W - e') <= limit * W.
  uint64_t wait_in_next_ms = 0;
  if (current > 0) {
    const u128 weight_allowed = static_cast<u128>(spec.limit - probe) * window_ms / current;
    wait_in_next_ms =
        weight_allowed >= window_ms ? 0 : window_ms - static_cast<uint64_t>(weight_allowed);
  }
  return rest_of_window_ms + wait_in_next_ms;
}

}  // namespace

Decision DecideFixedWindow(const LimitSpec& spec, uint64_t count, uint64_t elapsed_ms,
                           uint64_t cost) {
  Decision decision;
  const uint64_t available = count >= spec.limit ? 0 : spec.limit - count;
  const uint64_t rest_of_window_ms = spec.window_ms - elapsed_ms;
  if (Settle(spec, available, cost, &decision)) decision.retry_after_ms = rest_of_window_ms;
  const uint64_t count_after = count + (decision.allowed ? cost : 0);
  decision.reset_after_ms = count_after > 0 ? rest_of_window_ms : 0;
  return decision;
}

Decision DecideSlidingCounter(const LimitSpec& spec, uint64_t current, uint64_t previous,
                              uint64_t elapsed_ms, uint64_t cost) {
  Decision decision;
  const uint64_t window_ms = spec.window_ms;
  const u128 used = static_cast<u128>(current) * window_ms +
                    static_cast<u128>(previous) * (window_ms - elapsed_ms);
  const u128 capacity = static_cast<u128>(spec.limit) * window_ms;
  const uint64_t available =
      used >= capacity ? 0 : static_cast<uint64_t>((capacity - used) / window_ms);
  if (Settle(spec, available, cost, &decision)) {
    decision.retry_after_ms =
        SlidingCounterRetryMs(spec, current, previous, elapsed_ms, Probe(cost));
  }
  const uint64_t current_after = current + (decision.allowed ? cost : 0);
  if (current_after > 0) {
    decision.reset_after_ms = 2 * window_ms - elapsed_ms;
  } else if (previous > 0) {
    decision.reset_after_ms = window_ms - elapsed_ms;
  }
  return decision;
}

Decision DecideTokenBucket(const LimitSpec& spec, const BucketSlices* state, uint64_t heard_debt,
                           int64_t now_ms, uint64_t cost) {
  Decision decision;
  const uint64_t full = spec.limit * spec.window_ms;
  const uint64_t debt =
      state ? std::min(heard_debt, BucketDebt(*state, spec.limit, spec.window_ms, now_ms))
            : heard_debt;
  const uint64_t level = debt >= full ? 0 : full - debt;
  // Either debt falling to target (with `extra` tokens admitted now) is
  // enough, so the wait is the sooner of the two; each is exact.
  const auto wait_ms = [&](uint64_t extra, uint64_t target) {
    if (spec.limit == 0) return uint64_t{0};  // nothing ever passes: no wait helps
    const u128 heard = static_cast<u128>(heard_debt) + static_cast<u128>(extra) * spec.window_ms;
    const u128 heard_wait = heard <= target ? 0 : (heard - target + spec.limit - 1) / spec.limit;
    const auto wait = static_cast<uint64_t>(std::min<u128>(heard_wait, UINT64_MAX));
    if (!state) return wait;
    return std::min(wait, BucketWaitMs(*state, spec.limit, spec.window_ms, now_ms, extra, target));
  };
  if (Settle(spec, level / spec.window_ms, cost, &decision)) {
    decision.retry_after_ms = wait_ms(0, full - Probe(cost) * spec.window_ms);
  }
  decision.reset_after_ms = wait_ms(decision.allowed ? cost : 0, 0);
  return decision;
}

Decision DecideSlidingLog(const LimitSpec& spec, std::span<const LogStamp> live_stamps,
                          uint64_t live_total, int64_t now_ms, uint64_t cost) {
  Decision decision;
  const uint64_t available = live_total >= spec.limit ? 0 : spec.limit - live_total;
  const auto window_ms = static_cast<int64_t>(spec.window_ms);
  if (Settle(spec, available, cost, &decision)) {
    // Wait for the oldest entries to leave the window until the probe fits.
    const uint64_t probe = Probe(cost);
    uint64_t total_left = live_total;
    for (const LogStamp& stamp : live_stamps) {
      total_left -= stamp.cost;
      if (total_left + probe <= spec.limit) {
        decision.retry_after_ms = static_cast<uint64_t>(stamp.at_ms + window_ms - now_ms);
        break;
      }
    }
  }
  if (decision.allowed && cost > 0) {
    decision.reset_after_ms = spec.window_ms;
  } else if (!live_stamps.empty()) {
    decision.reset_after_ms = static_cast<uint64_t>(live_stamps.back().at_ms + window_ms - now_ms);
  }
  return decision;
}

}  // namespace tally
