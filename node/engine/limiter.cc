#include "node/engine/limiter.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "node/engine/key_table.h"

namespace tally {
namespace {

constexpr size_t kShardBits = 6;
constexpr size_t kShardCount = size_t{1} << kShardBits;

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

}  // namespace

Limiter::Limiter(const Options& options)
    : options_(options),
      budget_(options.max_keys),
      cluster_size_(options.cluster_size),
      shards_(std::make_unique<Shard[]>(kShardCount)) {
  for (size_t i = 0; i < kShardCount; ++i) {
    shards_[i].track_changes = options.track_changes;
    shards_[i].replicate = options.replicate;
    shards_[i].escrow = {options.escrow_epoch_ms, options.node_id, options.partition_share};
    shards_[i].cluster_size = &cluster_size_;
    shards_[i].unreachable_peers = &unreachable_peers_;
  }
}

Limiter::~Limiter() = default;

Shard& Limiter::ShardFor(size_t hash) { return shards_[hash >> (64 - kShardBits)]; }

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
      case 0: return shard.PrefetchIndex(request.key, hash, request.spec);
      case 1: return shard.PrefetchEntry(request.key, hash, request.spec);
      case 2: return shard.PrefetchNodes(request.key, hash, request.spec);
      default: return shard.PrefetchSlices(request.key, hash, request.spec);
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
      if (results[round].status.ok()) hashes[round % kInFlight] = HashKey(request.key);
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
  return CheckValid(key, HashKey(key), spec, cost, wall_ms, decision);
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
  const size_t hash = HashKey(key);
  const bool found = InShard(hash, [&](Shard& shard, int64_t now_ms) {
    return shard.Read(key, hash, spec, options_.node_id, now_ms, snapshot);
  });
  return found ? Status::OK() : Status::NotFound("no live state for this key");
}

Status Limiter::Erase(std::string_view key, const LimitSpec& spec) {
  if (Status status = ValidateKey(key); !status.ok()) return status;
  if (Status status = ValidateSpec(spec); !status.ok()) return status;
  const size_t hash = HashKey(key);
  const bool erased =
      InShard(hash, [&](Shard& shard, int64_t) { return shard.Erase(budget_, key, hash, spec); });
  if (!erased) return Status::NotFound("no state for this key");
  erasures_.fetch_add(1, std::memory_order_release);
  return Status::OK();
}

Status Limiter::Merge(const KeySnapshot& snapshot) {
  if (Status status = ValidateReplicated(snapshot.key, {snapshot.algorithm, 0, snapshot.window_ms});
      !status.ok()) {
    return status;
  }
  if (Status status = ValidateLog(snapshot.log); !status.ok()) return status;
  if (Status status = ValidateBucket(snapshot.bucket); !status.ok()) return status;
  const size_t hash = HashKey(snapshot.key);
  return InShard(hash, [&](Shard& shard, int64_t now_ms) {
    return shard.Merge(budget_, snapshot, hash, options_.node_id, now_ms);
  });
}

void Limiter::CollectGossip(const SnapshotSink& sink) {
  KeySnapshot scratch;
  for (size_t i = 0; i < kShardCount; ++i) {
    Shard& shard = shards_[i];
    std::lock_guard<std::mutex> lock(shard.mu);
    shard.CollectGossip(options_.node_id, &scratch, sink);
  }
}

size_t Limiter::shard_count() { return kShardCount; }

void Limiter::CollectReplica(size_t shard_index, const SnapshotSink& sink) {
  KeySnapshot scratch;
  Shard& shard = shards_[shard_index];
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.CollectReplica(options_.node_id, shard.Now(options_.clock->WallMs()), &scratch, sink);
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

void Limiter::CollectChanges(const SnapshotSink& sink) {
  KeySnapshot scratch;  // one snapshot, refilled for every key: no allocation per key
  for (size_t i = 0; i < kShardCount; ++i) {
    Shard& shard = shards_[i];
    std::lock_guard<std::mutex> lock(shard.mu);
    shard.CollectChanges(options_.node_id, &scratch, sink);
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
  const size_t hash = HashKey(snapshot.key);
  return InShard(hash, [&](Shard& shard, int64_t now_ms) {
    return shard.Restore(budget_, snapshot, hash, options_.node_id, now_ms);
  });
}

}  // namespace tally
