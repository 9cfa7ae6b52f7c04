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

namespace tally {
namespace {

constexpr int64_t kStartMs = 1'700'000'080'000;  // 40 s into a minute

struct Node {
  Node(ManualClock* clock, NodeId id, int64_t max_delay_ms, size_t members) {
    Limiter::Options options{id, 1'000'000, clock};
    options.replicate = true;
    options.gossip_max_delay_ms = max_delay_ms;
    options.cluster_size = members;
    limiter = std::make_unique<Limiter>(options);
  }
  bool Admit(std::string_view key, const LimitSpec& spec, uint64_t cost = 1) {
    Decision decision;
    REQUIRE(limiter->Check(key, spec, cost, &decision).ok());
    return decision.allowed;
  }
  std::vector<KeySnapshot> Collect(bool flush = false) {
    std::vector<KeySnapshot> deltas;
    limiter->CollectGossip([&](const KeySnapshot& s) { deltas.push_back(s); }, flush);
    return deltas;
  }
  std::unique_ptr<Limiter> limiter;
};

// The share rule: more than 1/N of what remains, without overflow.
TEST_CASE("headroom share: unsent beyond remaining / members") {
  CHECK_FALSE(OverHeadroomShare(0, 0, 3));
  CHECK(OverHeadroomShare(1, 0, 3));
  CHECK_FALSE(OverHeadroomShare(33, 99, 3));  // 99 = 33 * 3
  CHECK(OverHeadroomShare(34, 101, 3));       // 102 > 101
  CHECK_FALSE(OverHeadroomShare(UINT64_MAX / 4, UINT64_MAX, 3));
  CHECK(OverHeadroomShare(5, 4, 1));  // a lone node: its whole remaining
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
  Node node(&clock, 1, 1'000, 3);
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

// Near the limit every admission goes at the next round: the node's count
// exceeds its third of what remains.
TEST_CASE("headroom: near the limit an admission goes at the next round") {
  ManualClock clock(kStartMs);
  Node node(&clock, 1, 10'000, 3);
  const LimitSpec spec{Algorithm::kFixedWindow, 100, 60'000};
  int waited = 0;
  for (int i = 1; i <= 100; ++i) {
    CHECK(node.Admit("near", spec));
    const bool sent = !node.Collect().empty();
    // Own count i against remaining 100 - i: prompt once 3 i > 100 - i.
    CHECK(sent == (3 * i > 100 - i));
    waited += sent ? 0 : 1;
  }
  CHECK(waited == 25);
}

// Leaving the cluster sends what waits, however long it may still wait.
TEST_CASE("headroom: flushing sends every waiting admission") {
  ManualClock clock(kStartMs);
  Node node(&clock, 1, 10'000, 3);
  const LimitSpec counter{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
  const LimitSpec bucket{Algorithm::kTokenBucket, 1'000'000, 3'600'000};
  CHECK(node.Admit("a", counter));
  CHECK(node.Admit("b", bucket));
  CHECK(node.Collect().empty());
  CHECK(node.Collect(/*flush=*/true).size() == 2);
  CHECK(node.Collect(/*flush=*/true).empty());
}

// The log and escrow keep prompt gossip; so does a delay of 0.
TEST_CASE("headroom: the log, escrow and a zero delay send every round") {
  ManualClock clock(kStartMs);
  Node zero(&clock, 1, 0, 3);
  const LimitSpec counter{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
  CHECK(zero.Admit("k", counter));
  CHECK(zero.Collect().size() == 1);
  Node deferring(&clock, 2, 10'000, 3);
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
  Node node(&clock, 1, 30'000, 3);  // waits 15 s, a quarter of the window
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 90, 60'000};
  for (int i = 0; i < 10; ++i) CHECK(node.Admit("k", spec));
  CHECK(node.Collect().empty());  // 10 of 90: 3 x 10 <= 80
  clock.AdvanceMs(10'000);        // the next minute
  // Unsent: 1, and the previous minute's 10 that still wait, against 90 - 11:
  // 3 x 11 <= 79, so it waits too.
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
  Node node(&clock, 1, 1'000, 3);
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
  CHECK(node.Admit("gone", spec));
  REQUIRE(node.limiter->Erase("gone", spec).ok());
  clock.AdvanceMs(1'000);
  CHECK(node.Collect().empty());
}

// Random clusters: N nodes deliver their deltas to each other every round;
// with deferral, the total admitted in a window never exceeds what prompt
// gossip's bound allows (the limit plus what the other nodes admit within one
// round), and a cluster far below its limit never denies.
TEST_CASE("headroom: deferral keeps prompt gossip's bound on random clusters") {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937 random(seed);
    const size_t members = 2 + random() % 4;
    const uint64_t limit = 20 + random() % 400;
    const LimitSpec spec{random() % 2 ? Algorithm::kFixedWindow : Algorithm::kSlidingWindowCounter,
                         limit, 60'000};
    ManualClock clock(kStartMs - 40'000);  // a minute's start: one window throughout
    std::vector<Node> nodes;
    for (size_t i = 0; i < members; ++i) nodes.emplace_back(&clock, i + 1, 10'000, members);
    const int per_round = 1 + static_cast<int>(random() % 8);
    uint64_t admitted = 0;
    for (int round = 0; round < 400; ++round) {
      std::vector<int> admitted_here(members, 0);
      for (int i = 0; i < per_round * static_cast<int>(members); ++i) {
        const size_t at = random() % members;
        if (nodes[at].Admit("k", spec)) {
          ++admitted;
          ++admitted_here[at];
        }
      }
      // The bound of prompt gossip: the limit, plus what each other node
      // admitted this round on a view that missed it.
      CHECK(admitted <= limit + static_cast<uint64_t>(per_round) * members * members);
      clock.AdvanceMs(50);
      std::vector<std::vector<KeySnapshot>> deltas;
      for (Node& node : nodes) deltas.push_back(node.Collect());
      for (size_t from = 0; from < members; ++from) {
        for (size_t to = 0; to < members; ++to) {
          if (from == to) continue;
          for (const KeySnapshot& delta : deltas[from]) {
            REQUIRE(nodes[to].limiter->Merge(delta).ok());
          }
        }
      }
    }
    CHECK(admitted >= limit);  // demand far beyond the limit reaches it
  }
}

}  // namespace
}  // namespace tally
