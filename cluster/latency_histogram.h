// LatencyHistogram: a log-linear histogram of latencies in nanoseconds.
//
// Each power of two is split into kSubBuckets equal buckets, so a bucket is
// at most 1/64 of the values in it wide and a reported percentile is within
// 1% of the true value (the bucket's midpoint is reported). Values below 64 ns
// are exact; values above kMaxTrackedNs (~68 s) are counted in the top bucket.
// The maximum is tracked exactly. Fixed size (~16 KiB), no allocation after
// construction, Record is a few instructions.
//
// Thread safety: none. The load generator keeps one per event-loop thread
// and merges them after the threads have joined.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

namespace tally::cluster {

class LatencyHistogram {
 public:
  static constexpr int kSubBucketBits = 6;
  static constexpr uint64_t kSubBuckets = uint64_t{1} << kSubBucketBits;
  static constexpr int kMaxExponent = 36;  // 2^36 ns: ~68.7 s
  static constexpr uint64_t kMaxTrackedNs = (uint64_t{1} << kMaxExponent) - 1;

  void Record(uint64_t latency_ns);
  void Merge(const LatencyHistogram& other);

  uint64_t count() const { return count_; }
  uint64_t max_ns() const { return max_ns_; }
  // The latency at quantile q (0 < q <= 1): the smallest recorded value v
  // such that a fraction q of the values are <= v, within the precision
  // above, never above max_ns(). 0 when nothing was recorded.
  uint64_t PercentileNs(double q) const;

 private:
  static constexpr size_t kBucketCount =
      kSubBuckets + (kMaxExponent - kSubBucketBits) * kSubBuckets;

  static size_t BucketOf(uint64_t latency_ns);
  // The midpoint of the values that fall into `bucket`.
  static uint64_t MidpointOf(size_t bucket);

  std::array<uint64_t, kBucketCount> counts_{};
  uint64_t count_ = 0;
  uint64_t max_ns_ = 0;
};

// ns as µs.
inline double Micros(uint64_t ns) { return static_cast<double>(ns) / 1e3; }

// p50_us, p99_us, p999_us and max_us of `latency`, for the load generators' JSON.
nlohmann::ordered_json LatencyJson(const LatencyHistogram& latency);

}  // namespace tally::cluster
