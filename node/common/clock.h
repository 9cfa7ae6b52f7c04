// Clock: the injectable source of time (leveldb's Env, reduced to time).
//
// Two readings, with different jobs:
//  - WallMs(): milliseconds since the Unix epoch. Windows are aligned to it so
//    that every node agrees on the window index floor(wall_ms / window_ms).
//    It may jump (NTP); users of it must clamp it so it never moves backwards.
//  - MonotonicMs(): milliseconds since an arbitrary origin, never decreasing.
//    For intervals and timeouts (flush, gossip, idle connections).
//
// Thread safety: every implementation may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace tally {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t WallMs() const = 0;
  virtual int64_t MonotonicMs() const = 0;
};

// The real clocks (CLOCK_REALTIME and CLOCK_MONOTONIC).
class SystemClock final : public Clock {
 public:
  int64_t WallMs() const override;
  int64_t MonotonicMs() const override;
  // A process-wide instance; never destroyed.
  static SystemClock* Default();
};

// A clock that moves only when told to: for tests, replays and the demo.
// Setting the wall clock backwards is allowed (to test clock steps); the
// monotonic reading only ever advances.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t wall_ms = 0, int64_t monotonic_ms = 0)
      : wall_ms_(wall_ms), monotonic_ms_(monotonic_ms) {}

  int64_t WallMs() const override { return wall_ms_.load(std::memory_order_relaxed); }
  int64_t MonotonicMs() const override { return monotonic_ms_.load(std::memory_order_relaxed); }

  // Moves both readings forward by delta_ms (>= 0).
  void AdvanceMs(int64_t delta_ms);
  // Sets the wall reading only (it may go backwards); monotonic is unchanged.
  void SetWallMs(int64_t wall_ms) { wall_ms_.store(wall_ms, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> wall_ms_;
  std::atomic<int64_t> monotonic_ms_;
};

}  // namespace tally
