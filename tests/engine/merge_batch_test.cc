// Limiter::MergeBatch against Limiter::Merge: two limiters fed the same
// checks, one merging snapshots one at a time, the other in batches, must end
// in the same state with the same per-snapshot statuses.

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/bucket_slices.h"
#include "node/common/clock.h"
#include "node/common/key_snapshot.h"
#include "node/engine/limiter.h"

namespace tally {
namespace {

constexpr int64_t kStartMs = 1'700'000'000'000;
constexpr Algorithm kAlgorithms[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                                     Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket};
constexpr uint64_t kWindowsMs[] = {1'000, 60'000};

uint64_t Uniform(std::mt19937_64& rng, uint64_t lo, uint64_t hi) {
  return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
}

// prefix + n, built by appending (GCC 12 warns falsely on operator+ here).
std::string Name(std::string prefix, uint64_t n) {
  prefix.append(std::to_string(n));
  return prefix;
}

// A limit's identity, to compare two limiters' keys.
std::string LimitName(const KeySnapshot& snapshot) {
  std::string name = snapshot.key;
  name.append("/").append(AlgorithmName(snapshot.algorithm));
  name.append("/").append(std::to_string(snapshot.window_ms));
  return name;
}

// A snapshot as a peer might send it: mostly valid, sometimes not (a bad key
// or window, counts from too far ahead, a log out of order, a bucket from
// before the epoch or too far ahead), of one of `keys` keys, so that a batch
// holds several snapshots of one key.
KeySnapshot RandomSnapshot(std::mt19937_64& rng, int64_t now_ms, size_t keys) {
  KeySnapshot snapshot;
  snapshot.key = Name("key:", Uniform(rng, 0, keys - 1));
  snapshot.algorithm = kAlgorithms[Uniform(rng, 0, 3)];
  snapshot.window_ms = kWindowsMs[Uniform(rng, 0, 1)];
  const uint64_t invalid = Uniform(rng, 0, 19);
  if (invalid == 0) snapshot.key.clear();
  if (invalid == 1) snapshot.key.assign(kMaxKeyBytes + 1, 'k');
  if (invalid == 2) snapshot.window_ms = 0;
  const auto window_ms = static_cast<int64_t>(std::max<uint64_t>(snapshot.window_ms, 1));
  switch (snapshot.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter: {
      // From three windows back to two ahead (refused: more than one ahead).
      snapshot.counts.window_index =
          now_ms / window_ms - 3 + static_cast<int64_t>(Uniform(rng, 0, 5));
      for (GCounter* counter : {&snapshot.counts.current, &snapshot.counts.previous}) {
        for (uint64_t slots = Uniform(rng, 0, 3); slots > 0; --slots) {
          counter->MergeSlot(static_cast<NodeId>(Uniform(rng, 1, 4)), Uniform(rng, 0, 50));
        }
      }
      break;
    }
    case Algorithm::kSlidingWindowLog: {
      NodeId node = 0;
      for (uint64_t nodes = Uniform(rng, 0, 3); nodes > 0; --nodes) {
        node += static_cast<NodeId>(Uniform(rng, 1, 2));
        NodeStamps& stamps = snapshot.log.emplace_back();
        stamps.node = node;
        int64_t at_ms = now_ms - window_ms - 5 + static_cast<int64_t>(Uniform(rng, 0, 10));
        for (uint64_t count = Uniform(rng, 1, 4); count > 0; --count) {
          at_ms += static_cast<int64_t>(Uniform(rng, 1, static_cast<uint64_t>(window_ms + 1) / 2));
          stamps.stamps.push_back({at_ms, Uniform(rng, 1, 9)});
        }
      }
      if (invalid == 3 && snapshot.log.size() >= 2) std::swap(snapshot.log[0], snapshot.log[1]);
      break;
    }
    case Algorithm::kTokenBucket: {
      // Costs in the slices of the last period or so, by up to three nodes.
      BucketSlices& bucket = snapshot.bucket;
      const int64_t slice = BucketSliceAt(snapshot.window_ms, now_ms);
      bucket.capacity = 100;
      bucket.base_slice = BucketBaseFor(slice);
      for (uint64_t costs = Uniform(rng, 0, 4); costs > 0; --costs) {
        AddToBucket(bucket, static_cast<NodeId>(Uniform(rng, 1, 3)),
                    slice - static_cast<int64_t>(Uniform(rng, 0, kBucketSlicesPerPeriod)),
                    Uniform(rng, 1, 20));
      }
      if (invalid == 3) bucket.base_slice = -1;
      if (invalid == 4) bucket.base_slice += 3 * kBucketSlicesPerPeriod;
      break;
    }
  }
  return snapshot;
}

// Every key's state, by key, algorithm and window (CollectAll).
std::map<std::string, KeySnapshot> StateOf(Limiter& limiter) {
  std::map<std::string, KeySnapshot> state;
  limiter.CollectAll([&](const KeySnapshot& snapshot) { state[LimitName(snapshot)] = snapshot; });
  return state;
}

// The keys each limiter counts as changed since the last call.
std::map<std::string, int> ChangesOf(Limiter& limiter) {
  std::map<std::string, int> changed;
  limiter.CollectChanges([&](const KeySnapshot& snapshot) { ++changed[LimitName(snapshot)]; });
  return changed;
}

struct Pair {
  explicit Pair(size_t max_keys = 1'000'000)
      : clock(kStartMs),
        one_by_one(Limiter::Options{1, max_keys, &clock, /*track_changes=*/true}),
        batched(Limiter::Options{1, max_keys, &clock, /*track_changes=*/true}) {}
  // The same check on both; they must decide alike.
  void Check(std::string_view key, const LimitSpec& spec, uint64_t cost) {
    Decision first;
    Decision second;
    const Status status = one_by_one.Check(key, spec, cost, &first);
    REQUIRE(status.ToString() == batched.Check(key, spec, cost, &second).ToString());
    CHECK(first.allowed == second.allowed);
    CHECK(first.remaining == second.remaining);
  }
  // Merges `snapshots` into one_by_one with Merge and into batched with
  // MergeBatch; the statuses must match. Returns how many failed.
  size_t Merge(const std::vector<KeySnapshot>& snapshots) {
    std::vector<Status> statuses(snapshots.size());
    batched.MergeBatch(snapshots, statuses);
    size_t failed = 0;
    for (size_t i = 0; i < snapshots.size(); ++i) {
      CAPTURE(i);
      CHECK(one_by_one.Merge(snapshots[i]).ToString() == statuses[i].ToString());
      if (!statuses[i].ok()) ++failed;
    }
    return failed;
  }

  ManualClock clock;
  Limiter one_by_one;
  Limiter batched;
};

// Random batches of every algorithm, both windows, invalid snapshots and
// several snapshots of one key per batch, between checks: the same statuses,
// the same keys changed and the same state as merging one by one.
TEST_CASE("MergeBatch matches Merge on random batches") {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    Pair pair;
    size_t invalid = 0;
    for (int round = 0; round < 30; ++round) {
      for (int i = 0; i < 20; ++i) {
        const LimitSpec spec{kAlgorithms[Uniform(rng, 0, 3)], 100, kWindowsMs[Uniform(rng, 0, 1)]};
        pair.Check(Name("key:", Uniform(rng, 0, 40)), spec, Uniform(rng, 0, 3));
      }
      std::vector<KeySnapshot> batch(Uniform(rng, 0, 150));
      for (KeySnapshot& snapshot : batch) snapshot = RandomSnapshot(rng, pair.clock.WallMs(), 40);
      invalid += pair.Merge(batch);
      if (round % 3 == 0) pair.Merge(batch);  // a replay
      REQUIRE(ChangesOf(pair.one_by_one) == ChangesOf(pair.batched));
      REQUIRE(StateOf(pair.one_by_one) == StateOf(pair.batched));
      REQUIRE(pair.one_by_one.key_count() == pair.batched.key_count());
      pair.clock.AdvanceMs(static_cast<int64_t>(Uniform(rng, 0, 700)));
    }
    CHECK(invalid > 0);
  }
}

// A batch of 10,000 keys spans every shard: each key gets its own state.
TEST_CASE("MergeBatch merges a batch across every shard") {
  Pair pair;
  const int64_t window_index = pair.clock.WallMs() / 60'000;
  std::vector<KeySnapshot> batch(10'000);
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].key = Name("user:", i);
    batch[i].window_ms = 60'000;
    batch[i].counts.window_index = window_index;
    batch[i].counts.current.MergeSlot(2, i + 1);
  }
  pair.Merge(batch);
  CHECK(pair.batched.key_count() == batch.size());
  for (size_t i = 0; i < batch.size(); i += 97) {
    KeySnapshot read;
    REQUIRE(pair.batched.Read(batch[i].key, {batch[i].algorithm, 0, 60'000}, &read).ok());
    CHECK(read.counts.current.Get(2) == i + 1);
  }
  CHECK(StateOf(pair.one_by_one) == StateOf(pair.batched));
}

// An empty batch, and one of invalid snapshots only, change nothing.
TEST_CASE("MergeBatch of nothing valid changes nothing") {
  Pair pair;
  pair.Merge({});
  std::vector<KeySnapshot> invalid(3);  // empty keys
  invalid[1].key.push_back('k');        // window_ms 0
  pair.Merge(invalid);
  std::vector<Status> statuses(invalid.size());
  pair.batched.MergeBatch(invalid, statuses);
  for (const Status& status : statuses) CHECK(status.code() == Status::Code::kInvalidArgument);
  CHECK(pair.batched.key_count() == 0);
  CHECK(ChangesOf(pair.batched).empty());
}

// At max_keys as many keys find room as one by one (perhaps others: the
// shards are visited in turn), every snapshot of a key without room is
// refused, and those of the held keys merge.
TEST_CASE("MergeBatch at max_keys refuses as many new keys as Merge") {
  Pair pair(/*max_keys=*/50);
  const int64_t window_index = pair.clock.WallMs() / 60'000;
  std::vector<KeySnapshot> batch(120);
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].key = Name("user:", i % 100);  // the last 20 repeat the first 20 keys
    batch[i].window_ms = 60'000;
    batch[i].counts.window_index = window_index;
    batch[i].counts.current.MergeSlot(2, 1 + i / 100);
  }
  std::vector<Status> statuses(batch.size());
  pair.batched.MergeBatch(batch, statuses);
  std::map<std::string, int> refused_batched;
  std::map<std::string, int> refused_one_by_one;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!statuses[i].ok()) {
      CHECK(statuses[i].code() == Status::Code::kResourceExhausted);
      ++refused_batched[batch[i].key];
    }
    if (!pair.one_by_one.Merge(batch[i]).ok()) ++refused_one_by_one[batch[i].key];
  }
  CHECK(refused_batched.size() == 50);
  CHECK(refused_one_by_one.size() == 50);
  CHECK(pair.batched.key_count() == 50);
  CHECK(pair.one_by_one.key_count() == 50);
  for (size_t i = 0; i < batch.size(); ++i) {
    KeySnapshot read;
    const Status status = pair.batched.Read(batch[i].key, {batch[i].algorithm, 0, 60'000}, &read);
    CHECK(status.ok() == (refused_batched.count(batch[i].key) == 0));
    if (status.ok()) CHECK(read.counts.current.Get(2) == (i % 100 < 20 ? 2 : 1));
  }
}

}  // namespace
}  // namespace tally
