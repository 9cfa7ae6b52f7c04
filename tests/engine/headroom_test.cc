// Gossip that follows contention (node/engine/headroom.h): which admissions
// wait and for how long, and that waiting never lets a cluster admit past the
// bound prompt gossip holds.
#include "node/engine/headroom.h"

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "node/engine/limiter.h"
#include "tests/engine/engine_cluster.h"

namespace tally {
namespace {

constexpr int64_t kStartMs = 1'700'000'080'000;  // 40 s into a minute

using testing::EngineNode;

// A node of a cluster of `members` whose admissions far from a limit may wait max_delay_ms.
EngineNode Node(ManualClock* clock, NodeId id, int64_t max_delay_ms, size_t members) {
  Limiter::Options options{id, 1'000'000, clock};
  options.gossip_max_delay_ms = max_delay_ms;
  options.cluster_size = members;
  return EngineNode(clock, id, options);
}

// The share rule: more than 1/(32 N) of what remains, without overflow.
TEST_CASE("headroom share: unsent beyond remaining / (32 members)") {
  CHECK_FALSE(OverHeadroomShare(0, 0, 3));
  CHECK(OverHeadroomShare(1, 0, 3));
  CHECK(OverHeadroomShare(1, 95, 3));           // 96 > 95
  CHECK_FALSE(OverHeadroomShare(1, 96, 3));     // 96 = 1 x 3 x 32
  CHECK_FALSE(OverHeadroomShare(33, 3168, 3));  // 3168 = 33 x 96
  CHECK(OverHeadroomShare(34, 3263, 3));        // 3264 > 3263
  CHECK_FALSE(OverHeadroomShare(UINT64_MAX / 128, UINT64_MAX, 3));
  CHECK(OverHeadroomShare(5, 159, 1));  // a lone node: 1/32 of what remains
}

// The delay: the configured one, capped by the window's quarter (a bucket's
// eighth); none for the log or when switched off.
TEST_CASE("headroom deferral: capped by the window") {
  CHECK(DeferralMs(Algorithm::kSlidingWindowCounter, 60'000, 10'000) == 10'000);
  CHECK(DeferralMs(Algorithm::kFixedWindow, 1'000, 10'000) == 250);
  CHECK(DeferralMs(Algorithm::kTokenBucket, 1'000, 10'000) == 125);
  CHECK(DeferralMs(Algorithm::kSlidingWindowLog, 60'000, 10'000) == 0);
  CHECK(DeferralMs(Algorithm::kSlidingWindowCounter, 60'000, 0) == 0);
}

// A key far from its limit is sent once its delay has passed, with every
// admission made meanwhile; not before.
TEST_CASE("headroom: a key far from its limit waits, then goes with all its admissions") {
  ManualClock clock(kStartMs);
  EngineNode node = Node(&clock, 1, 1'000, 3);
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
  for (int i = 0; i < 10; ++i) {
    CHECK(node.Admit("far", spec));
    clock.AdvanceMs(50);
    CHECK(node.Collect().empty());
  }
  clock.AdvanceMs(500);  // 1,000 ms after the first admission
  const std::vector<KeySnapshot> deltas = node.Collect();
  REQUIRE(deltas.size() == 1);
  CHECK(deltas[0].counts.current.slots() == std::vector<GCounter::Slot>{{1, 10}});
  CHECK(node.Collect().empty());
  CHECK(node.Admit("far", spec));  // a new wait starts
  clock.AdvanceMs(999);
  CHECK(node.Collect().empty());
  clock.AdvanceMs(1);
  CHECK(node.Collect().size() == 1);
}

// What waits is released in steps of an eighth of its wait, by wall time:
// at the last step at or before its due time, never late, at most a step early.
TEST_CASE("headroom: a wait ends at the last step of an eighth of it before it is due") {
  CHECK(ReleaseAtMs(11'000, 1'000) == 11'000);  // on a step
  CHECK(ReleaseAtMs(11'124, 1'000) == 11'000);
  CHECK(ReleaseAtMs(11'125, 1'000) == 11'125);
  CHECK(ReleaseAtMs(11'124, 15) == 11'124);  // steps under 2 ms: none
  std::mt19937_64 random(7);
  for (int i = 0; i < 1'000; ++i) {
    const auto due_ms = static_cast<int64_t>(random() % 4'000'000'000'000);
    const auto delay_ms = static_cast<int64_t>(random() % 3'600'000);
    const int64_t release_ms = ReleaseAtMs(due_ms, delay_ms);
    CHECK(release_ms <= due_ms);
    CHECK(due_ms - release_ms <= std::max<int64_t>(0, delay_ms / kReleaseSteps - 1));
  }
}

// Keys admitted at different times go in one round when they fall due within
// one step (a delay of 1,000 ms: steps of 125), and not before it.
TEST_CASE("headroom: what falls due within one step goes in one round") {
  ManualClock clock(kStartMs);  // on a step
  EngineNode node = Node(&clock, 1, 1'000, 3);
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
  clock.AdvanceMs(10);
  CHECK(node.Admit("a", spec));  // due at +1,010
  clock.AdvanceMs(90);
  CHECK(node.Admit("b", spec));  // due at +1,100
  clock.AdvanceMs(30);
  CHECK(node.Admit("c", spec));  // due at +1,130
  clock.AdvanceMs(869);          // +999
  CHECK(node.Collect().empty());
  clock.AdvanceMs(1);  // +1,000: the step before "a" and "b" are due
  std::vector<std::string> keys;
  for (const KeySnapshot& delta : node.Collect()) keys.push_back(delta.key);
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"a", "b"});
  clock.AdvanceMs(124);
  CHECK(node.Collect().empty());
  clock.AdvanceMs(1);  // +1,125
  const std::vector<KeySnapshot> last = node.Collect();
  REQUIRE(last.size() == 1);
  CHECK(last[0].key == "c");
}

// Near the limit every admission goes at the next round: the node's count
// exceeds 1/96 of what remains (3 nodes).
TEST_CASE("headroom: near the limit an admission goes at the next round") {
  ManualClock clock(kStartMs);
  EngineNode node = Node(&clock, 1, 10'000, 3);
  const LimitSpec spec{Algorithm::kFixedWindow, 1'000, 60'000};
  int waited = 0;
  for (int i = 1; i <= 1'000; ++i) {
    CHECK(node.Admit("near", spec));
    const bool sent = !node.Collect().empty();
    // Own count i against remaining 1000 - i: prompt once 96 i > 1000 - i.
    CHECK(sent == (96 * i > 1'000 - i));
    waited += sent ? 0 : 1;
  }
  CHECK(waited == 10);
}

// Leaving the cluster sends what waits, however long it may still wait.
TEST_CASE("headroom: flushing sends every waiting admission") {
  ManualClock clock(kStartMs);
  EngineNode node = Node(&clock, 1, 10'000, 3);
  const LimitSpec counter{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
  const LimitSpec bucket{Algorithm::kTokenBucket, 1'000'000, 3'600'000};
  CHECK(node.Admit("a", counter));
  CHECK(node.Admit("b", bucket));
  CHECK(node.Collect().empty());
  CHECK(node.Collect(/*flush=*/true).size() == 2);
  CHECK(node.Collect(/*flush=*/true).empty());
}

// What lets a gossip thread rest while there is nothing to send: the hook
// (Limiter::SetGossipWork) hears of a shard's first entry for the next round
// and of a new wait, not of what adds to them, and CollectGossip tells how
// long until the earliest of what waits is due.
TEST_CASE("headroom: a resting gossip thread hears of new work, and when what waits is due") {
  ManualClock clock(kStartMs);
  EngineNode node = Node(&clock, 1, 1'000, 3);
  int noted = 0;
  node.limiter->SetGossipWork([&noted] { ++noted; });
  const auto collect = [&](size_t* sent) {
    *sent = 0;
    return node.limiter->CollectGossip([&](const KeySnapshot&) { ++*sent; });
  };
  const LimitSpec far{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
  const LimitSpec near{Algorithm::kFixedWindow, 10, 60'000};
  size_t sent = 0;
  CHECK(collect(&sent) == INT64_MAX);  // nothing waits
  CHECK(node.Admit("far", far));       // waits 1,000 ms
  CHECK(noted == 1);
  CHECK(node.Admit("far", far));  // waits with the first
  CHECK(noted == 1);
  CHECK(node.Admit("near", near));  // for the next round
  CHECK(noted == 2);
  CHECK(node.Admit("near", near));
  CHECK(noted == 2);
  clock.AdvanceMs(400);
  CHECK(collect(&sent) == 600);  // "near" went; "far" is due in 600 ms
  CHECK(sent == 1);
  CHECK(node.Admit("near", near));  // the next round's again
  CHECK(noted == 3);
  clock.AdvanceMs(700);
  CHECK(collect(&sent) == INT64_MAX);  // "far" and "near" went; nothing waits
  CHECK(sent == 2);
  CHECK(noted == 3);
}

// The log and escrow keep prompt gossip; so does a delay of 0.
TEST_CASE("headroom: the log, escrow and a zero delay send every round") {
  ManualClock clock(kStartMs);
  EngineNode zero = Node(&clock, 1, 0, 3);
  const LimitSpec counter{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
  CHECK(zero.Admit("k", counter));
  CHECK(zero.Collect().size() == 1);
  EngineNode deferring = Node(&clock, 2, 10'000, 3);
  CHECK(deferring.Admit("l", {Algorithm::kSlidingWindowLog, 1'000'000, 60'000}));
  CHECK(deferring.Collect().size() == 1);
  Limiter::Options options{3, 1'000, &clock};
  options.replicate = true;
  options.gossip_max_delay_ms = 10'000;
  options.escrow_epoch_ms = 200;
  options.cluster_size = 3;
  Limiter escrowed(options);
  Decision decision;
  REQUIRE(escrowed.Check("k", counter, 1, &decision).ok());
  int deltas = 0;
  escrowed.CollectGossip([&](const KeySnapshot&) { ++deltas; });
  CHECK(deltas == 1);
}

// A sliding counter's window ends while its admissions wait: they are still
// sent, under the window they were admitted in, and while they wait they
// count as unsent in the next window's share rule.
TEST_CASE("headroom: a waiting count crosses a window and is still sent") {
  ManualClock clock(kStartMs + 10'000);  // 50 s into a minute
  const int64_t minute = clock.WallMs() / 60'000;
  EngineNode node = Node(&clock, 1, 30'000, 3);  // waits 15 s, a quarter of the window
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 2'000, 60'000};
  for (int i = 0; i < 10; ++i) CHECK(node.Admit("k", spec));
  CHECK(node.Collect().empty());  // 10 of 2000: 96 x 10 <= 1990
  clock.AdvanceMs(10'000);        // the next minute
  // Unsent: 1, and the previous minute's 10 that still wait, against
  // 2000 - 11: 96 x 11 <= 1989, so it waits too.
  CHECK(node.Admit("k", spec));
  CHECK(node.Collect().empty());
  clock.AdvanceMs(5'000);  // 15 s after the first admission
  const std::vector<KeySnapshot> sent = node.Collect();
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].counts.window_index == minute + 1);
  CHECK(sent[0].counts.current.slots() == std::vector<GCounter::Slot>{{1, 1}});
  CHECK(sent[0].counts.previous.slots() == std::vector<GCounter::Slot>{{1, 10}});
}

// A waiting key freed (erased) and its slot reused leaves no stale send.
TEST_CASE("headroom: an erased waiting key is not sent") {
  ManualClock clock(kStartMs);
  EngineNode node = Node(&clock, 1, 1'000, 3);
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
  CHECK(node.Admit("gone", spec));
  REQUIRE(node.limiter->Erase("gone", spec).ok());
  clock.AdvanceMs(1'000);
  CHECK(node.Collect().empty());
}

// What a cluster of `members` nodes admits of one key in one window, every
// node's deltas delivered to the others each 50 ms round, for one seeded
// arrival schedule (which node each request reaches: the same whatever the
// decisions).
uint64_t AdmittedInCluster(uint32_t seed, size_t members, const LimitSpec& spec, int per_round,
                           int64_t max_delay_ms, int rounds = 400) {
  // per_round: requests per round over all nodes.
  std::mt19937 random(seed);
  ManualClock clock(kStartMs - 40'000);  // a minute's start: one window throughout
  Limiter::Options options{1, 1'000'000, &clock};
  options.gossip_max_delay_ms = max_delay_ms;
  std::vector<EngineNode> nodes = testing::MakeNodes(&clock, members, options);
  uint64_t admitted = 0;
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < per_round; ++i) {
      if (nodes[random() % members].Admit("k", spec)) ++admitted;
    }
    clock.AdvanceMs(50);
    testing::RunRound(nodes);
  }
  return admitted;
}

// Random clusters at demand beyond the limit, thin (a few requests a round,
// so that most nodes hold a few admissions each) or thick: with deferral, a
// window admits at most what prompt gossip admits for the same arrivals plus
// what the nodes may keep back together (limit / 32), and at least the limit.
TEST_CASE("headroom: deferral keeps prompt gossip's bound on random clusters") {
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    std::mt19937 random(seed);
    const size_t members = 2 + random() % 7;
    const uint64_t limit = 10 + random() % (seed % 2 ? 200 : 5'000);
    const LimitSpec spec{random() % 2 ? Algorithm::kFixedWindow : Algorithm::kSlidingWindowCounter,
                         limit, 60'000};
    const int per_round = 1 + static_cast<int>(random() % (seed % 3 ? 2 * members : 200));
    CAPTURE(members);
    CAPTURE(limit);
    CAPTURE(per_round);
    const uint64_t prompt = AdmittedInCluster(seed, members, spec, per_round, 0);
    const uint64_t deferred = AdmittedInCluster(seed, members, spec, per_round, 10'000);
    CHECK(deferred <= prompt + limit / kHeadroomDivisor + 1);
    if (per_round * 400 >= static_cast<int>(2 * limit)) CHECK(deferred >= limit);
  }
}

// Many nodes, each reached a few times on a key with a small limit (twice the
// limit in requests, one a round): what one node keeps back must not let the
// others admit past the limit unaware of it. Prompt gossip admits exactly the
// limit here; deferral must too (limit / 32 < 1).
TEST_CASE("headroom: a small limit spread thin over many nodes is not passed") {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    const size_t members = 4 + seed % 5;
    const LimitSpec spec{seed % 2 ? Algorithm::kFixedWindow : Algorithm::kSlidingWindowCounter,
                         10 + seed % 21, 3'600'000};
    const int rounds = static_cast<int>(2 * spec.limit);
    const uint64_t prompt = AdmittedInCluster(seed, members, spec, 1, 0, rounds);
    CHECK(prompt == spec.limit);
    CHECK(AdmittedInCluster(seed, members, spec, 1, 10'000, rounds) == prompt);
  }
}

// After a loss of what a member kept back, every window that began before it
// (the log's: a trailing window) counts a headroom share of the limit
// (960 / 96 = 10 on 3 nodes) as spent per loss, until it no longer counts;
// the limit given to clients stays.
TEST_CASE("headroom: a loss counts a share of the limit as spent in the windows it may hold") {
  ManualClock clock(kStartMs - 40'000);  // a minute's start
  EngineNode node = Node(&clock, 1, 10'000, 3);
  const LimitSpec fixed{Algorithm::kFixedWindow, 960, 60'000};
  const LimitSpec sliding{Algorithm::kSlidingWindowCounter, 960, 60'000};
  const LimitSpec bucket{Algorithm::kTokenBucket, 960, 60'000};
  const LimitSpec log{Algorithm::kSlidingWindowLog, 960, 60'000};
  clock.AdvanceMs(1'000);
  for (const LimitSpec& spec : {fixed, sliding, bucket, log})
    CHECK(node.Check("k", spec, 0).remaining == 960);
  const std::vector<int64_t> one_loss = {clock.WallMs()};
  node.limiter->SetDeferralLosses(one_loss);
  for (const LimitSpec& spec : {fixed, sliding, bucket, log}) {
    const Decision peek = node.Check("k", spec, 0);
    CHECK(peek.remaining == 950);
    CHECK(peek.limit == 960);
  }
  const std::vector<int64_t> two_losses = {one_loss[0], clock.WallMs()};
  node.limiter->SetDeferralLosses(two_losses);  // a second loss: another share
  CHECK(node.Check("k", fixed, 0).remaining == 940);
  clock.AdvanceMs(59'000);  // the next minute: the losses are a window back
  CHECK(node.Check("k", fixed, 0).remaining == 960);
  CHECK(node.Check("k", sliding, 0).remaining == 940);  // the previous window still counts
  CHECK(node.Check("k", bucket, 0).remaining == 940);   // not yet a window since the losses
  CHECK(node.Check("k", log, 0).remaining == 940);      // still in the trailing window
  clock.AdvanceMs(1'001);
  CHECK(node.Check("k", bucket, 0).remaining == 960);  // a window has refilled what they drew
  CHECK(node.Check("k", log, 0).remaining == 960);     // out of the trailing window
  clock.AdvanceMs(58'999);
  CHECK(node.Check("k", sliding, 0).remaining == 960);
}

// What is counted as spent never keeps out a request that a central limiter
// admits on an idle key: one of the whole limit still passes.
TEST_CASE("headroom: after a loss a request of the whole limit still passes on an idle key") {
  ManualClock clock(kStartMs);
  EngineNode node = Node(&clock, 1, 10'000, 3);
  const std::vector<int64_t> loss = {clock.WallMs()};
  node.limiter->SetDeferralLosses(loss);
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 960, 60'000};
  CHECK(node.Check("k", spec, 955).allowed);
  CHECK(node.Check("k", spec, 5).allowed == false);
  CHECK(node.Admit("whole", spec, 960));
}

// Nothing is kept back with a delay of 0, on a limit below 32 N, or on a node
// that does not replicate: a loss changes nothing there.
TEST_CASE("headroom: a loss counts nothing where nothing can be kept back") {
  ManualClock clock(kStartMs);
  const std::vector<int64_t> loss = {clock.WallMs()};
  EngineNode prompt = Node(&clock, 1, 0, 3);
  prompt.limiter->SetDeferralLosses(loss);
  CHECK(prompt.Check("k", {Algorithm::kFixedWindow, 960, 60'000}, 0).remaining == 960);
  EngineNode deferring = Node(&clock, 2, 10'000, 3);
  deferring.limiter->SetDeferralLosses(loss);
  CHECK(deferring.Check("k", {Algorithm::kFixedWindow, 95, 60'000}, 0).remaining == 95);
  Limiter::Options options{3, 1'000, &clock};
  options.gossip_max_delay_ms = 10'000;
  Limiter lone(options);
  lone.SetDeferralLosses(loss);
  Decision decision;
  REQUIRE(lone.Check("k", {Algorithm::kFixedWindow, 960, 60'000}, 0, &decision).ok());
  CHECK(decision.remaining == 960);
}

// A node crashes with admissions it kept back (nobody heard of them); its
// peers note the loss when its link goes down, and together with what was
// lost the cluster admits no more than the limit. Without the note it would
// admit the lost ones beyond it.
TEST_CASE("headroom: a crash with kept-back admissions never lets the cluster pass the limit") {
  for (const bool noted : {true, false}) {
    CAPTURE(noted);
    ManualClock clock(kStartMs);
    Limiter::Options options{0, 1'000, &clock};
    options.gossip_max_delay_ms = 10'000;
    std::vector<EngineNode> nodes = testing::MakeNodes(&clock, 3, options);
    const LimitSpec spec{Algorithm::kSlidingWindowCounter, 960, 3'600'000};
    uint64_t lost = 0;
    while (nodes[0].Admit("k", spec) && nodes[0].Collect().empty()) ++lost;
    REQUIRE(lost == 9);  // the 10th: 10 x 96 > 950 remaining, sent at once
    // Node 1 crashes before its round: the 10th never leaves it either.
    ++lost;
    nodes.erase(nodes.begin());
    if (noted) {
      const std::vector<int64_t> loss = {clock.WallMs()};
      for (EngineNode& node : nodes) node.limiter->SetDeferralLosses(loss);
    }
    uint64_t admitted = 0;
    for (int i = 0; i < 2'000; ++i, clock.AdvanceMs(1)) {
      admitted += nodes[i % 2].Admit("k", spec) ? 1 : 0;
      testing::RunRound(nodes);
    }
    CHECK(admitted == (noted ? spec.limit - lost : spec.limit));
  }
}

// Beyond DeferralLosses::kSlots, the older losses count together at the
// newest of their times: never fewer losses, and never for less long.
TEST_CASE("headroom: losses beyond the slots count together, for as long as the newest of them") {
  DeferralLosses losses;
  CHECK(losses.CountSince(0) == 0);
  std::vector<int64_t> seen_at_ms;
  for (int64_t i = 1; i <= 12; ++i) seen_at_ms.push_back(i * 100);
  losses.Set(seen_at_ms);
  CHECK(losses.CountSince(0) == 12);
  CHECK(losses.CountSince(1'200) == 1);
  CHECK(losses.CountSince(500) == 12);  // the 5 oldest (100 to 500) as one slot at 500
  CHECK(losses.CountSince(501) == 7);   // 600 to 1200
  losses.Set({});
  CHECK(losses.CountSince(0) == 0);
}

}  // namespace
}  // namespace tally
