#include "node/sim/checker.h"

#include <algorithm>

#include "node/sim/sim_node.h"

namespace tally::sim {

int64_t Checker::WindowOf(int64_t at_ms) const {
  return (SimClock::kWallOriginMs + at_ms) / options_.window_ms;
}

bool Checker::Degraded(int64_t window) const {
  const int64_t from_ms = window * options_.window_ms - SimClock::kWallOriginMs;
  const int64_t to_ms = from_ms + options_.window_ms;
  for (const auto& [degraded_from, degraded_to] : degraded_) {
    if (degraded_from < to_ms && degraded_to + options_.staleness_ms >= from_ms) return true;
  }
  return false;
}

Checker::KeyWindows& Checker::Windows(size_t key) {
  if (key >= windows_.size()) windows_.resize(key + 1);
  return windows_[key];
}

void Checker::Degrade(int64_t from_ms, int64_t to_ms) { degraded_.emplace_back(from_ms, to_ms); }

void Checker::Crashed(NodeId node, int64_t at_ms, int64_t round_ms) {
  for (size_t key = 0; key < windows_.size(); ++key) {
    KeyWindows& windows = windows_[key];
    uint64_t lost = 0;
    for (const auto& [admitted_ms, by] : windows.recent) {
      lost += by == node && admitted_ms >= at_ms - round_ms ? 1 : 0;
    }
    if (windows.window == WindowOf(at_ms)) {
      windows.crash_slack += lost;
      windows.next_crash_slack += lost;
    }
  }
}

std::optional<std::string> Checker::NodeAdmitted(size_t key, NodeId node, int64_t at_ms) {
  const SimKey& sim_key = (*keys_)[key];
  KeyWindows& windows = Windows(key);
  Totals& totals = totals_[static_cast<int>(sim_key.kind)];
  const int64_t window = WindowOf(at_ms);
  if (window != windows.window) {
    const bool next = window == windows.window + 1;
    windows.crash_slack = next ? windows.next_crash_slack : 0;
    windows.next_crash_slack = 0;
    windows.window = window;
    windows.admitted = 0;
    windows.most_within_s = 0;
    ++totals.windows;
  }
  ++totals.admitted;
  ++windows.admitted;
  totals.worst_window = std::max(totals.worst_window, windows.admitted);
  windows.recent.emplace_back(at_ms, node);
  while (windows.recent.front().first <= at_ms - options_.window_ms) windows.recent.pop_front();
  uint64_t within_s = 0;
  for (auto it = windows.recent.rbegin();
       it != windows.recent.rend() && it->first > at_ms - options_.staleness_ms &&
       WindowOf(it->first) == window;
       ++it) {
    ++within_s;
  }
  windows.most_within_s = std::max(windows.most_within_s, within_s);
  const uint64_t limit = sim_key.spec.limit;
  const uint64_t nodes = options_.max_nodes;
  const bool degraded = Degraded(window);
  const uint64_t base = sim_key.spec.algorithm == Algorithm::kTokenBucket ? 2 * limit : limit;
  const uint64_t overshoot =
      degraded ? nodes * limit : std::min(windows.most_within_s, (nodes - 1) * limit);
  const uint64_t bound = base + overshoot + limit / 32 + nodes + windows.crash_slack;
  if (windows.admitted <= bound) return std::nullopt;
  return "key '" + sim_key.key + "': the cluster admitted " + std::to_string(windows.admitted) +
         " in window " + std::to_string(window) + ", beyond the bound " + std::to_string(bound) +
         " (limit " + std::to_string(limit) + ", R x S " + std::to_string(windows.most_within_s) +
         (degraded ? ", degraded" : "") + ", crash slack " + std::to_string(windows.crash_slack) +
         ")";
}

void Checker::CentralAdmitted(size_t key, int64_t at_ms) {
  ++totals_[static_cast<int>((*keys_)[key].kind)].central;
  (void)at_ms;
}

std::optional<std::string> Checker::CheckViewHolds(NodeId at, Limiter& limiter, NodeId from,
                                                   std::span<const KeySnapshot> entries) {
  for (const KeySnapshot& sent : entries) {
    if (sent.algorithm != Algorithm::kFixedWindow &&
        sent.algorithm != Algorithm::kSlidingWindowCounter) {
      continue;
    }
    KeySnapshot held;
    if (!limiter.Read(sent.key, LimitSpec{sent.algorithm, 1, sent.window_ms}, &held).ok()) continue;
    const auto check = [&](const GCounter& sent_counts, int64_t sent_window) -> bool {
      const GCounter* held_counts = sent_window == held.counts.window_index ? &held.counts.current
                                    : sent_window == held.counts.window_index - 1
                                        ? &held.counts.previous
                                        : nullptr;
      if (held_counts == nullptr) return true;  // ended here, or not begun (a clock behind)
      for (const GCounter::Slot& slot : sent_counts.slots()) {
        if (held_counts->Get(slot.node) < slot.count) return false;
      }
      return true;
    };
    if (!check(sent.counts.current, sent.counts.window_index) ||
        !check(sent.counts.previous, sent.counts.window_index - 1)) {
      return "node " + std::to_string(at) + " holds less of key '" + sent.key + "' than node " +
             std::to_string(from) + " delivered to it";
    }
  }
  return std::nullopt;
}

}  // namespace tally::sim
