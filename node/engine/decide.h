// Pure decision functions, one per algorithm: given the state a limit holds
// now, what is the decision for a request of `cost`? They change nothing; the
// engine applies the cost when the decision allows it.
//
// Each function follows the semantics in limit.h (peek, never_allowed,
// remaining, retry_after_ms, reset_after_ms). Inputs are already validated
// (limit <= kMaxLimit, 1 <= window_ms <= kMaxWindowMs), so every product
// below fits in 128-bit intermediates and every result in 64 bits.
//
// Thread safety: stateless.
#pragma once

#include <cstdint>
#include <span>

#include "node/common/key_snapshot.h"
#include "node/common/limit.h"

namespace tally {

// Fixed window: `count` already consumed in the window, `elapsed_ms` into it.
Decision DecideFixedWindow(const LimitSpec& spec, uint64_t count, uint64_t elapsed_ms,
                           uint64_t cost);

// Sliding-window counter: `current` consumed in this window, `previous` in
// the one before, `elapsed_ms` into this one. The weighted estimate is
// current + previous * (window_ms - elapsed_ms) / window_ms, compared exactly
// (multiplied out by window_ms, no floating point).
Decision DecideSlidingCounter(const LimitSpec& spec, uint64_t current, uint64_t previous,
                              uint64_t elapsed_ms, uint64_t cost);

// Token bucket: `state` as replicated (node/common/bucket_slices.h) and
// heard_debt, the debt (token-ms) at now_ms of a central bucket fed each cost
// when this node heard of it (node/engine/key_state.h), judged at now_ms with
// capacity spec.limit refilled per window_ms. The debt is the smaller of the
// two. A request passes iff debt + cost * window_ms <= limit * window_ms;
// retry_after_ms and reset_after_ms are the exact waits of the debt's fall.
// `state` may be null where heard_debt is known to be the smaller (a lone
// node's, node/engine/key_state.h): the decision is then a classic bucket's.
Decision DecideTokenBucket(const LimitSpec& spec, const BucketSlices* state, uint64_t heard_debt,
                           int64_t now_ms, uint64_t cost);

// Sliding-window log: the entries still in the trailing window (now_ms -
// window_ms, now_ms], oldest first, and their total cost.
Decision DecideSlidingLog(const LimitSpec& spec, std::span<const LogStamp> live_stamps,
                          uint64_t live_total, int64_t now_ms, uint64_t cost);

}  // namespace tally
