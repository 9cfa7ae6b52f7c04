// Shard: one slice of the Limiter's keys (internal to the engine).
//
// Thread safety: every member is owned by `mu`; the caller holds it for
// every call. KeyBudget is shared by all shards and thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "node/common/g_counter.h"
#include "node/common/key_snapshot.h"
#include "node/common/limit.h"
#include "node/common/status.h"
#include "node/engine/coordination.h"
#include "node/engine/key_state.h"
#include "node/engine/key_table.h"

namespace tally {

// The node-wide cap on keys (Limiter::Options::max_keys).
class KeyBudget {
 public:
  explicit KeyBudget(size_t max_keys) : max_keys_(max_keys) {}
  // Room for one more key; false at the cap.
  bool Reserve() {
    if (count_.fetch_add(1, std::memory_order_relaxed) < max_keys_) return true;
    count_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  void Release(size_t keys) {
    if (keys > 0) count_.fetch_sub(keys, std::memory_order_relaxed);
  }
  size_t count() const { return count_.load(std::memory_order_relaxed); }
  size_t max_keys() const { return max_keys_; }

 private:
  const size_t max_keys_;
  std::atomic<size_t> count_{0};
};

// The CompactKey marks of an entry changed since the last CollectChanges
// (any change) and since the last CollectGossip (a change made here: an
// admission; a peer's state merged in is not relayed), and of one whose
// admissions wait in its class's `deferred` queue (node/engine/headroom.h).
inline constexpr int kStorageMark = 0;
inline constexpr int kGossipMark = 1;
inline constexpr int kDeferredMark = 2;

// The keys of one (algorithm, window_ms) within a shard.
template <typename Entry>
struct LimitClass {
  Algorithm algorithm;
  uint64_t window_ms;
  std::unique_ptr<KeyTable<Entry>> table;
  // Per mark: the entries changed since its last collection, each pushed
  // when its key's mark is set. May name entries freed (and perhaps reused)
  // since; only those still marked count, each once.
  std::vector<Entry*> changed[CompactKey::kMarkCount];
  // Counters only: entries whose peers' slots a merge changed while their
  // own did not (RemoteCounts::peers_unsaved, set when listed; not marked
  // kStorageMark), for CollectChanges with peer changes. Like `changed`, it
  // may name entries freed or reused since: only a flagged one counts.
  std::vector<Entry*> peers_changed;
  // Counters only, for MarkPeersMerged: the smallest limit this node has
  // admitted by on a key of the class (never raised), and the last window in
  // which a key's own slots came from disk or from a peer instead (Restore, a
  // merge that gave them back). From two windows later on, every own slot
  // counts admissions made here, by a limit of at least smallest_limit.
  uint64_t smallest_limit = UINT64_MAX;
  int64_t own_restored_window = INT64_MIN;
  // Entries whose admissions may wait, each with the time by which they go
  // out, oldest first (one delay per class, so also by due time). Like
  // `changed`, it may name entries freed or reused since: only an entry still
  // marked kDeferredMark counts, and an early send does no harm.
  struct Deferred {
    Entry* entry;
    int64_t due_ms;
  };
  std::deque<Deferred> deferred;
  // Counters only, with relay (node/engine/headroom.h), alike: `relayed`,
  // entries whose admissions went to their relayer, each with the time by
  // which the relayer's message should have come back (they stay marked
  // kDeferredMark until it does; if not, they are relayed again); `held`,
  // entries this node relays, each with the time it sends them to every
  // peer (what comes in meanwhile goes with them).
  std::deque<Deferred> relayed;
  std::deque<Deferred> held;
};

// Anti-entropy compares a shard's keys by ranges (Limiter::RangeDigests):
// the next kRangeBits of a key's hash after the shard's.
inline constexpr int kShardBits = 6;
inline constexpr int kRangeBits = 6;
inline constexpr size_t kShardCount = size_t{1} << kShardBits;
inline constexpr size_t kRangesPerShard = size_t{1} << kRangeBits;
inline size_t ShardOfHash(size_t hash) { return hash >> (64 - kShardBits); }
// The range within its shard.
inline size_t RangeOfHash(size_t hash) {
  return (hash >> (64 - kShardBits - kRangeBits)) & (kRangesPerShard - 1);
}

// One range of a shard's keys, for anti-entropy.
struct KeyRange {
  // +1 on every change to what the range replicates: a check that costs, a
  // merge that raises a count, a restore or an erase.
  uint64_t version = 1;
  // Wall ms from which no change made so far may still be on its way to a
  // peer: an admission that may wait before it is sent (and be held by its
  // relayer as long again) moves it that far ahead.
  int64_t quiet_from_ms = 0;
  // The range's digest at digest_ref_ms, valid while digest_version == version
  // (Shard::UpdateDigests).
  uint64_t digest_version = 0;
  int64_t digest_ref_ms = 0;
  uint64_t digest = 0;
};

struct alignas(64) Shard {
  std::mutex mu;
  bool track_changes = false;  // set once, before any use: kStorageMark
  bool replicate = false;      // set once, before any use: kGossipMark
  uint64_t key_hash_seed = 0;  // set once, before any use: HashKey's
  KeyRange ranges[kRangesPerShard];
  // Escrow, the partition share and gossip deferral (node/engine/coordination.h); set once.
  Coordination coordination;
  std::vector<LogStamp> stamp_scratch;  // a log's stamps of all nodes, merged
  int64_t last_now_ms = 0;              // the largest wall time seen: time never goes backwards
  // The earliest due time in any class's queues of waiting entries
  // (INT64_MAX: none): CollectGossip looks at them only from then on, so a
  // round touches no class of a shard with nothing due.
  int64_t next_release_ms = INT64_MAX;
  // An entry was marked for gossip (kGossipMark) since the last CollectGossip.
  bool gossip_marked = false;
  // Limiter::SetGossipWork's, set once: called (mu held) when gossip_marked
  // turns true or next_release_ms comes sooner (NoteGossipWork).
  const std::function<void()>* gossip_work = nullptr;
  std::vector<LimitClass<CounterEntry>> counters;  // fixed window and sliding counter
  std::vector<LimitClass<LogEntry>> logs;
  std::vector<LimitClass<BucketEntry>> buckets;

  int64_t Now(int64_t wall_ms) {
    last_now_ms = std::max(last_now_ms, wall_ms);
    return last_now_ms;
  }

  // Decide and apply one check (key and spec already validated).
  Status Check(KeyBudget& budget, std::string_view key, size_t hash, const LimitSpec& spec,
               uint64_t cost, int64_t now_ms, Decision* decision);

  // Cache hints for CheckBatch and MergeBatch, each once the memory of the
  // one before has arrived. They change nothing. First the index slot; then
  // the entry a key of this hash probably is (found without reading any
  // entry; it may be another key's, or null), prefetched and returned (valid
  // only while mu stays held). Then, level 0 and 1: for a check, a token
  // bucket's list of nodes and each node's slices; for a merge, the memory
  // outside that entry that merging the snapshot reads (other nodes' slots,
  // stamps or slices), what it points to and what that points to.
  void PrefetchIndex(size_t hash, const LimitSpec& spec);
  const void* PrefetchProbableEntry(size_t hash, const LimitSpec& spec);
  void PrefetchBucketState(std::string_view key, size_t hash, const LimitSpec& spec, size_t level);
  void PrefetchMergeState(const void* entry, const KeySnapshot& snapshot, size_t level);

  // Replication (validated). Read: every node's state of the key; false
  // when it holds nothing live. Merge: slot-wise / stamp-wise max with the
  // snapshot's state (a bucket: the join of node/common/bucket_slices.h).
  // `probable`: what PrefetchProbableEntry returned for the snapshot, mu held
  // since, or null; it saves the lookup when it is the key's entry.
  bool Read(std::string_view key, size_t hash, const LimitSpec& spec, NodeId self, int64_t now_ms,
            KeySnapshot* snapshot);
  // `source`: a counter's delta sent to this node as its relayer is held
  // and sent on (CollectGossip); one sent to every peer that brings back
  // this node's own slots, as high as they are, ends their wait for it.
  Status Merge(KeyBudget& budget, const KeySnapshot& snapshot, size_t hash, NodeId self,
               int64_t now_ms, MergeSource source, const void* probable = nullptr);

  // Frees every expired key; returns how many.
  size_t SweepAll(int64_t now_ms);
  // Frees the key's state under spec (validated); false when it has none.
  bool Erase(KeyBudget& budget, std::string_view key, size_t hash, const LimitSpec& spec);

  // Hands the sink a snapshot (built in *scratch) of every entry changed
  // since the last call; with_peer_changes: also of every counter whose
  // peers' slots alone changed since the last call that took those.
  void CollectChanges(NodeId self, bool with_peer_changes, KeySnapshot* scratch,
                      const SnapshotSink& sink);
  // The same for every live entry; afterwards none counts as changed.
  void CollectAll(NodeId self, int64_t now_ms, KeySnapshot* scratch, const SnapshotSink& sink);
  // Gossip deltas: for each entry admitted to since the last call and due
  // by now_ms (or waiting at all, with flush_deferred), this node's own
  // contribution only (counters: its slots; logs: its stamps not sent yet,
  // from the last one sent on). With relay (non-null, two members or more),
  // a counter's admissions that waited go to relay->sink for the key's
  // relayer instead, and a counter this node relays goes with every node's
  // slots (node/engine/headroom.h).
  void CollectGossip(NodeId self, int64_t now_ms, bool flush_deferred, const GossipRelay* relay,
                     KeySnapshot* scratch, const SnapshotSink& sink);
  // Anti-entropy: every live entry, every node's state; of one range only
  // when range < kRangesPerShard.
  void CollectReplica(NodeId self, int64_t now_ms, size_t range, KeySnapshot* scratch,
                      const SnapshotSink& sink);
  // Computes the digest (KeyRange) at ref_ms of every range not computed at
  // ref_ms yet, in one pass over the shard's keys: at most one pass per
  // reference time. Returns the ranges (bit i: range i) whose digest holds
  // their state now: the others changed since it was computed.
  uint64_t UpdateDigests(NodeId self, int64_t ref_ms, KeySnapshot* scratch);
  // Puts a snapshot's state back (counters and bucket: slot-wise max and
  // join; log: replaced). An expired snapshot changes nothing.
  Status Restore(KeyBudget& budget, const KeySnapshot& snapshot, size_t hash, NodeId self,
                 int64_t now_ms);

 private:
  // Calls f with the class list that holds `algorithm`'s keys.
  template <typename F>
  void WithClasses(Algorithm algorithm, F&& f);
  template <typename Entry>
  Status Ensure(KeyBudget& budget, std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec,
                std::string_view key, int64_t now_ms, Entry** entry);
  // A peer's state merged in: a change to store, never relayed.
  template <typename Entry>
  void MarkMerged(std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec, Entry* entry);
  // A counter's merge that changed its peers' slots only: stored with the
  // peer changes (peers_changed), unless it is marked already, or its own
  // slots count admissions made here (LimitClass::smallest_limit) and all
  // peers' slots together are still within a headroom share of that limit
  // (HeadroomShare): a key far from its limit, whose peers' slots a restart
  // with no peer answering may forget. They are stored with its next own
  // change, or a checkpoint.
  void MarkPeersMerged(const LimitSpec& spec, CounterEntry* entry);
  // A counter's own slots came from disk or from a peer, not from an
  // admission here (LimitClass::own_restored_window); the class exists.
  void NoteOwnRestored(const LimitSpec& spec, int64_t now_ms);
  // Marks the shard as having an entry for the next round (gossip_marked),
  // calling NoteGossipWork if it had none.
  void MarkForRound();
  // Queues the entry to wait delay_ms from now_ms (released by the step,
  // node/engine/headroom.h: ReleaseAtMs), and keeps next_release_ms (calling
  // NoteGossipWork when it comes sooner).
  template <typename Entry>
  void Wait(std::deque<typename LimitClass<Entry>::Deferred>& queue, Entry* entry, int64_t now_ms,
            int64_t delay_ms);
  // A change to what the key's range replicates, on its way to every peer
  // by quiet_from_ms (KeyRange).
  void Touch(size_t hash, int64_t quiet_from_ms) {
    KeyRange& range = ranges[RangeOfHash(hash)];
    ++range.version;
    range.quiet_from_ms = std::max(range.quiet_from_ms, quiet_from_ms);
  }
  // Tells gossip_work, if set, that this shard has new work for gossip.
  void NoteGossipWork() const;
  // Lowers next_release_ms to the class's earliest due time, if any.
  template <typename Entry>
  void NoteNextDue(const LimitClass<Entry>& limit_class);
  // A counter's delta came in for this node to relay: it goes to every
  // peer within the class's deferral (at the next round without one).
  void HoldRelayed(const LimitSpec& spec, CounterEntry* entry, int64_t now_ms);
  // An admission here: a change to store and to gossip, at the next round
  // when gossip_delay_ms is 0, else by now_ms + gossip_delay_ms.
  template <typename Entry>
  void MarkAdmitted(std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec, Entry* entry,
                    int64_t gossip_delay_ms, int64_t now_ms);

  Status CheckCounter(KeyBudget& budget, std::string_view key, size_t hash, const LimitSpec& spec,
                      uint64_t cost, int64_t now_ms, Decision* decision);
  Status CheckLog(KeyBudget& budget, std::string_view key, size_t hash, const LimitSpec& spec,
                  uint64_t cost, int64_t now_ms, Decision* decision);
  // Merge for a token bucket key: folds to this node's base, then joins.
  Status MergeBucketSnapshot(KeyBudget& budget, const KeySnapshot& snapshot, size_t hash,
                             NodeId self, int64_t now_ms, const void* probable);
  Status CheckBucket(KeyBudget& budget, std::string_view key, size_t hash, const LimitSpec& spec,
                     uint64_t cost, int64_t now_ms, Decision* decision);
};

}  // namespace tally
