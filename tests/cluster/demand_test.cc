// Unit tests of the benchmark harness's pure parts: the arrival schedules of
// cluster/demand.h and the CPU time of cluster/cpu_usage.h.
#include "cluster/demand.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "cluster/cpu_usage.h"

namespace tally::cluster {
namespace {

bool SameSchedule(const std::vector<Arrival>& a, const std::vector<Arrival>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const Arrival& x, const Arrival& y) {
    return x.offset_ns == y.offset_ns && x.stream == y.stream;
  });
}

// Poisson arrivals: the same for the same seed, different for another; in
// time order within the duration; about rate x duration of them (a Poisson
// count of mean 8000 lies within 5 standard deviations, ~450); every stream
// gets about its share; the gaps' mean is 1 / rate.
TEST_CASE("poisson arrivals are seeded, sorted and at their rate") {
  const std::vector<Arrival> arrivals = PoissonArrivals(800, 10'000, 4, 7);
  CHECK(SameSchedule(arrivals, PoissonArrivals(800, 10'000, 4, 7)));
  CHECK_FALSE(SameSchedule(arrivals, PoissonArrivals(800, 10'000, 4, 8)));
  CHECK(std::abs(static_cast<double>(arrivals.size()) - 8'000) < 450);
  CHECK(std::is_sorted(arrivals.begin(), arrivals.end(), [](const Arrival& a, const Arrival& b) {
    return a.offset_ns < b.offset_ns;
  }));
  CHECK(arrivals.front().offset_ns >= 0);
  CHECK(arrivals.back().offset_ns < 10'000'000'000);
  size_t per_stream[4] = {};
  for (const Arrival& arrival : arrivals) {
    REQUIRE(arrival.stream < 4);
    ++per_stream[arrival.stream];
  }
  for (const size_t count : per_stream) CHECK(std::abs(static_cast<double>(count) - 2'000) < 250);
  const double mean_gap_ms =
      static_cast<double>(arrivals.back().offset_ns - arrivals.front().offset_ns) / 1e6 /
      static_cast<double>(arrivals.size() - 1);
  CHECK(mean_gap_ms == doctest::Approx(1.25).epsilon(0.1));
}

// A burst: `count` arrivals at even intervals from 0 to before the span's
// end, dealt to the streams in turn.
TEST_CASE("burst arrivals are evenly spread and dealt in turn") {
  const std::vector<Arrival> arrivals = BurstArrivals(500, 20, 12);
  REQUIRE(arrivals.size() == 500);
  for (size_t i = 0; i < arrivals.size(); ++i) {
    CHECK(arrivals[i].offset_ns == static_cast<int64_t>(i) * 40'000);
    CHECK(arrivals[i].stream == i % 12);
  }
}

// A process's CPU time agrees with what getrusage says of it (to the
// kernel's tick), and grows with work; a process that is gone is an error.
TEST_CASE("process cpu seconds from /proc") {
  volatile uint64_t sink = 0;
  for (uint64_t i = 0; i < 100'000'000; ++i) sink = sink + i;  // some CPU time to see
  double seconds = 0;
  REQUIRE(ProcessCpuSeconds(getpid(), &seconds).ok());
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double rusage_s =
      static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
      static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  CHECK(seconds > 0);
  CHECK(std::abs(seconds - rusage_s) < 0.05);

  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK_FALSE(ProcessCpuSeconds(child, &seconds).ok());
}

}  // namespace
}  // namespace tally::cluster
