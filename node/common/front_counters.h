// FrontCounters: what one front (tally's protocol, gRPC, HTTP, RESP) has
// decided, for stats and metrics (node/metrics/metrics.h): checks by outcome
// and by policy domain, shadow denials and quota excesses, and a histogram
// of how long a request took to decide.
//
// Cardinality is bounded: a policy domain is counted under a slot (the
// PolicySet assigns them, node/policy/policy.h), at most kDomainSlots;
// slot kNoDomain holds checks that name their limit instead of a domain,
// kOtherDomain every domain beyond the named slots. Nothing is per key.
//
// Cost on the hot path: the counters are split into stripes, one cache line
// apart, each written by one thread at a time (a front's worker, or a gRPC
// thread by ThreadStripe): Count and RecordLatency are a handful of relaxed
// loads and stores (Writers::kOnePerStripe) or relaxed fetch_adds when
// several threads may share a stripe (Writers::kAny). Read sums the stripes
// at scrape time: its totals may trail the writers by a few requests, and
// it never blocks them.
//
// Thread safety: Count and RecordLatency from the stripe's writer (any
// thread with Writers::kAny); Read from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace tally {

class FrontCounters {
 public:
  static constexpr size_t kDomainSlots = 64;
  static constexpr size_t kNoDomain = 0;  // checks with an explicit limit
  static constexpr size_t kOtherDomain = kDomainSlots - 1;
  // Upper bounds of the latency buckets, in ns (Prometheus "le" in seconds);
  // a last bucket holds everything slower.
  static constexpr std::array<int64_t, 14> kLatencyBoundsNs = {
      5'000,     10'000,    25'000,    50'000,     100'000,    250'000,     500'000,
      1'000'000, 2'500'000, 5'000'000, 10'000'000, 25'000'000, 100'000'000, 1'000'000'000};
  static constexpr size_t kLatencyBuckets = kLatencyBoundsNs.size() + 1;

  enum class Writers { kOnePerStripe, kAny };

  // Checks (or policy descriptors) decided in one request, by outcome:
  // checks = allowed + denied + errors. A shadow denial, and a quota-mode
  // descriptor over its limit but allowed (node/policy/policy_checker.h),
  // are allowed (and counted in shadow_denied or quota_exceeded as well).
  struct Outcomes {
    uint64_t allowed = 0;
    uint64_t denied = 0;
    uint64_t errors = 0;
    uint64_t shadow_denied = 0;
    uint64_t quota_exceeded = 0;

    uint64_t checks() const { return allowed + denied + errors; }
    Outcomes& operator+=(const Outcomes& other);
  };

  struct Snapshot {
    std::array<Outcomes, kDomainSlots> by_domain;
    std::array<uint64_t, kLatencyBuckets> latency_buckets{};  // not cumulative
    uint64_t latency_count = 0;
    int64_t latency_sum_ns = 0;

    Outcomes Total() const;
  };

  // `stripes`: at least 1 (a front's worker count, or kThreadStripes).
  FrontCounters(size_t stripes, Writers writers);
  ~FrontCounters();
  FrontCounters(const FrontCounters&) = delete;
  FrontCounters& operator=(const FrontCounters&) = delete;

  // `domain_slot` below kDomainSlots; `stripe` below stripes().
  void Count(size_t stripe, size_t domain_slot, const Outcomes& outcomes);
  // One request (however many checks it holds) took `latency_ns` to decide;
  // or `requests` requests decided together (a RESP pipeline's batch) each took it.
  void RecordLatency(size_t stripe, int64_t latency_ns, uint64_t requests = 1);

  Snapshot Read() const;
  size_t stripes() const { return stripe_count_; }

  // For fronts whose requests run on threads they do not own (gRPC): a
  // stripe for the calling thread, stable for its life. Use with
  // Writers::kAny when there may be more threads than stripes.
  static constexpr size_t kThreadStripes = 16;
  static size_t ThreadStripe();

 private:
  struct Stripe;
  void Add(std::atomic<uint64_t>& counter, uint64_t delta) const;

  const size_t stripe_count_;
  const Writers writers_;
  std::unique_ptr<Stripe[]> stripes_;
};

}  // namespace tally
