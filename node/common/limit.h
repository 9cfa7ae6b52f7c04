// The vocabulary of a rate-limit check: which algorithm, which parameters,
// and what a decision says. Shared by the engine, the protocol and clients.
//
// Semantics common to all four algorithms (README "Semantics" says the same):
//  - A limit is identified by (key, algorithm, window_ms). The limit value is
//    applied at decision time, so callers that disagree on it share counts.
//  - Denied requests consume nothing.
//  - cost 0 is a peek: nothing changes; the decision says whether a request
//    of cost 1 would pass now (allowed, retry_after_ms) and what remains.
//  - cost > limit is denied with never_allowed set: no wait helps. In
//    particular limit 0 denies everything.
//
// Units: counts and costs are whole requests (or tokens); times are ms.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "node/common/status.h"

namespace tally {

// Wire values are stable: the protocol carries them as numbers.
enum class Algorithm : uint8_t {
  kFixedWindow = 0,           // count per wall-clock-aligned window
  kSlidingWindowLog = 1,      // exact: timestamps in the trailing window_ms
  kSlidingWindowCounter = 2,  // current + previous * (1 - elapsed / window)
  kTokenBucket = 3,           // capacity `limit`, refills `limit` per window_ms
};
inline constexpr int kAlgorithmCount = 4;

// Limit parameters. For the token bucket, `limit` is the capacity (the burst)
// and the refill rate is limit / window_ms, i.e. window_ms is the time an
// empty bucket takes to fill: capacity 20 at 5/s is {limit 20, window 4000}.
struct LimitSpec {
  Algorithm algorithm = Algorithm::kSlidingWindowCounter;
  uint64_t limit = 0;
  uint64_t window_ms = 0;
};

// Bounds that keep all arithmetic exact in 64 bits, with room to spare: a
// limit is at most kMaxLimit, and limit * window_ms at most
// kMaxLimitWindowMs (10^9 over 30 days, below 2^62), so sums of a few such
// products fit too. The longest window is 365 days (envoyproxy/ratelimit's
// year); beyond 30 days the product, not kMaxLimit, bounds the limit.
inline constexpr uint64_t kMaxLimit = 1'000'000'000;
inline constexpr uint64_t kMaxWindowMs = 365ull * 24 * 3600 * 1000;  // 365 days
inline constexpr uint64_t kMaxLimitWindowMs = kMaxLimit * 30 * 24 * 3600 * 1000;
inline constexpr size_t kMaxKeyBytes = 256;

// The largest limit a window of `window_ms` (1 to kMaxWindowMs) takes:
// kMaxLimit up to 30 days, then kMaxLimitWindowMs / window_ms (a year: 82,191,780).
constexpr uint64_t MaxLimitFor(uint64_t window_ms) {
  const uint64_t product_bound = kMaxLimitWindowMs / window_ms;
  return product_bound < kMaxLimit ? product_bound : kMaxLimit;
}

struct Decision {
  bool allowed = false;
  // Set with a denial that no wait can fix (cost > limit).
  bool never_allowed = false;
  uint64_t limit = 0;
  // The largest cost that would pass right now, after this decision.
  uint64_t remaining = 0;
  // Wait until the full limit is available again if nothing else arrives.
  uint64_t reset_after_ms = 0;
  // For a denial: the smallest wait after which the same request would pass
  // if nothing else arrived. 0 when allowed or never_allowed.
  uint64_t retry_after_ms = 0;

  bool operator==(const Decision&) const = default;
};

// OK, or InvalidArgument naming what is wrong (unknown algorithm, window 0
// or over kMaxWindowMs, limit over MaxLimitFor).
Status ValidateSpec(const LimitSpec& spec);
// OK, or InvalidArgument for an empty key or one over kMaxKeyBytes.
Status ValidateKey(std::string_view key);

// "fixed_window", "sliding_log", "sliding_counter", "token_bucket".
std::string_view AlgorithmName(Algorithm algorithm);
// The inverse of AlgorithmName; nullopt for anything else.
std::optional<Algorithm> ParseAlgorithm(std::string_view name);

}  // namespace tally
