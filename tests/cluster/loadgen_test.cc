// Unit tests of the load generator's pure parts: the latency histogram
// (cluster/latency_histogram.h). Its RESP codec is tested in
// tests/protocol/resp_codec_test.cc.
#include <cstring>
#include <string>
#include <string_view>

#include <doctest/doctest.h>

#include "cluster/latency_histogram.h"

namespace tally::cluster {
namespace {

// Percentiles of 1..100000 µs, each once, are within 1% of the exact ones.
TEST_CASE("latency histogram percentiles of a uniform distribution") {
  LatencyHistogram histogram;
  for (uint64_t us = 1; us <= 100'000; ++us) histogram.Record(us * 1'000);
  CHECK(histogram.count() == 100'000);
  CHECK(histogram.max_ns() == 100'000'000);
  const struct {
    double q;
    double exact_ns;
  } expected[] = {{0.5, 50e6}, {0.9, 90e6}, {0.99, 99e6}, {0.999, 99.9e6}, {1.0, 100e6}};
  for (const auto& [q, exact_ns] : expected) {
    CHECK_MESSAGE(
        static_cast<double>(histogram.PercentileNs(q)) == doctest::Approx(exact_ns).epsilon(0.01),
        "q=", q);
  }
}

// Small values are exact; the empty histogram reports 0; max is exact even
// past the tracked range, and no percentile exceeds it.
TEST_CASE("latency histogram edges: exact small values, empty, overflow") {
  LatencyHistogram histogram;
  CHECK(histogram.PercentileNs(0.5) == 0);
  for (uint64_t ns = 0; ns < 100; ++ns) histogram.Record(ns);
  CHECK(histogram.PercentileNs(0.5) == 49);
  CHECK(histogram.PercentileNs(0.01) == 0);
  CHECK(histogram.PercentileNs(1.0) == 99);

  LatencyHistogram overflow;
  overflow.Record(200'000'000'000);  // 200 s, past kMaxTrackedNs
  CHECK(overflow.max_ns() == 200'000'000'000);
  CHECK(overflow.PercentileNs(0.5) <= overflow.max_ns());
  CHECK(static_cast<double>(overflow.PercentileNs(0.5)) ==
        doctest::Approx(static_cast<double>(LatencyHistogram::kMaxTrackedNs)).epsilon(0.01));
}

// Merging per-thread histograms gives the histogram of all the values.
TEST_CASE("latency histogram merge equals recording everything in one") {
  LatencyHistogram low, high, all;
  for (uint64_t ns = 1'000; ns <= 2'000'000; ns += 997) {
    (ns % 2 ? low : high).Record(ns);
    all.Record(ns);
  }
  low.Merge(high);
  CHECK(low.count() == all.count());
  CHECK(low.max_ns() == all.max_ns());
  for (const double q : {0.1, 0.5, 0.99, 0.999}) CHECK(low.PercentileNs(q) == all.PercentileNs(q));
}

}  // namespace
}  // namespace tally::cluster
