#include "node/engine/shard.h"

#include <algorithm>
#include <string>
#include <utility>

#include "node/engine/decide.h"
#include "node/engine/shard_internal.h"

namespace tally {
namespace {

// Prefetches the cache lines of *object, if any (it may span two).
template <typename T>
void PrefetchObject(const T* object) {
  if (!object) return;
  __builtin_prefetch(object);
  __builtin_prefetch(reinterpret_cast<const char*>(object) + sizeof(T) - 1);
}

template <typename Entry>
size_t SweepClasses(std::vector<LimitClass<Entry>>& classes, int64_t now_ms) {
  size_t freed = 0;
  for (auto& limit_class : classes) {
    freed += limit_class.table->SweepAll([&](const Entry& entry) {
      return IsExpired(entry, limit_class.algorithm, limit_class.window_ms, now_ms);
    });
  }
  return freed;
}

// What this node sent last on the entry, if it may still be on its way (sent
// less than delivery_ms ago): with what is unsent, what no peer may have merged.
uint64_t SentInFlight(const CounterEntry* entry, int64_t now_ms, int64_t delivery_ms) {
  const RemoteCounts* remote = entry != nullptr ? entry->peers.full() : nullptr;
  return remote != nullptr && InFlight(remote->sent_at_ms, now_ms, delivery_ms) ? remote->own_sent
                                                                                : 0;
}

// Buckets and logs keep what they sent in the entry itself.
template <typename Entry>
uint64_t SentInFlight(const Entry* entry, int64_t now_ms, int64_t delivery_ms) {
  return entry != nullptr && InFlight(entry->sent_at_ms, now_ms, delivery_ms) ? entry->own_sent : 0;
}

}  // namespace

template <typename Entry>
void Shard::MarkAdmitted(std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec,
                         Entry* entry, int64_t gossip_delay_ms, int64_t now_ms) {
  LimitClass<Entry>& limit_class = *FindClass(classes, spec.algorithm, spec.window_ms);
  limit_class.smallest_limit = std::min(limit_class.smallest_limit, spec.limit);
  if (track_changes) Mark(limit_class, entry, kStorageMark);
  if (!replicate) return;
  if (entry->key.marked(kGossipMark)) {  // sent next round: to every peer, if this must be
    if (gossip_delay_ms == 0) entry->key.set_marked(kDeferredMark, false);
    return;
  }
  if (gossip_delay_ms == 0) {
    entry->key.set_marked(kDeferredMark, false);  // its queue slot is void now
    Mark(limit_class, entry, kGossipMark);
    MarkForRound();
  } else if (!entry->key.marked(kDeferredMark)) {  // else it waits since an earlier admission
    entry->key.set_marked(kDeferredMark, true);
    Wait(limit_class.deferred, entry, now_ms, gossip_delay_ms);
  }
}

void Shard::MarkForRound() {
  if (!std::exchange(gossip_marked, true)) NoteGossipWork();
}

void Shard::NoteGossipWork() const {
  if (gossip_work != nullptr && *gossip_work) (*gossip_work)();
}

template <typename F>
void Shard::WithClasses(Algorithm algorithm, F&& f) {
  switch (algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter: return f(counters);
    case Algorithm::kSlidingWindowLog: return f(logs);
    case Algorithm::kTokenBucket: return f(buckets);
  }
}

Status Shard::Check(KeyBudget& budget, std::string_view key, size_t hash, const LimitSpec& spec,
                    uint64_t cost, int64_t now_ms, Decision* decision) {
  // An admission or a denial, both replicated; an admission far from the
  // limit may wait its deferral, then its relayer's hold, before every peer has it.
  if (cost > 0)
    Touch(hash, now_ms + 2 * coordination.MaxDeferralMs(spec.algorithm, spec.window_ms));
  switch (spec.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter:
      return CheckCounter(budget, key, hash, spec, cost, now_ms, decision);
    case Algorithm::kSlidingWindowLog:
      return CheckLog(budget, key, hash, spec, cost, now_ms, decision);
    case Algorithm::kTokenBucket:
      return CheckBucket(budget, key, hash, spec, cost, now_ms, decision);
  }
  return Status::InvalidArgument("unknown algorithm");  // unreachable: validated
}

Status Shard::CheckCounter(KeyBudget& budget, std::string_view key, size_t hash,
                           const LimitSpec& spec, uint64_t cost, int64_t now_ms,
                           Decision* decision) {
  int64_t window_index = now_ms / static_cast<int64_t>(spec.window_ms);
  uint64_t elapsed_ms = static_cast<uint64_t>(now_ms) % spec.window_ms;
  CounterEntry* entry = FindEntry(counters, spec, key, hash);
  uint64_t current = 0;
  uint64_t previous = 0;
  if (entry) {
    AdvanceTo(*entry, window_index);
    if (entry->window_index > window_index) {  // moved ahead by a peer's clock
      window_index = entry->window_index;
      elapsed_ms = 0;
    }
    current = CurrentTotal(*entry);
    previous = PreviousTotal(*entry);
    // A key this node checks in a cluster keeps what coordination records
    // (its turns, what it sent): a RemoteCounts, once a peer has reported.
    if (coordination.CountsUnsent() && !entry->peers.empty()) entry->peers.MakeFull();
  }
  // The windows the decision counts began at counted_since_ms; what members
  // may have kept back and lost since counts as spent in them.
  const int64_t counted_windows = spec.algorithm == Algorithm::kFixedWindow ? 1 : 2;
  LimitSpec decided_spec = spec;
  decided_spec.limit = coordination.LimitAfterLosses(
      spec, cost, (window_index - counted_windows + 1) * static_cast<int64_t>(spec.window_ms));
  const auto decide = [&](uint64_t current_count, uint64_t cost_now) {
    return spec.algorithm == Algorithm::kFixedWindow
               ? DecideFixedWindow(decided_spec, current_count, elapsed_ms, cost_now)
               : DecideSlidingCounter(decided_spec, current_count, previous, elapsed_ms, cost_now);
  };
  Decision result = decide(current, cost);
  const bool view_had_room = result.allowed;
  // What this node would have kept to itself after the admission: its
  // count, and the previous window's too while that waits.
  const uint64_t unsent_after =
      (entry ? uint64_t{entry->own_current} +
                   (entry->key.marked(kDeferredMark) ? entry->own_previous : 0)
             : 0) +
      cost;
  const uint64_t unsent = UnsentNow(entry);
  const uint64_t unheard_before = unsent + SentInFlight(entry, now_ms, coordination.delivery_ms());
  // Demand weighs only on a rationed key, which has denials; the previous
  // window counts as much as the sliding counter still counts it (the fixed
  // window's demand is weighed alike: it lasts no longer than its window).
  HeardDemand demand;
  if (entry && entry->peers.full() && entry->peers.full()->denied && coordination.WeighsDemand()) {
    const double previous_weight =
        static_cast<double>(spec.window_ms - elapsed_ms) / static_cast<double>(spec.window_ms);
    demand = DemandOf(*entry, coordination.self(), unheard_before, previous_weight);
  }
  std::unique_ptr<RemoteCounts> fresh;  // escrow state for a key this node does not hold yet
  const int64_t gossip_delay_ms =
      coordination.Counter({decided_spec, cost, now_ms, window_index, elapsed_ms, current, previous,
                            unsent_after, unheard_before, demand},
                           entry, &fresh, &result);
  // A denial is demand too (which ones count: Coordination::CountsDenial).
  if (cost > 0 && entry && coordination.CountsDenial(result, view_had_room)) {
    CountDenied(*entry, cost);
  }
  if (result.allowed && cost > 0) {
    const bool is_new = entry == nullptr;
    if (Status status = Ensure(budget, counters, spec, key, now_ms, &entry); !status.ok()) {
      return status;
    }
    if (is_new) {
      entry->window_index = window_index;
      if (fresh) entry->peers.Adopt(std::move(fresh));
    }
    entry->own_current += static_cast<uint32_t>(cost);
    if (coordination.CountsUnsent() && (!entry->peers.empty() || gossip_delay_ms == 0)) {
      entry->peers.MakeFull().own_unsent = Unsent32(unsent + cost);
    }
    MarkAdmitted(counters, spec, entry, gossip_delay_ms, now_ms);
  }
  result.limit = spec.limit;  // the limit the client was given, losses or not
  *decision = result;
  return Status::OK();
}

Status Shard::CheckLog(KeyBudget& budget, std::string_view key, size_t hash, const LimitSpec& spec,
                       uint64_t cost, int64_t now_ms, Decision* decision) {
  LogEntry* entry = FindEntry(logs, spec, key, hash);
  if (entry) TrimLog(*entry, spec.window_ms, now_ms);
  // The log counts the trailing window: what a crash may have lost since
  // its start (a round not yet sent) counts as spent in it.
  LimitSpec decided_spec = spec;
  decided_spec.limit =
      coordination.LimitAfterLosses(spec, cost, now_ms - static_cast<int64_t>(spec.window_ms));
  Decision result = entry ? DecideSlidingLog(decided_spec, ClusterStamps(*entry, &stamp_scratch),
                                             ClusterTotal(*entry), now_ms, cost)
                          : DecideSlidingLog(decided_spec, {}, 0, now_ms, cost);
  const uint64_t unsent = UnsentNow(entry);
  const uint64_t unheard_before = unsent + SentInFlight(entry, now_ms, coordination.delivery_ms());
  coordination.Log({cost, now_ms, unheard_before}, entry ? &entry->turn_at_ms : nullptr, &result);
  result.limit = spec.limit;  // the limit the client was given, losses or not
  if (result.allowed && cost > 0) {
    if (Status status = Ensure(budget, logs, spec, key, now_ms, &entry); !status.ok()) {
      return status;
    }
    AppendLog(*entry, now_ms, cost);
    entry->own_unsent = Unsent32(unsent + cost);
    MarkAdmitted(logs, spec, entry, /*gossip_delay_ms=*/0, now_ms);
  }
  *decision = result;
  return Status::OK();
}

Status Shard::CheckBucket(KeyBudget& budget, std::string_view key, size_t hash,
                          const LimitSpec& spec, uint64_t cost, int64_t now_ms,
                          Decision* decision) {
  const int64_t slice = BucketSliceAt(spec.window_ms, now_ms);
  BucketEntry* entry = FindEntry(buckets, spec, key, hash);
  if (entry) AdvanceBucket(*entry, spec.window_ms, BucketBaseFor(slice));
  BucketSlices full;  // a bucket this node does not hold yet (no allocation)
  full.base_slice = BucketBaseFor(slice);
  const BucketSlices& state = entry ? entry->state : full;
  // What this node would have kept to itself: its live slices, sent or not.
  const NodeId self = coordination.self();
  const uint64_t unsent_after = (entry ? OwnBucketCost(*entry, self) : 0) + cost;
  const uint64_t unsent = UnsentNow(entry);
  const uint64_t unheard_before = unsent + SentInFlight(entry, now_ms, coordination.delivery_ms());
  // Demand weighs only on a rationed bucket, which has denials (as on counting keys).
  HeardDemand demand;
  if (entry && entry->denied && coordination.WeighsDemand()) {
    demand = DemandOf(*entry, self, unheard_before);
  }
  // A rationed bucket is judged by its slices' debt alone, as every node
  // judges it once it has heard the same costs: the heard debt charges this
  // node's own costs at their true times and its peers' later (when heard),
  // so the node that draws most would see the bucket fuller than the others
  // do, and keep drawing first. Otherwise the smaller debt (a lone node's
  // heard debt is exact: its slices' debt, never smaller, is not computed).
  const bool rationed = demand.denied > 0;
  const uint64_t heard = rationed ? UINT64_MAX : entry ? HeardDebt(*entry, spec.limit, now_ms) : 0;
  const bool heard_least = !rationed && (!entry || HeardIsLeast(*entry, heard));
  // A draw is refilled within a window: what members may have kept back and
  // lost since one window ago counts as spent.
  LimitSpec decided_spec = spec;
  decided_spec.limit =
      coordination.LimitAfterLosses(spec, cost, now_ms - static_cast<int64_t>(spec.window_ms));
  Decision result =
      DecideTokenBucket(decided_spec, heard_least ? nullptr : &state, heard, now_ms, cost);
  const bool view_had_room = result.allowed;
  std::unique_ptr<EscrowEpoch> fresh;  // escrow state for a key this node does not hold yet
  const int64_t gossip_delay_ms = coordination.Bucket(
      {decided_spec, cost, now_ms, slice, state, unsent_after, unheard_before, demand}, entry,
      &fresh, &result);
  // A denial is demand too (which ones count: Coordination::CountsDenial).
  if (cost > 0 && entry && coordination.CountsDenial(result, view_had_room)) {
    CountDenied(*entry, cost);
  }
  if (result.allowed && cost > 0) {
    const bool is_new = entry == nullptr;
    if (Status status = Ensure(budget, buckets, spec, key, now_ms, &entry); !status.ok()) {
      return status;
    }
    if (is_new) {
      entry->state.base_slice = BucketBaseFor(slice);
      entry->epoch = std::move(fresh);
    }
    AdmitToBucket(*entry, self, spec, cost, now_ms);
    if (coordination.CountsUnsent()) entry->own_unsent = Unsent32(unsent + cost);
    MarkAdmitted(buckets, spec, entry, gossip_delay_ms, now_ms);
  }
  result.limit = spec.limit;  // the limit the client was given, losses or not
  *decision = result;
  return Status::OK();
}

void Shard::PrefetchIndex(size_t hash, const LimitSpec& spec) {
  WithClasses(spec.algorithm, [&](auto& classes) {
    if (auto* limit_class = FindClass(classes, spec.algorithm, spec.window_ms)) {
      limit_class->table->PrefetchIndex(hash);
    }
  });
}

const void* Shard::PrefetchProbableEntry(size_t hash, const LimitSpec& spec) {
  const void* probable = nullptr;
  WithClasses(spec.algorithm, [&](auto& classes) {
    if (auto* limit_class = FindClass(classes, spec.algorithm, spec.window_ms)) {
      const auto* entry = limit_class->table->Probable(hash);
      PrefetchObject(entry);
      probable = entry;
    }
  });
  return probable;
}

void Shard::PrefetchBucketState(std::string_view key, size_t hash, const LimitSpec& spec,
                                size_t level) {
  if (const BucketEntry* entry = FindEntry(buckets, spec, key, hash)) PrefetchBucket(*entry, level);
}

bool Shard::Read(std::string_view key, size_t hash, const LimitSpec& spec, NodeId self,
                 int64_t now_ms, KeySnapshot* snapshot) {
  snapshot->key.assign(key);
  snapshot->algorithm = spec.algorithm;
  snapshot->window_ms = spec.window_ms;
  if (spec.algorithm == Algorithm::kSlidingWindowLog) {
    LogEntry* entry = FindEntry(logs, spec, key, hash);
    if (!entry || IsExpired(*entry, spec.algorithm, spec.window_ms, now_ms)) return false;
    TrimLog(*entry, spec.window_ms, now_ms);
    ExportLog(*entry, self, &snapshot->log);
    return true;
  }
  if (spec.algorithm == Algorithm::kTokenBucket) {
    BucketEntry* entry = FindEntry(buckets, spec, key, hash);
    if (!entry || IsExpired(*entry, spec.algorithm, spec.window_ms, now_ms)) return false;
    AdvanceBucket(*entry, spec.window_ms, BucketBaseFor(BucketSliceAt(spec.window_ms, now_ms)));
    snapshot->bucket = entry->state;
    // The level this node decides by, at the capacity asked for (else the last one checked).
    const uint64_t capacity = spec.limit > 0 ? spec.limit : entry->state.capacity;
    const uint64_t full = capacity * spec.window_ms;
    const uint64_t debt = DecisionDebt(*entry, capacity, spec.window_ms, now_ms);
    snapshot->bucket_level = debt >= full ? 0 : full - debt;
    snapshot->bucket_level_at_ms = now_ms;
    return true;
  }
  CounterEntry* entry = FindEntry(counters, spec, key, hash);
  if (!entry || IsExpired(*entry, spec.algorithm, spec.window_ms, now_ms)) return false;
  AdvanceTo(*entry, now_ms / static_cast<int64_t>(spec.window_ms));
  ExportCounts(*entry, self, &snapshot->counts);
  return true;
}

size_t Shard::SweepAll(int64_t now_ms) {
  return SweepClasses(counters, now_ms) + SweepClasses(logs, now_ms) +
         SweepClasses(buckets, now_ms);
}

bool Shard::Erase(KeyBudget& budget, std::string_view key, size_t hash, const LimitSpec& spec) {
  Touch(hash, 0);  // conservative: a peer may have to send this node the key again
  bool erased = false;
  WithClasses(spec.algorithm, [&](auto& classes) {
    if (auto* limit_class = FindClass(classes, spec.algorithm, spec.window_ms)) {
      erased = limit_class->table->Erase(key, hash);  // its change marks go with it
    }
  });
  if (erased) budget.Release(1);
  return erased;
}

}  // namespace tally
