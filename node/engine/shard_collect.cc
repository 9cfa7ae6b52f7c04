// Shard: what goes to peers (gossip deltas, anti-entropy) and to disk
// (changes, checkpoints). shard.h states the contract.
#include <algorithm>
#include <deque>
#include <type_traits>
#include <vector>

#include "node/engine/range_digest.h"
#include "node/engine/shard.h"
#include "node/engine/shard_internal.h"

namespace tally {
namespace {

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
// How many entries ahead a pass over every entry of a table (digests, full
// syncs) prefetches what they point to.
constexpr uint32_t kPassAhead = 8;
// How many items ahead a release from a queue of waiting entries prefetches
// their entries: it reads one byte of each, so it must look further ahead.
constexpr size_t kReleaseAhead = 32;

// The memory outside an entry that snapshotting it reads first.
const void* OutsideState(const CounterEntry& entry) { return entry.peers.full(); }
const void* OutsideState(const LogEntry& entry) { return entry.own.stamps.data(); }
const void* OutsideState(const BucketEntry& entry) { return entry.state.nodes.data(); }

// For a pass over a whole table (KeyTable::ForEach): fetches what an entry
// points to, kPassAhead entries before the pass reads it. The empty volatile
// asm keeps the prefetch (see PrefetchAhead).
constexpr auto FetchOutside = [](const auto& entry) {
  asm volatile("");
  if (const void* outside = OutsideState(entry)) __builtin_prefetch(outside);
};

// What that points to and a snapshot reads next: a counter's slots.
void PrefetchSlots(const CounterEntry& entry) {
  if (const RemoteCounts* remote = entry.peers.full())
    __builtin_prefetch(remote->peers.slots().data());
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
    return entry.peers.full() && entry.peers.full()->peers_unsaved;
  } else {
    return false;
  }
}
template <typename Entry>
void ClearPeersUnsaved(Entry& entry) {
  if constexpr (std::is_same_v<Entry, CounterEntry>) {
    if (RemoteCounts* remote = entry.peers.full()) {
      remote->peers_unsaved = false;
      entry.peers.Shrink();
    }
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
    limit_class.table->ForEach(
        [&](Entry& entry) {
          if (IsExpired(entry, limit_class.algorithm, limit_class.window_ms, now_ms)) {
            entry.key.set_marked(kStorageMark, false);
            ClearPeersUnsaved(entry);
          } else {
            Collect(limit_class, entry, self, scratch, sink);
          }
        },
        FetchOutside, kPassAhead);
    limit_class.changed[kStorageMark].clear();
    limit_class.peers_changed.clear();
  }
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

}  // namespace

template <typename Entry>
void Shard::NoteNextDue(const LimitClass<Entry>& limit_class) {
  for (const auto* queue : {&limit_class.deferred, &limit_class.relayed, &limit_class.held}) {
    if (!queue->empty()) next_release_ms = std::min(next_release_ms, queue->front().due_ms);
  }
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
      // What this node sends of its own is on its way for a while
      // (SentInFlight). A key a peer reports keeps that in its RemoteCounts;
      // one with nothing of this node's to send (relayed) needs none.
      const uint64_t unsent = UnsentNow(entry);
      RemoteCounts* remote = entry->peers.full();
      if (remote == nullptr && unsent > 0 && !entry->peers.empty())
        remote = &entry->peers.MakeFull();
      if (remote != nullptr) {
        remote->own_sent = Unsent32(unsent);
        remote->sent_at_ms = static_cast<uint32_t>(now_ms);
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
      entry->own_sent = std::exchange(entry->own_unsent, 0);
      entry->sent_at_ms = static_cast<uint32_t>(now_ms);
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

// Every live entry of the shard (of one range, when range < kRangesPerShard),
// its window rolled on to now_ms, to f(limit_class, entry, hash).
template <typename F>
void ForEachLive(Shard& shard, int64_t now_ms, size_t range, const F& f) {
  const auto in_range = [&](const auto& entry, size_t* hash) {
    *hash = HashKey(entry.key.view(), shard.key_hash_seed);
    return range >= kRangesPerShard || RangeOfHash(*hash) == range;
  };
  size_t hash = 0;
  for (auto& limit_class : shard.counters) {
    limit_class.table->ForEach(
        [&](CounterEntry& entry) {
          if (IsExpired(entry, limit_class.algorithm, limit_class.window_ms, now_ms)) return;
          if (!in_range(entry, &hash)) return;
          AdvanceTo(entry, now_ms / static_cast<int64_t>(limit_class.window_ms));
          f(limit_class, entry, hash);
        },
        FetchOutside, kPassAhead);
  }
  for (auto& limit_class : shard.logs) {
    limit_class.table->ForEach(
        [&](LogEntry& entry) {
          if (IsExpired(entry, limit_class.algorithm, limit_class.window_ms, now_ms)) return;
          if (!in_range(entry, &hash)) return;
          TrimLog(entry, limit_class.window_ms, now_ms);
          f(limit_class, entry, hash);
        },
        FetchOutside, kPassAhead);
  }
  for (auto& limit_class : shard.buckets) {
    limit_class.table->ForEach(
        [&](BucketEntry& entry) {
          if (IsExpired(entry, limit_class.algorithm, limit_class.window_ms, now_ms)) return;
          if (!in_range(entry, &hash)) return;
          AdvanceBucket(entry, limit_class.window_ms,
                        BucketBaseFor(BucketSliceAt(limit_class.window_ms, now_ms)));
          f(limit_class, entry, hash);
        },
        FetchOutside, kPassAhead);
  }
}

// Fills the scratch snapshot with the entry's replicated state.
template <typename Entry>
void FillReplica(const LimitClass<Entry>& limit_class, const Entry& entry, NodeId self,
                 KeySnapshot* scratch) {
  scratch->key.assign(entry.key.view());
  scratch->algorithm = limit_class.algorithm;
  scratch->window_ms = limit_class.window_ms;
  FillSnapshot(entry, self, scratch);
}

void Shard::CollectReplica(NodeId self, int64_t now_ms, size_t range, KeySnapshot* scratch,
                           const SnapshotSink& sink) {
  ForEachLive(*this, now_ms, range, [&](const auto& limit_class, const auto& entry, size_t) {
    FillReplica(limit_class, entry, self, scratch);
    sink(*scratch);
  });
}

uint64_t Shard::UpdateDigests(NodeId self, int64_t ref_ms, KeySnapshot* scratch) {
  uint64_t stale = 0;  // the ranges not computed at ref_ms yet
  for (size_t i = 0; i < kRangesPerShard; ++i) {
    if (ranges[i].digest_ref_ms != ref_ms) stale |= uint64_t{1} << i;
  }
  if (stale != 0) {
    for (size_t i = 0; i < kRangesPerShard; ++i) {
      if ((stale >> i & 1) != 0) ranges[i].digest = 0;
    }
    // Entries roll on to ref_ms at most: a later time would drop what still
    // counts at ref_ms (a peer's ref_ms may lag this node's clock a little).
    ForEachLive(*this, std::min(ref_ms, last_now_ms), kRangesPerShard,
                [&](const auto& limit_class, const auto& entry, size_t hash) {
                  const size_t i = RangeOfHash(hash);
                  if ((stale >> i & 1) == 0) return;
                  if constexpr (std::is_same_v<std::decay_t<decltype(entry)>, CounterEntry>) {
                    ranges[i].digest += CounterDigest(limit_class.algorithm, limit_class.window_ms,
                                                      entry, self, hash, ref_ms);
                  } else {
                    FillReplica(limit_class, entry, self, scratch);
                    ranges[i].digest += KeyDigest(*scratch, hash, ref_ms);
                  }
                });
    for (size_t i = 0; i < kRangesPerShard; ++i) {
      if ((stale >> i & 1) == 0) continue;
      ranges[i].digest_version = ranges[i].version;
      ranges[i].digest_ref_ms = ref_ms;
    }
  }
  uint64_t current = 0;
  for (size_t i = 0; i < kRangesPerShard; ++i) {
    if (ranges[i].digest_version == ranges[i].version) current |= uint64_t{1} << i;
  }
  return current;
}

void Shard::CollectAll(NodeId self, int64_t now_ms, KeySnapshot* scratch,
                       const SnapshotSink& sink) {
  CollectAllClasses(counters, self, now_ms, scratch, sink);
  CollectAllClasses(logs, self, now_ms, scratch, sink);
  CollectAllClasses(buckets, self, now_ms, scratch, sink);
}

}  // namespace tally
