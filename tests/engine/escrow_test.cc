// Unit tests of share-of-remaining (node/engine/escrow.h), of three engines that
// gossip on a ManualClock with and without it (the overshoot near the
// limit), and of the partition modes.
#include "node/engine/escrow.h"

#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "tests/engine/engine_cluster.h"

namespace tally {
namespace {

constexpr int64_t kStartMs = 1'700'000'000'000;  // a whole second

// This node's allowance in epoch `index` begun with no epoch before it:
// remaining, its id and admissions, the others' (current window), the
// cluster's size.
uint64_t FirstAllowance(uint64_t remaining, NodeId self, uint32_t self_count,
                        const std::vector<GCounter::Slot>& others, size_t cluster_size,
                        int64_t index = 0) {
  GCounter current;
  for (const GCounter::Slot& slot : others) current.MergeSlot(slot.node, slot.count);
  EscrowEpoch epoch;
  epoch.Begin(index, 0, remaining, self, self_count, self_count, current, GCounter(), nullptr,
              nullptr, cluster_size);
  return epoch.allowance();
}

// Each member's allowance in epoch `index`, each computed from its own view
// (every member's admissions `counts`, views alike), members 1..N.
std::vector<uint64_t> Allowances(uint64_t remaining, const std::vector<uint32_t>& counts,
                                 int64_t index) {
  std::vector<uint64_t> allowances;
  for (NodeId self = 1; self <= counts.size(); ++self) {
    std::vector<GCounter::Slot> others;
    for (NodeId node = 1; node <= counts.size(); ++node) {
      if (node != self) others.push_back({node, counts[node - 1]});
    }
    allowances.push_back(
        FirstAllowance(remaining, self, counts[self - 1], others, counts.size(), index));
  }
  return allowances;
}

// Whether `allowance` is `share`'s floor or ceiling.
bool Rounds(uint64_t allowance, double share) {
  const auto units = static_cast<double>(allowance);
  return units >= std::floor(share) && units <= std::ceil(share);
}

// Shares follow recent demand, with a floor of all of it / 4N that every
// member gets, those without demand too; a share that is a whole number of
// units is exact, others come out as their floor or ceiling.
TEST_CASE("escrow: the allowance is the node's weighted share of what remains") {
  const std::vector<GCounter::Slot> others = {{2, 100}, {3, 200}};  // 400 in all: floor 33
  CHECK(FirstAllowance(600, 1, 100, others, 3) == 150);
  CHECK(FirstAllowance(600, 3, 200, {{1, 100}, {2, 100}}, 3) == 300);
  CHECK(FirstAllowance(0, 1, 100, others, 3) == 0);
  for (int64_t index = 0; index < 20; ++index) {
    // Two members without admissions weigh the floor, 20.
    CHECK(Rounds(FirstAllowance(600, 1, 100, others, 5, index), 600.0 * 100 / 440));
    // A node that has admitted nothing still gets about 1/(5N).
    CHECK(Rounds(FirstAllowance(1'000, 1, 0, {{2, 998}}, 2, index), 1000.0 * 124 / 1122));
    // A node with less demand than the floor weighs the floor; one above it,
    // its demand alone (it used to get the floor on top: more than its part).
    CHECK(Rounds(FirstAllowance(1'000, 1, 10, {{2, 890}, {3, 100}}, 3, index), 1000.0 * 83 / 1073));
    CHECK(
        Rounds(FirstAllowance(1'000, 3, 100, {{1, 10}, {2, 890}}, 3, index), 1000.0 * 100 / 1073));
  }
}

// Shares below a unit (quiet nodes near the limit): every epoch the members'
// allowances sum to exactly what remains, each is its share's floor or
// ceiling, and over epochs each member gets its share, the highest id as
// much as the lowest. (The units the floors left once went to the largest
// remainders, ties to the lowest id: members 4 and 5 here got none.)
TEST_CASE("escrow: rounding gives each member its share over epochs, whatever its id") {
  const std::vector<uint32_t> counts = {700, 75, 75, 75, 75};  // shares 7 and 0.75 of 10
  std::vector<uint64_t> sums(counts.size());
  constexpr int kEpochs = 2'000;
  for (int64_t index = 0; index < kEpochs; ++index) {
    const std::vector<uint64_t> allowances = Allowances(10, counts, index);
    CHECK(std::accumulate(allowances.begin(), allowances.end(), uint64_t{0}) == 10);
    CHECK(allowances[0] == 7);
    for (size_t node = 1; node < counts.size(); ++node) CHECK(allowances[node] <= 1);
    for (size_t node = 0; node < counts.size(); ++node) sums[node] += allowances[node];
  }
  for (size_t node = 1; node < counts.size(); ++node) {
    CAPTURE(node);
    CHECK(static_cast<double>(sums[node]) / kEpochs == doctest::Approx(0.75).epsilon(0.08));
  }
}

// Nodes that know nothing of each other yet (a new key) take the floors of
// their shares, so the allowances sum to at most what remains (33 each of
// 100, not 34).
TEST_CASE("escrow: a node that knows no other member yet takes its share's floor") {
  for (int64_t index = 0; index < 20; ++index) {
    CHECK(FirstAllowance(100, 1, 0, {}, 3, index) == 33);
    CHECK(FirstAllowance(100, 2, 0, {}, 3, index) == 33);
    CHECK(FirstAllowance(101, 1, 0, {}, 3, index) == 33);
    CHECK(FirstAllowance(102, 1, 0, {}, 3, index) == 34);
  }
}

// At the next epoch, what another node was allowed and has not been seen to
// spend is taken off what remains: it may still be on its way.
TEST_CASE("escrow: spending not heard of yet is held back") {
  GCounter other;
  other.MergeSlot(2, 10);
  EscrowEpoch epoch;
  epoch.Begin(0, 7, 100, 1, 10, 10, other, GCounter(), nullptr, nullptr, 2);  // weights 12, 12
  CHECK(epoch.allowance() == 50);
  CHECK(epoch.Left(30) == 30);
  CHECK_FALSE(epoch.Stale(0, 7));
  CHECK(epoch.Stale(1, 7));
  other.MergeSlot(2, 20);  // seen 10 of node 2's 50; this node spent 10: the view leaves 80
  epoch.Begin(1, 7, 80, 1, 20, 20, other, GCounter(), nullptr, nullptr, 2);
  CHECK(epoch.allowance() == 20);  // (80 - 40 unheard) * 20 / 40
  other.MergeSlot(2, 60);          // all of it heard by the next epoch: nothing held back
  epoch.Begin(2, 7, 20, 1, 20, 20, other, GCounter(), nullptr, nullptr, 2);
  CHECK(epoch.allowance() == 5);  // floor 10: weights 20 and 60: 5 and 15
}

// Nodes at the given demand per ms, gossiping every 50 ms and each round's
// deltas delivered one round late (so views are 50-100 ms old): what the
// cluster admits per window, with escrow (epochs of 200 ms) and without.
std::vector<uint64_t> Simulate(bool escrow, const LimitSpec& spec, int windows,
                               const std::vector<int>& per_ms_demand) {
  ManualClock clock(kStartMs);
  std::vector<std::unique_ptr<Limiter>> nodes;
  for (NodeId id = 1; id <= per_ms_demand.size(); ++id) {
    Limiter::Options options{id, 1'000, &clock};
    options.replicate = true;
    options.escrow_epoch_ms = escrow ? 200 : 0;
    options.cluster_size = per_ms_demand.size();
    nodes.push_back(std::make_unique<Limiter>(options));
  }
  std::vector<uint64_t> admitted(static_cast<size_t>(windows), 0);
  std::vector<std::vector<KeySnapshot>> in_flight(nodes.size());  // sent last round
  for (int64_t ms = 0; ms < windows * static_cast<int64_t>(spec.window_ms); ++ms) {
    for (size_t n = 0; n < nodes.size(); ++n) {
      for (int i = 0; i < per_ms_demand[n]; ++i) {
        Decision decision;
        REQUIRE(nodes[n]->Check("hot", spec, 1, &decision).ok());
        if (decision.allowed)
          ++admitted[static_cast<size_t>(ms / static_cast<int64_t>(spec.window_ms))];
      }
    }
    if (ms % 50 == 49) {  // a round: deliver last round's deltas, collect this round's
      for (size_t from = 0; from < nodes.size(); ++from) {
        for (const KeySnapshot& delta : in_flight[from]) {
          for (size_t to = 0; to < nodes.size(); ++to) {
            if (to != from) REQUIRE(nodes[to]->Merge(delta).ok());
          }
        }
        in_flight[from].clear();
        nodes[from]->CollectGossip([&](const KeySnapshot& s) { in_flight[from].push_back(s); });
      }
    }
    clock.AdvanceMs(1);
  }
  return admitted;
}

// Plain gossip overshoots by what the others admit while views are stale;
// escrow keeps each window within 1% of the limit and above 95% of it,
// spread evenly or skewed to one node.
TEST_CASE("escrow: three gossiping engines keep to the limit near it") {
  struct Case {
    Algorithm algorithm;
    std::vector<int> per_ms_demand;  // per node; the limit is 1 per ms
  };
  const Case cases[] = {
      {Algorithm::kFixedWindow, {10, 10, 10}},  // 30x, even
      {Algorithm::kFixedWindow, {24, 3, 3}},    // 30x, skewed
      {Algorithm::kFixedWindow, {1, 1, 0}},     // 2x, one node idle
      {Algorithm::kSlidingWindowCounter, {10, 10, 10}},
      {Algorithm::kSlidingWindowCounter, {2, 1, 1}},  // 4x, skewed
  };
  for (const Case& c : cases) {
    CAPTURE(AlgorithmName(c.algorithm));
    CAPTURE(c.per_ms_demand[0]);
    const LimitSpec spec{c.algorithm, 1'000, 1'000};
    const std::vector<uint64_t> plain = Simulate(false, spec, 4, c.per_ms_demand);
    const std::vector<uint64_t> shared = Simulate(true, spec, 4, c.per_ms_demand);
    const bool heavy = c.per_ms_demand[0] + c.per_ms_demand[1] + c.per_ms_demand[2] >= 10;
    for (size_t w = 1; w < plain.size(); ++w) {  // window 0: the sliding counter starts empty
      CAPTURE(w);
      MESSAGE(AlgorithmName(c.algorithm)
              << " demand " << c.per_ms_demand[0] << "/" << c.per_ms_demand[1] << "/"
              << c.per_ms_demand[2] << " per ms, window " << w << ": plain gossip " << plain[w]
              << ", escrow " << shared[w] << " (limit 1000)");
      if (heavy) CHECK(plain[w] > shared[w]);
      CHECK(shared[w] <= 1'010);
      CHECK(shared[w] >= 950);
    }
  }
}

// The token bucket (1000, refilled 1000 per s) escrowed the same way: over
// four windows the three nodes admit what one central bucket fed all of the
// demand admits, within 1% with escrow and 10% without, spread evenly or
// skewed to one node.
TEST_CASE("escrow: three gossiping engines share one token bucket") {
  for (const std::vector<int>& per_ms_demand :
       {std::vector<int>{10, 10, 10}, std::vector<int>{24, 3, 3}, std::vector<int>{2, 1, 1}}) {
    CAPTURE(per_ms_demand[0]);
    const LimitSpec spec{Algorithm::kTokenBucket, 1'000, 1'000};
    const auto total = [&](bool escrow, const std::vector<int>& demand) {
      const std::vector<uint64_t> admitted = Simulate(escrow, spec, 4, demand);
      return static_cast<double>(std::accumulate(admitted.begin(), admitted.end(), uint64_t{0}));
    };
    const double central = total(false, {per_ms_demand[0] + per_ms_demand[1] + per_ms_demand[2]});
    const double plain = total(false, per_ms_demand) / central;
    const double shared = total(true, per_ms_demand) / central;
    MESSAGE("token_bucket demand " << per_ms_demand[0] << "/" << per_ms_demand[1] << "/"
                                   << per_ms_demand[2] << " per ms, over 4 windows: central "
                                   << central << ", plain gossip " << plain << "x, escrow "
                                   << shared << "x");
    CHECK(plain <= 1.10);
    CHECK(plain >= 0.95);
    CHECK(shared <= 1.01);
    CHECK(shared >= 0.95);
  }
}

// A coordinated burst of 5x the limit within 20 ms on a fresh key at every
// node, rounds every 10 ms: the nodes together admit what one central node
// admits (a bucket: its capacity and the refill of those 20 ms, 102), the
// log at most N - 1 beyond. A bucket's period of slices may end within an
// epoch (offset 0 here: 8 ms in); the epoch goes on counting across it.
TEST_CASE("escrow: a coordinated burst on a fresh bucket or log stays at the limit") {
  for (const Algorithm algorithm : {Algorithm::kTokenBucket, Algorithm::kSlidingWindowLog}) {
    for (const size_t members : {3, 5}) {
      for (const int64_t offset_ms : {0, 60, 190}) {
        CAPTURE(algorithm);
        CAPTURE(members);
        CAPTURE(offset_ms);
        ManualClock clock(kStartMs + offset_ms);
        Limiter::Options options;
        options.replicate = true;
        options.escrow_epoch_ms = 200;
        options.share_wait_ms = 55;
        options.share_delivery_ms = 5;
        std::vector<testing::EngineNode> nodes = testing::MakeNodes(&clock, members, options);
        const LimitSpec spec{algorithm, 100, 1'000};
        uint64_t admitted = 0;
        for (int ms = 0; ms < 1'000; ++ms) {
          for (int request = 0; ms < 20 && request < 25; ++request) {
            for (testing::EngineNode& node : nodes) admitted += node.Admit("fresh", spec) ? 1 : 0;
          }
          clock.AdvanceMs(1);
          if (ms % 10 == 9) testing::RunRound(nodes);
        }
        CHECK(admitted >= 90);
        CHECK(admitted <=
              (algorithm == Algorithm::kTokenBucket ? 102 * 105 / 100 : 100 + members - 1));
      }
    }
  }
}

// Node 1 of a gossiping cluster of `members` with escrow epochs of 200 ms.
Limiter::Options EscrowedNode(const Clock* clock, size_t members) {
  Limiter::Options options{1, 1'000, clock};
  options.replicate = true;
  options.escrow_epoch_ms = 200;
  options.cluster_size = members;
  return options;
}

// Node 2's delta of key "k" in the first window: `count` admitted.
KeySnapshot PeerDelta(const LimitSpec& spec, uint32_t count) {
  KeySnapshot peer;
  peer.key.push_back('k');  // (GCC 12 warns falsely, -Wrestrict, on = "k" here with sanitizers)
  peer.algorithm = spec.algorithm;
  peer.window_ms = spec.window_ms;
  peer.counts.window_index = kStartMs / 1'000;
  peer.counts.current.MergeSlot(2, count);
  return peer;
}

// A request a central limiter admits on an idle key passes under escrow
// too, whatever its cost; once the key is in use, the share applies again.
TEST_CASE("escrow: an idle key admits any cost up to the limit") {
  ManualClock clock(kStartMs);
  Limiter limiter(EscrowedNode(&clock, 3));
  for (const LimitSpec& spec : {LimitSpec{Algorithm::kFixedWindow, 100, 60'000},
                                LimitSpec{Algorithm::kSlidingWindowCounter, 100, 60'000},
                                LimitSpec{Algorithm::kTokenBucket, 100, 60'000}}) {
    CAPTURE(AlgorithmName(spec.algorithm));
    const std::string key(AlgorithmName(spec.algorithm));
    Decision decision;
    REQUIRE(limiter.Check(key, spec, 60, &decision).ok());
    CHECK(decision.allowed);  // a third of 100 would be 33
    CHECK(decision.remaining == 40);
    // In use now: this node's share of 40 weighs its 60 against the floors
    // (5) of two members without admissions: 40 x 60 / 70 = 34.
    REQUIRE(limiter.Check(key, spec, 35, &decision).ok());
    CHECK_FALSE(decision.allowed);
    CHECK(decision.remaining == 40);
  }
}

// A node spends its share of an epoch and is told to retry when the next
// epoch begins; there a peer's allowance it has not heard spent is held
// back; a node alone is not escrowed. `remaining` stays what the view
// leaves of the cluster-wide limit throughout, never the share.
TEST_CASE("escrow: a spent share waits for the next epoch") {
  ManualClock clock(kStartMs);
  Limiter limiter(EscrowedNode(&clock, 2));
  const LimitSpec spec{Algorithm::kFixedWindow, 100, 1'000};
  KeySnapshot peer = PeerDelta(spec, 64);  // floor 8: the peer weighs 64, this node 8
  REQUIRE(limiter.Merge(peer).ok());
  Decision decision;
  REQUIRE(limiter.Check("k", spec, 0, &decision).ok());
  CHECK(decision.remaining == 36);  // the cluster's; the share is 36 * 8 / 72 = 4
  REQUIRE(limiter.Check("k", spec, 5, &decision).ok());
  CHECK_FALSE(decision.allowed);
  CHECK(decision.remaining == 36);
  REQUIRE(limiter.Check("k", spec, 4, &decision).ok());
  CHECK(decision.allowed);
  CHECK(decision.remaining == 32);
  clock.AdvanceMs(30);
  REQUIRE(limiter.Check("k", spec, 1, &decision).ok());
  CHECK_FALSE(decision.allowed);  // the share is spent for this epoch
  CHECK(decision.retry_after_ms == 170);
  // A new epoch: 32 left in this view, but node 2 was allowed 32 of the last
  // epoch and none of its spending has been heard of: nothing left.
  clock.AdvanceMs(170);
  REQUIRE(limiter.Check("k", spec, 0, &decision).ok());
  CHECK_FALSE(decision.allowed);  // a peek: not even one unit is this node's
  CHECK(decision.remaining == 32);
  CHECK(decision.retry_after_ms == 200);
  peer.counts.current.MergeSlot(2, 96);  // it did spend all of them
  REQUIRE(limiter.Merge(peer).ok());
  clock.AdvanceMs(200);
  REQUIRE(limiter.Check("k", spec, 1, &decision).ok());
  CHECK_FALSE(decision.allowed);  // the plain limit: 96 + 4 used
  CHECK(decision.remaining == 0);
  Limiter::Options alone_options{1, 1'000, &clock};
  alone_options.escrow_epoch_ms = 200;  // cluster_size 1: nothing to share with
  Limiter alone(alone_options);
  REQUIRE(alone.Check("k", spec, 0, &decision).ok());
  CHECK(decision.remaining == 100);
}

// An epoch this node begins late (its first check some time after the
// start) weighs the peer's count as it stood at the start, not with what
// the peer has spent of the same epoch since: else this node would share
// out what the peer's spending left, and get less than its share.
TEST_CASE("escrow: an epoch begun late weighs the counts at its start") {
  ManualClock clock(kStartMs);
  Limiter limiter(EscrowedNode(&clock, 2));
  const LimitSpec spec{Algorithm::kFixedWindow, 1'000, 1'000};
  KeySnapshot peer = PeerDelta(spec, 640);
  REQUIRE(limiter.Merge(peer).ok());
  Decision decision;
  REQUIRE(limiter.Check("k", spec, 0, &decision).ok());  // epoch 0: shares 40 and 320
  peer.counts.current.MergeSlot(2, 960);                 // the peer spent its 320
  REQUIRE(limiter.Merge(peer).ok());
  clock.AdvanceMs(210);                   // epoch 1
  peer.counts.current.MergeSlot(2, 980);  // it spent 20 of epoch 1 before this node's check
  REQUIRE(limiter.Merge(peer).ok());
  clock.AdvanceMs(30);
  // Of the 40 left at the epoch's start, this node's weight (the floor, 120,
  // of 1080) gives 4.4; weighed on the view after the peer's 20, 2.2 of 20.
  REQUIRE(limiter.Check("k", spec, 4, &decision).ok());
  CHECK(decision.allowed);
  CHECK(decision.remaining == 16);
}

// The same on a token bucket, with a second engine as the peer: what this
// node may draw in an epoch does not depend on whether the peer's first
// draws in it arrive before or after this node's first check in it. (The
// bucket refills, so the epoch after one where both drew all they were
// allowed has something to share.)
TEST_CASE("escrow: a bucket's allowance does not depend on when the node first checks") {
  const LimitSpec spec{Algorithm::kTokenBucket, 1'000, 1'000};
  const auto allowance = [&](bool checks_first) {
    ManualClock clock(kStartMs);
    Limiter node(EscrowedNode(&clock, 2));
    Limiter::Options peer_options = EscrowedNode(&clock, 2);
    peer_options.node_id = 2;
    Limiter peer(peer_options);
    const auto admit = [&](Limiter& limiter, int requests) {
      int admitted = 0;
      for (int i = 0; i < requests; ++i) {
        Decision decision;
        REQUIRE(limiter.Check("k", spec, 1, &decision).ok());
        admitted += decision.allowed ? 1 : 0;
      }
      return admitted;
    };
    const auto deliver = [&] {
      peer.CollectGossip([&](const KeySnapshot& delta) { REQUIRE(node.Merge(delta).ok()); });
    };
    admit(peer, 1);  // an idle bucket: the first draw passes
    deliver();
    Decision decision;
    REQUIRE(node.Check("k", spec, 0, &decision).ok());
    CHECK(admit(peer, 1'000) == 499);  // all of its share of the epoch
    deliver();
    clock.AdvanceMs(200);  // the next epoch
    if (checks_first) REQUIRE(node.Check("k", spec, 0, &decision).ok());
    CHECK(admit(peer, 50) == 50);
    deliver();
    clock.AdvanceMs(20);
    return admit(node, 1'000);
  };
  const int early = allowance(true);
  CHECK(early > 0);
  CHECK(allowance(false) == early);
}

// Denials weigh as demand: a node's own as its peers have heard them, which
// once a delivery time has passed since it sent them is as it sent them
// last. A node denied beyond its floor share sends its denials with its next
// delta, and the next window's epochs weigh them as the peer's admissions.
TEST_CASE("escrow: a node's own denials weigh as sent once they have had time to arrive") {
  ManualClock clock(kStartMs);
  Limiter::Options options = EscrowedNode(&clock, 2);
  options.share_delivery_ms = 5;
  Limiter limiter(options);
  const LimitSpec spec{Algorithm::kFixedWindow, 1'000, 1'000};
  KeySnapshot peer = PeerDelta(spec, 400);
  REQUIRE(limiter.Merge(peer).ok());
  const auto admit_of_400 = [&] {
    uint64_t admitted = 0;
    for (int i = 0; i < 400; ++i) {
      Decision decision;
      REQUIRE(limiter.Check("k", spec, 1, &decision).ok());
      admitted += decision.allowed ? 1 : 0;
    }
    return admitted;
  };
  // This node weighs the floor, 50 of 450: 600 * 50 / 450 = 66.7.
  CHECK(Rounds(admit_of_400(), 600.0 * 50 / 450));
  limiter.CollectGossip([](const KeySnapshot&) {});  // its admissions and 333 or 334 denials
  clock.AdvanceMs(1'000);
  // The next window: 400 of its demand (admitted and denied) against the
  // peer's 400, so half of the limit. Weighed without its denials, 66 or 67
  // of 466 or so: a seventh.
  CHECK(admit_of_400() == 400);
}

// Cut off from a peer in the share mode, a node keeps its own admissions to
// limit / nodes (and says when to retry); reachable again, the whole limit
// applies. Fail-open (the default) enforces the whole limit throughout.
TEST_CASE("partition modes: share keeps to limit / nodes, fail-open to the limit") {
  for (const bool share : {true, false}) {
    CAPTURE(share);
    ManualClock clock(kStartMs + 200);
    Limiter::Options options{1, 1'000, &clock};
    options.replicate = true;
    options.cluster_size = 3;
    options.partition_share = share;
    Limiter limiter(options);
    for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingWindowCounter}) {
      CAPTURE(AlgorithmName(algorithm));
      const LimitSpec spec{algorithm, 90, 1'000};
      const std::string key(AlgorithmName(algorithm));
      limiter.SetClusterView(3, 1);
      int admitted = 0;
      Decision decision;
      for (int i = 0; i < 100; ++i) {
        REQUIRE(limiter.Check(key, spec, 1, &decision).ok());
        admitted += decision.allowed ? 1 : 0;
      }
      CHECK(admitted == (share ? 30 : 90));
      CHECK(decision.remaining == (share ? 60 : 0));  // what this node knows of the cluster's
      if (share) CHECK(decision.retry_after_ms > 0);
      limiter.SetClusterView(3, 0);
      REQUIRE(limiter.Check(key, spec, 0, &decision).ok());
      CHECK(decision.remaining == (share ? 60 : 0));
    }
  }
}

}  // namespace
}  // namespace tally
