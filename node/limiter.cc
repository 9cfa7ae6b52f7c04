#include "node/limiter.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "node/decide.h"
#include "node/key_state.h"
#include "node/key_table.h"

namespace tally {
namespace {

constexpr size_t kShardBits = 6;
constexpr size_t kShardCount = size_t{1} << kShardBits;
// Slots examined for expiry on every insertion: enough that a table under
// churn never holds more than about twice its live keys.
constexpr size_t kSweepPerInsert = 2;

// The keys of one (algorithm, window_ms) within a shard.
template <typename Entry>
struct LimitClass {
  Algorithm algorithm;
  uint64_t window_ms;
  std::unique_ptr<KeyTable<Entry>> table;
};

template <typename Entry>
LimitClass<Entry>* FindClass(std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec) {
  for (auto& limit_class : classes) {
    if (limit_class.algorithm == spec.algorithm && limit_class.window_ms == spec.window_ms) {
      return &limit_class;
    }
  }
  return nullptr;
}

template <typename Entry>
Entry* FindEntry(std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec,
                 std::string_view key, size_t hash) {
  LimitClass<Entry>* limit_class = FindClass(classes, spec);
  return limit_class ? limit_class->table->Find(key, hash) : nullptr;
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

bool IsCounting(Algorithm algorithm) {
  return algorithm == Algorithm::kFixedWindow || algorithm == Algorithm::kSlidingWindowCounter;
}

}  // namespace

// One shard: every piece of state in it is owned by `mu`.
struct alignas(64) Limiter::Shard {
  std::mutex mu;
  int64_t last_now_ms = 0;  // the largest wall time seen: time never goes backwards
  std::vector<LimitClass<CounterEntry>> counters;  // fixed window and sliding counter
  std::vector<LimitClass<LogEntry>> logs;
  std::vector<LimitClass<BucketEntry>> buckets;

  int64_t Now(int64_t wall_ms) {
    last_now_ms = std::max(last_now_ms, wall_ms);
    return last_now_ms;
  }

  // Pulls into cache what checking `key` will touch: the index slot first,
  // then (once that has arrived) the entry. Purely a hint: no state changes.
  void PrefetchIndex(std::string_view key, size_t hash, const LimitSpec& spec) {
    Visit(spec, [&](auto& classes) {
      if (auto* limit_class = FindClass(classes, spec)) limit_class->table->PrefetchIndex(key, hash);
    });
  }
  void PrefetchEntry(std::string_view key, size_t hash, const LimitSpec& spec) {
    Visit(spec, [&](auto& classes) {
      if (auto* entry = FindEntry(classes, spec, key, hash)) {
        __builtin_prefetch(entry);
        __builtin_prefetch(reinterpret_cast<const char*>(entry) + sizeof(*entry) - 1);
      }
    });
  }
  // Calls f with the class list that holds spec.algorithm.
  template <typename F>
  void Visit(const LimitSpec& spec, F&& f) {
    switch (spec.algorithm) {
      case Algorithm::kFixedWindow:
      case Algorithm::kSlidingWindowCounter: f(counters); return;
      case Algorithm::kSlidingWindowLog: f(logs); return;
      case Algorithm::kTokenBucket: f(buckets); return;
    }
  }

  size_t SweepAll(int64_t now_ms) {
    return SweepClasses(counters, now_ms) + SweepClasses(logs, now_ms) +
           SweepClasses(buckets, now_ms);
  }

  // Makes *entry point at the entry for `key`, adding one if it is null.
  // Fails only at the key cap.
  template <typename Entry>
  Status Ensure(Limiter& limiter, std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec,
                std::string_view key, int64_t now_ms, Entry** entry) {
    if (*entry) return Status::OK();
    if (!limiter.ReserveKey()) {
      return Status::ResourceExhausted("key limit reached: this node holds max_keys=" +
                                       std::to_string(limiter.options_.max_keys) + " keys");
    }
    LimitClass<Entry>* limit_class = FindClass(classes, spec);
    if (!limit_class) {
      classes.push_back({spec.algorithm, spec.window_ms, std::make_unique<KeyTable<Entry>>()});
      limit_class = &classes.back();
    }
    limiter.ReleaseKeys(limit_class->table->SweepSome(kSweepPerInsert, [&](const Entry& old) {
      return IsExpired(old, spec.algorithm, spec.window_ms, now_ms);
    }));
    *entry = limit_class->table->Insert(key);
    return Status::OK();
  }

  Status CheckCounter(Limiter& limiter, std::string_view key, size_t hash, const LimitSpec& spec,
                      uint64_t cost, int64_t now_ms, Decision* decision) {
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
    const Decision result =
        spec.algorithm == Algorithm::kFixedWindow
            ? DecideFixedWindow(spec, current, elapsed_ms, cost)
            : DecideSlidingCounter(spec, current, previous, elapsed_ms, cost);
    if (result.allowed && cost > 0) {
      const bool is_new = entry == nullptr;
      if (Status status = Ensure(limiter, counters, spec, key, now_ms, &entry); !status.ok()) {
        return status;
      }
      if (is_new) entry->window_index = window_index;
      entry->own_current += static_cast<uint32_t>(cost);
    }
    *decision = result;
    return Status::OK();
  }

  Status CheckLog(Limiter& limiter, std::string_view key, size_t hash, const LimitSpec& spec,
                  uint64_t cost, int64_t now_ms, Decision* decision) {
    LogEntry* entry = FindEntry(logs, spec, key, hash);
    if (entry) TrimLog(*entry, spec.window_ms, now_ms);
    const Decision result =
        entry ? DecideSlidingLog(spec, LiveStamps(*entry), entry->live_total, now_ms, cost)
              : DecideSlidingLog(spec, {}, 0, now_ms, cost);
    if (result.allowed && cost > 0) {
      if (Status status = Ensure(limiter, logs, spec, key, now_ms, &entry); !status.ok()) {
        return status;
      }
      AppendLog(*entry, now_ms, cost);
    }
    *decision = result;
    return Status::OK();
  }

  Status CheckBucket(Limiter& limiter, std::string_view key, size_t hash, const LimitSpec& spec,
                     uint64_t cost, int64_t now_ms, Decision* decision) {
    BucketEntry* entry = FindEntry(buckets, spec, key, hash);
    const uint64_t level =
        entry ? RefillTokenBucket(spec, entry->level,
                                  static_cast<uint64_t>(now_ms - entry->refilled_at_ms))
              : spec.limit * spec.window_ms;  // a new bucket starts full
    const Decision result = DecideTokenBucket(spec, level, cost);
    if (result.allowed && cost > 0) {
      if (Status status = Ensure(limiter, buckets, spec, key, now_ms, &entry); !status.ok()) {
        return status;
      }
      entry->level = level - cost * spec.window_ms;
      entry->refilled_at_ms = now_ms;
    }
    *decision = result;
    return Status::OK();
  }
};

Limiter::Limiter(const Options& options)
    : options_(options), shards_(std::make_unique<Shard[]>(kShardCount)) {}

Limiter::~Limiter() = default;

Limiter::Shard& Limiter::ShardFor(size_t hash) { return shards_[hash >> (64 - kShardBits)]; }

bool Limiter::ReserveKey() {
  if (key_count_.fetch_add(1, std::memory_order_relaxed) < options_.max_keys) return true;
  key_count_.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

void Limiter::ReleaseKeys(size_t count) {
  if (count > 0) key_count_.fetch_sub(count, std::memory_order_relaxed);
}

Status Limiter::Check(std::string_view key, const LimitSpec& spec, uint64_t cost,
                      Decision* decision) {
  if (Status status = ValidateKey(key); !status.ok()) return status;
  if (Status status = ValidateSpec(spec); !status.ok()) return status;
  return CheckValid(key, HashKey(key), spec, cost, options_.clock->WallMs(), decision);
}

void Limiter::CheckBatch(std::span<const CheckRequest> requests, std::span<CheckResult> results) {
  const int64_t wall_ms = options_.clock->WallMs();
  // Stage 1 of request i runs with stage 2 of request i - kDistance and stage 3
  // of request i - 2 * kDistance, so that each check finds its memory cached.
  constexpr size_t kDistance = 12;
  const size_t count = std::min(requests.size(), results.size());
  std::vector<size_t> hashes(count);
  auto valid = [&](size_t i) { return results[i].status.ok(); };
  for (size_t i = 0; i < count + 2 * kDistance; ++i) {
    if (i < count) {
      const CheckRequest& request = requests[i];
      results[i].status = ValidateKey(request.key);
      if (results[i].status.ok()) results[i].status = ValidateSpec(request.spec);
      if (valid(i)) {
        hashes[i] = HashKey(request.key);
        Shard& shard = ShardFor(hashes[i]);
        std::lock_guard<std::mutex> lock(shard.mu);
        shard.PrefetchIndex(request.key, hashes[i], request.spec);
      }
    }
    if (i >= kDistance && i - kDistance < count && valid(i - kDistance)) {
      const size_t j = i - kDistance;
      Shard& shard = ShardFor(hashes[j]);
      std::lock_guard<std::mutex> lock(shard.mu);
      shard.PrefetchEntry(requests[j].key, hashes[j], requests[j].spec);
    }
    if (i >= 2 * kDistance && valid(i - 2 * kDistance)) {
      const size_t j = i - 2 * kDistance;
      const CheckRequest& request = requests[j];
      results[j].status = CheckValid(request.key, hashes[j], request.spec, request.cost, wall_ms,
                                     &results[j].decision);
    }
  }
}

Status Limiter::CheckValid(std::string_view key, size_t hash, const LimitSpec& spec,
                           uint64_t cost, int64_t wall_ms, Decision* decision) {
  Status status = CheckInShard(key, hash, spec, cost, wall_ms, decision);
  // At the cap, expired keys may be holding the room: free them and retry.
  if (status.code() == Status::Code::kResourceExhausted && SweepIfDue() > 0) {
    status = CheckInShard(key, hash, spec, cost, wall_ms, decision);
  }
  return status;
}

Status Limiter::CheckInShard(std::string_view key, size_t hash, const LimitSpec& spec,
                             uint64_t cost, int64_t wall_ms, Decision* decision) {
  Shard& shard = ShardFor(hash);
  std::lock_guard<std::mutex> lock(shard.mu);
  const int64_t now_ms = shard.Now(wall_ms);
  switch (spec.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter:
      return shard.CheckCounter(*this, key, hash, spec, cost, now_ms, decision);
    case Algorithm::kSlidingWindowLog:
      return shard.CheckLog(*this, key, hash, spec, cost, now_ms, decision);
    case Algorithm::kTokenBucket:
      return shard.CheckBucket(*this, key, hash, spec, cost, now_ms, decision);
  }
  return Status::InvalidArgument("unknown algorithm");  // unreachable: ValidateSpec
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

Status Limiter::ReadCounts(std::string_view key, const LimitSpec& spec, WindowCounts* counts) {
  if (Status status = ValidateKey(key); !status.ok()) return status;
  if (Status status = ValidateSpec(spec); !status.ok()) return status;
  if (!IsCounting(spec.algorithm)) {
    return Status::InvalidArgument("only fixed_window and sliding_counter keep replicated counts");
  }
  const size_t hash = HashKey(key);
  Shard& shard = ShardFor(hash);
  std::lock_guard<std::mutex> lock(shard.mu);
  const int64_t now_ms = shard.Now(options_.clock->WallMs());
  CounterEntry* entry = FindEntry(shard.counters, spec, key, hash);
  if (!entry || IsExpired(*entry, spec.algorithm, spec.window_ms, now_ms)) {
    return Status::NotFound("no live counts for this key");
  }
  AdvanceTo(*entry, now_ms / static_cast<int64_t>(spec.window_ms));
  ExportCounts(*entry, options_.node_id, counts);
  return Status::OK();
}

Status Limiter::MergeCounts(std::string_view key, const LimitSpec& spec,
                            const WindowCounts& counts) {
  if (Status status = ValidateKey(key); !status.ok()) return status;
  if (Status status = ValidateSpec(spec); !status.ok()) return status;
  if (!IsCounting(spec.algorithm)) {
    return Status::InvalidArgument("only fixed_window and sliding_counter keep replicated counts");
  }
  const size_t hash = HashKey(key);
  Shard& shard = ShardFor(hash);
  std::lock_guard<std::mutex> lock(shard.mu);
  const int64_t now_ms = shard.Now(options_.clock->WallMs());
  const int64_t now_window = now_ms / static_cast<int64_t>(spec.window_ms);
  if (counts.window_index > now_window + 1) {
    return Status::InvalidArgument("counts for window " + std::to_string(counts.window_index) +
                                   " are more than one window ahead of this node's window " +
                                   std::to_string(now_window) + " (clock skew?)");
  }
  CounterEntry* entry = FindEntry(shard.counters, spec, key, hash);
  if (!entry) {
    const int64_t windows_kept = spec.algorithm == Algorithm::kSlidingWindowCounter ? 2 : 1;
    const bool holds_live_counts = counts.window_index > now_window - windows_kept &&
                                   !(counts.current.empty() && counts.previous.empty());
    if (!holds_live_counts) return Status::OK();
    if (Status status = shard.Ensure(*this, shard.counters, spec, key, now_ms, &entry);
        !status.ok()) {
      return status;
    }
    entry->window_index = std::max(now_window, counts.window_index);
  }
  AdvanceTo(*entry, now_window);
  tally::MergeCounts(*entry, options_.node_id, counts);
  return Status::OK();
}

size_t Limiter::SweepExpired() {
  size_t freed = 0;
  for (size_t i = 0; i < kShardCount; ++i) {
    Shard& shard = shards_[i];
    std::lock_guard<std::mutex> lock(shard.mu);
    freed += shard.SweepAll(shard.Now(options_.clock->WallMs()));
  }
  ReleaseKeys(freed);
  return freed;
}

}  // namespace tally
