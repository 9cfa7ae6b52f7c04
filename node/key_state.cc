#include "node/key_state.h"

#include "node/key_snapshot.h"

#include <algorithm>
#include <limits>

namespace tally {
namespace {

// Merges `from` into the own slot (inline) and the remote G-counter of one window.
void MergeWindow(const GCounter& from, NodeId self, uint32_t& own,
                 std::unique_ptr<RemoteCounts>& remote, GCounter RemoteCounts::*window) {
  for (const GCounter::Slot& slot : from.slots()) {
    if (slot.node == self) {
      const uint64_t clamped = std::min<uint64_t>(slot.count, std::numeric_limits<uint32_t>::max());
      own = std::max(own, static_cast<uint32_t>(clamped));
      continue;
    }
    if (!remote) remote = std::make_unique<RemoteCounts>();
    ((*remote).*window).MergeSlot(slot.node, slot.count);
  }
}

}  // namespace

void AdvanceTo(CounterEntry& entry, int64_t window_index) {
  const int64_t windows_ahead = window_index - entry.window_index;
  if (windows_ahead <= 0) return;
  entry.window_index = window_index;
  if (windows_ahead == 1) {
    entry.own_previous = entry.own_current;
    entry.own_current = 0;
    if (entry.remote) {
      entry.remote->previous = std::move(entry.remote->current);
      entry.remote->current = GCounter();
      if (entry.remote->previous.empty()) entry.remote.reset();
    }
    return;
  }
  entry.own_previous = 0;
  entry.own_current = 0;
  entry.remote.reset();
}

uint64_t CurrentTotal(const CounterEntry& entry) {
  return entry.own_current + (entry.remote ? entry.remote->current.Sum() : 0);
}

uint64_t PreviousTotal(const CounterEntry& entry) {
  return entry.own_previous + (entry.remote ? entry.remote->previous.Sum() : 0);
}

void ExportCounts(const CounterEntry& entry, NodeId self, WindowCounts* counts) {
  counts->window_index = entry.window_index;
  counts->current.Clear();  // keeps the memory of a reused snapshot
  counts->previous.Clear();
  if (entry.remote) {
    counts->current = entry.remote->current;
    counts->previous = entry.remote->previous;
  }
  counts->current.MergeSlot(self, entry.own_current);
  counts->previous.MergeSlot(self, entry.own_previous);
}

void MergeCounts(CounterEntry& entry, NodeId self, const WindowCounts& counts) {
  AdvanceTo(entry, counts.window_index);
  if (counts.window_index == entry.window_index) {
    MergeWindow(counts.current, self, entry.own_current, entry.remote, &RemoteCounts::current);
    MergeWindow(counts.previous, self, entry.own_previous, entry.remote, &RemoteCounts::previous);
  } else if (counts.window_index == entry.window_index - 1) {
    MergeWindow(counts.current, self, entry.own_previous, entry.remote, &RemoteCounts::previous);
  }
}

int64_t WindowsKept(Algorithm algorithm) {
  return algorithm == Algorithm::kSlidingWindowCounter ? 2 : 1;
}

bool IsExpired(const CounterEntry& entry, Algorithm algorithm, uint64_t window_ms,
               int64_t now_ms) {
  const int64_t now_window = now_ms / static_cast<int64_t>(window_ms);
  return entry.window_index <= now_window - WindowsKept(algorithm);
}

void TrimLog(LogEntry& entry, uint64_t window_ms, int64_t now_ms) {
  const int64_t cutoff_ms = now_ms - static_cast<int64_t>(window_ms);
  while (entry.first < entry.stamps.size() && entry.stamps[entry.first].at_ms <= cutoff_ms) {
    entry.live_total -= entry.stamps[entry.first].cost;
    ++entry.first;
  }
  // Compact once the dead prefix is at least half the vector: amortised O(1).
  if (entry.first > 0 && entry.first * 2 >= entry.stamps.size()) {
    entry.stamps.erase(entry.stamps.begin(), entry.stamps.begin() + entry.first);
    entry.first = 0;
    if (entry.stamps.capacity() > 4 * entry.stamps.size() + 4) entry.stamps.shrink_to_fit();
  }
}

std::span<const LogStamp> LiveStamps(const LogEntry& entry) {
  return std::span<const LogStamp>(entry.stamps).subspan(entry.first);
}

void AppendLog(LogEntry& entry, int64_t now_ms, uint64_t cost) {
  entry.live_total += cost;
  if (entry.stamps.size() > entry.first && entry.stamps.back().at_ms == now_ms) {
    entry.stamps.back().cost += cost;
  } else {
    entry.stamps.push_back(LogStamp{now_ms, cost});
  }
}

bool IsExpired(const LogEntry& entry, Algorithm /*algorithm*/, uint64_t window_ms,
               int64_t now_ms) {
  return entry.stamps.size() == entry.first ||
         entry.stamps.back().at_ms <= now_ms - static_cast<int64_t>(window_ms);
}

bool IsExpired(const BucketEntry& entry, Algorithm /*algorithm*/, uint64_t window_ms,
               int64_t now_ms) {
  return now_ms - entry.refilled_at_ms >= static_cast<int64_t>(window_ms);
}

int64_t ExpiresAtMs(const KeySnapshot& snapshot) {
  const auto window_ms = static_cast<int64_t>(snapshot.window_ms);
  switch (snapshot.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter:
      return (snapshot.counts.window_index + WindowsKept(snapshot.algorithm)) * window_ms;
    case Algorithm::kSlidingWindowLog:
      return snapshot.log_stamps.empty() ? 0 : snapshot.log_stamps.back().at_ms + window_ms;
    case Algorithm::kTokenBucket: return snapshot.bucket_refilled_at_ms + window_ms;
  }
  return 0;
}

}  // namespace tally
