#include "cluster/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace tally::cluster {

size_t LatencyHistogram::BucketOf(uint64_t latency_ns) {
  const uint64_t value = std::min(latency_ns, kMaxTrackedNs);
  if (value < kSubBuckets) return static_cast<size_t>(value);
  const int exponent = std::bit_width(value) - 1;  // >= kSubBucketBits
  const int shift = exponent - kSubBucketBits;
  const uint64_t sub_bucket = (value >> shift) - kSubBuckets;
  return static_cast<size_t>(kSubBuckets * (1 + shift) + sub_bucket);
}

uint64_t LatencyHistogram::MidpointOf(size_t bucket) {
  if (bucket < kSubBuckets) return bucket;
  const uint64_t shift = bucket / kSubBuckets - 1;
  const uint64_t sub_bucket = bucket % kSubBuckets;
  const uint64_t lower = (kSubBuckets + sub_bucket) << shift;
  return lower + ((uint64_t{1} << shift) >> 1);
}

void LatencyHistogram::Record(uint64_t latency_ns) {
  ++counts_[BucketOf(latency_ns)];
  ++count_;
  max_ns_ = std::max(max_ns_, latency_ns);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (size_t i = 0; i < kBucketCount; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  max_ns_ = std::max(max_ns_, other.max_ns_);
}

uint64_t LatencyHistogram::PercentileNs(double q) const {
  if (count_ == 0) return 0;
  const auto wanted =
      static_cast<uint64_t>(std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(count_)));
  const uint64_t rank = std::max<uint64_t>(wanted, 1);
  uint64_t seen = 0;
  for (size_t bucket = 0; bucket < kBucketCount; ++bucket) {
    seen += counts_[bucket];
    if (seen >= rank) return std::min(MidpointOf(bucket), max_ns_);
  }
  return max_ns_;
}

nlohmann::ordered_json LatencyJson(const LatencyHistogram& latency) {
  return {{"p50_us", Micros(latency.PercentileNs(0.5))},
          {"p99_us", Micros(latency.PercentileNs(0.99))},
          {"p999_us", Micros(latency.PercentileNs(0.999))},
          {"max_us", Micros(latency.max_ns())}};
}

}  // namespace tally::cluster
