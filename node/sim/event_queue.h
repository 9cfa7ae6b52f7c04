// EventQueue: the simulation's time and what is due, in order of time and,
// at one time, of scheduling: one seed, one order. Time is in whole
// milliseconds from the simulation's start (every Clock of the simulation
// reads it).
//
// Thread safety: none (the simulation is single-threaded).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace tally::sim {

class EventQueue {
 public:
  using Event = std::function<void()>;

  int64_t now_ms() const { return now_ms_; }
  // Runs `event` at at_ms (not before now).
  void At(int64_t at_ms, Event event);
  void After(int64_t delay_ms, Event event) { At(now_ms_ + delay_ms, std::move(event)); }
  // Runs the next event if it is due by until_ms and returns true; else
  // moves time to until_ms and returns false.
  bool RunNext(int64_t until_ms);
  size_t pending() const { return heap_.size(); }
  uint64_t steps() const { return steps_; }

 private:
  struct Entry {
    int64_t at_ms;
    uint64_t seq;
    Event event;
  };
  static bool Later(const Entry& a, const Entry& b) {
    return a.at_ms != b.at_ms ? a.at_ms > b.at_ms : a.seq > b.seq;
  }

  std::vector<Entry> heap_;  // a min-heap by (at_ms, seq)
  int64_t now_ms_ = 0;
  uint64_t next_seq_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace tally::sim
