// Unit tests of the limiter engine (node/engine/limiter.h) on a manual clock.
#include "node/engine/limiter.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

namespace tally {
namespace {

constexpr int64_t kMinuteMs = 60'000;
constexpr int64_t kStartMs = 1'700'000'000'000 / kMinuteMs * kMinuteMs;  // a 0:00

struct Fixture {
  explicit Fixture(size_t max_keys = 1'000'000, NodeId node_id = 1)
      : clock(kStartMs), limiter(Limiter::Options{node_id, max_keys, &clock}) {}

  Decision Check(std::string_view key, const LimitSpec& spec, uint64_t cost = 1) {
    Decision decision;
    const Status status = limiter.Check(key, spec, cost, &decision);
    REQUIRE_MESSAGE(status.ok(), status.ToString());
    return decision;
  }
  int Admitted(std::string_view key, const LimitSpec& spec, int requests) {
    int admitted = 0;
    for (int i = 0; i < requests; ++i) admitted += Check(key, spec).allowed ? 1 : 0;
    return admitted;
  }
  void At(int64_t offset_ms) { clock.AdvanceMs(kStartMs + offset_ms - clock.WallMs()); }

  ManualClock clock;
  Limiter limiter;
};

// CheckBatch decides exactly as Check one request after the other does: batches of every size
// (one, and longer than the prefetch pipeline), every algorithm, a key repeated within a batch,
// invalid keys and specs, and the key cap, which fails only the checks beyond it.
TEST_CASE("CheckBatch answers as Check does, request by request, in order") {
  std::mt19937_64 rng(16);
  Fixture batched(/*max_keys=*/150);
  Fixture one_by_one(/*max_keys=*/150);
  const LimitSpec specs[] = {{Algorithm::kFixedWindow, 3, kMinuteMs},
                             {Algorithm::kSlidingWindowLog, 3, kMinuteMs},
                             {Algorithm::kSlidingWindowCounter, 3, kMinuteMs},
                             {Algorithm::kTokenBucket, 3, kMinuteMs},
                             {Algorithm::kTokenBucket, 2, 1'000},
                             {Algorithm::kFixedWindow, 3, 0}};  // invalid: a window of 0
  std::vector<std::string> keys;
  for (int i = 0; i < 60; ++i) keys.push_back(std::to_string(i * 7919));
  keys.push_back("");  // invalid: empty
  int64_t elapsed_ms = 0;
  for (size_t size : {0, 1, 2, 5, 31, 32, 33, 100, 100, 100}) {
    CAPTURE(size);
    std::vector<Limiter::CheckRequest> requests;
    for (size_t i = 0; i < size; ++i) {
      requests.push_back({keys[rng() % keys.size()], specs[rng() % std::size(specs)], rng() % 3});
    }
    std::vector<Limiter::CheckResult> results(size);
    batched.limiter.CheckBatch(requests, results);
    for (size_t i = 0; i < size; ++i) {
      CAPTURE(i);
      Decision decision;
      const Status status =
          one_by_one.limiter.Check(requests[i].key, requests[i].spec, requests[i].cost, &decision);
      CHECK(results[i].status.code() == status.code());
      if (status.ok()) CHECK(results[i].decision == decision);
    }
    elapsed_ms += static_cast<int64_t>(rng() % 2'000);
    batched.At(elapsed_ms);
    one_by_one.At(elapsed_ms);
  }
  CHECK(batched.limiter.key_count() == one_by_one.limiter.key_count());
}

// The seed: 100/min, 100 requests at 0:59 and 100 at 1:00.
TEST_CASE("seed boundary scenario: what each algorithm admits") {
  struct Expect {
    Algorithm algorithm;
    int at_0_59, at_1_00, at_1_01;
  };
  // The fixed window leaks 200 within two seconds. The log holds the rolling
  // minute to 100. The counter at 1:00 weighs the previous minute fully (100,
  // so 0 more); at 1:01 it weighs it 59/60 = 98.3, so exactly 1 more fits.
  const Expect expectations[] = {{Algorithm::kFixedWindow, 100, 100, 0},
                                 {Algorithm::kSlidingWindowLog, 100, 0, 0},
                                 {Algorithm::kSlidingWindowCounter, 100, 0, 1}};
  for (const Expect& expect : expectations) {
    CAPTURE(AlgorithmName(expect.algorithm));
    Fixture f;
    const LimitSpec spec{expect.algorithm, 100, kMinuteMs};
    f.At(59'000);
    CHECK(f.Admitted("client", spec, 100) == expect.at_0_59);
    f.At(60'000);
    CHECK(f.Admitted("client", spec, 100) == expect.at_1_00);
    f.At(61'000);
    CHECK(f.Admitted("client", spec, 100) == expect.at_1_01);
  }
}

// Cloudflare's worked example through the engine: 50/min, 42 requests in the
// previous minute, 18 in this one, 15 s in: estimate 49.5, the next is denied.
TEST_CASE("sliding counter: Cloudflare's example end to end") {
  Fixture f;
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 50, kMinuteMs};
  f.At(30'000);
  CHECK(f.Admitted("zone", spec, 42) == 42);
  f.At(kMinuteMs + 15'000);
  CHECK(f.Admitted("zone", spec, 18) == 18);
  const Decision next = f.Check("zone", spec);
  CHECK_FALSE(next.allowed);
  CHECK(next.remaining == 0);
  CHECK(next.retry_after_ms == 715);
}

// The seed's bucket: a burst of 20 passes, the 21st waits 200 ms, and over a
// long run the rate is 5 per second.
TEST_CASE("token bucket: burst of capacity, then the refill rate") {
  Fixture f;
  const LimitSpec spec{Algorithm::kTokenBucket, 20, 4'000};  // 20 tokens, 5/s
  CHECK(f.Admitted("client", spec, 20) == 20);
  const Decision denied = f.Check("client", spec);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.retry_after_ms == 200);
  f.clock.AdvanceMs(199);
  CHECK_FALSE(f.Check("client", spec).allowed);
  f.clock.AdvanceMs(1);
  CHECK(f.Check("client", spec).allowed);
  // One attempt every 10 ms for 60 s: the empty bucket refills 5 per second.
  int admitted = 0;
  for (int i = 0; i < 6'000; ++i) {
    f.clock.AdvanceMs(10);
    admitted += f.Check("client", spec).allowed ? 1 : 0;
  }
  CHECK(admitted == 300);
}

// Bad keys and specs are errors that leave the decision and the state alone.
TEST_CASE("invalid input gets a clear error and changes nothing") {
  Fixture f;
  const LimitSpec good{Algorithm::kFixedWindow, 10, 1'000};
  Decision decision;
  decision.limit = 12345;
  CHECK(f.limiter.Check("", good, 1, &decision).code() == Status::Code::kInvalidArgument);
  CHECK(f.limiter.Check(std::string(kMaxKeyBytes + 1, 'k'), good, 1, &decision).code() ==
        Status::Code::kInvalidArgument);
  LimitSpec bad = good;
  bad.window_ms = 0;
  CHECK(f.limiter.Check("k", bad, 1, &decision).message() == "window_ms must be at least 1");
  bad.window_ms = kMaxWindowMs + 1;
  CHECK_FALSE(f.limiter.Check("k", bad, 1, &decision).ok());
  bad = good;
  bad.limit = kMaxLimit + 1;
  CHECK_FALSE(f.limiter.Check("k", bad, 1, &decision).ok());
  bad = good;
  bad.algorithm = static_cast<Algorithm>(9);
  CHECK(f.limiter.Check("k", bad, 1, &decision).ToString() ==
        "invalid argument: unknown algorithm 9");
  CHECK(decision.limit == 12345);
  CHECK(f.limiter.key_count() == 0);
  CHECK(f.Check(std::string(kMaxKeyBytes, 'k'), good).allowed);
}

// Peeks and denials consume nothing and create no key.
TEST_CASE("peeks and denials consume nothing") {
  for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                              Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket}) {
    CAPTURE(AlgorithmName(algorithm));
    Fixture f;
    const LimitSpec spec{algorithm, 5, 1'000};
    CHECK(f.Check("k", spec, 0).remaining == 5);
    CHECK(f.Check("k", spec, 6).never_allowed);
    CHECK(f.limiter.key_count() == 0);
    CHECK(f.Check("k", spec, 3).allowed);
    CHECK_FALSE(f.Check("k", spec, 3).allowed);
    for (int i = 0; i < 10; ++i) CHECK(f.Check("k", spec, 0).remaining == 2);
    CHECK(f.Check("k", spec, 2).allowed);
    CHECK(f.Check("k", spec, 0).remaining == 0);
    CHECK(f.limiter.key_count() == 1);
  }
}

// A fixed window ends exactly at a multiple of window_ms.
TEST_CASE("window boundaries at exact multiples") {
  Fixture f;
  const LimitSpec spec{Algorithm::kFixedWindow, 2, 1'000};
  f.At(999);
  CHECK(f.Admitted("k", spec, 3) == 2);
  CHECK(f.Check("k", spec).retry_after_ms == 1);
  f.At(1'000);
  CHECK(f.Admitted("k", spec, 3) == 2);
  const LimitSpec log{Algorithm::kSlidingWindowLog, 1, 1'000};
  f.At(5'000);
  CHECK(f.Check("log", log).allowed);
  f.At(5'999);
  CHECK(f.Check("log", log).retry_after_ms == 1);
  f.At(6'000);  // the entry at 5000 is out of (5000, 6000]
  CHECK(f.Check("log", log).allowed);
}

// With the clock standing still nothing refills, and a step back in wall time
// does not reopen a window: time is clamped so that it never moves backwards.
TEST_CASE("clock standing still and stepping back") {
  Fixture f;
  const LimitSpec bucket{Algorithm::kTokenBucket, 3, 3'000};
  const LimitSpec fixed{Algorithm::kFixedWindow, 3, 1'000};
  f.At(2'500);
  CHECK(f.Admitted("b", bucket, 10) == 3);
  CHECK(f.Admitted("f", fixed, 10) == 3);
  CHECK(f.Check("b", bucket).retry_after_ms == 1'000);
  f.clock.SetWallMs(kStartMs + 1'500);  // back by a second: an earlier window
  CHECK(f.Admitted("f", fixed, 10) == 0);
  CHECK(f.Admitted("b", bucket, 10) == 0);
  f.clock.SetWallMs(kStartMs + 3'000);  // the clamp lets time resume from 2500
  CHECK(f.Admitted("f", fixed, 10) == 3);
  CHECK(f.Check("b", bucket).retry_after_ms == 500);
}

// Many threads on one key: every admission is counted, none is lost.
TEST_CASE("concurrent checks on one key lose no update") {
  for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                              Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket}) {
    CAPTURE(AlgorithmName(algorithm));
    Fixture f;
    const LimitSpec spec{algorithm, 5'000, kMinuteMs};
    std::atomic<int> admitted{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 3'000; ++i) {
          Decision decision;
          if (f.limiter.Check("hot", spec, 1, &decision).ok() && decision.allowed) ++admitted;
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    CHECK(admitted.load() == 5'000);
    CHECK(f.Check("hot", spec, 0).remaining == 0);
  }
}

// Limits with another window or algorithm are separate; another limit value
// on the same (key, algorithm, window) shares the counts.
TEST_CASE("a limit is identified by key, algorithm and window") {
  Fixture f;
  const LimitSpec per_second{Algorithm::kFixedWindow, 5, 1'000};
  const LimitSpec per_minute{Algorithm::kFixedWindow, 5, kMinuteMs};
  const LimitSpec stricter{Algorithm::kFixedWindow, 3, 1'000};
  CHECK(f.Admitted("k", per_second, 4) == 4);
  CHECK(f.Check("k", per_minute, 0).remaining == 5);
  CHECK_FALSE(f.Check("k", stricter).allowed);
  CHECK(f.Check("k", per_second).allowed);
  const std::string long_key(100, 'x');
  CHECK(f.Admitted(long_key, per_second, 6) == 5);
  CHECK(f.Admitted(long_key + "y", per_second, 6) == 5);
}

// At max_keys a new key is refused with ResourceExhausted; held keys still
// work, and keys freed by expiry make room again.
TEST_CASE("key cap: refuse new keys, keep serving held ones") {
  Fixture f(/*max_keys=*/10);
  const LimitSpec spec{Algorithm::kFixedWindow, 5, 1'000};
  for (int i = 0; i < 10; ++i) CHECK(f.Check("key" + std::to_string(i), spec).allowed);
  Decision decision;
  const Status refused = f.limiter.Check("key10", spec, 1, &decision);
  CHECK(refused.code() == Status::Code::kResourceExhausted);
  CHECK(f.limiter.key_count() == 10);
  CHECK(f.Check("key3", spec).allowed);
  CHECK(f.Check("key10", spec, 0).allowed);  // a peek needs no key
  f.clock.AdvanceMs(1'000);                  // every window has ended
  CHECK(f.Check("key10", spec).allowed);
  CHECK(f.limiter.key_count() == 1);
}

// Under key churn the engine holds about the live keys, not every key seen.
TEST_CASE("memory stays bounded under key churn") {
  for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                              Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket}) {
    CAPTURE(AlgorithmName(algorithm));
    Fixture f;
    const LimitSpec spec{algorithm, 10, 100};
    size_t most_keys = 0;
    for (int window = 0; window < 200; ++window) {  // 200 windows of 500 fresh keys
      for (int i = 0; i < 500; ++i) f.Check(std::to_string(window) + ":" + std::to_string(i), spec);
      most_keys = std::max(most_keys, f.limiter.key_count());
      f.clock.AdvanceMs(100);
    }
    // Live: at most two windows' keys (1000); incremental sweeping keeps the
    // rest to within about as many again. 100,000 keys were created.
    CHECK(most_keys <= 2'500);
    f.clock.AdvanceMs(1'000);
    f.limiter.SweepExpired();
    CHECK(f.limiter.key_count() == 0);
  }
}

// Limiter::Merge and Read for the counts of one counting key.
Status MergeCounts(Limiter& limiter, std::string_view key, const LimitSpec& spec,
                   const WindowCounts& counts) {
  KeySnapshot snapshot;
  snapshot.key.assign(key);
  snapshot.algorithm = spec.algorithm;
  snapshot.window_ms = spec.window_ms;
  snapshot.counts = counts;
  return limiter.Merge(snapshot);
}
Status ReadCounts(Limiter& limiter, std::string_view key, const LimitSpec& spec,
                  WindowCounts* counts) {
  KeySnapshot snapshot;
  const Status status = limiter.Read(key, spec, &snapshot);
  *counts = snapshot.counts;
  return status;
}

// A log snapshot of one key with the given nodes' stamps.
KeySnapshot LogOf(std::string key, uint64_t window_ms, std::vector<NodeStamps> log) {
  KeySnapshot snapshot;
  snapshot.key = std::move(key);
  snapshot.algorithm = Algorithm::kSlidingWindowLog;
  snapshot.window_ms = window_ms;
  snapshot.log = std::move(log);
  return snapshot;
}

// A bucket snapshot holding `cost` admitted by `node` at at_ms (capacity 100).
KeySnapshot BucketOf(std::string key, uint64_t window_ms, NodeId node, int64_t at_ms,
                     uint64_t cost) {
  KeySnapshot snapshot;
  snapshot.key = std::move(key);
  snapshot.algorithm = Algorithm::kTokenBucket;
  snapshot.window_ms = window_ms;
  const int64_t slice = BucketSliceAt(window_ms, at_ms);
  snapshot.bucket.capacity = 100;
  snapshot.bucket.base_slice = BucketBaseFor(slice);
  AddToBucket(snapshot.bucket, node, slice, cost);
  return snapshot;
}

// A peer's bucket slices count against this node's bucket, the own slot
// recovers from a peer's copy, replays change nothing and slices from more
// than a period ahead are refused.
TEST_CASE("merge bucket slices from replicas") {
  Fixture f(1'000'000, /*node_id=*/1);
  const LimitSpec spec{Algorithm::kTokenBucket, 100, 3'200};  // 100 ms slices
  const int64_t now = f.clock.WallMs();
  REQUIRE(f.limiter.Merge(BucketOf("k", 3'200, 2, now, 30)).ok());
  CHECK(f.Check("k", spec, 0).remaining == 70);
  REQUIRE(f.limiter.Merge(BucketOf("k", 3'200, 2, now, 30)).ok());  // a replay
  REQUIRE(f.limiter.Merge(BucketOf("k", 3'200, 2, now, 10)).ok());  // an older copy
  CHECK(f.Check("k", spec, 0).remaining == 70);
  // Node 1's own slot, as a peer holds it after this node lost it: recovered.
  REQUIRE(f.limiter.Merge(BucketOf("k", 3'200, 1, now, 20)).ok());
  CHECK(f.Check("k", spec, 5).remaining == 45);  // 30 + 20 + 5 taken
  KeySnapshot read;
  REQUIRE(f.limiter.Read("k", spec, &read).ok());
  REQUIRE(read.bucket.nodes.size() == 2);
  CHECK(read.bucket.nodes[0].counts.back() == 25);
  // A whole window later the bucket is full again, and the key forgotten.
  f.clock.AdvanceMs(3'200);
  CHECK(f.Check("k", spec, 0).remaining == 100);
  CHECK(f.limiter.Read("k", spec, &read).code() == Status::Code::kNotFound);
  CHECK(f.limiter.Merge(BucketOf("k", 3'200, 2, now + 10'000, 1)).code() ==
        Status::Code::kInvalidArgument);
  // Nor from before the epoch (a fuzzer's find: the base's time overflowed).
  KeySnapshot ancient = BucketOf("k", 3'200, 2, now, 1);
  ancient.bucket.base_slice = -562'949'953'421'314;
  CHECK(f.limiter.Merge(ancient).code() == Status::Code::kInvalidArgument);
}

// Merging a replica's counts: remote slots count against the limit, the own
// slot recovers from a peer's copy, and replays or stale windows change nothing.
TEST_CASE("merge counts from replicas") {
  Fixture f(1'000'000, /*node_id=*/1);
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 100, 1'000};
  f.At(10'500);
  CHECK(f.Check("k", spec, 10).allowed);
  WindowCounts peer;
  peer.window_index = (kStartMs + 10'500) / 1'000;
  peer.current.MergeSlot(2, 30);
  peer.current.MergeSlot(1, 25);  // a peer saw more of our own slot than we hold
  peer.previous.MergeSlot(3, 40);
  REQUIRE(MergeCounts(f.limiter, "k", spec, peer).ok());
  REQUIRE(MergeCounts(f.limiter, "k", spec, peer).ok());  // replay: idempotent
  // 25 + 30 + 40 * 0.5 = 75 used.
  CHECK(f.Check("k", spec, 0).remaining == 25);
  WindowCounts read;
  REQUIRE(ReadCounts(f.limiter, "k", spec, &read).ok());
  CHECK(read.current.Get(1) == 25);
  CHECK(read.current.Sum() == 55);
  CHECK(read.previous.Sum() == 40);
  // A lower, older copy of a slot never lowers it.
  WindowCounts stale = peer;
  stale.current = GCounter();
  stale.current.MergeSlot(2, 5);
  REQUIRE(MergeCounts(f.limiter, "k", spec, stale).ok());
  CHECK(f.Check("k", spec, 0).remaining == 25);
  // Counts of an expired window are ignored; counts from the far future refused.
  stale.window_index -= 5;
  REQUIRE(MergeCounts(f.limiter, "k", spec, stale).ok());
  CHECK(f.Check("k", spec, 0).remaining == 25);
  // Even one at the far end of time (a fuzzer's find: the distance overflowed).
  WindowCounts ancient = stale;
  ancient.window_index = INT64_MIN + 214;
  REQUIRE(MergeCounts(f.limiter, "k", spec, ancient).ok());
  CHECK(f.Check("k", spec, 0).remaining == 25);
  stale.window_index += 10;
  CHECK(MergeCounts(f.limiter, "k", spec, stale).code() == Status::Code::kInvalidArgument);
  CHECK(ReadCounts(f.limiter, "nokey", spec, &read).code() == Status::Code::kNotFound);
}

// Counts merged for a key this node has never seen create it; next window
// they become the previous window's counts.
TEST_CASE("merge creates a key and rolls with the windows") {
  Fixture f;
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 10, 1'000};
  WindowCounts peer;
  peer.window_index = kStartMs / 1'000;
  peer.current.MergeSlot(7, 10);
  REQUIRE(MergeCounts(f.limiter, "new", spec, peer).ok());
  CHECK(f.limiter.key_count() == 1);
  CHECK_FALSE(f.Check("new", spec).allowed);
  f.At(1'500);  // previous window weighs half: 5 used
  CHECK(f.Check("new", spec, 0).remaining == 5);
}

}  // namespace
}  // namespace tally

namespace tally {
namespace {

// What CollectChanges (or, with all, CollectAll) hands over, copied.
std::vector<KeySnapshot> Collect(Limiter& limiter, bool all = false) {
  std::vector<KeySnapshot> collected;
  const auto sink = [&](const KeySnapshot& snapshot) { collected.push_back(snapshot); };
  all ? limiter.CollectAll(sink) : limiter.CollectChanges(sink);
  return collected;
}

// What CollectChanges without the peers' changes hands over: the keys.
std::vector<std::string> CollectOwnChanges(Limiter& limiter) {
  std::vector<std::string> keys;
  limiter.CollectChanges([&](const KeySnapshot& snapshot) { keys.push_back(snapshot.key); },
                         /*with_peer_changes=*/false);
  std::sort(keys.begin(), keys.end());
  return keys;
}

// With change tracking, each changed key is reported once per collection,
// with its current state; without it, nothing is recorded.
TEST_CASE("collect changes reports each changed key once") {
  ManualClock clock(kStartMs);
  Limiter tracked(Limiter::Options{1, 1'000, &clock, /*track_changes=*/true});
  Limiter untracked(Limiter::Options{1, 1'000, &clock, /*track_changes=*/false});
  const LimitSpec spec{Algorithm::kFixedWindow, 10, 1'000};
  Decision decision;
  for (Limiter* limiter : {&tracked, &untracked}) {
    for (int i = 0; i < 3; ++i) REQUIRE(limiter->Check("a", spec, 1, &decision).ok());
    REQUIRE(limiter->Check("b", spec, 2, &decision).ok());
    REQUIRE(limiter->Check("c", spec, 0, &decision).ok());  // a peek changes nothing
  }
  std::vector<KeySnapshot> changes = Collect(tracked);
  REQUIRE(changes.size() == 2);
  std::sort(changes.begin(), changes.end(),
            [](const KeySnapshot& x, const KeySnapshot& y) { return x.key < y.key; });
  CHECK(changes[0].key == "a");
  CHECK(changes[0].counts.current.Get(1) == 3);
  CHECK(changes[1].counts.current.Get(1) == 2);
  CHECK(Collect(tracked).empty());
  CHECK(Collect(untracked).empty());
}

// An entry freed and reused by another key since the last collection is
// reported once, as the new key; a key changed again after a collection is
// reported again.
TEST_CASE("collect changes survives freed and reused entries") {
  ManualClock clock(kStartMs);
  Limiter limiter(Limiter::Options{1, 1'000, &clock, /*track_changes=*/true});
  const LimitSpec spec{Algorithm::kFixedWindow, 10, 1'000};
  Decision decision;
  REQUIRE(limiter.Check("old", spec, 1, &decision).ok());
  clock.AdvanceMs(2'000);
  REQUIRE(limiter.SweepExpired() == 1);
  REQUIRE(limiter.Check("new", spec, 1, &decision).ok());  // takes the freed slot
  std::vector<KeySnapshot> changes = Collect(limiter);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].key == "new");
  REQUIRE(limiter.Check("new", spec, 1, &decision).ok());
  changes = Collect(limiter);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].counts.current.Get(1) == 2);
}

// A merge that changes only peers' slots of a counter waits for a collection
// with the peers' changes (once, whatever merges came since); one that gives
// back this node's own slot, or an admission here, is collected at once, with
// every slot, and then nothing waits.
TEST_CASE("peers' slots alone are collected only with the peer changes") {
  ManualClock clock(kStartMs);
  Limiter limiter(Limiter::Options{1, 1'000, &clock, /*track_changes=*/true});
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 100, 1'000};
  WindowCounts peer;
  peer.window_index = kStartMs / 1'000;
  peer.current.MergeSlot(2, 5);
  REQUIRE(MergeCounts(limiter, "peers", spec, peer).ok());
  REQUIRE(MergeCounts(limiter, "admitted", spec, peer).ok());
  peer.current.MergeSlot(2, 7);
  REQUIRE(MergeCounts(limiter, "peers", spec, peer).ok());
  WindowCounts own = peer;
  own.current.MergeSlot(1, 4);  // what a peer holds of this node's slot
  REQUIRE(MergeCounts(limiter, "own", spec, own).ok());
  Decision decision;
  REQUIRE(limiter.Check("admitted", spec, 1, &decision).ok());
  // Own slots changed on "own" (by the merge) and "admitted" (by a check).
  CHECK(CollectOwnChanges(limiter) == std::vector<std::string>{"admitted", "own"});
  CHECK(CollectOwnChanges(limiter).empty());
  const std::vector<KeySnapshot> with_peers = Collect(limiter);
  REQUIRE(with_peers.size() == 1);
  CHECK(with_peers[0].key == "peers");
  CHECK(with_peers[0].counts.current.Get(2) == 7);
  CHECK(Collect(limiter).empty());
  // A peer's merge on a key this node then admits to goes with the admission.
  peer.current.MergeSlot(2, 9);
  REQUIRE(MergeCounts(limiter, "admitted", spec, peer).ok());
  REQUIRE(limiter.Check("admitted", spec, 1, &decision).ok());
  const std::vector<KeySnapshot> admitted = Collect(limiter);
  REQUIRE(admitted.size() == 1);
  CHECK(admitted[0].counts.current.Get(2) == 9);
  CHECK(admitted[0].counts.current.Get(1) == 2);
  // A checkpoint takes what waits: nothing is left for the next collection.
  peer.current.MergeSlot(2, 11);
  REQUIRE(MergeCounts(limiter, "peers", spec, peer).ok());
  CHECK(Collect(limiter, /*all=*/true).size() == 3);
  CHECK(Collect(limiter).empty());
}

// A limiter that tracks changes, and a limit whose headroom share on one member is 100.
struct TrackedLimiter {
  ManualClock clock{kStartMs};
  Limiter limiter{Limiter::Options{1, 1'000, &clock, /*track_changes=*/true}};
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 3'200, 1'000};
  Decision decision;
};

// Peers' slots of a key this node admits to are not written while they stay
// within a headroom share (limit / 32 on one member) of the smallest limit it
// admitted by in the class; past it, on a key it never admitted to, or while
// its own slots may still hold counts restored from disk, they are.
TEST_CASE_FIXTURE(TrackedLimiter,
                  "peers' slots of a key far from its limit wait for its next own change") {
  REQUIRE(limiter.Check("far", spec, 1, &decision).ok());
  REQUIRE(Collect(limiter).size() == 1);
  WindowCounts peer;
  peer.window_index = kStartMs / 1'000;
  peer.current.MergeSlot(2, 60);
  peer.previous.MergeSlot(2, 40);
  REQUIRE(MergeCounts(limiter, "far", spec, peer).ok());
  REQUIRE(MergeCounts(limiter, "never admitted here", spec, peer).ok());
  std::vector<KeySnapshot> collected = Collect(limiter);
  REQUIRE(collected.size() == 1);
  CHECK(collected[0].key == "never admitted here");
  // One more past the share: written, with every slot.
  peer.current.MergeSlot(2, 61);
  REQUIRE(MergeCounts(limiter, "far", spec, peer).ok());
  collected = Collect(limiter);
  REQUIRE(collected.size() == 1);
  CHECK(collected[0].counts.current.Get(2) == 61);
  CHECK(collected[0].counts.current.Get(1) == 1);
  // A smaller limit admitted by in the class lowers the share of every key in it.
  REQUIRE(limiter.Check("near", LimitSpec{spec.algorithm, 320, spec.window_ms}, 1, &decision).ok());
  REQUIRE(Collect(limiter).size() == 1);
  WindowCounts small;
  small.window_index = peer.window_index;
  small.current.MergeSlot(3, 11);  // over 320 / 32 with the others
  REQUIRE(MergeCounts(limiter, "far", spec, small).ok());
  CHECK(Collect(limiter).size() == 1);
  // Own slots restored from disk may count admissions by any limit: until
  // two windows later, peers' slots of every key of the class are written.
  Limiter restarted(Limiter::Options{1, 1'000, &clock, /*track_changes=*/true});
  KeySnapshot stored;
  stored.key = "stored";
  stored.algorithm = spec.algorithm;
  stored.window_ms = spec.window_ms;
  stored.counts.window_index = peer.window_index;
  stored.counts.current.MergeSlot(1, 5);
  REQUIRE(restarted.Restore(stored).ok());
  REQUIRE(restarted.Check("stored", spec, 1, &decision).ok());
  REQUIRE(Collect(restarted).size() == 1);
  WindowCounts one;
  one.window_index = peer.window_index;
  one.current.MergeSlot(2, 1);
  REQUIRE(MergeCounts(restarted, "stored", spec, one).ok());
  CHECK(Collect(restarted).size() == 1);
  clock.AdvanceMs(2'000);
  REQUIRE(restarted.Check("stored", spec, 1, &decision).ok());
  REQUIRE(Collect(restarted).size() == 1);
  one.window_index += 2;
  REQUIRE(MergeCounts(restarted, "stored", spec, one).ok());
  CHECK(Collect(restarted).empty());
}

// A peer's counts of the next window (its clock a little ahead) move a key on,
// which rolls its own slots: no restore. So that key is not written again, and
// peers' slots of keys far from their limits still wait.
TEST_CASE_FIXTURE(TrackedLimiter, "a peer's next window restores nothing") {
  REQUIRE(limiter.Check("ahead", spec, 1, &decision).ok());
  REQUIRE(limiter.Check("far", spec, 1, &decision).ok());
  REQUIRE(Collect(limiter).size() == 2);
  WindowCounts next;
  next.window_index = kStartMs / 1'000 + 1;
  next.current.MergeSlot(2, 3);
  REQUIRE(MergeCounts(limiter, "ahead", spec, next).ok());
  WindowCounts peer;
  peer.window_index = kStartMs / 1'000;
  peer.current.MergeSlot(2, 5);
  REQUIRE(MergeCounts(limiter, "far", spec, peer).ok());
  CHECK(Collect(limiter).empty());
  // Its own slot rolled into the previous window, the peer's in the current one.
  KeySnapshot read;
  REQUIRE(limiter.Read("ahead", spec, &read).ok());
  CHECK(read.counts.window_index == next.window_index);
  CHECK(read.counts.previous.Get(1) == 1);
  CHECK(read.counts.current.Get(2) == 3);
}

// CollectAll snapshots every live key of every algorithm, leaves out expired
// ones, and leaves nothing to CollectChanges.
TEST_CASE("collect all snapshots every live key and clears the changes") {
  ManualClock clock(kStartMs);
  Limiter limiter(Limiter::Options{1, 1'000, &clock, /*track_changes=*/true});
  Decision decision;
  for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                              Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket}) {
    REQUIRE(limiter.Check("live", LimitSpec{algorithm, 10, 60'000}, 1, &decision).ok());
  }
  REQUIRE(
      limiter.Check("expiring", LimitSpec{Algorithm::kFixedWindow, 10, 1'000}, 1, &decision).ok());
  REQUIRE(Collect(limiter).size() == 5);
  REQUIRE(limiter.Check("live", LimitSpec{Algorithm::kFixedWindow, 10, 60'000}, 1, &decision).ok());
  clock.AdvanceMs(1'000);
  const std::vector<KeySnapshot> all = Collect(limiter, /*all=*/true);
  CHECK(all.size() == 4);
  for (const KeySnapshot& snapshot : all) CHECK(snapshot.key == "live");
  CHECK(Collect(limiter).empty());
}

// Snapshots restored into a fresh limiter reproduce every algorithm's state:
// the same requests get the same decisions.
TEST_CASE("restore reproduces the state of every algorithm") {
  for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                              Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket}) {
    CAPTURE(AlgorithmName(algorithm));
    ManualClock clock(kStartMs + 500);
    Limiter original(Limiter::Options{7, 1'000, &clock, true});
    const LimitSpec spec{algorithm, 20, 1'000};
    Decision decision;
    for (int i = 0; i < 12; ++i) {
      REQUIRE(original.Check("k", spec, 1, &decision).ok());
      clock.AdvanceMs(37);
    }
    const std::vector<KeySnapshot> snapshots = Collect(original);
    REQUIRE(snapshots.size() == 1);
    Limiter restored(Limiter::Options{7, 1'000, &clock, true});
    REQUIRE(restored.Restore(snapshots[0]).ok());
    CHECK(Collect(restored).empty());  // restoring is not a change
    for (int i = 0; i < 15; ++i) {
      Decision expected, actual;
      REQUIRE(original.Check("k", spec, 1, &expected).ok());
      REQUIRE(restored.Check("k", spec, 1, &actual).ok());
      CHECK(actual == expected);
      clock.AdvanceMs(53);
    }
  }
}

// Restoring takes the max with what a counting key holds, and an expired
// snapshot is ignored.
TEST_CASE("restore never lowers a count and ignores expired state") {
  ManualClock clock(kStartMs);
  Limiter limiter(Limiter::Options{1, 1'000, &clock});
  const LimitSpec spec{Algorithm::kFixedWindow, 100, 1'000};
  Decision decision;
  REQUIRE(limiter.Check("k", spec, 30, &decision).ok());
  KeySnapshot snapshot;
  snapshot.key = "k";
  snapshot.algorithm = spec.algorithm;
  snapshot.window_ms = spec.window_ms;
  snapshot.counts.window_index = kStartMs / 1'000;
  snapshot.counts.current.MergeSlot(1, 10);  // older than what the node holds
  REQUIRE(limiter.Restore(snapshot).ok());
  CHECK(limiter.Check("k", spec, 0, &decision).ok());
  CHECK(decision.remaining == 70);
  snapshot.key = "old";
  snapshot.counts.window_index -= 1;  // its window has ended
  REQUIRE(limiter.Restore(snapshot).ok());
  CHECK(limiter.key_count() == 1);
}

// Merging a replica's log: remote stamps count against the limit and decide
// retry_after, our own stamps recover from a peer's copy, replays change
// nothing, stamps out of order are refused, and the token bucket stays local.
TEST_CASE("merge log stamps from replicas") {
  Fixture f(1'000'000, /*node_id=*/1);
  const LimitSpec spec{Algorithm::kSlidingWindowLog, 10, 1'000};
  f.At(10'000);
  CHECK(f.Check("k", spec, 2).allowed);
  const int64_t now = kStartMs + 10'000;
  const KeySnapshot peer = LogOf("k", 1'000,
                                 {{1, {{now - 100, 1}, {now, 3}}},  // ours: 3 > 2
                                  {2, {{now - 500, 4}, {now - 10, 1}}}});
  REQUIRE(f.limiter.Merge(peer).ok());
  REQUIRE(f.limiter.Merge(peer).ok());  // replay: idempotent
  // 1 + 3 (own, recovered) + 4 + 1 (node 2) = 9 of 10.
  Decision decision = f.Check("k", spec, 0);
  CHECK(decision.remaining == 1);
  decision = f.Check("k", spec, 3);
  CHECK_FALSE(decision.allowed);
  CHECK(decision.retry_after_ms == 500);  // node 2's 4 at now-500 leave the window first
  KeySnapshot read;
  REQUIRE(f.limiter.Read("k", spec, &read).ok());
  REQUIRE(read.log.size() == 2);
  CHECK(read.log == peer.log);
  // Out of order, unordered nodes, and node 0 are refused; expired stamps ignored.
  CHECK(f.limiter.Merge(LogOf("k", 1'000, {{2, {{now, 1}, {now - 1, 1}}}})).code() ==
        Status::Code::kInvalidArgument);
  CHECK(f.limiter.Merge(LogOf("k", 1'000, {{3, {}}, {2, {}}})).code() ==
        Status::Code::kInvalidArgument);
  CHECK(f.limiter.Merge(LogOf("k", 1'000, {{0, {{now, 1}}}})).code() ==
        Status::Code::kInvalidArgument);
  REQUIRE(f.limiter.Merge(LogOf("k", 1'000, {{3, {{now - 1'000, 5}}}})).ok());
  CHECK(f.Check("k", spec, 0).remaining == 1);
}

// Gossip deltas carry only this node's own contribution of each key admitted
// to since the last collection, once; a merged peer state is not relayed.
TEST_CASE("collect gossip hands over own changes once and relays nothing") {
  ManualClock clock(kStartMs);
  Limiter::Options options{5, 1'000, &clock};
  options.replicate = true;
  Limiter limiter(options);
  const LimitSpec counter{Algorithm::kSlidingWindowCounter, 100, 1'000};
  const LimitSpec log{Algorithm::kSlidingWindowLog, 100, 1'000};
  const LimitSpec bucket{Algorithm::kTokenBucket, 100, 1'000};
  Decision decision;
  REQUIRE(limiter.Check("c", counter, 3, &decision).ok());
  REQUIRE(limiter.Check("l", log, 2, &decision).ok());
  clock.AdvanceMs(5);
  REQUIRE(limiter.Check("l", log, 1, &decision).ok());
  REQUIRE(limiter.Check("b", bucket, 1, &decision).ok());
  WindowCounts peer;
  peer.window_index = kStartMs / 1'000;
  peer.current.MergeSlot(9, 50);
  REQUIRE(MergeCounts(limiter, "c", counter, peer).ok());
  REQUIRE(limiter.Merge(LogOf("other", 1'000, {{9, {{kStartMs, 1}}}})).ok());

  std::vector<KeySnapshot> deltas;
  const auto collect = [&] {
    deltas.clear();
    limiter.CollectGossip([&](const KeySnapshot& s) { deltas.push_back(s); });
    std::sort(deltas.begin(), deltas.end(),
              [](const KeySnapshot& a, const KeySnapshot& b) { return a.key < b.key; });
  };
  REQUIRE(limiter.Merge(BucketOf("b", 1'000, 9, kStartMs, 7)).ok());
  collect();
  REQUIRE(deltas.size() == 3);
  CHECK(deltas[0].key == "b");  // this node's slices only, asserting no debt
  REQUIRE(deltas[0].bucket.nodes.size() == 1);
  CHECK(deltas[0].bucket.nodes[0].node == 5);
  CHECK(deltas[0].bucket.base_debt == 0);
  CHECK(deltas[1].key == "c");
  CHECK(deltas[1].counts.current.slots() == std::vector<GCounter::Slot>{{5, 3}});  // not node 9's
  CHECK(deltas[2].key == "l");
  CHECK(deltas[2].log == std::vector<NodeStamps>{{5, {{kStartMs, 2}, {kStartMs + 5, 1}}}});
  collect();
  CHECK(deltas.empty());
  // The next delta of the log starts at the last stamp sent, whose cost may grow.
  REQUIRE(limiter.Check("l", log, 4, &decision).ok());
  collect();
  REQUIRE(deltas.size() == 1);
  CHECK(deltas[0].log == std::vector<NodeStamps>{{5, {{kStartMs + 5, 5}}}});
}

// Two replicating limiters, nodes 1 and 2, on one manual clock, and a spec of each algorithm.
struct TwoReplicas {
  static Limiter::Options OptionsFor(NodeId node, const Clock* clock) {
    Limiter::Options options{node, 1'000, clock};
    options.replicate = true;
    return options;
  }

  ManualClock clock{kStartMs + 300};
  Limiter source{OptionsFor(1, &clock)};
  Limiter target{OptionsFor(2, &clock)};
  const LimitSpec specs[4] = {{Algorithm::kFixedWindow, 50, 1'000},
                              {Algorithm::kSlidingWindowCounter, 50, 1'000},
                              {Algorithm::kSlidingWindowLog, 50, 1'000},
                              {Algorithm::kTokenBucket, 50, 3'600'000}};
};

// Anti-entropy hands over every node's state of every live replicated key,
// shard by shard, and a limiter that merges it all decides the same.
TEST_CASE("collect replica carries every node's state to another limiter") {
  TwoReplicas replicas;
  ManualClock& clock = replicas.clock;
  Limiter& source = replicas.source;
  Limiter& target = replicas.target;
  const auto& specs = replicas.specs;
  Decision decision;
  for (int i = 0; i < 40; ++i) {
    for (const LimitSpec& spec : specs) {
      REQUIRE(source.Check("key" + std::to_string(i % 7), spec, 1, &decision).ok());
    }
    clock.AdvanceMs(29);
  }
  REQUIRE(source.Merge(LogOf("key0", 1'000, {{3, {{clock.WallMs() - 1, 2}}}})).ok());
  size_t handed = 0;
  for (size_t shard = 0; shard < Limiter::shard_count(); ++shard) {
    source.CollectReplica(shard, [&](const KeySnapshot& snapshot) {
      ++handed;
      REQUIRE(target.Merge(snapshot).ok());
    });
  }
  CHECK(handed == 7 * 4);
  for (int i = 0; i < 7; ++i) {
    for (const LimitSpec& spec : specs) {
      KeySnapshot want, got;
      REQUIRE(source.Read("key" + std::to_string(i), spec, &want).ok());
      REQUIRE(target.Read("key" + std::to_string(i), spec, &got).ok());
      CHECK(got.counts == want.counts);
      CHECK(got.log == want.log);
      CHECK(got.bucket == want.bucket);
    }
  }
}

// A range's version moves when its replicated state gains something (a check that
// costs, a merge that raises a count) and not when a merge brings nothing new or a check
// costs nothing, for every algorithm: anti-entropy skips what did not move.
TEST_CASE("range versions move with what a peer may lack, not with repeats") {
  TwoReplicas replicas;
  Limiter& source = replicas.source;
  Limiter& target = replicas.target;
  const auto& specs = replicas.specs;
  const auto versions = [](Limiter& limiter) {
    std::vector<uint64_t> all;
    Limiter::RangeVersion shard_versions[kRangesPerShard];
    for (size_t shard = 0; shard < Limiter::shard_count(); ++shard) {
      limiter.RangeVersions(shard, 0, shard_versions);
      for (const Limiter::RangeVersion& range : shard_versions) all.push_back(range.version);
    }
    return all;
  };
  const auto sync = [&] {
    for (size_t shard = 0; shard < Limiter::shard_count(); ++shard) {
      source.CollectReplica(
          shard, [&](const KeySnapshot& snapshot) { REQUIRE(target.Merge(snapshot).ok()); });
    }
  };
  for (const LimitSpec& spec : specs) {
    Decision decision;
    const std::vector<uint64_t> before = versions(source);
    REQUIRE(source.Check("k", spec, 0, &decision).ok());  // a peek
    CHECK(versions(source) == before);
    REQUIRE(source.Check("k", spec, 1, &decision).ok());
    CHECK(versions(source) != before);

    const std::vector<uint64_t> target_before = versions(target);
    sync();  // brings the admission: the target's version moves
    CHECK(versions(target) != target_before);
    const std::vector<uint64_t> target_synced = versions(target);
    sync();  // the same state again: nothing new
    CHECK(versions(target) == target_synced);
  }
}

// Read answers the token bucket with this node's level and refill time
// (token-ms, as decide.h keeps it); a bucket never drawn from is NotFound.
TEST_CASE("read gives the token bucket's level on this node") {
  Fixture f;
  const LimitSpec bucket{Algorithm::kTokenBucket, 20, 4'000};
  KeySnapshot snapshot;
  CHECK(f.limiter.Read("b", bucket, &snapshot).code() == Status::Code::kNotFound);
  f.Check("b", bucket, 5);
  REQUIRE(f.limiter.Read("b", bucket, &snapshot).ok());
  CHECK(snapshot.algorithm == Algorithm::kTokenBucket);
  CHECK(snapshot.bucket_level == 15 * 4'000);
  CHECK(snapshot.bucket_level_at_ms == kStartMs);
}

// Erase forgets one limit of a key (other algorithms and windows of the same
// key stay), frees its room under max_keys, counts itself in erasures(), and
// the next check starts from nothing.
TEST_CASE("erase forgets one limit of a key and frees its room") {
  Fixture f(/*max_keys=*/2);
  const LimitSpec minute{Algorithm::kFixedWindow, 3, kMinuteMs};
  const LimitSpec log{Algorithm::kSlidingWindowLog, 3, kMinuteMs};
  CHECK(f.Admitted("k", minute, 5) == 3);
  CHECK(f.Admitted("k", log, 5) == 3);
  Decision decision;
  CHECK(f.limiter.Check("other", minute, 1, &decision).code() == Status::Code::kResourceExhausted);
  CHECK(f.limiter.erasures() == 0);
  REQUIRE(f.limiter.Erase("k", minute).ok());
  CHECK(f.limiter.erasures() == 1);
  CHECK(f.limiter.key_count() == 1);
  CHECK(f.limiter.Erase("k", minute).code() == Status::Code::kNotFound);
  CHECK(f.limiter.erasures() == 1);
  CHECK(f.Admitted("k", minute, 5) == 3);  // from nothing again
  CHECK(f.Admitted("k", log, 1) == 0);     // the log of the same key is kept
  CHECK(f.limiter.Erase("", minute).code() == Status::Code::kInvalidArgument);
}

// After an erase, persistence sees nothing of the key: a checkpoint
// (CollectAll) leaves it out, which is how it leaves the disk.
TEST_CASE("an erased key is in no checkpoint") {
  ManualClock clock(kStartMs);
  Limiter::Options options{1, 1'000, &clock};
  options.track_changes = true;
  Limiter limiter(options);
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 10, kMinuteMs};
  Decision decision;
  REQUIRE(limiter.Check("gone", spec, 1, &decision).ok());
  REQUIRE(limiter.Check("kept", spec, 1, &decision).ok());
  REQUIRE(limiter.Erase("gone", spec).ok());
  std::vector<std::string> changed, all;
  limiter.CollectChanges([&](const KeySnapshot& s) { changed.push_back(s.key); });
  limiter.CollectAll([&](const KeySnapshot& s) { all.push_back(s.key); });
  CHECK(changed == std::vector<std::string>{"kept"});
  CHECK(all == std::vector<std::string>{"kept"});
}

}  // namespace
}  // namespace tally
