// Shares of what remains (node/engine/coordination.h) against one central
// limiter, over time: Limiters in one process stand for the nodes, each runs
// its gossip rounds on its own schedule (every round, or sooner when it
// asks), its deltas reach the others a latency later, and the same arrivals
// go to a central Limiter on the same 1 ms clock.
#include <cstdint>
#include <cstdio>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "node/engine/limiter.h"
#include "tests/engine/engine_cluster.h"

namespace tally {
namespace {

using testing::EngineNode;
using testing::MakeNodes;

constexpr int64_t kStartMs = 1'700'000'040'000;
constexpr int64_t kRoundMs = 50;
constexpr int64_t kEarlyMs = 5;  // an early round comes no sooner after the last (gossip.cc)
constexpr int64_t kDeliveryMs = 5;
const LimitSpec kSpec{Algorithm::kSlidingWindowCounter, 100, 1'000};
const LimitSpec kBucketSpec{Algorithm::kTokenBucket, 100, 1'000};  // the same rate, refilled

// Arrivals: per ms, the nodes that get a request then.
using Schedule = std::vector<std::vector<size_t>>;

// Paced: `factor` x the limit per window, node i getting shares[i] of it.
Schedule Paced(const std::vector<double>& shares, int factor, int windows) {
  Schedule schedule(static_cast<size_t>(windows) * kSpec.window_ms);
  const double per_ms = factor * static_cast<double>(kSpec.limit) / kSpec.window_ms;
  std::vector<double> due(shares.size());
  for (std::vector<size_t>& now : schedule) {
    for (size_t i = 0; i < shares.size(); ++i) {
      for (due[i] += shares[i] * per_ms; due[i] >= 1; due[i] -= 1) now.push_back(i);
    }
  }
  return schedule;
}

// Poisson arrivals at `factor` x the limit, each at a random node.
Schedule Poisson(size_t members, double factor, int windows, uint32_t seed) {
  Schedule schedule(static_cast<size_t>(windows) * kSpec.window_ms);
  std::mt19937 random(seed);
  std::exponential_distribution<double> gap_ms(factor * kSpec.limit / kSpec.window_ms);
  for (double at_ms = gap_ms(random); at_ms < static_cast<double>(schedule.size());
       at_ms += gap_ms(random)) {
    schedule[static_cast<size_t>(at_ms)].push_back(random() % members);
  }
  return schedule;
}

struct Outcome {
  std::vector<uint64_t> sent;      // per node
  std::vector<uint64_t> admitted;  // per node
  uint64_t cluster_admitted = 0;
  uint64_t central_admitted = 0;
};

// With escrow (epochs of 200 ms) instead of shares when `escrow`.
Outcome Drive(size_t members, const Schedule& schedule, int64_t latency_ms, bool escrow = false,
              const LimitSpec& spec = kSpec) {
  ManualClock clock(kStartMs);
  Limiter::Options options;
  options.share_wait_ms = kRoundMs + kDeliveryMs;
  options.share_delivery_ms = kDeliveryMs;
  options.escrow_epoch_ms = escrow ? 200 : 0;
  std::vector<EngineNode> nodes = MakeNodes(&clock, members, options);
  Limiter::Options central_options;
  central_options.clock = &clock;
  Limiter central(central_options);
  std::vector<char> wanted(members);
  for (size_t i = 0; i < members; ++i)
    nodes[i].limiter->SetRoundWanted([&wanted, i] { wanted[i] = 1; });
  struct InFlight {
    int64_t arrives_ms;
    size_t from;
    KeySnapshot delta;
  };
  std::deque<InFlight> in_flight;
  Outcome outcome{std::vector<uint64_t>(members), std::vector<uint64_t>(members)};
  std::vector<int64_t> last_round_ms(members);
  for (size_t i = 0; i < members; ++i) last_round_ms[i] = static_cast<int64_t>(i * 17 % kRoundMs);
  for (int64_t t = 0; t < static_cast<int64_t>(schedule.size()); ++t) {
    for (; !in_flight.empty() && in_flight.front().arrives_ms <= t; in_flight.pop_front()) {
      for (size_t to = 0; to < members; ++to) {
        if (to != in_flight.front().from)
          REQUIRE(nodes[to].limiter->Merge(in_flight.front().delta).ok());
      }
    }
    for (const size_t node : schedule[static_cast<size_t>(t)]) {
      ++outcome.sent[node];
      const bool admitted = nodes[node].Admit("k", spec);
      outcome.admitted[node] += admitted ? 1 : 0;
      outcome.cluster_admitted += admitted ? 1 : 0;
      Decision decision;
      REQUIRE(central.Check("k", spec, 1, &decision).ok());
      outcome.central_admitted += decision.allowed ? 1 : 0;
    }
    for (size_t i = 0; i < members; ++i) {
      const int64_t since_ms = t - last_round_ms[i];
      if (since_ms < kRoundMs && !(wanted[i] && since_ms >= kEarlyMs)) continue;
      for (KeySnapshot& delta : nodes[i].Collect())
        in_flight.push_back({t + latency_ms, i, std::move(delta)});
      wanted[i] = 0;
      last_round_ms[i] = t;
    }
    clock.AdvanceMs(1);
  }
  return outcome;
}

// Each node's clients' share of admissions over all clients' (a central
// limiter gives each the same), checked within 1/max_ratio..max_ratio; the
// cluster admits at most 1.02x the central's.
void CheckFairness(const Outcome& outcome, double max_ratio) {
  CHECK(outcome.cluster_admitted <= 1.02 * static_cast<double>(outcome.central_admitted));
  double all_sent = 0;
  for (const uint64_t sent : outcome.sent) all_sent += static_cast<double>(sent);
  const double all_share = static_cast<double>(outcome.cluster_admitted) / all_sent;
  std::string relative;
  for (size_t i = 0; i < outcome.sent.size(); ++i) {
    const double node =
        static_cast<double>(outcome.admitted[i]) / static_cast<double>(outcome.sent[i]) / all_share;
    char figure[16];
    std::snprintf(figure, sizeof figure, " %.2f", node);
    relative += figure;
    CHECK(node >= 1 / max_ratio);
    CHECK(node <= max_ratio);
  }
  MESSAGE("each node's share over all clients':" << relative);
}

// 70% of the demand at one node, the rest spread over the others.
std::vector<double> Skewed(size_t members) {
  std::vector<double> shares(members, 0.3 / static_cast<double>(members - 1));
  shares[0] = 0.7;
  return shares;
}

// Skewed demand (and even) at 2x and 10x the limit, 3 and 5 nodes, deltas
// arriving at once or 4 ms late, on a sliding counter and on a token bucket
// (whose shares weigh demand per period of its slices): each node's clients
// fare within 1.5x of central.
TEST_CASE("shares over time: under skewed overload each node's clients fare within 1.5x") {
  for (const LimitSpec& spec : {kSpec, kBucketSpec}) {
    for (const bool skewed : {true, false}) {
      for (const int factor : {2, 10}) {
        for (const size_t members : {3, 5}) {
          for (const int64_t latency_ms : {0, 4}) {
            CAPTURE(AlgorithmName(spec.algorithm));
            CAPTURE(skewed);
            CAPTURE(factor);
            CAPTURE(members);
            CAPTURE(latency_ms);
            const std::vector<double> shares =
                skewed ? Skewed(members)
                       : std::vector<double>(members, 1 / static_cast<double>(members));
            CheckFairness(
                Drive(members, Paced(shares, factor, 6), latency_ms, /*escrow=*/false, spec), 1.5);
          }
        }
      }
    }
  }
}

// Escrow weighs demand too (denials included), with a floor for nodes of
// little demand: the same within 1.5x. (With the floor added to every
// weight, quiet nodes' clients got up to 1.50x at 10x on 5 nodes, 1.31x at
// 2x on 3; with the floor as a least weight, 1.00-1.11 and 0.70-1.00.) On a
// token bucket at 10x, too: weighed by admissions alone, as a bucket's
// epochs once were, the busy node's clients got 0.50-0.59x and the quiet
// nodes' up to 2.3x. (At 2x on 5 nodes the quiet nodes' clients get
// 0.61-0.71x here, with requests paced to the ms; README has the cluster's.)
TEST_CASE("shares over time: escrow's clients fare within 1.5x under skewed overload") {
  for (const int factor : {2, 10}) {
    for (const size_t members : {3, 5}) {
      CAPTURE(factor);
      CAPTURE(members);
      CheckFairness(Drive(members, Paced(Skewed(members), factor, 6), 4, /*escrow=*/true), 1.5);
      if (factor == 10) {
        CheckFairness(
            Drive(members, Paced(Skewed(members), factor, 6), 4, /*escrow=*/true, kBucketSpec),
            1.5);
      }
    }
  }
}

// Below the limit (Poisson arrivals at 0.8x over the nodes, three seeds),
// the cluster denies little that the central limiter admits: under 0.4%.
// The shares are equal while no view is full (weighing chance differences in
// demand there denied 1%), and rounded up (rounded down, a share of a few
// units left a node's second request within an early round waiting: 0.7%).
TEST_CASE("shares over time: below the limit the cluster admits what a central limiter does") {
  for (const size_t members : {3, 5}) {
    CAPTURE(members);
    uint64_t cluster = 0, central = 0;
    for (const uint32_t seed : {1, 2, 3}) {
      const Outcome outcome = Drive(members, Poisson(members, 0.8, 10, seed), 2);
      CHECK(outcome.cluster_admitted <= outcome.central_admitted);
      cluster += outcome.cluster_admitted;
      central += outcome.central_admitted;
    }
    MESSAGE("cluster " << cluster << " of central " << central);
    CHECK(static_cast<double>(cluster) >= 0.996 * static_cast<double>(central));
  }
}

}  // namespace
}  // namespace tally
