// Shares of what remains (node/engine/coordination.h), the default mode of a
// cluster: what a node admits and has not sent stays within 1/N of what its
// view leaves, so that nodes admitting at once do not pass the limit together.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "node/engine/limiter.h"
#include "tests/engine/engine_cluster.h"

namespace tally {
namespace {

using testing::EngineNode;
using testing::MakeNodes;
using testing::RunRound;

constexpr int64_t kMinuteStartMs = 1'700'000'040'000;
constexpr int64_t kRoundMs = 50;
constexpr int64_t kDeliveryMs = 5;

// A cluster's options: shares held (share_wait_ms one round), or plain gossip (0).
Limiter::Options ClusterOptions(bool shares) {
  Limiter::Options options;
  options.share_wait_ms = shares ? kRoundMs + kDeliveryMs : 0;
  options.share_delivery_ms = kDeliveryMs;
  return options;
}

const LimitSpec kSpecs[] = {{Algorithm::kFixedWindow, 100, 60'000},
                            {Algorithm::kSlidingWindowCounter, 100, 60'000},
                            {Algorithm::kTokenBucket, 100, 3'600'000},
                            {Algorithm::kSlidingWindowLog, 100, 60'000}};

// Every node admits until it is denied, with no round in between.
uint64_t Burst(std::vector<EngineNode>& nodes, const LimitSpec& spec, int per_node) {
  uint64_t admitted = 0;
  for (int i = 0; i < per_node; ++i) {
    for (EngineNode& node : nodes) admitted += node.Admit("fresh", spec) ? 1 : 0;
  }
  return admitted;
}

// A burst of 5x the limit on a fresh key at every node at once: with shares
// the nodes together admit at most the limit; plain gossip admits it at each.
TEST_CASE("shares: a coordinated burst on a fresh key does not pass the limit") {
  for (const LimitSpec& spec : kSpecs) {
    for (size_t members : {2, 3, 5, 8}) {
      CAPTURE(spec.algorithm);
      CAPTURE(members);
      ManualClock clock(kMinuteStartMs);
      std::vector<EngineNode> shared = MakeNodes(&clock, members, ClusterOptions(true));
      const uint64_t per_node = 5 * spec.limit / members;
      const uint64_t admitted = Burst(shared, spec, static_cast<int>(per_node));
      CHECK(admitted <= spec.limit);
      CHECK(admitted >= spec.limit / 2);  // each node at least its share of the headroom
      std::vector<EngineNode> plain = MakeNodes(&clock, members, ClusterOptions(false));
      CHECK(Burst(plain, spec, static_cast<int>(per_node)) ==
            members * std::min(per_node, spec.limit));
    }
  }
}

// Bursts every round until the window ends: the nodes together admit the
// limit and at most one unit per node beyond it (the one request a node may
// pass when nothing of its own waits to be sent).
TEST_CASE("shares: bursts round after round fill the limit and pass it by at most N - 1") {
  for (size_t members : {3, 5}) {
    CAPTURE(members);
    ManualClock clock(kMinuteStartMs);
    std::vector<EngineNode> nodes = MakeNodes(&clock, members, ClusterOptions(true));
    const LimitSpec spec = kSpecs[0];  // fixed window: nothing comes back within the minute
    uint64_t admitted = 0;
    for (int round = 0; round < 40; ++round) {
      admitted += Burst(nodes, spec, 100);
      clock.AdvanceMs(kRoundMs);
      RunRound(nodes);
    }
    CHECK(admitted >= spec.limit);
    CHECK(admitted <= spec.limit + members - 1);
  }
}

// A key only one node is asked for reaches its whole limit there, a share
// a round: the others' shares are not kept from it.
TEST_CASE("shares: a node alone on a key gets the whole limit within rounds") {
  ManualClock clock(kMinuteStartMs);
  std::vector<EngineNode> nodes = MakeNodes(&clock, 3, ClusterOptions(true));
  const LimitSpec spec = kSpecs[0];
  uint64_t admitted = 0;
  int rounds = 0;
  for (; rounds < 40 && admitted < spec.limit; ++rounds) {
    while (nodes[0].Admit("lone", spec)) ++admitted;
    RunRound(nodes);
    clock.AdvanceMs(kRoundMs);  // delivered long before the next burst
  }
  CHECK(admitted == spec.limit);
  CHECK(rounds <= 20);  // 100 x (3/4)^k shrinks to a unit a round in about 16
}

// A request beyond the share is denied with retry_after_ms of a round and
// the delivery time, and the same request passes once a round has sent what
// waited and it has had the delivery time to arrive (not before).
TEST_CASE("shares: a request beyond the share waits a round and delivery, then passes") {
  for (const LimitSpec& spec : kSpecs) {
    CAPTURE(spec.algorithm);
    ManualClock clock(kMinuteStartMs);
    std::vector<EngineNode> nodes = MakeNodes(&clock, 3, ClusterOptions(true));
    uint64_t admitted = 0;
    while (nodes[0].Admit("k", spec)) ++admitted;
    CHECK(admitted == 25);  // u x 3 <= 100 - u
    const Decision denied = nodes[0].Check("k", spec);
    CHECK_FALSE(denied.allowed);
    CHECK(denied.retry_after_ms == static_cast<uint64_t>(kRoundMs + kDeliveryMs));
    CHECK(denied.remaining == 75);  // the view's remaining, not the share's
    CHECK_FALSE(denied.never_allowed);
    nodes[0].Collect();  // sent, perhaps still on its way
    clock.AdvanceMs(kDeliveryMs - 1);
    CHECK_FALSE(nodes[0].Admit("k", spec));
    clock.AdvanceMs(1);  // arrived: nothing of node 1's is unheard
    CHECK(nodes[0].Admit("k", spec));
  }
}

// What a node sent of a key that one peer also admits on (that peer's slot
// inside the entry) is on its way for the delivery time, as on any key: a
// request beyond the share waits for it.
TEST_CASE("shares: what a node sent of a key one peer reports is on its way for a while") {
  ManualClock clock(kMinuteStartMs);
  Limiter::Options options = ClusterOptions(true);
  options.gossip_max_delay_ms = 10'000;  // far from the limit, an admission waits
  std::vector<EngineNode> nodes = MakeNodes(&clock, 3, options);
  const LimitSpec spec = kSpecs[1];
  REQUIRE(nodes[0].Admit("k", spec));
  for (int i = 0; i < 5; ++i) REQUIRE(nodes[1].Admit("k", spec));
  for (const KeySnapshot& delta : nodes[1].Collect(/*flush=*/true)) {
    REQUIRE(nodes[0].limiter->Merge(delta).ok());
  }
  REQUIRE(nodes[0].Collect(/*flush=*/true).size() == 1);  // node 1's admission, now sent
  CHECK_FALSE(nodes[0].Admit("k", spec, 40));             // beyond the share of 54 / 3
  clock.AdvanceMs(kDeliveryMs);
  CHECK(nodes[0].Admit("k", spec, 40));  // arrived: nothing of node 1's is unheard
}

// When nothing of its own waits to be sent, a node admits a request larger
// than its share, as a central limiter would; right after, a second one waits.
TEST_CASE("shares: a request larger than a share passes when nothing waits") {
  for (const LimitSpec& spec : kSpecs) {
    CAPTURE(spec.algorithm);
    ManualClock clock(kMinuteStartMs);
    std::vector<EngineNode> nodes = MakeNodes(&clock, 3, ClusterOptions(true));
    CHECK(nodes[1].Admit("big", spec, 10));
    RunRound(nodes);
    CHECK(nodes[0].Admit("big", spec, 60));  // 60 x 3 > 90 - 60, but nothing waited
    CHECK_FALSE(nodes[0].Admit("big", spec, 1));
    RunRound(nodes);
    clock.AdvanceMs(kDeliveryMs);            // sent and arrived
    CHECK(nodes[0].Admit("big", spec, 30));  // what remains: 30
  }
}

// Shares follow demand: what a node's view had no room for goes out with its
// next delta, and the peers then leave it most of what remains (their own
// shares shrink), instead of a third each. While the key is so
// oversubscribed, a request beyond a node's share passes only once its share
// has accrued the cost, and retry_after_ms says when.
TEST_CASE("shares: a node whose clients asked for most gets most of what remains") {
  ManualClock clock(kMinuteStartMs);
  std::vector<EngineNode> nodes = MakeNodes(&clock, 3, ClusterOptions(true));
  const LimitSpec spec = kSpecs[0];  // fixed window, a minute
  uint64_t filled = 0;
  for (int round = 0; round < 40 && filled < spec.limit; ++round) {
    while (nodes[0].Admit("k", spec)) ++filled;  // alone: a share a round
    RunRound(nodes);
    clock.AdvanceMs(kDeliveryMs);
  }
  REQUIRE(filled == spec.limit);
  for (int i = 0; i < 100; ++i) CHECK_FALSE(nodes[0].Admit("k", spec));  // no room in the view
  clock.SetWallMs(kMinuteStartMs + 60'000);                              // the next window
  CHECK(nodes[0].Admit("k", spec));
  const std::vector<KeySnapshot> deltas = nodes[0].Collect();
  REQUIRE(deltas.size() == 1);
  CHECK(deltas[0].denied.node == 1);
  CHECK(deltas[0].denied.current == 0);
  CHECK(deltas[0].denied.previous == 101);  // and the fill's last request
  for (size_t to : {1, 2}) REQUIRE(nodes[to].limiter->Merge(deltas[0]).ok());
  clock.AdvanceMs(kDeliveryMs);
  // Node 1 hears node 1's 202 (1 + 100 admitted, 101 denied), none of its
  // own; floors of 202 / 12: its share of 99 is 99 x 16.8 / 252.5.
  uint64_t quiet = 0;
  for (int i = 0; i < 100; ++i) quiet += nodes[1].Admit("k", spec) ? 1 : 0;
  CHECK(quiet == 6);  // equal shares: 24
  uint64_t busy = 0;
  for (int i = 0; i < 100; ++i) busy += nodes[0].Admit("k", spec) ? 1 : 0;
  CHECK(busy >= 40);
  RunRound(nodes);
  clock.AdvanceMs(kDeliveryMs);
  CHECK(nodes[1].Admit("k", spec, 20));  // beyond its share: the first time at once
  RunRound(nodes);
  clock.AdvanceMs(kDeliveryMs);
  const Decision waits = nodes[1].Check("k", spec, 20);
  CHECK_FALSE(waits.allowed);
  CHECK(waits.retry_after_ms > kRoundMs);
  CHECK(waits.retry_after_ms < 10'000);
  clock.AdvanceMs(1);
  CHECK_FALSE(nodes[1].Admit("k", spec, 20));
  clock.AdvanceMs(static_cast<int64_t>(waits.retry_after_ms) - 1);
  CHECK(nodes[1].Admit("k", spec, 20));  // (the window's start weighs less by then: sooner is fine)
}

// Random clusters at demand beyond a small limit, one burst a round at random
// nodes: every fixed window, and the log's trailing minute, admits the limit
// and at most N - 1 beyond it.
TEST_CASE("shares: random clusters admit the limit, at most N - 1 beyond") {
  for (uint32_t seed = 1; seed <= 80; ++seed) {
    CAPTURE(seed);
    std::mt19937 random(seed);
    const size_t members = 2 + random() % 7;
    const Algorithm algorithm =
        seed % 2 == 0 ? Algorithm::kFixedWindow : Algorithm::kSlidingWindowLog;
    const LimitSpec spec{algorithm, 5 + random() % 300, 60'000};
    ManualClock clock(kMinuteStartMs);
    std::vector<EngineNode> nodes = MakeNodes(&clock, members, ClusterOptions(true));
    uint64_t admitted = 0;
    for (int round = 0; round < 200; ++round) {
      const int requests = 1 + static_cast<int>(random() % (2 * spec.limit));
      for (int i = 0; i < requests; ++i) {
        admitted += nodes[random() % members].Admit("k", spec) ? 1 : 0;
      }
      clock.AdvanceMs(kRoundMs);
      RunRound(nodes);
    }
    CAPTURE(members);
    CAPTURE(spec.limit);
    CHECK(admitted >= spec.limit);
    CHECK(admitted <= spec.limit + members - 1);
  }
}

// An eighth of a share unheard asks for an early gossip round; far from the
// limit nothing does.
TEST_CASE("shares: an eighth of a share unheard asks for an early round") {
  ManualClock clock(kMinuteStartMs);
  std::vector<EngineNode> nodes = MakeNodes(&clock, 3, ClusterOptions(true));
  int asked = 0;
  nodes[0].limiter->SetRoundWanted([&asked] { ++asked; });
  for (int i = 0; i < 10; ++i)
    CHECK(nodes[0].Admit("far", {Algorithm::kFixedWindow, 1'000, 60'000}));
  CHECK(asked == 0);  // 8 x 10 <= floor(990 / 3)
  const LimitSpec spec = kSpecs[0];
  for (int i = 0; i < 4; ++i) CHECK(nodes[0].Admit("near", spec));
  CHECK(asked == 0);  // 8 x 4 <= floor((100 - 4) / 3)
  CHECK(nodes[0].Admit("near", spec));
  CHECK(asked == 1);  // 8 x 5 > floor(95 / 3)
}

// A lone node (no peers) is never held to a share: the log stays exact there.
TEST_CASE("shares: a lone node admits as before") {
  ManualClock clock(kMinuteStartMs);
  for (const LimitSpec& spec : kSpecs) {
    std::vector<EngineNode> lone = MakeNodes(&clock, 1, ClusterOptions(true));
    CHECK(Burst(lone, spec, 200) == 100);
  }
}

// The log's request beyond its share waits a round and delivery; a denial
// by the view says when the oldest counted stamp leaves the window.
TEST_CASE("shares: the log waits beyond its share, and a denial says when a stamp leaves") {
  ManualClock clock(kMinuteStartMs);
  std::vector<EngineNode> nodes = MakeNodes(&clock, 3, ClusterOptions(true));
  const LimitSpec spec{Algorithm::kSlidingWindowLog, 30, 60'000};
  CHECK(nodes[0].Admit("k", spec, 10));  // nothing unheard: passes whatever its share
  const Decision waits = nodes[0].Check("k", spec, 1);
  CHECK_FALSE(waits.allowed);
  CHECK(waits.remaining == 20);
  CHECK(waits.retry_after_ms == kRoundMs + kDeliveryMs);
  RunRound(nodes);
  clock.AdvanceMs(kDeliveryMs);
  CHECK(nodes[0].Admit("k", spec, 7));  // within 1/3 of the 20 left, after it was heard
  RunRound(nodes);
  clock.AdvanceMs(kDeliveryMs);
  CHECK(nodes[1].Admit("k", spec, 13));
  RunRound(nodes);
  clock.AdvanceMs(1'000);
  const Decision full = nodes[2].Check("k", spec, 1);
  CHECK_FALSE(full.allowed);
  CHECK(full.remaining == 0);
  CHECK(full.retry_after_ms == 60'000 - 1'000 - 2 * kDeliveryMs);  // the first stamp's
}

}  // namespace
}  // namespace tally
