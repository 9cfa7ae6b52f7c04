#include "node/engine/limiter.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <string>
#include <vector>

#include "node/engine/key_table.h"

namespace tally {
namespace {

Status ValidateReplicated(std::string_view key, const LimitSpec& spec) {
  if (Status status = ValidateKey(key); !status.ok()) return status;
  return ValidateSpec(spec);
}

// A snapshot's log must be ordered as the engine keeps it: by node, and each
// node's stamps strictly increasing in time.
Status ValidateLog(std::span<const NodeStamps> log) {
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i].node == 0 || (i > 0 && log[i - 1].node >= log[i].node)) {
      return Status::InvalidArgument("log stamps not grouped by increasing non-zero node id");
    }
    const std::vector<LogStamp>& stamps = log[i].stamps;
    for (size_t j = 1; j < stamps.size(); ++j) {
      if (stamps[j - 1].at_ms >= stamps[j].at_ms) {
        return Status::InvalidArgument("log stamps of a node not in increasing time order");
      }
    }
  }
  return Status::OK();
}

// A bucket's slices count from the epoch: a base before it is no node's.
Status ValidateBucket(const BucketSlices& bucket) {
  if (bucket.base_slice < 0) {
    return Status::InvalidArgument("bucket slices from before 1970 (base slice " +
                                   std::to_string(bucket.base_slice) + ")");
  }
  return Status::OK();
}

// Merge's checks of a snapshot: only the member of its algorithm counts.
Status ValidateMerge(const KeySnapshot& snapshot) {
  if (Status status = ValidateReplicated(snapshot.key, {snapshot.algorithm, 0, snapshot.window_ms});
      !status.ok()) {
    return status;
  }
  if (snapshot.algorithm == Algorithm::kSlidingWindowLog) return ValidateLog(snapshot.log);
  if (snapshot.algorithm == Algorithm::kTokenBucket) return ValidateBucket(snapshot.bucket);
  return Status::OK();
}

// MergeBatch's scratch, one per thread: grown to the largest batch the thread
// has merged, then reused, so that a batch allocates nothing.
struct MergeItem {
  const KeySnapshot* snapshot;
  Status* status;
  size_t hash;                  // HashKey(snapshot->key)
  size_t shard;                 // its index
  LimitSpec spec;               // the snapshot's class, without a limit
  const void* entry = nullptr;  // Shard::PrefetchProbableEntry's, for cache hints only
};
struct MergeScratch {
  std::vector<size_t> hashes;    // by snapshot: HashKey of its key (when valid)
  std::vector<MergeItem> items;  // the valid snapshots grouped by shard, each in batch order
};
thread_local MergeScratch merge_scratch;

}  // namespace

Limiter::Limiter(const Options& options)
    : options_(options),
      budget_(options.max_keys),
      cluster_size_(options.cluster_size),
      shards_(std::make_unique<Shard[]>(kShardCount)) {
  for (size_t i = 0; i < kShardCount; ++i) {
    shards_[i].track_changes = options.track_changes;
    shards_[i].replicate = options.replicate;
    shards_[i].key_hash_seed = options.key_hash_seed;
    shards_[i].gossip_work = &gossip_work_;
    Coordination::Settings coordination;
    coordination.self = options.node_id;
    coordination.escrow_epoch_ms = options.escrow_epoch_ms;
    coordination.partition_share = options.partition_share;
    coordination.gossip_max_delay_ms = options.gossip_max_delay_ms;
    coordination.share_wait_ms = options.replicate ? options.share_wait_ms : 0;
    coordination.delivery_ms = options.share_delivery_ms;
    coordination.cluster_size = &cluster_size_;
    coordination.unreachable_peers = &unreachable_peers_;
    coordination.round_wanted = &round_wanted_;
    coordination.deferral_losses = &deferral_losses_;
    shards_[i].coordination = Coordination(coordination);
  }
}

Limiter::~Limiter() = default;

size_t Limiter::ShardIndex(size_t hash) { return ShardOfHash(hash); }

Shard& Limiter::ShardFor(size_t hash) { return shards_[ShardIndex(hash)]; }

template <typename F>
auto Limiter::InShard(size_t hash, F&& f) {
  Shard& shard = ShardFor(hash);
  std::lock_guard<std::mutex> lock(shard.mu);
  return f(shard, shard.Now(options_.clock->WallMs()));
}

Status Limiter::Check(std::string_view key, const LimitSpec& spec, uint64_t cost,
                      Decision* decision) {
  return ValidateAndCheck(key, spec, cost, options_.clock->WallMs(), decision);
}

void Limiter::CheckBatch(std::span<const CheckRequest> requests, std::span<CheckResult> results) {
  const int64_t wall_ms = options_.clock->WallMs();
  const size_t count = std::min(requests.size(), results.size());
  if (count == 1) {  // nothing to overlap: the plain check, without the prefetch stages' locks
    results[0].status = ValidateAndCheck(requests[0].key, requests[0].spec, requests[0].cost,
                                         wall_ms, &results[0].decision);
    return;
  }
  // Cache hints, each kDistance requests behind the one before, so that each
  // finds the memory the one before asked for arrived and the check finds all
  // of it cached: the index slot, the entry, then (a token bucket's, behind
  // two more pointers) the list of nodes and each node's slices.
  const auto give_hint = [](Shard& shard, size_t hint, const CheckRequest& request, size_t hash) {
    switch (hint) {
      case 0: return shard.PrefetchIndex(hash, request.spec);
      case 1: shard.PrefetchProbableEntry(hash, request.spec); return;
      default: return shard.PrefetchBucketState(request.key, hash, request.spec, hint - 2);
    }
  };
  constexpr size_t kHints = 4;
  constexpr size_t kBucketOnlyFrom = 2;  // hints from here on concern token buckets only
  constexpr size_t kDistance = 6;
  constexpr size_t kCheckLag = kHints * kDistance;
  // The hashes of the requests in flight, request i's at i % kInFlight (no allocation).
  constexpr size_t kInFlight = 32;
  static_assert(kInFlight > kCheckLag);
  size_t hashes[kInFlight];
  for (size_t round = 0; round < count + kCheckLag; ++round) {
    if (round < count) {
      const CheckRequest& request = requests[round];
      results[round].status = ValidateKey(request.key);
      if (results[round].status.ok()) results[round].status = ValidateSpec(request.spec);
      if (results[round].status.ok())
        hashes[round % kInFlight] = HashKey(request.key, options_.key_hash_seed);
    }
    for (size_t hint = 0; hint < kHints; ++hint) {
      const size_t lag = hint * kDistance;
      if (round < lag || round - lag >= count) continue;
      const size_t i = round - lag;
      const CheckRequest& request = requests[i];
      if (!results[i].status.ok() ||
          (hint >= kBucketOnlyFrom && request.spec.algorithm != Algorithm::kTokenBucket)) {
        continue;
      }
      Shard& shard = ShardFor(hashes[i % kInFlight]);
      std::lock_guard<std::mutex> lock(shard.mu);
      give_hint(shard, hint, request, hashes[i % kInFlight]);
    }
    if (round >= kCheckLag && results[round - kCheckLag].status.ok()) {
      const size_t i = round - kCheckLag;
      const CheckRequest& request = requests[i];
      results[i].status = CheckValid(request.key, hashes[i % kInFlight], request.spec, request.cost,
                                     wall_ms, &results[i].decision);
    }
  }
}

Status Limiter::ValidateAndCheck(std::string_view key, const LimitSpec& spec, uint64_t cost,
                                 int64_t wall_ms, Decision* decision) {
  if (Status status = ValidateKey(key); !status.ok()) return status;
  if (Status status = ValidateSpec(spec); !status.ok()) return status;
  return CheckValid(key, HashKey(key, options_.key_hash_seed), spec, cost, wall_ms, decision);
}

Status Limiter::CheckValid(std::string_view key, size_t hash, const LimitSpec& spec, uint64_t cost,
                           int64_t wall_ms, Decision* decision) {
  const auto check = [&] {
    Shard& shard = ShardFor(hash);
    std::lock_guard<std::mutex> lock(shard.mu);
    return shard.Check(budget_, key, hash, spec, cost, shard.Now(wall_ms), decision);
  };
  Status status = check();
  // At the cap, expired keys may be holding the room: free them and retry.
  if (status.code() == Status::Code::kResourceExhausted && SweepIfDue() > 0) status = check();
  return status;
}

size_t Limiter::SweepIfDue() {
  const int64_t now_ms = options_.clock->MonotonicMs();
  int64_t last_ms = last_cap_sweep_ms_.load(std::memory_order_relaxed);
  if (now_ms - last_ms < kCapSweepIntervalMs ||
      !last_cap_sweep_ms_.compare_exchange_strong(last_ms, now_ms)) {
    return 0;
  }
  return SweepExpired();
}

Status Limiter::Read(std::string_view key, const LimitSpec& spec, KeySnapshot* snapshot) {
  if (Status status = ValidateKey(key); !status.ok()) return status;
  if (Status status = ValidateSpec(spec); !status.ok()) return status;
  const size_t hash = HashKey(key, options_.key_hash_seed);
  const bool found = InShard(hash, [&](Shard& shard, int64_t now_ms) {
    return shard.Read(key, hash, spec, options_.node_id, now_ms, snapshot);
  });
  return found ? Status::OK() : Status::NotFound("no live state for this key");
}

Status Limiter::Erase(std::string_view key, const LimitSpec& spec) {
  if (Status status = ValidateKey(key); !status.ok()) return status;
  if (Status status = ValidateSpec(spec); !status.ok()) return status;
  const size_t hash = HashKey(key, options_.key_hash_seed);
  const bool erased =
      InShard(hash, [&](Shard& shard, int64_t) { return shard.Erase(budget_, key, hash, spec); });
  if (!erased) return Status::NotFound("no state for this key");
  erasures_.fetch_add(1, std::memory_order_release);
  return Status::OK();
}

Status Limiter::Merge(const KeySnapshot& snapshot) {
  if (Status status = ValidateMerge(snapshot); !status.ok()) return status;
  const size_t hash = HashKey(snapshot.key, options_.key_hash_seed);
  return InShard(hash, [&](Shard& shard, int64_t now_ms) {
    return shard.Merge(budget_, snapshot, hash, options_.node_id, now_ms, MergeSource::kSync);
  });
}

void Limiter::MergeBatch(std::span<const KeySnapshot> snapshots, std::span<Status> statuses,
                         MergeSource source) {
  const size_t count = std::min(snapshots.size(), statuses.size());
  MergeScratch& scratch = merge_scratch;
  scratch.hashes.resize(count);
  // Group the valid snapshots by shard, stably: count each shard's, then place them.
  std::array<size_t, kShardCount + 1> starts{};
  for (size_t i = 0; i < count; ++i) {
    statuses[i] = ValidateMerge(snapshots[i]);
    if (!statuses[i].ok()) continue;
    scratch.hashes[i] = HashKey(snapshots[i].key, options_.key_hash_seed);
    ++starts[ShardIndex(scratch.hashes[i]) + 1];
  }
  for (size_t s = 0; s < kShardCount; ++s) starts[s + 1] += starts[s];
  const size_t valid = starts[kShardCount];
  scratch.items.resize(valid);
  std::array<size_t, kShardCount> next;
  std::copy_n(starts.begin(), kShardCount, next.begin());
  for (size_t i = 0; i < count; ++i) {
    if (!statuses[i].ok()) continue;
    const size_t shard = ShardIndex(scratch.hashes[i]);
    scratch.items[next[shard]++] = {&snapshots[i],
                                    &statuses[i],
                                    scratch.hashes[i],
                                    shard,
                                    {snapshots[i].algorithm, 0, snapshots[i].window_ms}};
  }
  // One pipeline over the whole batch, in shard order: stage 0 of the k-th
  // snapshot (its index slot) runs with stage 1 of the (k - kDistance)-th
  // (its entry), stages 2 and 3 of the (k - 2 and 3 * kDistance)-th (what the
  // entry points to, and what that points to) and the merge of the
  // (k - kDepth)-th, so that each merge finds its memory cached. A shard is
  // locked when stage 0 reaches its first snapshot and unlocked after its
  // last merge: once per batch, a few at a time, always in increasing order
  // (every other path holds one shard at a time), so no deadlock.
  constexpr size_t kDistance = 6;
  constexpr size_t kDepth = 4 * kDistance;
  const int64_t wall_ms = options_.clock->WallMs();
  std::array<std::unique_lock<std::mutex>, kShardCount> locks;
  std::array<int64_t, kShardCount> now_ms;
  for (size_t k = 0; k < valid + kDepth; ++k) {
    if (k < valid) {
      const MergeItem& item = scratch.items[k];
      if (!locks[item.shard].owns_lock()) {
        locks[item.shard] = std::unique_lock<std::mutex>(shards_[item.shard].mu);
        now_ms[item.shard] = shards_[item.shard].Now(wall_ms);
      }
      shards_[item.shard].PrefetchIndex(item.hash, item.spec);
      // The snapshot's key, class and counts, for the later stages and the merge.
      __builtin_prefetch(item.snapshot);
      __builtin_prefetch(&item.snapshot->counts.previous);
    }
    if (k >= kDistance && k - kDistance < valid) {
      MergeItem& item = scratch.items[k - kDistance];
      item.entry = shards_[item.shard].PrefetchProbableEntry(item.hash, item.spec);
    }
    for (size_t level = 0; level < 2; ++level) {
      const size_t behind = (2 + level) * kDistance;
      if (k < behind || k - behind >= valid) continue;
      const MergeItem& item = scratch.items[k - behind];
      shards_[item.shard].PrefetchMergeState(item.entry, *item.snapshot, level);
    }
    if (k >= kDepth) {
      const MergeItem& item = scratch.items[k - kDepth];
      *item.status = shards_[item.shard].Merge(budget_, *item.snapshot, item.hash, options_.node_id,
                                               now_ms[item.shard], source, item.entry);
      if (k - kDepth + 1 == valid || scratch.items[k - kDepth + 1].shard != item.shard) {
        locks[item.shard].unlock();
      }
    }
  }
}

int64_t Limiter::CollectGossip(const SnapshotSink& sink, bool flush_deferred,
                               const GossipRelay* relay) {
  KeySnapshot scratch;
  int64_t next_due_in_ms = INT64_MAX;
  for (size_t i = 0; i < kShardCount; ++i) {
    Shard& shard = shards_[i];
    std::lock_guard<std::mutex> lock(shard.mu);
    const int64_t now_ms = shard.Now(options_.clock->WallMs());
    shard.CollectGossip(options_.node_id, now_ms, flush_deferred, relay, &scratch, sink);
    if (shard.next_release_ms != INT64_MAX) {
      next_due_in_ms =
          std::min(next_due_in_ms, std::max<int64_t>(0, shard.next_release_ms - now_ms));
    }
  }
  return next_due_in_ms;
}

size_t Limiter::shard_count() { return kShardCount; }

size_t Limiter::range_count() { return kShardCount * kRangesPerShard; }

void Limiter::RangeVersions(size_t shard_index, int64_t quiet_ms, std::span<RangeVersion> out,
                            int64_t as_of_ms) {
  Shard& shard = shards_[shard_index];
  std::lock_guard<std::mutex> lock(shard.mu);
  const int64_t quiet_by_ms = std::min(shard.Now(options_.clock->WallMs()), as_of_ms) - quiet_ms;
  for (size_t i = 0; i < kRangesPerShard && i < out.size(); ++i) {
    out[i] = {shard.ranges[i].version, shard.ranges[i].quiet_from_ms <= quiet_by_ms};
  }
}

uint64_t Limiter::RangeDigests(size_t shard_index, int64_t ref_ms, std::span<uint64_t> out) {
  KeySnapshot scratch;
  Shard& shard = shards_[shard_index];
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.Now(options_.clock->WallMs());
  const uint64_t current = shard.UpdateDigests(options_.node_id, ref_ms, &scratch);
  for (size_t i = 0; i < kRangesPerShard && i < out.size(); ++i) out[i] = shard.ranges[i].digest;
  return current;
}

void Limiter::CollectReplica(size_t shard_index, const SnapshotSink& sink) {
  KeySnapshot scratch;
  Shard& shard = shards_[shard_index];
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.CollectReplica(options_.node_id, shard.Now(options_.clock->WallMs()), kRangesPerShard,
                       &scratch, sink);
}

void Limiter::CollectRange(size_t range, const SnapshotSink& sink) {
  KeySnapshot scratch;
  Shard& shard = shards_[range / kRangesPerShard];
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.CollectReplica(options_.node_id, shard.Now(options_.clock->WallMs()),
                       range % kRangesPerShard, &scratch, sink);
}

size_t Limiter::SweepExpired() {
  size_t freed = 0;
  for (size_t i = 0; i < kShardCount; ++i) {
    Shard& shard = shards_[i];
    std::lock_guard<std::mutex> lock(shard.mu);
    freed += shard.SweepAll(shard.Now(options_.clock->WallMs()));
  }
  budget_.Release(freed);
  return freed;
}

void Limiter::CollectChanges(const SnapshotSink& sink, bool with_peer_changes) {
  KeySnapshot scratch;  // one snapshot, refilled for every key: no allocation per key
  for (size_t i = 0; i < kShardCount; ++i) {
    Shard& shard = shards_[i];
    std::lock_guard<std::mutex> lock(shard.mu);
    shard.CollectChanges(options_.node_id, with_peer_changes, &scratch, sink);
  }
}

void Limiter::CollectAll(const SnapshotSink& sink) {
  KeySnapshot scratch;
  for (size_t i = 0; i < kShardCount; ++i) {
    Shard& shard = shards_[i];
    std::lock_guard<std::mutex> lock(shard.mu);
    shard.CollectAll(options_.node_id, shard.Now(options_.clock->WallMs()), &scratch, sink);
  }
}

Status Limiter::Restore(const KeySnapshot& snapshot) {
  if (Status status = ValidateKey(snapshot.key); !status.ok()) return status;
  if (Status status = ValidateSpec({snapshot.algorithm, 0, snapshot.window_ms}); !status.ok()) {
    return status;
  }
  if (Status status = ValidateLog(snapshot.log); !status.ok()) return status;
  const size_t hash = HashKey(snapshot.key, options_.key_hash_seed);
  return InShard(hash, [&](Shard& shard, int64_t now_ms) {
    return shard.Restore(budget_, snapshot, hash, options_.node_id, now_ms);
  });
}

}  // namespace tally
