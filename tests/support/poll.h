// PollUntil: waits, bounded, for a condition that another process makes true.
#pragma once

#include <chrono>
#include <thread>

namespace tally::testing {

// Polls `done` every 5 ms for at most timeout_ms; returns its last answer.
template <typename Predicate>
bool PollUntil(Predicate done, int timeout_ms = 5'000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace tally::testing
