#include "node/common/front_counters.h"

#include <algorithm>

namespace tally {

// One stripe: its own cache lines, so that writers on other stripes never
// contend for them.
struct alignas(64) FrontCounters::Stripe {
  struct Slot {
    std::atomic<uint64_t> allowed{0}, denied{0}, errors{0}, shadow_denied{0}, quota_exceeded{0};
  };
  std::array<Slot, kDomainSlots> by_domain;
  std::array<std::atomic<uint64_t>, kLatencyBuckets> latency_buckets{};
  std::atomic<uint64_t> latency_sum_ns{0};
};

FrontCounters::Outcomes& FrontCounters::Outcomes::operator+=(const Outcomes& other) {
  allowed += other.allowed;
  denied += other.denied;
  errors += other.errors;
  shadow_denied += other.shadow_denied;
  quota_exceeded += other.quota_exceeded;
  return *this;
}

FrontCounters::Outcomes FrontCounters::Snapshot::Total() const {
  Outcomes total;
  for (const Outcomes& outcomes : by_domain) total += outcomes;
  return total;
}

FrontCounters::FrontCounters(size_t stripes, Writers writers)
    : stripe_count_(std::max<size_t>(1, stripes)),
      writers_(writers),
      stripes_(new Stripe[stripe_count_]) {}

FrontCounters::~FrontCounters() = default;

void FrontCounters::Add(std::atomic<uint64_t>& counter, uint64_t delta) const {
  if (delta == 0) return;
  if (writers_ == Writers::kAny) {
    counter.fetch_add(delta, std::memory_order_relaxed);
  } else {  // the only writer: no read-modify-write needed
    counter.store(counter.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  }
}

void FrontCounters::Count(size_t stripe, size_t domain_slot, const Outcomes& outcomes) {
  Stripe::Slot& slot = stripes_[stripe].by_domain[domain_slot];
  Add(slot.allowed, outcomes.allowed);
  Add(slot.denied, outcomes.denied);
  Add(slot.errors, outcomes.errors);
  Add(slot.shadow_denied, outcomes.shadow_denied);
  Add(slot.quota_exceeded, outcomes.quota_exceeded);
}

void FrontCounters::RecordLatency(size_t stripe, int64_t latency_ns, uint64_t requests) {
  latency_ns = std::max<int64_t>(0, latency_ns);
  size_t bucket = 0;
  while (bucket < kLatencyBoundsNs.size() && latency_ns > kLatencyBoundsNs[bucket]) ++bucket;
  Stripe& counters = stripes_[stripe];
  Add(counters.latency_buckets[bucket], requests);
  Add(counters.latency_sum_ns, static_cast<uint64_t>(latency_ns) * requests);
}

FrontCounters::Snapshot FrontCounters::Read() const {
  const auto get = [](const std::atomic<uint64_t>& counter) {
    return counter.load(std::memory_order_relaxed);
  };
  Snapshot snapshot;
  for (size_t s = 0; s < stripe_count_; ++s) {
    const Stripe& stripe = stripes_[s];
    for (size_t d = 0; d < kDomainSlots; ++d) {
      const Stripe::Slot& slot = stripe.by_domain[d];
      snapshot.by_domain[d] += Outcomes{get(slot.allowed), get(slot.denied), get(slot.errors),
                                        get(slot.shadow_denied), get(slot.quota_exceeded)};
    }
    for (size_t b = 0; b < kLatencyBuckets; ++b) {
      const uint64_t count = get(stripe.latency_buckets[b]);
      snapshot.latency_buckets[b] += count;
      snapshot.latency_count += count;
    }
    snapshot.latency_sum_ns += static_cast<int64_t>(get(stripe.latency_sum_ns));
  }
  return snapshot;
}

size_t FrontCounters::ThreadStripe() {
  static std::atomic<size_t> next{0};
  thread_local const size_t stripe = next.fetch_add(1, std::memory_order_relaxed) % kThreadStripes;
  return stripe;
}

}  // namespace tally
