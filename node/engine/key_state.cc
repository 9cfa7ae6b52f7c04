#include "node/engine/key_state.h"

#include <algorithm>
#include <limits>

#include "node/common/key_snapshot.h"

namespace tally {
namespace {

__extension__ typedef unsigned __int128 u128;  // token-ms sums and refills

uint64_t Saturate(u128 value) {
  return static_cast<uint64_t>(std::min<u128>(value, std::numeric_limits<uint64_t>::max()));
}

// A debt of `debt` token-ms at at_ms, refilled at `capacity` token-ms per ms
// until now_ms (none if now_ms is not later).
uint64_t RefilledDebt(uint64_t debt, int64_t at_ms, uint64_t capacity, int64_t now_ms) {
  if (now_ms <= at_ms) return debt;
  const u128 refill = static_cast<u128>(now_ms - at_ms) * capacity;
  return refill >= debt ? 0 : debt - static_cast<uint64_t>(refill);
}

uint32_t Saturated32(uint64_t value) {
  return static_cast<uint32_t>(std::min<uint64_t>(value, std::numeric_limits<uint32_t>::max()));
}

DeniedCounts& DeniedOf(CounterEntry& entry) {
  RemoteCounts& remote = entry.peers.MakeFull();
  if (!remote.denied) remote.denied = std::make_unique<DeniedCounts>();
  return *remote.denied;
}

DeniedCounts& DeniedOf(BucketEntry& entry) {
  if (!entry.denied) entry.denied = std::make_unique<DeniedCounts>();
  return *entry.denied;
}

// The current window's counts become the previous window's; the current
// one starts empty, in the previous one's memory.
void RollWindow(GCounter& current, GCounter& previous) {
  std::swap(previous, current);
  current.Clear();
}

// The current window's denials become the previous window's.
void ShiftDenied(DeniedCounts& denied) {
  RollWindow(denied.current, denied.previous);
  denied.own_previous = denied.own_current;
  denied.own_current = 0;
  denied.sent_previous = denied.sent_current;
  denied.sent_current = 0;
}

// A peer's denials for its window `index` into `counts`, whose current window is `current_index`.
void MergeDeniedAt(DeniedCounts& counts, int64_t current_index, int64_t index,
                   const DeniedCost& denied) {
  if (index == current_index) {
    counts.current.MergeSlot(denied.node, denied.current);
    counts.previous.MergeSlot(denied.node, denied.previous);
  } else if (index == current_index - 1) {
    counts.previous.MergeSlot(denied.node, denied.current);
  }
}

// What a node sends of its denials (none: node 0); what it sent the time
// before counts as heard from now on (SendDenied).
DeniedCost SendDeniedOf(DeniedCounts* denied, NodeId self) {
  if (denied == nullptr) return {};
  denied->current.MergeSlot(self, denied->sent_current);
  denied->previous.MergeSlot(self, denied->sent_previous);
  denied->sent_current = denied->own_current;
  denied->sent_previous = denied->own_previous;
  return {self, denied->own_current, denied->own_previous};
}

// Every node's denials as heard, and this node's own among them: the
// current window and the previous one weighed by previous_weight.
void AddDenied(const DeniedCounts& denied, NodeId self, double previous_weight,
               HeardDemand* demand) {
  const double own_denied = static_cast<double>(denied.current.Get(self)) +
                            previous_weight * static_cast<double>(denied.previous.Get(self));
  demand->own += own_denied;
  demand->denied = static_cast<double>(denied.current.Sum()) +
                   previous_weight * static_cast<double>(denied.previous.Sum());
  demand->all += demand->denied;
}

// A node's cost in a bucket's live slices (folded cost not included).
uint64_t LiveCost(const NodeSlices& node) {
  uint64_t cost = 0;
  for (uint32_t count : node.counts) cost += count;
  return cost;
}

// The period (a quarter window) a bucket's state is current in: its base is
// the previous one's start.
int64_t CurrentPeriod(const BucketSlices& state) {
  return state.base_slice / kBucketSlicesPerPeriod + 1;
}

// Merges `from` into the own slot (inline) and the peers' slots of one
// window (the current one unless `previous`).
void MergeWindow(const GCounter& from, NodeId self, size_t peers, uint32_t& own,
                 CounterPeers& others, bool previous) {
  const uint64_t own_count = from.Get(self);
  own = std::max(own, Saturated32(own_count));
  const size_t own_slots = own_count > 0 ? 1 : 0;
  if (from.slots().size() == own_slots) return;  // nothing of a peer's
  // A key that one peer admits on keeps its slot inside the entry, one that
  // two do inside their RemoteCounts, however large the cluster; one that
  // needs more makes room for `peers` at once.
  if (previous) {
    others.MergePrevious(from, /*except=*/self, peers);
  } else {
    others.MergeCurrent(from, /*except=*/self, peers);
  }
}

// Drops entries at or before cutoff_ms.
void TrimStamps(StampLog& log, int64_t cutoff_ms) {
  while (log.first < log.stamps.size() && log.stamps[log.first].at_ms <= cutoff_ms) {
    log.live_total -= log.stamps[log.first].cost;
    ++log.first;
  }
  // Compact once the dead prefix is at least half the vector: amortised O(1).
  if (log.first > 0 && log.first * 2 >= log.stamps.size()) {
    log.stamps.erase(log.stamps.begin(), log.stamps.begin() + log.first);
    log.first = 0;
    if (log.stamps.capacity() > 4 * log.stamps.size() + 4) log.stamps.shrink_to_fit();
  }
}

// Max-merges `incoming` (strictly increasing times) into the live entries of
// `log`; entries at or before cutoff_ms are skipped.
void MergeStamps(StampLog& log, std::span<const LogStamp> incoming, int64_t cutoff_ms) {
  const std::span<const LogStamp> live = LiveStamps(log);
  if (!incoming.empty() && (live.empty() || incoming.front().at_ms >= live.back().at_ms)) {
    // The usual case, a peer's newer entries: append (the first may update the last).
    for (const LogStamp& stamp : incoming) {
      const uint64_t cost = std::min<uint64_t>(stamp.cost, kMaxLimit);
      if (stamp.at_ms <= cutoff_ms || cost == 0) continue;
      if (log.stamps.size() > log.first && log.stamps.back().at_ms == stamp.at_ms) {
        if (cost > log.stamps.back().cost) {
          log.live_total += cost - log.stamps.back().cost;
          log.stamps.back().cost = cost;
        }
      } else {
        log.stamps.push_back({stamp.at_ms, cost});
        log.live_total += cost;
      }
    }
    return;
  }
  std::vector<LogStamp> merged;
  merged.reserve(live.size() + incoming.size());
  size_t i = 0;
  for (const LogStamp& stamp : incoming) {
    const uint64_t cost = std::min<uint64_t>(stamp.cost, kMaxLimit);
    if (stamp.at_ms <= cutoff_ms || cost == 0) continue;
    while (i < live.size() && live[i].at_ms < stamp.at_ms) merged.push_back(live[i++]);
    if (i < live.size() && live[i].at_ms == stamp.at_ms) {
      merged.push_back({stamp.at_ms, std::max(cost, live[i++].cost)});
    } else {
      merged.push_back({stamp.at_ms, cost});
    }
  }
  merged.insert(merged.end(), live.begin() + static_cast<ptrdiff_t>(i), live.end());
  log.stamps = std::move(merged);
  log.first = 0;
  log.live_total = 0;
  for (const LogStamp& stamp : log.stamps) log.live_total += stamp.cost;
}

}  // namespace

void AdvanceTo(CounterEntry& entry, int64_t window_index) {
  // Compared, not subtracted: a peer's window index may be anything.
  if (window_index <= entry.window_index) return;
  const bool next_window = window_index - 1 == entry.window_index;
  entry.window_index = window_index;
  if (next_window) {
    entry.own_previous = entry.own_current;
    entry.own_current = 0;
    entry.peers.Roll();
    if (RemoteCounts* remote = entry.peers.full()) {
      if (DeniedCounts* denied = remote->denied.get()) ShiftDenied(*denied);
      if (remote->peers.empty() && !remote->denied) entry.peers.Reset();
    }
    return;
  }
  entry.own_previous = 0;
  entry.own_current = 0;
  entry.peers.Reset();
}

uint64_t CurrentTotal(const CounterEntry& entry) {
  return entry.own_current + entry.peers.current_sum();
}

uint64_t PreviousTotal(const CounterEntry& entry) {
  return entry.own_previous + entry.peers.previous_sum();
}

void ExportCounts(const CounterEntry& entry, NodeId self, WindowCounts* counts) {
  counts->window_index = entry.window_index;
  counts->current.Clear();  // keeps the memory of a reused snapshot
  counts->previous.Clear();
  entry.peers.ExportTo(counts);
  counts->current.MergeSlot(self, entry.own_current);
  counts->previous.MergeSlot(self, entry.own_previous);
}

void MergeCounts(CounterEntry& entry, NodeId self, size_t peers, const WindowCounts& counts) {
  AdvanceTo(entry, counts.window_index);
  if (counts.window_index == entry.window_index) {
    MergeWindow(counts.current, self, peers, entry.own_current, entry.peers, false);
    MergeWindow(counts.previous, self, peers, entry.own_previous, entry.peers, true);
  } else if (counts.window_index == entry.window_index - 1) {
    MergeWindow(counts.current, self, peers, entry.own_previous, entry.peers, true);
  }
}

bool IsExpired(const CounterEntry& entry, Algorithm algorithm, uint64_t window_ms, int64_t now_ms) {
  const int64_t now_window = now_ms / static_cast<int64_t>(window_ms);
  return entry.window_index <= now_window - WindowsKept(algorithm);
}

void CountDenied(CounterEntry& entry, uint64_t cost) {
  DeniedCounts& denied = DeniedOf(entry);
  denied.own_current = Saturated32(uint64_t{denied.own_current} + cost);
}

void MergeDenied(CounterEntry& entry, NodeId self, int64_t window_index, const DeniedCost& denied) {
  if (denied.node == 0 || denied.node == self) return;  // this node's own are never taken back
  if (window_index != entry.window_index && window_index != entry.window_index - 1) return;
  MergeDeniedAt(DeniedOf(entry), entry.window_index, window_index, denied);
}

DeniedCost SendDenied(CounterEntry& entry, NodeId self) {
  RemoteCounts* remote = entry.peers.full();
  return SendDeniedOf(remote ? remote->denied.get() : nullptr, self);
}

HeardDemand DemandOf(const CounterEntry& entry, NodeId self, uint64_t unheard,
                     double previous_weight) {
  // This node's admissions as its peers have them: what is unheard comes off
  // the current window first (the previous one's wait only while deferred).
  const uint64_t unheard_current = std::min<uint64_t>(unheard, entry.own_current);
  const uint64_t unheard_previous =
      std::min<uint64_t>(unheard - unheard_current, entry.own_previous);
  HeardDemand demand;
  demand.own = static_cast<double>(entry.own_current - unheard_current) +
               previous_weight * static_cast<double>(entry.own_previous - unheard_previous);
  demand.all = demand.own;
  demand.all += static_cast<double>(entry.peers.current_sum()) +
                previous_weight * static_cast<double>(entry.peers.previous_sum());
  if (const RemoteCounts* remote = entry.peers.full()) {
    if (const DeniedCounts* denied = remote->denied.get()) {
      AddDenied(*denied, self, previous_weight, &demand);
    }
  }
  return demand;
}

void TrimLog(LogEntry& entry, uint64_t window_ms, int64_t now_ms) {
  const int64_t cutoff_ms = now_ms - static_cast<int64_t>(window_ms);
  TrimStamps(entry.own, cutoff_ms);
  if (!entry.remote) return;
  auto& nodes = entry.remote->nodes;
  for (auto& [node, log] : nodes) TrimStamps(log, cutoff_ms);
  std::erase_if(nodes, [](const auto& node_log) { return node_log.second.live_total == 0; });
  if (nodes.empty()) entry.remote.reset();
}

std::span<const LogStamp> LiveStamps(const StampLog& log) {
  return std::span<const LogStamp>(log.stamps).subspan(log.first);
}

std::span<const LogStamp> ClusterStamps(const LogEntry& entry, std::vector<LogStamp>* scratch) {
  if (!entry.remote) return LiveStamps(entry.own);
  const std::span<const LogStamp> own = LiveStamps(entry.own);
  scratch->assign(own.begin(), own.end());
  for (const auto& [node, log] : entry.remote->nodes) {
    const std::span<const LogStamp> live = LiveStamps(log);
    scratch->insert(scratch->end(), live.begin(), live.end());
  }
  std::sort(scratch->begin(), scratch->end(),
            [](const LogStamp& a, const LogStamp& b) { return a.at_ms < b.at_ms; });
  return *scratch;
}

uint64_t ClusterTotal(const LogEntry& entry) {
  uint64_t total = entry.own.live_total;
  if (entry.remote) {
    for (const auto& [node, log] : entry.remote->nodes) total += log.live_total;
  }
  return total;
}

void AppendLog(LogEntry& entry, int64_t now_ms, uint64_t cost) {
  StampLog& own = entry.own;
  own.live_total += cost;
  if (own.stamps.size() > own.first && own.stamps.back().at_ms == now_ms) {
    own.stamps.back().cost += cost;
  } else {
    own.stamps.push_back(LogStamp{now_ms, cost});
  }
}

void ExportLog(const LogEntry& entry, NodeId self, std::vector<NodeStamps>* log) {
  log->clear();
  const auto add = [&](NodeId node, const StampLog& stamps) {
    const std::span<const LogStamp> live = LiveStamps(stamps);
    if (!live.empty()) log->push_back(NodeStamps{node, {live.begin(), live.end()}});
  };
  add(self, entry.own);
  if (entry.remote) {
    for (const auto& [node, stamps] : entry.remote->nodes) add(node, stamps);
  }
  std::sort(log->begin(), log->end(),
            [](const NodeStamps& a, const NodeStamps& b) { return a.node < b.node; });
}

void MergeLog(LogEntry& entry, NodeId self, std::span<const NodeStamps> log, uint64_t window_ms,
              int64_t now_ms) {
  const int64_t cutoff_ms = now_ms - static_cast<int64_t>(window_ms);
  for (const NodeStamps& from : log) {
    if (from.node == self) {
      MergeStamps(entry.own, from.stamps, cutoff_ms);
      continue;
    }
    if (!entry.remote) entry.remote = std::make_unique<RemoteLogs>();
    auto& nodes = entry.remote->nodes;
    auto it = std::lower_bound(nodes.begin(), nodes.end(), from.node,
                               [](const auto& node_log, NodeId id) { return node_log.first < id; });
    if (it == nodes.end() || it->first != from.node) it = nodes.insert(it, {from.node, StampLog()});
    MergeStamps(it->second, from.stamps, cutoff_ms);
  }
  TrimLog(entry, window_ms, now_ms);  // drops what merged nothing live
}

bool IsExpired(const LogEntry& entry, Algorithm /*algorithm*/, uint64_t window_ms, int64_t now_ms) {
  const int64_t cutoff_ms = now_ms - static_cast<int64_t>(window_ms);
  const auto expired = [&](const StampLog& log) {
    return log.stamps.size() == log.first || log.stamps.back().at_ms <= cutoff_ms;
  };
  if (!expired(entry.own)) return false;
  if (entry.remote) {
    for (const auto& [node, log] : entry.remote->nodes) {
      if (!expired(log)) return false;
    }
  }
  return true;
}

uint64_t HeardDebt(const BucketEntry& entry, uint64_t capacity, int64_t now_ms) {
  return RefilledDebt(entry.heard_debt, entry.heard_at_ms, capacity, now_ms);
}

uint64_t DecisionDebt(const BucketEntry& entry, uint64_t capacity, uint64_t window_ms,
                      int64_t now_ms) {
  const uint64_t heard = HeardDebt(entry, capacity, now_ms);
  if (HeardIsLeast(entry, heard)) return heard;
  return std::min(heard, BucketDebt(entry.state, capacity, window_ms, now_ms));
}

void AdmitToBucket(BucketEntry& entry, NodeId self, const LimitSpec& spec, uint64_t cost,
                   int64_t now_ms) {
  const uint64_t debt = DecisionDebt(entry, spec.limit, spec.window_ms, now_ms);
  // A heard debt of 0 is exact too: every known cost has refilled by now.
  entry.heard_exact = HeardIsLeast(entry, HeardDebt(entry, spec.limit, now_ms));
  entry.heard_debt = Saturate(static_cast<u128>(debt) + static_cast<u128>(cost) * spec.window_ms);
  entry.heard_at_ms = now_ms;
  entry.state.capacity = spec.limit;
  AddToBucket(entry.state, self, BucketSliceAt(spec.window_ms, now_ms), cost);
}

uint64_t OwnBucketCost(const BucketEntry& entry, NodeId self) {
  for (const NodeSlices& node : entry.state.nodes) {
    if (node.node == self) return LiveCost(node);
  }
  return 0;
}

void MergeIntoBucket(BucketEntry& entry, const BucketSlices& from, uint64_t window_ms,
                     int64_t now_ms) {
  const uint64_t debt = HeardDebt(entry, entry.state.capacity, now_ms);
  const uint64_t added = MergeBucket(entry.state, from, window_ms);
  if (added > 0) entry.heard_exact = false;  // charged when heard, not when admitted
  entry.heard_debt = Saturate(static_cast<u128>(debt) + added);
  entry.heard_at_ms = now_ms;
}

void AdvanceBucket(BucketEntry& entry, uint64_t window_ms, int64_t base_slice) {
  const int64_t before = CurrentPeriod(entry.state);
  FoldBucket(entry.state, window_ms, base_slice);
  if (!entry.denied) return;
  const int64_t periods = CurrentPeriod(entry.state) - before;
  if (periods == 1) {
    ShiftDenied(*entry.denied);
  } else if (periods > 1) {
    entry.denied.reset();
  }
}

void CountDenied(BucketEntry& entry, uint64_t cost) {
  DeniedCounts& denied = DeniedOf(entry);
  denied.own_current = Saturated32(uint64_t{denied.own_current} + cost);
}

void MergeDenied(BucketEntry& entry, NodeId self, int64_t base_slice, const DeniedCost& denied) {
  if (denied.node == 0 || denied.node == self) return;  // this node's own are never taken back
  const int64_t current = CurrentPeriod(entry.state);
  const int64_t period = base_slice / kBucketSlicesPerPeriod + 1;
  if (period != current && period != current - 1) return;
  MergeDeniedAt(DeniedOf(entry), current, period, denied);
}

DeniedCost SendDenied(BucketEntry& entry, NodeId self) {
  return SendDeniedOf(entry.denied.get(), self);
}

HeardDemand DemandOf(const BucketEntry& entry, NodeId self, uint64_t unheard) {
  HeardDemand demand;
  for (const NodeSlices& node : entry.state.nodes) {
    const uint64_t cost = LiveCost(node);
    if (node.node == self) {
      demand.own = static_cast<double>(cost - std::min(cost, unheard));
      demand.all += demand.own;
    } else {
      demand.all += static_cast<double>(cost);
    }
  }
  if (entry.denied) AddDenied(*entry.denied, self, /*previous_weight=*/1, &demand);
  return demand;
}

void RestoreHeardDebt(BucketEntry& entry, uint64_t heard_debt, int64_t heard_at_ms,
                      int64_t now_ms) {
  if (heard_debt == KeySnapshot::kUnknownDebt) return;
  const uint64_t capacity = entry.state.capacity;
  entry.heard_debt = std::min(HeardDebt(entry, capacity, now_ms),
                              RefilledDebt(heard_debt, heard_at_ms, capacity, now_ms));
  entry.heard_at_ms = now_ms;
}

bool IsExpired(const BucketEntry& entry, Algorithm /*algorithm*/, uint64_t window_ms,
               int64_t now_ms) {
  // The heard debt first: it is cheap, and a bucket still owing is kept.
  return HeardDebt(entry, std::max<uint64_t>(entry.state.capacity, 1), now_ms) == 0 &&
         BucketFullBy(entry.state, window_ms, now_ms);
}

uint64_t ReplicaWeight(const CounterEntry& entry) {
  return CurrentTotal(entry) + PreviousTotal(entry);
}

uint64_t ReplicaWeight(const LogEntry& entry) {
  uint64_t weight = entry.own.live_total;
  if (entry.remote) {
    for (const auto& [node, log] : entry.remote->nodes) weight += log.live_total;
  }
  return weight;
}

uint64_t ReplicaWeight(const BucketEntry& entry) {
  uint64_t weight = entry.state.capacity + entry.state.base_debt;
  for (const NodeSlices& node : entry.state.nodes) {
    for (const uint32_t count : node.counts) weight += count;
  }
  return weight;
}

}  // namespace tally
