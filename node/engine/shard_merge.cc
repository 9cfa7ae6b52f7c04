// Shard: what comes from peers (Merge, with its cache hints) and from disk
// (Restore). shard.h states the contract.
#include <algorithm>
#include <string>

#include "node/engine/shard.h"
#include "node/engine/shard_internal.h"

namespace tally {
namespace {

// Room made at once for peers' slots in a key's counter once it needs more
// than PeerCounts::kInlinePeers: one per peer, up to kMostSlotsAtOnce
// (beyond, few keys hear from every member).
constexpr size_t kMostSlotsAtOnce = 16;
size_t SlotsForPeers(const Coordination& coordination) {
  const size_t members = coordination.members();
  return std::min(members > 1 ? members - 1 : 1, kMostSlotsAtOnce);
}

// Whether `counts` (a relayer's delta, sent to every peer) hold this node's
// slots of the entry's windows as high as the entry has them: every peer has
// heard of all its admissions there.
bool BringsOwnBack(const WindowCounts& counts, const CounterEntry& entry, NodeId self) {
  return counts.window_index == entry.window_index &&
         counts.current.Get(self) >= entry.own_current &&
         counts.previous.Get(self) >= entry.own_previous;
}

}  // namespace

template <typename Entry>
void Shard::MarkMerged(std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec,
                       Entry* entry) {
  if (track_changes) Mark(*FindClass(classes, spec.algorithm, spec.window_ms), entry, kStorageMark);
}

void Shard::MarkPeersMerged(const LimitSpec& spec, CounterEntry* entry) {
  if (!track_changes || entry->key.marked(kStorageMark) || entry->peers.empty() ||
      (entry->peers.full() && entry->peers.full()->peers_unsaved)) {
    return;
  }
  LimitClass<CounterEntry>& limit_class = *FindClass(counters, spec.algorithm, spec.window_ms);
  const bool admitted_by_known_limit = (entry->own_current > 0 || entry->own_previous > 0) &&
                                       (limit_class.own_restored_window == INT64_MIN ||
                                        entry->window_index >= limit_class.own_restored_window + 2);
  if (admitted_by_known_limit &&
      entry->peers.current_sum() + entry->peers.previous_sum() <=
          HeadroomShare(limit_class.smallest_limit, coordination.members())) {
    return;
  }
  // The flag needs a RemoteCounts: with persistence, a key whose peers'
  // slots wait to be stored holds one.
  entry->peers.MakeFull().peers_unsaved = true;
  limit_class.peers_changed.push_back(entry);
}

void Shard::NoteOwnRestored(const LimitSpec& spec, int64_t now_ms) {
  FindClass(counters, spec.algorithm, spec.window_ms)->own_restored_window =
      now_ms / static_cast<int64_t>(spec.window_ms);
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

void Shard::PrefetchMergeState(const void* entry, const KeySnapshot& snapshot, size_t level) {
  if (!entry) return;
  const auto prefetch = [](const void* address) {
    if (address) __builtin_prefetch(address);
  };
  switch (snapshot.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter: {
      // One peer's slot is inside the entry. Beyond, the peers' counts and
      // their flag; then their slots (inside them for up to
      // PeerCounts::kInlinePeers peers).
      const RemoteCounts* remote = static_cast<const CounterEntry*>(entry)->peers.full();
      if (remote && level == 0) {
        prefetch(&remote->peers);
        prefetch(&remote->peers_unsaved);
      }
      if (remote && level == 1) prefetch(remote->peers.slots().data());
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

Status Shard::Merge(KeyBudget& budget, const KeySnapshot& snapshot, size_t hash, NodeId self,
                    int64_t now_ms, MergeSource source, const void* probable) {
  const LimitSpec spec{snapshot.algorithm, 0, snapshot.window_ms};
  if (spec.algorithm == Algorithm::kSlidingWindowLog) {
    if (ExpiresAtMs(snapshot) <= now_ms) return Status::OK();  // nothing live to add
    LogEntry* entry = FindEntry(logs, spec, snapshot.key, hash, probable);
    if (Status status = Ensure(budget, logs, spec, snapshot.key, now_ms, &entry); !status.ok()) {
      return status;
    }
    TrimLog(*entry, spec.window_ms, now_ms);
    const uint64_t weight_before = ReplicaWeight(*entry);
    MergeLog(*entry, self, snapshot.log, spec.window_ms, now_ms);
    if (ReplicaWeight(*entry) != weight_before) Touch(hash, now_ms);
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
  const uint64_t weight_before = ReplicaWeight(*entry);
  if (RemoteCounts* remote = entry->peers.full()) {
    coordination.BeforeMerge(*remote, entry->window_index, now_ms);
  }
  tally::MergeCounts(*entry, self, SlotsForPeers(coordination), counts);
  if (ReplicaWeight(*entry) != weight_before) {
    // What this node relays goes on to every peer after its hold.
    Touch(hash, source == MergeSource::kRelay
                    ? now_ms + coordination.MaxDeferralMs(spec.algorithm, spec.window_ms)
                    : now_ms);
  }
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
  const uint64_t weight_before = ReplicaWeight(*entry);
  coordination.BeforeMerge(*entry, spec.window_ms, now_ms);
  MergeIntoBucket(*entry, snapshot.bucket, spec.window_ms, now_ms);
  if (ReplicaWeight(*entry) != weight_before) Touch(hash, now_ms);
  MergeDenied(*entry, self, snapshot.bucket.base_slice, snapshot.denied);
  MarkMerged(buckets, spec, entry);
  return Status::OK();
}

Status Shard::Restore(KeyBudget& budget, const KeySnapshot& snapshot, size_t hash, NodeId self,
                      int64_t now_ms) {
  if (ExpiresAtMs(snapshot) <= now_ms) return Status::OK();
  Touch(hash, now_ms);
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
