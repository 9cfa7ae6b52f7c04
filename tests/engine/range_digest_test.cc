// Anti-entropy's ranges in the engine: versions, quiet, digests and the
// ranges' state (node/engine/limiter.h, node/engine/range_digest.h).
#include "node/engine/range_digest.h"

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "node/engine/key_table.h"
#include "node/engine/limiter.h"

namespace tally {
namespace {

constexpr int64_t kStartMs = 1'700'000'000'000 / 60'000 * 60'000;
constexpr uint64_t kSeed = 42;

Limiter::Options OptionsFor(NodeId node, const Clock* clock, int64_t max_delay_ms = 0) {
  Limiter::Options options{node, 100'000, clock};
  options.replicate = true;
  options.key_hash_seed = kSeed;
  options.gossip_max_delay_ms = max_delay_ms;
  return options;
}

// The range a key falls in, as the Limiter splits keys.
size_t RangeOf(const std::string& key) {
  const size_t hash = HashKey(key, kSeed);
  return ShardOfHash(hash) * kRangesPerShard + RangeOfHash(hash);
}

// Every range's digest at ref_ms.
std::vector<uint64_t> AllDigests(Limiter& limiter, int64_t ref_ms) {
  std::vector<uint64_t> digests(Limiter::range_count());
  for (size_t shard = 0; shard < Limiter::shard_count(); ++shard) {
    limiter.RangeDigests(shard, ref_ms,
                         std::span(digests).subspan(shard * kRangesPerShard, kRangesPerShard));
  }
  return digests;
}

// Merges everything `from` holds into `to`.
void SyncAll(Limiter& from, Limiter& to) {
  for (size_t shard = 0; shard < Limiter::shard_count(); ++shard) {
    from.CollectReplica(shard,
                        [&](const KeySnapshot& snapshot) { REQUIRE(to.Merge(snapshot).ok()); });
  }
}

const LimitSpec kSpecs[] = {{Algorithm::kFixedWindow, 50, 1'000},
                            {Algorithm::kSlidingWindowCounter, 50, 1'000},
                            {Algorithm::kSlidingWindowLog, 50, 1'000},
                            {Algorithm::kTokenBucket, 50, 4'000}};

// Two nodes that admitted on the same keys and exchanged everything hold
// equal digests in every range, for every algorithm (a bucket's slices
// folded at different times included), and still do when one of them
// computes them later for the same reference time.
TEST_CASE("range digests: converged replicas agree at a reference time, computed at any time") {
  ManualClock clock(kStartMs + 300);
  Limiter a(OptionsFor(1, &clock)), b(OptionsFor(2, &clock));
  Decision decision;
  for (int step = 0; step < 30; ++step) {
    for (int i = 0; i < 20; ++i) {
      const LimitSpec& spec = kSpecs[i % 4];
      Limiter& node = (i + step) % 3 == 0 ? b : a;
      REQUIRE(node.Check("key-" + std::to_string(i), spec, 1, &decision).ok());
    }
    clock.AdvanceMs(97);
    if (step % 10 == 9) SyncAll(a, b);  // b folds and rolls with part of a's history
  }
  SyncAll(a, b);
  SyncAll(b, a);
  const int64_t ref_ms = clock.WallMs();
  const std::vector<uint64_t> a_digests = AllDigests(a, ref_ms);
  CHECK(a_digests == AllDigests(b, ref_ms));
  CHECK(std::count(a_digests.begin(), a_digests.end(), 0) < Limiter::range_count() - 10);
  clock.AdvanceMs(5'000);  // windows ended, slices folded: nothing was rolled in the entries
  CHECK(AllDigests(a, ref_ms) == a_digests);
}

// A range one node lacks an admission of has another digest there (and only
// that range); sending that range alone (CollectRange) makes them agree at
// the next reference time. At the first, digests are computed once: the
// range that changed since says so.
TEST_CASE("range digests: the range a lost admission is in differs, and sending it repairs it") {
  ManualClock clock(kStartMs + 300);
  Limiter a(OptionsFor(1, &clock)), b(OptionsFor(2, &clock));
  Decision decision;
  for (const LimitSpec& spec : kSpecs) {
    for (int i = 0; i < 50; ++i)
      REQUIRE(a.Check(std::to_string(i) + "-k", spec, 1, &decision).ok());
    SyncAll(a, b);
    REQUIRE(a.Check("lost", spec, 1, &decision).ok());
    const int64_t ref_ms = clock.WallMs();
    const std::vector<uint64_t> a_digests = AllDigests(a, ref_ms);
    std::vector<uint64_t> b_digests = AllDigests(b, ref_ms);
    std::vector<size_t> differ;
    for (size_t range = 0; range < a_digests.size(); ++range) {
      if (a_digests[range] != b_digests[range]) differ.push_back(range);
    }
    REQUIRE(differ == std::vector<size_t>{RangeOf("lost")});
    a.CollectRange(differ[0],
                   [&](const KeySnapshot& snapshot) { REQUIRE(b.Merge(snapshot).ok()); });
    const size_t range = differ[0];
    uint64_t unused[kRangesPerShard];
    const uint64_t current = b.RangeDigests(range / kRangesPerShard, ref_ms, unused);
    CHECK((current >> (range % kRangesPerShard) & 1) == 0);
    CHECK(AllDigests(b, ref_ms + 1) == AllDigests(a, ref_ms + 1));
    clock.AdvanceMs(10'000);  // the next spec starts from nothing
  }
}

// CollectRange hands each live key of its range, and the ranges together
// hand every key CollectReplica does, each once.
TEST_CASE("range digests: the ranges split the keys") {
  ManualClock clock(kStartMs);
  Limiter a(OptionsFor(1, &clock));
  Decision decision;
  for (int i = 0; i < 2'000; ++i) {
    REQUIRE(a.Check("key-" + std::to_string(i), kSpecs[i % 4], 1, &decision).ok());
  }
  std::multiset<std::string> by_range;
  for (size_t range = 0; range < Limiter::range_count(); ++range) {
    a.CollectRange(range, [&](const KeySnapshot& snapshot) {
      CHECK(RangeOf(snapshot.key) == range);
      by_range.insert(snapshot.key);
    });
  }
  std::multiset<std::string> all;
  for (size_t shard = 0; shard < Limiter::shard_count(); ++shard) {
    a.CollectReplica(shard, [&](const KeySnapshot& snapshot) { all.insert(snapshot.key); });
  }
  CHECK(all.size() == 2'000);
  CHECK(by_range == all);
}

// A far admission that may wait its deferral (1 s here), and its relayer's
// hold as long again, keeps its range from being quiet for 2 s; a merge
// only for quiet_ms; a peek changes nothing.
TEST_CASE("range digests: a range is quiet once what changed it has had time to arrive") {
  ManualClock clock(kStartMs);
  Limiter a(OptionsFor(1, &clock, /*max_delay_ms=*/1'000));
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
  const size_t range = RangeOf("far");
  const auto state = [&](int64_t quiet_ms) {
    Limiter::RangeVersion versions[kRangesPerShard];
    a.RangeVersions(range / kRangesPerShard, quiet_ms, versions);
    return versions[range % kRangesPerShard];
  };
  const uint64_t initial = state(0).version;
  Decision decision;
  REQUIRE(a.Check("far", spec, 0, &decision).ok());  // a peek
  CHECK(state(0).version == initial);
  REQUIRE(a.Check("far", spec, 1, &decision).ok());
  const uint64_t admitted = state(0).version;
  CHECK(admitted != initial);
  clock.AdvanceMs(1'999);
  CHECK_FALSE(state(0).quiet);
  clock.AdvanceMs(1);
  CHECK(state(0).quiet);
  CHECK_FALSE(state(1).quiet);

  KeySnapshot merged;
  merged.key = "far";
  merged.algorithm = spec.algorithm;
  merged.window_ms = spec.window_ms;
  merged.counts.window_index = clock.WallMs() / 60'000;
  merged.counts.current.MergeSlot(7, 3);
  REQUIRE(a.Merge(merged).ok());
  CHECK(state(0).version != admitted);
  CHECK(state(0).quiet);
  CHECK_FALSE(state(200).quiet);
  clock.AdvanceMs(200);
  CHECK(state(200).quiet);
}

// A counting key's digest read from its entry equals the one its exported
// snapshot gives, whatever slots it holds (its own or not, peers' on either
// side of this node's id, windows with zero counts) and wherever the
// reference time falls from its window: a digest pass reads entries, and
// a node of an earlier build hashes snapshots.
TEST_CASE("range digests: a counter entry's digest equals its snapshot's") {
  constexpr NodeId kSelf = 5;
  constexpr uint64_t kWindowMs = 1'000;
  std::mt19937_64 random(7);
  for (int trial = 0; trial < 2'000; ++trial) {
    CounterEntry entry;
    entry.window_index = 100;
    entry.own_current = static_cast<uint32_t>(random() % 3);
    entry.own_previous = static_cast<uint32_t>(random() % 3);
    const int peers = static_cast<int>(random() % 6);
    for (int peer = 0; peer < peers; ++peer) {
      WindowCounts counts;
      counts.window_index = 100;
      const NodeId node = static_cast<NodeId>(1 + random() % 9);  // 5 is this node's own
      counts.current.MergeSlot(node, random() % 3);
      counts.previous.MergeSlot(node, random() % 3);
      MergeCounts(entry, kSelf, /*peers=*/8, counts);
    }
    const Algorithm algorithm =
        random() % 2 == 0 ? Algorithm::kFixedWindow : Algorithm::kSlidingWindowCounter;
    KeySnapshot snapshot;
    snapshot.algorithm = algorithm;
    snapshot.window_ms = kWindowMs;
    ExportCounts(entry, kSelf, &snapshot.counts);
    const uint64_t key_hash = random();
    for (const int64_t window : {98, 99, 100, 101, 102}) {
      const int64_t ref_ms = window * static_cast<int64_t>(kWindowMs) + 500;
      CAPTURE(trial);
      CAPTURE(window);
      CHECK(CounterDigest(algorithm, kWindowMs, entry, kSelf, key_hash, ref_ms) ==
            KeyDigest(snapshot, key_hash, ref_ms));
    }
  }
}

}  // namespace
}  // namespace tally
