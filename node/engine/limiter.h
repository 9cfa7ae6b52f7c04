// Limiter: the rate-limit engine of one node. Pure computation: no threads,
// no I/O, no timers. The daemon, persistence and gossip sit around it.
//
// State model (ARCHITECTURE.md "State model"):
//  - A limit is identified by (key, algorithm, window_ms); each has its own
//    state. The limit value is applied at decision time.
//  - Fixed window and sliding-window counter keep, per wall-clock-aligned
//    window w = floor(wall_ms / window_ms), a G-counter with one slot per
//    node. This node increments only its own slot; Read/Merge export and
//    import every node's slots (slot-wise max) for replication.
//  - Sliding-window log keeps (timestamp, cost) entries of the trailing
//    window, per node: this node's own, and those peers report (merged by
//    max per node and millisecond), so it is replicated as well.
//  - Token bucket keeps, per node, the cost admitted in each slice of time
//    (window_ms / 32) of the last one to two periods (window_ms / 4 each),
//    and a base debt folded from older slices (node/common/bucket_slices.h):
//    a decision is a central bucket's fed the merged slices, so it is
//    replicated too.
//  - Time: Clock::WallMs(), clamped per shard so that it never moves
//    backwards (a wall-clock step back freezes time until it catches up).
//
// Memory: a key whose state has expired (counters: no counts in the current
// or previous window; log: no entry in the trailing window; bucket: full) is
// garbage. Each insertion frees a few such keys of its table incrementally
// (so a table under churn holds at most about twice its live keys), and
// SweepExpired() frees all of them. At most Options::max_keys keys are held:
// a check that would create a key beyond that first frees every expired key
// (at most once per kCapSweepIntervalMs, so a flood of new keys cannot make
// every request scan the whole node), then, if still full, fails with
// ResourceExhausted and changes nothing. Checks on held keys keep working.
//
// Thread safety: every method may be called concurrently from any thread.
// State is split into shards by key hash; each shard's state is owned by its
// mutex. Checks on distinct keys rarely contend.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "node/common/clock.h"
#include "node/common/g_counter.h"
#include "node/common/key_snapshot.h"
#include "node/common/limit.h"
#include "node/common/status.h"
#include "node/engine/shard.h"

namespace tally {

class Limiter {
 public:
  struct Options {
    NodeId node_id = 1;  // this node's G-counter slot
    size_t max_keys = 10'000'000;
    const Clock* clock = SystemClock::Default();  // not owned; must outlive the Limiter
    // Record which keys change, for CollectChanges (persistence). Off: no cost.
    bool track_changes = false;
    // Record which keys are admitted to, for CollectGossip (replication).
    bool replicate = false;
    // With replicate: how long an admission on a counter or bucket key far
    // from its limit may wait before CollectGossip hands it out
    // (node/engine/headroom.h: within this node's share of the headroom; at
    // most a quarter of a counter's window, an eighth of a bucket's). 0: every
    // admission at the next CollectGossip. Escrow needs views less than an
    // epoch old, so with escrow_epoch_ms > 0 it is 0.
    int64_t gossip_max_delay_ms = 0;
    // With replicate, in a cluster, without escrow: what this node admitted on
    // a counter or bucket key that its peers may not have merged yet (not
    // handed out by CollectGossip, or handed out less than share_delivery_ms
    // ago) stays within its share, 1/cluster_size, of what its view leaves of
    // the limit (node/engine/coordination.h); a request beyond it is denied
    // with retry_after_ms = share_wait_ms, which should be the time between
    // two CollectGossip calls plus share_delivery_ms. 0: no share (plain
    // gossip).
    int64_t share_wait_ms = 0;
    int64_t share_delivery_ms = 0;
    // Share of remaining (node/engine/escrow.h) for fixed window, sliding
    // counter and token bucket keys: 0 off, else the epoch (one gossip
    // interval). cluster_size: the members, this node included, until
    // SetClusterView says otherwise.
    int64_t escrow_epoch_ms = 0;
    size_t cluster_size = 1;
    // Partition mode, for fixed window and sliding counter: while
    // SetClusterView says some peers cannot be reached, false (fail
    // open) enforces the whole limit from what this node knows; true keeps
    // this node's own admissions to its equal share, limit / cluster_size.
    bool partition_share = false;
    // The seed of the keys' hash (node/engine/key_table.h: HashKey): the
    // same on every node of a cluster, so that anti-entropy's ranges are
    // alike, and unknown to clients.
    uint64_t key_hash_seed = 0;
  };

  explicit Limiter(const Options& options);
  ~Limiter();
  Limiter(const Limiter&) = delete;
  Limiter& operator=(const Limiter&) = delete;

  // Decides whether `cost` units of `key` under `spec` pass now, and consumes
  // them if they do. Errors (InvalidArgument for a bad key or spec,
  // ResourceExhausted at max_keys) leave *decision untouched and change nothing.
  Status Check(std::string_view key, const LimitSpec& spec, uint64_t cost, Decision* decision);

  // Check for each request, in order, as if all arrived at one instant (one
  // clock reading). results[i] answers requests[i]; the spans must be of equal
  // size. Faster per check than Check on large key sets: it prefetches the
  // memory of later requests while deciding earlier ones.
  struct CheckRequest {
    std::string_view key;
    LimitSpec spec;
    uint64_t cost = 1;
  };
  struct CheckResult {
    Status status;
    Decision decision;
  };
  void CheckBatch(std::span<const CheckRequest> requests, std::span<CheckResult> results);

  // Replication: every algorithm; spec.limit is ignored. Read gives every
  // node's state of the key's live windows (counts' slots, log stamps, bucket slices), or
  // NotFound when it holds none. Merge takes the slot-wise / stamp-wise max
  // with a snapshot (state that has expired is ignored; a newer window moves
  // a counting key forward; a log must be ordered as KeySnapshot says, else
  // InvalidArgument). State under this node's own id raises its own: that is
  // how a restarted node recovers increments it had not persisted. A merge
  // counts as a change for CollectChanges; for CollectGossip only when sent
  // to this node as the key's relayer (MergeBatch with MergeSource::kRelay).
  // Read answers the token bucket too, with this node's level (for
  // inspection; Merge refuses it).
  Status Read(std::string_view key, const LimitSpec& spec, KeySnapshot* snapshot);
  Status Merge(const KeySnapshot& snapshot);

  // Merge for each snapshot, as if all arrived at one instant (one clock
  // reading): statuses[i] is what Merge(snapshots[i]) returns, and a failed
  // entry changes nothing, as there. The state afterwards is what merging them
  // one by one in order leaves: the snapshots of one shard (duplicates of a key
  // included) are merged in their order, those of other shards hold other
  // keys. One difference: at max_keys, which keys find room may differ, as
  // the shards are visited in turn (every snapshot of a key without room is
  // refused). The spans must be of equal size.
  // Faster per key than Merge: each shard is locked once per batch, and the
  // memory of later snapshots is prefetched while earlier ones merge. A
  // shard's lock is held from the prefetch of its first snapshot to the merge
  // of its last, with the next few shards' (taken in increasing order, while
  // every other method holds one at a time: no deadlock).
  // Scratch memory is the calling thread's (thread_local in limiter.cc): it
  // grows to the largest batch that thread merged, then no call allocates.
  // `source` (node/engine/headroom.h): kRelay, a counter's delta sent to this
  // node as the key's relayer: it goes on to every peer by CollectGossip,
  // with every node's slots, within the class's deferral; kDelta, a peer's
  // delta to every peer: if it brings back this node's own slots as high as
  // they are, what this node relayed has reached every peer.
  void MergeBatch(std::span<const KeySnapshot> snapshots, std::span<Status> statuses,
                  MergeSource source = MergeSource::kSync);

  // With Options::replicate: hands the sink, for each key admitted to since
  // the previous call and due now (Options::gossip_max_delay_ms; every one,
  // with flush_deferred, as before leaving the cluster), this node's own
  // contribution (counts: its slots of the key's windows; log: its stamps
  // not sent yet; bucket: its slices). Sinks run with a shard locked: they
  // must not call the Limiter.
  // With `relay` (node/engine/headroom.h "Relay"), a counter's admissions
  // that waited go to relay->sink for the key's relayer, not to `sink`
  // (except with flush_deferred), and wait until a delta brings them back
  // (MergeBatch, kDelta); a counter this node relays goes to `sink` with
  // every node's slots, what was relayed to it and its own admissions that
  // waited held for the class's deferral first.
  // Returns how long from now (ms, at least 0) until the earliest of what
  // still waits is due; INT64_MAX when nothing waits.
  int64_t CollectGossip(const SnapshotSink& sink, bool flush_deferred = false,
                        const GossipRelay* relay = nullptr);

  // Anti-entropy by ranges of keys. The keys split into shard_count() shards
  // of kRangesPerShard ranges each by their hash, alike on every node with
  // the same Options::key_hash_seed (range r: shard r / kRangesPerShard).
  // A range's version grows whenever its replicated state gains what a peer
  // may lack: an admission or denial here, a merge or restore that raised a
  // count, an erasure. Unchanged, the range holds what it held (but for
  // windows rolling and keys expiring, which every node does itself). A
  // merge that raises only denials does not change it.
  static size_t shard_count();
  static size_t range_count();
  struct RangeVersion {
    uint64_t version = 0;
    // Every change to it so far has reached every peer quiet_ms ago, unless
    // lost: no admission here may still wait to be sent, nor be held by its
    // relayer (node/engine/headroom.h), and nothing merged came in later.
    bool quiet = false;
  };
  // The shard's ranges (out: kRangesPerShard of them), quiet as of
  // as_of_ms (wall ms; now when later than now).
  void RangeVersions(size_t shard, int64_t quiet_ms, std::span<RangeVersion> out,
                     int64_t as_of_ms = INT64_MAX);
  // The digests (node/engine/range_digest.h) at ref_ms (wall ms) of the
  // shard's ranges into out (kRangesPerShard). They are computed once per
  // ref_ms, in one pass over the shard's keys, so asking again costs
  // nothing. Returns the ranges (bit i: range i of the shard) whose digest
  // holds their state now; a range that changed since has none at ref_ms
  // (its digest is that of its state when computed).
  uint64_t RangeDigests(size_t shard, int64_t ref_ms, std::span<uint64_t> out);
  // Hands the sink every node's state of every live replicated key of one
  // shard, or of one range (0 .. range_count() - 1).
  void CollectReplica(size_t shard, const SnapshotSink& sink);
  void CollectRange(size_t range, const SnapshotSink& sink);

  // Frees every key whose state has expired. Returns how many were freed.
  size_t SweepExpired();

  // Forgets the state of `key` under spec (spec.limit is ignored) on this
  // node, every node's slots included: NotFound when it holds none. A peer's
  // next merge brings back what the peer holds. What is on disk stays until a
  // checkpoint (CollectAll) replaces it; erasures() counts the calls that
  // erased something, so that the persister knows to write one.
  Status Erase(std::string_view key, const LimitSpec& spec);
  uint64_t erasures() const { return erasures_.load(std::memory_order_acquire); }

  // Persistence. With Options::track_changes, hands the sink a snapshot of
  // every key whose state changed since the previous call (each key once);
  // but a counter whose peers' slots alone changed (a merge that brought
  // nothing of this node's own) only in a call with_peer_changes, which
  // takes every such change since the previous one. So a persister may
  // write merges at a slower pace than this node's own admissions.
  // CollectAll does so for every key whose state has not expired, for a
  // checkpoint; afterwards no key counts as changed. The sink runs with a
  // shard locked: it must not call the Limiter.
  // Restore puts a snapshot back: counting algorithms and the bucket take the
  // slot-wise max (so restoring never lowers a count), the log is replaced;
  // an expired snapshot is ignored. Restore does not count as a change.
  void CollectChanges(const SnapshotSink& sink, bool with_peer_changes = true);
  void CollectAll(const SnapshotSink& sink);
  Status Restore(const KeySnapshot& snapshot);

  // Called by a check when this node's unsent admissions on a key near its
  // limit come to an eighth of its share of what remains (coordination.h):
  // an early gossip round sends them, and the node's next admissions have a
  // whole share again. It is called under a shard's mutex, so it must return
  // at once and take no lock the Limiter's callers hold. Set once, before any
  // check; empty: never called.
  void SetRoundWanted(std::function<void()> round_wanted) {
    round_wanted_ = std::move(round_wanted);
  }
  // Called when a shard that had nothing for the next gossip round gets
  // something (an entry marked to go at the next round, or an earlier due
  // time of what waits), so that a gossip thread that rests while there is
  // nothing to send wakes for it. Under a shard's mutex, as round_wanted.
  // Set once, before any check; empty: never called.
  void SetGossipWork(std::function<void()> gossip_work) { gossip_work_ = std::move(gossip_work); }

  // The cluster as gossip sees it now (the gossip thread sets it): its
  // members that have not left, this node included, and how many of the
  // others no link reaches.
  void SetClusterView(size_t cluster_size, size_t unreachable_peers) {
    cluster_size_.store(cluster_size, std::memory_order_relaxed);
    unreachable_peers_.store(unreachable_peers, std::memory_order_relaxed);
  }
  // The members alone (as the membership has them), before the links follow.
  void SetClusterSize(size_t cluster_size) {
    cluster_size_.store(cluster_size, std::memory_order_relaxed);
  }

  // What members may have lost of what they kept back (node/engine/headroom.h,
  // DeferralLosses), each loss at the wall time it was first seen: replaces
  // the losses counted so far. Until the windows that began before a loss no
  // longer count, every check counts a headroom share of the limit as spent
  // for it. Nothing on a node that does not replicate, or with nothing kept
  // back (gossip_max_delay_ms 0, escrow). Called from one thread at a time
  // (the gossip thread; at start, before it runs).
  void SetDeferralLosses(std::span<const int64_t> seen_at_ms) {
    if (options_.replicate) deferral_losses_.Set(seen_at_ms);
  }

  size_t key_count() const { return budget_.count(); }
  NodeId node_id() const { return options_.node_id; }
  bool replicated() const { return options_.replicate; }

 private:
  static constexpr int64_t kCapSweepIntervalMs = 100;

  static size_t ShardIndex(size_t hash);
  Shard& ShardFor(size_t hash);
  // Check at wall_ms: validation, then CheckValid.
  Status ValidateAndCheck(std::string_view key, const LimitSpec& spec, uint64_t cost,
                          int64_t wall_ms, Decision* decision);
  // Check after validation; retries once after a sweep at the key cap.
  Status CheckValid(std::string_view key, size_t hash, const LimitSpec& spec, uint64_t cost,
                    int64_t wall_ms, Decision* decision);
  // Locks the key's shard and runs f(shard, now_ms).
  template <typename F>
  auto InShard(size_t hash, F&& f);
  // SweepExpired(), unless it ran less than kCapSweepIntervalMs ago.
  size_t SweepIfDue();
  const Options options_;
  KeyBudget budget_;
  std::atomic<int64_t> last_cap_sweep_ms_{INT64_MIN / 2};  // monotonic ms
  std::atomic<size_t> cluster_size_;
  std::atomic<size_t> unreachable_peers_{0};
  std::function<void()> round_wanted_;  // set before any check, read only after
  std::function<void()> gossip_work_;   // likewise
  DeferralLosses deferral_losses_;      // its own thread safety
  std::atomic<uint64_t> erasures_{0};
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace tally
