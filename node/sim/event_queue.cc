#include "node/sim/event_queue.h"

#include <algorithm>
#include <cmath>

#include "node/sim/random.h"

namespace tally::sim {

void EventQueue::At(int64_t at_ms, Event event) {
  heap_.push_back(Entry{std::max(at_ms, now_ms_), next_seq_++, std::move(event)});
  std::push_heap(heap_.begin(), heap_.end(), Later);
}

bool EventQueue::RunNext(int64_t until_ms) {
  if (heap_.empty() || heap_.front().at_ms > until_ms) {
    now_ms_ = std::max(now_ms_, until_ms);
    return false;
  }
  std::pop_heap(heap_.begin(), heap_.end(), Later);
  Entry entry = std::move(heap_.back());
  heap_.pop_back();
  now_ms_ = entry.at_ms;
  ++steps_;
  entry.event();
  return true;
}

int64_t Random::ExponentialMs(double mean_ms) {
  const double draw = -std::log(1.0 - Unit()) * mean_ms;
  return std::max<int64_t>(1, static_cast<int64_t>(draw));
}

}  // namespace tally::sim
