// The gossip layer in-process: two Gossip instances on loopback, every
// reading of time from one ManualClock, so membership timing is driven by
// the test rather than by waiting.
#include <algorithm>
#include <optional>
#include <string>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/gossip/gossip.h"
#include "protocol/peer_auth.h"
#include "protocol/peer_codec.h"
#include "tests/support/poll.h"
#include "tests/support/raw_connection.h"

namespace tally {
namespace {

struct TestNode {
  TestNode(NodeId id, const Clock* clock) : limiter(LimiterOptions(id, clock)) {}

  static Limiter::Options LimiterOptions(NodeId id, const Clock* clock) {
    Limiter::Options options;
    options.node_id = id;
    options.clock = clock;
    options.replicate = true;
    return options;
  }

  Limiter limiter;
  std::optional<Gossip> gossip;
};

// Gossip on an ephemeral loopback port, every reading of time from `clock`.
Gossip::Options OptionsOn(const Clock* clock) {
  Gossip::Options options;
  options.cluster_secret = std::string(32, 's');
  options.listen_port = 0;
  options.clock = clock;
  return options;
}

protocol::MemberState StateOf(const Gossip& gossip, NodeId node) {
  protocol::StatsReply stats;
  gossip.AddStats(&stats);
  for (const protocol::MemberStatus& member : stats.members) {
    if (member.node_id == node) return member.state;
  }
  FAIL("node ", node, " is not a member");
  return protocol::MemberState::kLeft;
}

// A few of the node's rounds (real time) run: whatever the clock made due has happened.
void RoundsPass(const Gossip& gossip) {
  const auto rounds = [&] {
    protocol::StatsReply stats;
    gossip.AddStats(&stats);
    return stats.gossip_rounds;
  };
  const uint64_t from = rounds();
  REQUIRE(testing::PollUntil([&] { return rounds() >= from + 3; }));
}

// Moves the clock on by ms in steps of 100 ms, with a few of the node's
// rounds after each: a jump in one step would look to it like a stall of
// its own (MemberProbes::Stalled), which postpones its judgements.
void Advance(ManualClock* clock, const Gossip& gossip, int64_t ms) {
  for (int64_t step_ms = 0; ms > 0; ms -= step_ms) {
    step_ms = std::min<int64_t>(ms, 100);
    clock->AdvanceMs(step_ms);
    RoundsPass(gossip);
  }
}

// Whether the node's link to `peer` is up.
bool LinkUp(const Gossip& gossip, NodeId peer) {
  protocol::StatsReply stats;
  gossip.AddStats(&stats);
  for (const protocol::PeerLinkStatus& link : stats.peer_links) {
    if (link.node_id == peer) return link.up;
  }
  return false;
}

// A peer that stops is probed when its link drops, and turns suspect and
// then dead exactly when the injected clock passes suspect-after and
// dead-after from then (rounds run on real time and read the injected clock).
TEST_CASE("gossip: membership timing follows the injected clock") {
  ManualClock clock(/*wall_ms=*/1'700'000'000'000, /*monotonic_ms=*/1'000);
  Gossip::Options options = OptionsOn(&clock);
  options.suspect_after_ms = 1'000;
  options.dead_after_ms = 3'000;

  TestNode a(1, &clock), b(2, &clock);
  a.gossip.emplace(options, &a.limiter);
  REQUIRE(a.gossip->Listen().ok());
  Gossip::Options b_options = options;
  b_options.seeds = {"127.0.0.1:" + std::to_string(a.gossip->port())};
  b.gossip.emplace(b_options, &b.limiter);
  REQUIRE(b.gossip->Listen().ok());
  a.gossip->Start();
  b.gossip->Start();

  // Joining takes real round trips on loopback; the clock stands still
  // meanwhile. A's link to B comes up once A has heard of B.
  REQUIRE(testing::PollUntil([&] { return LinkUp(*a.gossip, 2); }));
  CHECK(StateOf(*a.gossip, 2) == protocol::MemberState::kAlive);

  b.gossip->Stop();  // silent from now on, without a leave
  // A's link to B is down, and a round (every 50 ms of real time) has probed B.
  REQUIRE(testing::PollUntil([&] { return !LinkUp(*a.gossip, 2); }));
  RoundsPass(*a.gossip);  // the round that saw the link drop has probed B
  const auto advance = [&](int64_t ms) { Advance(&clock, *a.gossip, ms); };
  advance(999);
  CHECK(StateOf(*a.gossip, 2) == protocol::MemberState::kAlive);
  advance(1);
  CHECK(StateOf(*a.gossip, 2) == protocol::MemberState::kSuspect);
  advance(1'999);
  CHECK(StateOf(*a.gossip, 2) == protocol::MemberState::kSuspect);
  advance(1);
  CHECK(StateOf(*a.gossip, 2) == protocol::MemberState::kDead);
  a.gossip->Stop();
}

// A delta lost on the wire (here: taken from A's engine before a round
// could send it) reaches B by anti-entropy: at the first interval after the
// key's range is quiet (the admission could have waited 2 s, and its relayer
// as long again, plus four rounds), A's digest of the range differs from B's
// and A sends the range. Nothing else is sent whole.
TEST_CASE("gossip: a lost delta is repaired at the first anti-entropy interval once quiet") {
  ManualClock clock(/*wall_ms=*/1'700'000'000'000, /*monotonic_ms=*/1'000);
  Gossip::Options options = OptionsOn(&clock);
  options.relay = false;
  options.full_sync_interval_ms = 1'000;
  options.membership_interval_ms = 100;  // rounds at rest come this often: Advance is quick
  Limiter::Options a_options = TestNode::LimiterOptions(1, &clock);
  a_options.gossip_max_delay_ms = 2'000;  // a far key's admission may wait 2 s
  Limiter a_limiter(a_options);
  TestNode b(2, &clock);
  Gossip a_gossip(options, &a_limiter);
  REQUIRE(a_gossip.Listen().ok());
  Gossip::Options b_options = options;
  b_options.seeds = {"127.0.0.1:" + std::to_string(a_gossip.port())};
  b.gossip.emplace(b_options, &b.limiter);
  REQUIRE(b.gossip->Listen().ok());
  a_gossip.Start();
  b.gossip->Start();
  REQUIRE(testing::PollUntil([&] { return LinkUp(a_gossip, 2) && LinkUp(*b.gossip, 1); }));
  RoundsPass(a_gossip);  // the first full sync on the link, of nothing

  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
  Decision decision;
  REQUIRE(a_limiter.Check("lost", spec, 1, &decision).ok());  // at a whole second
  REQUIRE(decision.allowed);
  size_t taken = 0;
  a_limiter.CollectGossip([&](const KeySnapshot&) { ++taken; }, /*flush_deferred=*/true);
  REQUIRE(taken == 1);  // the delta, lost
  KeySnapshot snapshot;
  Advance(&clock, a_gossip, 4'900);  // quiet from +4.2 s; the next interval is at +5 s
  CHECK(b.limiter.Read("lost", spec, &snapshot).code() == Status::Code::kNotFound);
  Advance(&clock, a_gossip, 100);
  REQUIRE(testing::PollUntil([&] { return b.limiter.Read("lost", spec, &snapshot).ok(); }));
  CHECK(snapshot.counts.current.Get(1) == 1);
  protocol::StatsReply stats;
  a_gossip.AddStats(&stats);
  CHECK(stats.gossip_ranges_sent == 1);
  CHECK(stats.gossip_digests_sent == 1);
  b.gossip->Stop();
  a_gossip.Stop();
}

// A hello dripped a byte a second never completes a message, so its
// session is closed idle_timeout_ms after it opened, by the injected clock,
// however regularly the bytes come.
TEST_CASE("gossip: a dripped frame is closed idle_timeout_ms after the last whole message") {
  ManualClock clock(/*wall_ms=*/1'700'000'000'000, /*monotonic_ms=*/1'000);
  Gossip::Options options = OptionsOn(&clock);
  options.idle_timeout_ms = 5'000;
  TestNode node(1, &clock);
  node.gossip.emplace(options, &node.limiter);
  REQUIRE(node.gossip->Listen().ok());
  node.gossip->Start();
  std::string hello;
  protocol::EncodeHello(9, protocol::RandomNonce(), false, 0, &hello);
  testing::RawConnection dripper(node.gossip->port());
  REQUIRE(dripper.connected());
  for (size_t second = 0; second < 5; ++second) {
    REQUIRE(dripper.Send(hello.substr(second, 1)));
    CHECK_FALSE(dripper.ClosedByPeer(120));  // accepted; rounds run every 50 ms of real time
    clock.AdvanceMs(999);
  }
  REQUIRE(dripper.Send(hello.substr(5, 1)));
  CHECK_FALSE(dripper.ClosedByPeer(120));
  clock.AdvanceMs(6);  // 5,001 ms after the connection opened
  CHECK(dripper.ClosedByPeer(1'000));
  node.gossip->Stop();
}

// While it waits for a seed that never answers, WaitForRecovery reports its
// progress (not joined) about every kRecoveryProgressMs, then gives up at its
// timeout (real time: the wait is on a condition variable).
TEST_CASE("gossip: WaitForRecovery reports its progress while it waits") {
  ManualClock clock(/*wall_ms=*/1'700'000'000'000, /*monotonic_ms=*/1'000);
  Gossip::Options options = OptionsOn(&clock);
  options.seeds = {"127.0.0.1:1"};  // nothing listens there
  TestNode node(1, &clock);
  node.gossip.emplace(options, &node.limiter);
  REQUIRE(node.gossip->Listen().ok());
  node.gossip->Start();
  int reports = 0;
  const Gossip::Recovery recovery =
      node.gossip->WaitForRecovery(3 * Gossip::kRecoveryProgressMs, [&](const auto& now) {
        CHECK_FALSE(now.joined);
        ++reports;
      });
  CHECK_FALSE(recovery.joined);
  CHECK(reports >= 1);
  CHECK(reports <= 3);
  node.gossip->Stop();
}

}  // namespace
}  // namespace tally
