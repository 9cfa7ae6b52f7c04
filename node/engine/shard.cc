#include "node/engine/shard.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "node/engine/decide.h"

namespace tally {
namespace {

// Slots examined for expiry on every insertion: enough that a table under
// churn never holds more than about twice its live keys.
constexpr size_t kSweepPerInsert = 2;

// Room made at once for peers' slots in a key's counter: one per peer, up
// to kMostSlotsAtOnce (beyond, few keys hear from every member).
constexpr size_t kMostSlotsAtOnce = 16;
size_t SlotsForPeers(const Coordination& coordination) {
  const size_t members = coordination.members();
  return std::min(members > 1 ? members - 1 : 1, kMostSlotsAtOnce);
}

template <typename Entry>
LimitClass<Entry>* FindClass(std::vector<LimitClass<Entry>>& classes, Algorithm algorithm,
                             uint64_t window_ms) {
  for (auto& limit_class : classes) {
    if (limit_class.algorithm == algorithm && limit_class.window_ms == window_ms) {
      return &limit_class;
    }
  }
  return nullptr;
}

template <typename Entry>
Entry* FindEntry(std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec,
                 std::string_view key, size_t hash) {
  LimitClass<Entry>* limit_class = FindClass(classes, spec.algorithm, spec.window_ms);
  return limit_class ? limit_class->table->Find(key, hash) : nullptr;
}

// Prefetches the cache lines of *object, if any (it may span two).
template <typename T>
void PrefetchObject(const T* object) {
  if (!object) return;
  __builtin_prefetch(object);
  __builtin_prefetch(reinterpret_cast<const char*>(object) + sizeof(T) - 1);
}

// A token bucket's memory outside its entry: level 0 its list of nodes,
// level 1 (once that has arrived) each node's slices.
void PrefetchBucket(const BucketEntry& entry, size_t level) {
  const std::vector<NodeSlices>& nodes = entry.state.nodes;
  if (level == 0) __builtin_prefetch(nodes.data());
  if (level == 1) {
    for (const NodeSlices& node : nodes) __builtin_prefetch(node.counts.data());
  }
}

// The same, trying first `probable`: an entry PrefetchProbableEntry returned
// for this key's class, mu held since (so it is an entry of that class's
// table, perhaps since erased or reused): it is the key's if it holds the key.
template <typename Entry>
Entry* FindEntry(std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec,
                 std::string_view key, size_t hash, const void* probable) {
  auto* entry = static_cast<Entry*>(const_cast<void*>(probable));
  return entry && entry->key.view() == key ? entry : FindEntry(classes, spec, key, hash);
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

void FillSnapshot(const CounterEntry& entry, NodeId self, KeySnapshot* snapshot) {
  ExportCounts(entry, self, &snapshot->counts);
  snapshot->denied = DeniedCost();  // a node's view of demand, not state
}
void FillSnapshot(const LogEntry& entry, NodeId self, KeySnapshot* snapshot) {
  ExportLog(entry, self, &snapshot->log);
}
void FillSnapshot(const BucketEntry& entry, NodeId /*self*/, KeySnapshot* snapshot) {
  snapshot->denied = DeniedCost();  // a node's view of demand, not state
  snapshot->bucket = entry.state;
  snapshot->bucket_heard_debt = entry.heard_debt;
  snapshot->bucket_heard_at_ms = entry.heard_at_ms;
}

// How many entries ahead a pass over a class's changed or deferred entries
// prefetches.
constexpr size_t kCollectAhead = 12;
// How many items ahead a release from a queue of waiting entries prefetches
// their entries: it reads one byte of each, so it must look further ahead.
constexpr size_t kReleaseAhead = 32;

// The memory outside an entry that snapshotting it reads first.
const void* OutsideState(const CounterEntry& entry) { return entry.remote.get(); }
const void* OutsideState(const LogEntry& entry) { return entry.own.stamps.data(); }
const void* OutsideState(const BucketEntry& entry) { return entry.state.nodes.data(); }

// What that points to and a snapshot reads next: a counter's slots.
void PrefetchSlots(const CounterEntry& entry) {
  if (const RemoteCounts* remote = entry.remote.get()) __builtin_prefetch(remote->peers.data());
}
void PrefetchSlots(const LogEntry&) {}
void PrefetchSlots(const BucketEntry&) {}

// For a pass over `entries` (scattered) at i: fetches the entry
// kCollectAhead ahead; what the one half as far ahead points to, and what
// that points to for the one a quarter as far ahead, if wanted(entry) (read
// once its entry has arrived). The empty volatile asm keeps the calls: GCC
// finds a function that only reads and prefetches free of side effects and
// deletes calls to it that it does not inline (key_table.h says the same).
template <typename Entry, typename Wanted>
void PrefetchAhead(const std::vector<Entry*>& entries, size_t i, const Wanted& wanted) {
  asm volatile("");
  if (i + kCollectAhead < entries.size()) __builtin_prefetch(entries[i + kCollectAhead]);
  if (i + kCollectAhead / 2 < entries.size()) {
    const Entry* ahead = entries[i + kCollectAhead / 2];
    if (wanted(*ahead)) {
      if (const void* outside = OutsideState(*ahead)) __builtin_prefetch(outside);
    }
  }
  if (i + kCollectAhead / 4 < entries.size()) {
    const Entry* ahead = entries[i + kCollectAhead / 4];
    if (wanted(*ahead)) PrefetchSlots(*ahead);
  }
}
template <typename Entry>
void PrefetchAhead(const std::vector<Entry*>& entries, size_t i, int mark) {
  PrefetchAhead(entries, i, [mark](const Entry& entry) { return entry.key.marked(mark); });
}

// Whether a merge changed the entry's peers' slots alone since it was
// stored (counters only: Shard::MarkPeersMerged), and forgetting that.
template <typename Entry>
bool PeersUnsaved(const Entry& entry) {
  if constexpr (std::is_same_v<Entry, CounterEntry>) {
    return entry.remote && entry.remote->peers_unsaved;
  } else {
    return false;
  }
}
template <typename Entry>
void ClearPeersUnsaved(Entry& entry) {
  if constexpr (std::is_same_v<Entry, CounterEntry>) {
    if (entry.remote) entry.remote->peers_unsaved = false;
  }
}

// Hands the entry's snapshot (in *scratch) to the sink and clears the entry's
// storage mark and unsaved peers' flag: it is saved, every slot of it.
template <typename Entry>
void Collect(const LimitClass<Entry>& limit_class, Entry& entry, NodeId self, KeySnapshot* scratch,
             const SnapshotSink& sink) {
  entry.key.set_marked(kStorageMark, false);
  ClearPeersUnsaved(entry);
  scratch->key.assign(entry.key.view());
  scratch->algorithm = limit_class.algorithm;
  scratch->window_ms = limit_class.window_ms;
  FillSnapshot(entry, self, scratch);
  sink(*scratch);
}

// Snapshots each changed entry once (with_peer_changes: those whose peers'
// slots alone changed too): the lists may name an entry twice (freed and
// reused since) or name a freed one; only a marked or flagged entry counts.
template <typename Entry>
void CollectChangedClasses(std::vector<LimitClass<Entry>>& classes, NodeId self,
                           bool with_peer_changes, KeySnapshot* scratch, const SnapshotSink& sink) {
  for (auto& limit_class : classes) {
    const std::vector<Entry*>& changed = limit_class.changed[kStorageMark];
    for (size_t i = 0; i < changed.size(); ++i) {
      PrefetchAhead(changed, i, kStorageMark);
      if (changed[i]->key.marked(kStorageMark)) {
        Collect(limit_class, *changed[i], self, scratch, sink);
      }
    }
    limit_class.changed[kStorageMark].clear();
    if (!with_peer_changes) continue;
    const std::vector<Entry*>& peers_changed = limit_class.peers_changed;
    for (size_t i = 0; i < peers_changed.size(); ++i) {
      PrefetchAhead(peers_changed, i, [](const Entry&) { return true; });
      if (PeersUnsaved(*peers_changed[i]))
        Collect(limit_class, *peers_changed[i], self, scratch, sink);
    }
    limit_class.peers_changed.clear();
  }
}

// Snapshots every entry that has not expired; nothing is left marked changed.
template <typename Entry>
void CollectAllClasses(std::vector<LimitClass<Entry>>& classes, NodeId self, int64_t now_ms,
                       KeySnapshot* scratch, const SnapshotSink& sink) {
  for (auto& limit_class : classes) {
    limit_class.table->ForEach([&](Entry& entry) {
      if (IsExpired(entry, limit_class.algorithm, limit_class.window_ms, now_ms)) {
        entry.key.set_marked(kStorageMark, false);
        ClearPeersUnsaved(entry);
      } else {
        Collect(limit_class, entry, self, scratch, sink);
      }
    });
    limit_class.changed[kStorageMark].clear();
    limit_class.peers_changed.clear();
  }
}

}  // namespace

template <typename Entry>
Status Shard::Ensure(KeyBudget& budget, std::vector<LimitClass<Entry>>& classes,
                     const LimitSpec& spec, std::string_view key, int64_t now_ms, Entry** entry) {
  if (*entry) return Status::OK();
  if (!budget.Reserve()) {
    return Status::ResourceExhausted("key limit reached: this node holds max_keys=" +
                                     std::to_string(budget.max_keys()) + " keys");
  }
  LimitClass<Entry>* limit_class = FindClass(classes, spec.algorithm, spec.window_ms);
  if (!limit_class) {
    limit_class = &classes.emplace_back();
    limit_class->algorithm = spec.algorithm;
    limit_class->window_ms = spec.window_ms;
    limit_class->table = std::make_unique<KeyTable<Entry>>();
  }
  budget.Release(limit_class->table->SweepSome(kSweepPerInsert, [&](const Entry& old) {
    return IsExpired(old, spec.algorithm, spec.window_ms, now_ms);
  }));
  *entry = limit_class->table->Insert(key);
  return Status::OK();
}

namespace {

// Sets `which` on the entry and lists it in its class, unless it is set already.
template <typename Entry>
void Mark(LimitClass<Entry>& limit_class, Entry* entry, int which) {
  if (entry->key.marked(which)) return;
  entry->key.set_marked(which, true);
  limit_class.changed[which].push_back(entry);
}

// Takes the items of `queue` due by now_ms (every one, with `all`) whose
// entries still wait (kDeferredMark; an item may name an entry sent since,
// freed or reused: it is skipped, or sent early, which does no harm); hands
// each entry to `release`.
template <typename Entry, typename Release>
void ReleaseDue(std::deque<typename LimitClass<Entry>::Deferred>& queue, int64_t now_ms, bool all,
                Release&& release) {
  while (!queue.empty() && (all || queue.front().due_ms <= now_ms)) {
    if (queue.size() > kReleaseAhead) __builtin_prefetch(queue[kReleaseAhead].entry);
    Entry* entry = queue.front().entry;
    queue.pop_front();
    if (entry->key.marked(kDeferredMark)) release(entry);
  }
}

// Moves the class's waiting entries that are due to the next delta: with
// `relaying`, what waited from admissions here, or was relayed and not seen
// back in time, goes to the relayer (marked kGossipMark and still
// kDeferredMark); what this node held to relay goes to every peer (marked
// kGossipMark alone). With `all`, everything, to every peer.
template <typename Entry>
void ReleaseDeferred(LimitClass<Entry>& limit_class, int64_t now_ms, bool all, bool relaying) {
  const auto to_relayer = [&](Entry* entry) {
    if (entry->key.marked(kGossipMark)) return;  // sent this round already
    if (!relaying || all) entry->key.set_marked(kDeferredMark, false);
    Mark(limit_class, entry, kGossipMark);
  };
  const auto to_every_peer = [&](Entry* entry) {
    entry->key.set_marked(kDeferredMark, false);
    Mark(limit_class, entry, kGossipMark);
  };
  ReleaseDue<Entry>(limit_class.deferred, now_ms, all, to_relayer);
  ReleaseDue<Entry>(limit_class.relayed, now_ms, all, to_relayer);
  ReleaseDue<Entry>(limit_class.held, now_ms, all, to_every_peer);
}

// Whether some of this node's admissions on the entry wait to be sent.
bool WaitsToBeSent(const CompactKey& key) {
  return key.marked(kGossipMark) || key.marked(kDeferredMark);
}

// What this node admitted on the entry and has not sent: counted exactly once
// coordination asked for it (RemoteCounts::own_unsent), else its own slots.
uint64_t UnsentNow(const CounterEntry* entry) {
  if (entry == nullptr || !WaitsToBeSent(entry->key)) return 0;
  const uint64_t own = uint64_t{entry->own_current} + entry->own_previous;
  if (!entry->remote || entry->remote->own_unsent == kUnsentUnknown) return own;
  return std::min<uint64_t>(entry->remote->own_unsent, own);
}

uint64_t UnsentNow(const BucketEntry* entry) {
  return entry != nullptr && WaitsToBeSent(entry->key) ? entry->own_unsent : 0;
}

// Whether what was sent at sent_at_ms may still be on its way at now_ms.
bool InFlight(uint32_t sent_at_ms, int64_t now_ms, int64_t delivery_ms) {
  return static_cast<uint32_t>(static_cast<uint32_t>(now_ms) - sent_at_ms) <
         static_cast<uint64_t>(delivery_ms);
}

// What this node sent last on the entry, if it may still be on its way (sent
// less than delivery_ms ago): with what is unsent, what no peer may have merged.
uint64_t SentInFlight(const CounterEntry* entry, int64_t now_ms, int64_t delivery_ms) {
  const RemoteCounts* remote = entry != nullptr ? entry->remote.get() : nullptr;
  return remote != nullptr && InFlight(remote->sent_at_ms, now_ms, delivery_ms) ? remote->own_sent
                                                                                : 0;
}

uint64_t SentInFlight(const BucketEntry* entry, int64_t now_ms, int64_t delivery_ms) {
  return entry != nullptr && InFlight(entry->sent_at_ms, now_ms, delivery_ms) ? entry->own_sent : 0;
}

// Whether `counts` (a relayer's delta, sent to every peer) hold this node's
// slots of the entry's windows as high as the entry has them: every peer has
// heard of all its admissions there.
bool BringsOwnBack(const WindowCounts& counts, const CounterEntry& entry, NodeId self) {
  return counts.window_index == entry.window_index &&
         counts.current.Get(self) >= entry.own_current &&
         counts.previous.Get(self) >= entry.own_previous;
}

uint32_t Unsent32(uint64_t unsent) {
  return static_cast<uint32_t>(std::min<uint64_t>(unsent, kUnsentUnknown - 1));
}

}  // namespace

template <typename Entry>
void Shard::MarkMerged(std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec,
                       Entry* entry) {
  if (track_changes) Mark(*FindClass(classes, spec.algorithm, spec.window_ms), entry, kStorageMark);
}

void Shard::MarkPeersMerged(const LimitSpec& spec, CounterEntry* entry) {
  if (!track_changes || entry->key.marked(kStorageMark) || !entry->remote ||
      entry->remote->peers_unsaved) {
    return;
  }
  LimitClass<CounterEntry>& limit_class = *FindClass(counters, spec.algorithm, spec.window_ms);
  const bool admitted_by_known_limit = (entry->own_current > 0 || entry->own_previous > 0) &&
                                       (limit_class.own_restored_window == INT64_MIN ||
                                        entry->window_index >= limit_class.own_restored_window + 2);
  if (admitted_by_known_limit &&
      entry->remote->peers.current_sum() + entry->remote->peers.previous_sum() <=
          HeadroomShare(limit_class.smallest_limit, coordination.members())) {
    return;
  }
  entry->remote->peers_unsaved = true;
  limit_class.peers_changed.push_back(entry);
}

void Shard::NoteOwnRestored(const LimitSpec& spec, int64_t now_ms) {
  FindClass(counters, spec.algorithm, spec.window_ms)->own_restored_window =
      now_ms / static_cast<int64_t>(spec.window_ms);
}

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

template <typename Entry>
void Shard::Wait(std::deque<typename LimitClass<Entry>::Deferred>& queue, Entry* entry,
                 int64_t now_ms, int64_t delay_ms) {
  const int64_t due_ms = ReleaseAtMs(now_ms + delay_ms, delay_ms);
  queue.push_back({entry, due_ms});
  if (due_ms >= next_release_ms) return;
  next_release_ms = due_ms;
  NoteGossipWork();
}

void Shard::MarkForRound() {
  if (!std::exchange(gossip_marked, true)) NoteGossipWork();
}

void Shard::NoteGossipWork() const {
  if (gossip_work != nullptr && *gossip_work) (*gossip_work)();
}

template <typename Entry>
void Shard::NoteNextDue(const LimitClass<Entry>& limit_class) {
  for (const auto* queue : {&limit_class.deferred, &limit_class.relayed, &limit_class.held}) {
    if (!queue->empty()) next_release_ms = std::min(next_release_ms, queue->front().due_ms);
  }
}

void Shard::HoldRelayed(const LimitSpec& spec, CounterEntry* entry, int64_t now_ms) {
  LimitClass<CounterEntry>& limit_class = *FindClass(counters, spec.algorithm, spec.window_ms);
  const int64_t hold_ms = coordination.MaxDeferralMs(spec.algorithm, spec.window_ms);
  if (hold_ms == 0) {
    entry->key.set_marked(kDeferredMark, false);
    Mark(limit_class, entry, kGossipMark);
    MarkForRound();
    return;
  }
  // What comes in while the entry waits goes with what waits; else a hold starts.
  if (WaitsToBeSent(entry->key)) return;
  entry->key.set_marked(kDeferredMark, true);
  Wait(limit_class.held, entry, now_ms, hold_ms);
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
  if (entry && entry->remote && entry->remote->denied && coordination.WeighsDemand()) {
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
      entry->remote = std::move(fresh);
    }
    entry->own_current += static_cast<uint32_t>(cost);
    if (coordination.CountsUnsent() && (entry->remote || gossip_delay_ms == 0)) {
      if (!entry->remote) entry->remote = std::make_unique<RemoteCounts>();
      entry->remote->own_unsent = Unsent32(unsent + cost);
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
  const Decision result = entry ? DecideSlidingLog(spec, ClusterStamps(*entry, &stamp_scratch),
                                                   ClusterTotal(*entry), now_ms, cost)
                                : DecideSlidingLog(spec, {}, 0, now_ms, cost);
  if (result.allowed && cost > 0) {
    if (Status status = Ensure(budget, logs, spec, key, now_ms, &entry); !status.ok()) {
      return status;
    }
    AppendLog(*entry, now_ms, cost);
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

void Shard::PrefetchMergeState(const void* entry, const KeySnapshot& snapshot, size_t level) {
  if (!entry) return;
  const auto prefetch = [](const void* address) {
    if (address) __builtin_prefetch(address);
  };
  switch (snapshot.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter: {
      const auto& remote = static_cast<const CounterEntry*>(entry)->remote;
      // The peers' counts and their flag; then their slots (inside them for
      // up to PeerCounts::kInlinePeers peers).
      if (remote && level == 0) {
        prefetch(&remote->peers);
        prefetch(&remote->peers_unsaved);
      }
      if (remote && level == 1) prefetch(remote->peers.data());
      break;
    }
    case Algorithm::kSlidingWindowLog: {
      const auto* log = static_cast<const LogEntry*>(entry);
      if (level == 0) {
        prefetch(log->own.stamps.data());
        prefetch(log->remote.get());
      }
      if (level == 1 && log->remote) prefetch(log->remote->nodes.data());
      break;
    }
    case Algorithm::kTokenBucket:
      PrefetchBucket(*static_cast<const BucketEntry*>(entry), level);
      break;
  }
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

Status Shard::Merge(KeyBudget& budget, const KeySnapshot& snapshot, size_t hash, NodeId self,
                    int64_t now_ms, MergeSource source, const void* probable) {
  const LimitSpec spec{snapshot.algorithm, 0, snapshot.window_ms};
  if (spec.algorithm == Algorithm::kSlidingWindowLog) {
    if (ExpiresAtMs(snapshot) <= now_ms) return Status::OK();  // nothing live to add
    LogEntry* entry = FindEntry(logs, spec, snapshot.key, hash, probable);
    if (Status status = Ensure(budget, logs, spec, snapshot.key, now_ms, &entry); !status.ok()) {
      return status;
    }
    MergeLog(*entry, self, snapshot.log, spec.window_ms, now_ms);
    MarkMerged(logs, spec, entry);
    return Status::OK();
  }
  if (spec.algorithm == Algorithm::kTokenBucket)
    return MergeBucketSnapshot(budget, snapshot, hash, self, now_ms, probable);
  const WindowCounts& counts = snapshot.counts;
  const int64_t now_window = now_ms / static_cast<int64_t>(spec.window_ms);
  if (counts.window_index > now_window + 1) {
    return Status::InvalidArgument("counts for window " + std::to_string(counts.window_index) +
                                   " are more than one window ahead of this node's window " +
                                   std::to_string(now_window) + " (clock skew?)");
  }
  CounterEntry* entry = FindEntry(counters, spec, snapshot.key, hash, probable);
  if (!entry) {
    const bool holds_live_counts = counts.window_index > now_window - WindowsKept(spec.algorithm) &&
                                   !(counts.current.empty() && counts.previous.empty());
    if (!holds_live_counts) return Status::OK();
    if (Status status = Ensure(budget, counters, spec, snapshot.key, now_ms, &entry);
        !status.ok()) {
      return status;
    }
  }
  // The window moves first (a new entry's too), also to a peer's next one (its
  // clock a little ahead): that rolls the own slots, and a roll restores nothing.
  AdvanceTo(*entry, std::max(now_window, counts.window_index));
  const uint32_t own_current_before = entry->own_current;
  const uint32_t own_previous_before = entry->own_previous;
  if (entry->remote) coordination.BeforeMerge(*entry->remote, entry->window_index, now_ms);
  tally::MergeCounts(*entry, self, SlotsForPeers(coordination), counts);
  MergeDenied(*entry, self, counts.window_index, snapshot.denied);
  // Most merges bring peers' slots alone: those are stored at the slower
  // pace of the peer changes (Limiter::CollectChanges); a merge that gives
  // this node back its own admissions (after a restart) is stored at once.
  if (entry->own_current != own_current_before || entry->own_previous != own_previous_before) {
    NoteOwnRestored(spec, now_ms);
    MarkMerged(counters, spec, entry);
  } else {
    MarkPeersMerged(spec, entry);
  }
  if (!replicate) return Status::OK();
  if (source == MergeSource::kRelay) {
    HoldRelayed(spec, entry, now_ms);
  } else if (source == MergeSource::kDelta && entry->key.marked(kDeferredMark) &&
             !entry->key.marked(kGossipMark) && BringsOwnBack(counts, *entry, self)) {
    entry->key.set_marked(kDeferredMark, false);  // every peer has what waited
  }
  return Status::OK();
}

Status Shard::MergeBucketSnapshot(KeyBudget& budget, const KeySnapshot& snapshot, size_t hash,
                                  NodeId self, int64_t now_ms, const void* probable) {
  const LimitSpec spec{snapshot.algorithm, 0, snapshot.window_ms};
  const int64_t base_slice = BucketBaseFor(BucketSliceAt(spec.window_ms, now_ms));
  if (snapshot.bucket.base_slice > base_slice + kBucketSlicesPerPeriod) {
    return Status::InvalidArgument("bucket slices from " +
                                   std::to_string(snapshot.bucket.base_slice) +
                                   " are more than a period ahead of this node's " +
                                   std::to_string(base_slice) + " (clock skew?)");
  }
  BucketEntry* entry = FindEntry(buckets, spec, snapshot.key, hash, probable);
  if (!entry) {
    if (BucketFullAtMs(snapshot.bucket, spec.window_ms) <= now_ms) return Status::OK();
    if (Status status = Ensure(budget, buckets, spec, snapshot.key, now_ms, &entry); !status.ok()) {
      return status;
    }
    entry->state.base_slice = base_slice;
  }
  AdvanceBucket(*entry, spec.window_ms, base_slice);
  coordination.BeforeMerge(*entry, spec.window_ms, now_ms);
  MergeIntoBucket(*entry, snapshot.bucket, spec.window_ms, now_ms);
  MergeDenied(*entry, self, snapshot.bucket.base_slice, snapshot.denied);
  MarkMerged(buckets, spec, entry);
  return Status::OK();
}

size_t Shard::SweepAll(int64_t now_ms) {
  return SweepClasses(counters, now_ms) + SweepClasses(logs, now_ms) +
         SweepClasses(buckets, now_ms);
}

bool Shard::Erase(KeyBudget& budget, std::string_view key, size_t hash, const LimitSpec& spec) {
  bool erased = false;
  WithClasses(spec.algorithm, [&](auto& classes) {
    if (auto* limit_class = FindClass(classes, spec.algorithm, spec.window_ms)) {
      erased = limit_class->table->Erase(key, hash);  // its change marks go with it
    }
  });
  if (erased) budget.Release(1);
  return erased;
}

void Shard::CollectChanges(NodeId self, bool with_peer_changes, KeySnapshot* scratch,
                           const SnapshotSink& sink) {
  CollectChangedClasses(counters, self, with_peer_changes, scratch, sink);
  CollectChangedClasses(logs, self, with_peer_changes, scratch, sink);
  CollectChangedClasses(buckets, self, with_peer_changes, scratch, sink);
}

void Shard::CollectGossip(NodeId self, int64_t now_ms, bool flush_deferred,
                          const GossipRelay* relay, KeySnapshot* scratch,
                          const SnapshotSink& sink) {
  const bool relaying = relay != nullptr && relay->members.size() > 1;
  const bool any_marked = std::exchange(gossip_marked, false);
  const bool release = flush_deferred || now_ms >= next_release_ms;
  if (!any_marked && !release) return;  // nothing to send: no class is touched
  if (release) {
    next_release_ms = INT64_MAX;
    for (auto& limit_class : counters) {
      ReleaseDeferred(limit_class, now_ms, flush_deferred, relaying);
      NoteNextDue(limit_class);
    }
    for (auto& limit_class : buckets) {
      ReleaseDeferred(limit_class, now_ms, flush_deferred, false);
      NoteNextDue(limit_class);
    }
  }
  // Starts the entry's snapshot; what waited goes now, unless `still_waits`.
  const auto begin = [&](const auto& limit_class, auto& entry, bool still_waits = false) {
    if (!still_waits) entry.key.set_marked(kDeferredMark, false);
    scratch->key.assign(entry.key.view());
    scratch->algorithm = limit_class.algorithm;
    scratch->window_ms = limit_class.window_ms;
  };
  for (auto& limit_class : counters) {
    const std::vector<CounterEntry*>& changed = limit_class.changed[kGossipMark];
    const int64_t deferral_ms =
        coordination.MaxDeferralMs(limit_class.algorithm, limit_class.window_ms);
    for (size_t i = 0; i < changed.size(); ++i) {
      PrefetchAhead(changed, i, kGossipMark);
      CounterEntry* entry = changed[i];
      if (!entry->key.marked(kGossipMark)) continue;
      // Marked kDeferredMark still: admissions that waited, for the relayer.
      const NodeId relayer =
          relaying ? RelayerFor(RelayHash(entry->key.view()), relay->members) : 0;
      const bool waited = entry->key.marked(kDeferredMark) && !flush_deferred;
      if (waited && relayer == self) {  // held here with what the others relay
        entry->key.set_marked(kGossipMark, false);
        Wait(limit_class.held, entry, now_ms, deferral_ms);
        continue;
      }
      if (entry->remote) {
        entry->remote->own_sent = Unsent32(UnsentNow(entry));
        entry->remote->sent_at_ms = static_cast<uint32_t>(now_ms);
      }
      entry->key.set_marked(kGossipMark, false);
      const bool to_relayer = waited && relayer != 0;
      // Relayed, it waits until the relayer's delta brings it back.
      if (to_relayer) Wait(limit_class.relayed, entry, now_ms, RelayConfirmMs(deferral_ms));
      begin(limit_class, *entry, to_relayer);
      WindowCounts& counts = scratch->counts;
      if (relayer == self) {  // every node's slots, relayed or not
        ExportCounts(*entry, self, &counts);
      } else {
        counts.window_index = entry->window_index;
        counts.current.Clear();
        counts.previous.Clear();
        counts.current.MergeSlot(self, entry->own_current);
        counts.previous.MergeSlot(self, entry->own_previous);
      }
      if (to_relayer) {
        scratch->denied = DeniedCost();  // denials go to every peer, with the next delta
        relay->sink(relayer, *scratch);
      } else {
        scratch->denied = SendDenied(*entry, self);
        sink(*scratch);
      }
    }
    limit_class.changed[kGossipMark].clear();
  }
  for (auto& limit_class : logs) {
    for (LogEntry* entry : limit_class.changed[kGossipMark]) {
      if (!entry->key.marked(kGossipMark)) continue;
      entry->key.set_marked(kGossipMark, false);
      const std::span<const LogStamp> live = LiveStamps(entry->own);
      // From the last stamp sent on: its cost may have grown within its ms.
      const auto unsent = std::lower_bound(
          live.begin(), live.end(), entry->gossip_from_ms,
          [](const LogStamp& stamp, int64_t at_ms) { return stamp.at_ms < at_ms; });
      if (unsent == live.end()) continue;
      begin(limit_class, *entry);
      scratch->log.resize(1);
      scratch->log[0].node = self;
      scratch->log[0].stamps.assign(unsent, live.end());
      entry->gossip_from_ms = live.back().at_ms;
      sink(*scratch);
    }
    limit_class.changed[kGossipMark].clear();
  }
  for (auto& limit_class : buckets) {
    for (BucketEntry* entry : limit_class.changed[kGossipMark]) {
      if (!entry->key.marked(kGossipMark)) continue;
      entry->own_sent = Unsent32(UnsentNow(entry));
      entry->sent_at_ms = static_cast<uint32_t>(now_ms);
      entry->key.set_marked(kGossipMark, false);
      begin(limit_class, *entry);
      // This node's slices only, with no base debt (the bottom: it asserts nothing).
      BucketSlices& bucket = scratch->bucket;
      bucket.capacity = entry->state.capacity;
      bucket.base_slice = entry->state.base_slice;
      bucket.base_debt = 0;
      bucket.nodes.clear();
      for (const NodeSlices& node : entry->state.nodes) {
        if (node.node == self) bucket.nodes.push_back(node);
      }
      scratch->denied = SendDenied(*entry, self);
      sink(*scratch);
    }
    limit_class.changed[kGossipMark].clear();
  }
}

void Shard::CollectReplica(NodeId self, int64_t now_ms, KeySnapshot* scratch,
                           const SnapshotSink& sink) {
  const auto send = [&](const auto& limit_class, const auto& entry) {
    scratch->key.assign(entry.key.view());
    scratch->algorithm = limit_class.algorithm;
    scratch->window_ms = limit_class.window_ms;
    FillSnapshot(entry, self, scratch);
    sink(*scratch);
  };
  for (auto& limit_class : counters) {
    limit_class.table->ForEach([&](CounterEntry& entry) {
      if (IsExpired(entry, limit_class.algorithm, limit_class.window_ms, now_ms)) return;
      AdvanceTo(entry, now_ms / static_cast<int64_t>(limit_class.window_ms));
      send(limit_class, entry);
    });
  }
  for (auto& limit_class : logs) {
    limit_class.table->ForEach([&](LogEntry& entry) {
      if (IsExpired(entry, limit_class.algorithm, limit_class.window_ms, now_ms)) return;
      TrimLog(entry, limit_class.window_ms, now_ms);
      send(limit_class, entry);
    });
  }
  for (auto& limit_class : buckets) {
    limit_class.table->ForEach([&](BucketEntry& entry) {
      if (IsExpired(entry, limit_class.algorithm, limit_class.window_ms, now_ms)) return;
      AdvanceBucket(entry, limit_class.window_ms,
                    BucketBaseFor(BucketSliceAt(limit_class.window_ms, now_ms)));
      send(limit_class, entry);
    });
  }
}

void Shard::CollectAll(NodeId self, int64_t now_ms, KeySnapshot* scratch,
                       const SnapshotSink& sink) {
  CollectAllClasses(counters, self, now_ms, scratch, sink);
  CollectAllClasses(logs, self, now_ms, scratch, sink);
  CollectAllClasses(buckets, self, now_ms, scratch, sink);
}

Status Shard::Restore(KeyBudget& budget, const KeySnapshot& snapshot, size_t hash, NodeId self,
                      int64_t now_ms) {
  if (ExpiresAtMs(snapshot) <= now_ms) return Status::OK();
  const LimitSpec spec{snapshot.algorithm, 0, snapshot.window_ms};
  switch (snapshot.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter: {
      CounterEntry* entry = FindEntry(counters, spec, snapshot.key, hash);
      if (Status status = Ensure(budget, counters, spec, snapshot.key, now_ms, &entry);
          !status.ok()) {
        return status;
      }
      tally::MergeCounts(*entry, self, SlotsForPeers(coordination), snapshot.counts);
      NoteOwnRestored(spec, now_ms);
      return Status::OK();
    }
    case Algorithm::kSlidingWindowLog: {
      LogEntry* entry = FindEntry(logs, spec, snapshot.key, hash);
      if (Status status = Ensure(budget, logs, spec, snapshot.key, now_ms, &entry); !status.ok()) {
        return status;
      }
      entry->own = StampLog();  // replaced; the peers' entries are max-merged
      MergeLog(*entry, self, snapshot.log, snapshot.window_ms, now_ms);
      entry->gossip_from_ms = 0;
      return Status::OK();
    }
    case Algorithm::kTokenBucket: {
      BucketEntry* entry = FindEntry(buckets, spec, snapshot.key, hash);
      if (Status status = Ensure(budget, buckets, spec, snapshot.key, now_ms, &entry);
          !status.ok()) {
        return status;
      }
      if (entry->state.nodes.empty() && entry->state.base_debt == 0) {
        entry->state.base_slice = snapshot.bucket.base_slice;
      }
      MergeIntoBucket(*entry, snapshot.bucket, snapshot.window_ms, now_ms);
      RestoreHeardDebt(*entry, snapshot.bucket_heard_debt, snapshot.bucket_heard_at_ms, now_ms);
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown algorithm");
}

}  // namespace tally
