#include "node/common/clock.h"

#include <time.h>

namespace tally {
namespace {

int64_t ReadMs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

}  // namespace

int64_t SystemClock::WallMs() const { return ReadMs(CLOCK_REALTIME); }

int64_t SystemClock::MonotonicMs() const { return ReadMs(CLOCK_MONOTONIC); }

SystemClock* SystemClock::Default() {
  static SystemClock* clock = new SystemClock();
  return clock;
}

void ManualClock::AdvanceMs(int64_t delta_ms) {
  if (delta_ms <= 0) return;
  wall_ms_.fetch_add(delta_ms, std::memory_order_relaxed);
  monotonic_ms_.fetch_add(delta_ms, std::memory_order_relaxed);
}

}  // namespace tally
