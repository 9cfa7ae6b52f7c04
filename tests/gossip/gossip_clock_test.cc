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
#include "tests/support/test_peer.h"

namespace tally {
namespace {

struct TestNode {
  TestNode(NodeId id, const Clock* clock) : limiter(LimiterOptions(id, clock)) {}
  explicit TestNode(const Limiter::Options& options) : limiter(options) {}

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

// Starts A's gossip, then B's with A as its seed, both with `options`.
void StartTwo(const Gossip::Options& options, TestNode& a, TestNode& b) {
  a.gossip.emplace(options, &a.limiter);
  REQUIRE(a.gossip->Listen().ok());
  Gossip::Options b_options = options;
  b_options.seeds = {"127.0.0.1:" + std::to_string(a.gossip->port())};
  b.gossip.emplace(b_options, &b.limiter);
  REQUIRE(b.gossip->Listen().ok());
  a.gossip->Start();
  b.gossip->Start();
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
  StartTwo(options, a, b);

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

// Two nodes on one manual clock for anti-entropy: no relay, an interval of
// 1 s, and A's far admissions may wait 2 s. Take(key) admits on A and takes
// the delta from A's engine before a round could send it (lost on the wire).
struct AntiEntropyPair {
  AntiEntropyPair() {
    options.relay = false;
    options.full_sync_interval_ms = 1'000;
    options.membership_interval_ms = 100;  // rounds at rest come this often: Advance is quick
    StartTwo(options, a, b);
    REQUIRE(testing::PollUntil([&] { return LinkUp(*a.gossip, 2) && LinkUp(*b.gossip, 1); }));
    RoundsPass(*a.gossip);  // the first full sync on the link, of nothing
  }
  ~AntiEntropyPair() {
    b.gossip->Stop();
    a.gossip->Stop();
  }
  static Limiter::Options AOptions(const Clock* clock) {
    Limiter::Options a_options = TestNode::LimiterOptions(1, clock);
    a_options.gossip_max_delay_ms = 2'000;
    return a_options;
  }
  KeySnapshot Take(const std::string& key) {
    Decision decision;
    REQUIRE(a.limiter.Check(key, spec, 1, &decision).ok());
    REQUIRE(decision.allowed);
    std::vector<KeySnapshot> taken;
    a.limiter.CollectGossip([&](const KeySnapshot& snapshot) { taken.push_back(snapshot); },
                            /*flush_deferred=*/true);
    REQUIRE(taken.size() == 1);
    return taken[0];
  }
  bool BHas(const std::string& key) {
    KeySnapshot snapshot;
    return b.limiter.Read(key, spec, &snapshot).ok();
  }
  protocol::StatsReply AStats() {
    protocol::StatsReply stats;
    a.gossip->AddStats(&stats);
    return stats;
  }
  void Advance(int64_t ms) { tally::Advance(&clock, *a.gossip, ms); }

  ManualClock clock{/*wall_ms=*/1'700'000'000'000, /*monotonic_ms=*/1'000};
  Gossip::Options options = OptionsOn(&clock);
  TestNode a{AOptions(&clock)};
  TestNode b{2, &clock};
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
};

// A delta lost on the wire reaches B by anti-entropy: at the first interval
// after the key's range is quiet (the admission could have waited 2 s, and
// its relayer as long again, plus four rounds), A's digest of the range
// differs from B's; B compares again 2 s later (what was on its way would
// have come), then asks, and A sends the range. Nothing else is sent whole.
TEST_CASE("gossip: a lost delta is repaired at the first anti-entropy interval once quiet") {
  AntiEntropyPair pair;
  pair.Take("lost");    // at a whole second
  pair.Advance(4'900);  // quiet from +4.2 s; the next interval is at +5 s
  CHECK_FALSE(pair.BHas("lost"));
  pair.Advance(100);  // the interval: B finds the digest differs
  pair.Advance(1'900);
  CHECK_FALSE(pair.BHas("lost"));
  pair.Advance(100);  // B's recheck: it asks for the range
  REQUIRE(testing::PollUntil([&] { return pair.BHas("lost"); }));
  KeySnapshot snapshot;
  REQUIRE(pair.b.limiter.Read("lost", pair.spec, &snapshot).ok());
  CHECK(snapshot.counts.current.Get(1) == 1);
  CHECK(pair.AStats().gossip_ranges_sent == 1);
  CHECK(pair.AStats().gossip_digests_sent == 1);
}

// A digest that differs only for what is still on its way (here: the delta
// reaches B after B compared, before its recheck) gets no range sent: the
// range changed at B after the interval's instant, so at its recheck B
// answers that it compares later, and A's next digest of it agrees. (A's
// interval and B's recheck fall at the same instant, +7 s: whichever of
// the two rounds runs first, A's digest goes again at +7 s or at +8 s.)
TEST_CASE("gossip: a range that differed only for what was on its way is not sent") {
  AntiEntropyPair pair;
  const KeySnapshot late = pair.Take("late");
  pair.Advance(5'000);  // the interval: B finds the digest differs
  CHECK_FALSE(pair.BHas("late"));
  REQUIRE(pair.b.limiter.Merge(late).ok());  // it arrives
  pair.Advance(2'000);                       // B's recheck: later
  RoundsPass(*pair.b.gossip);
  pair.Advance(1'000);  // the interval after B's answer
  RoundsPass(*pair.b.gossip);
  CHECK(pair.AStats().gossip_digests_sent == 2);
  pair.Advance(3'000);  // and later ones: the digests agree
  RoundsPass(*pair.b.gossip);
  CHECK(pair.AStats().gossip_digests_sent == 2);
  CHECK(pair.AStats().gossip_ranges_sent == 0);
}

// Starts the node's gossip, listening, with an idle timeout of 5 s.
void StartWithIdleTimeout(TestNode* node, const Clock* clock) {
  Gossip::Options options = OptionsOn(clock);
  options.idle_timeout_ms = 5'000;
  node->gossip.emplace(options, &node->limiter);
  REQUIRE(node->gossip->Listen().ok());
  node->gossip->Start();
}

// A hello dripped a byte a second never completes a message, so its
// session is closed idle_timeout_ms after it opened, by the injected clock,
// however regularly the bytes come.
TEST_CASE("gossip: a dripped hello is closed idle_timeout_ms after the session opened") {
  ManualClock clock(/*wall_ms=*/1'700'000'000'000, /*monotonic_ms=*/1'000);
  TestNode node(1, &clock);
  StartWithIdleTimeout(&node, &clock);
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

// A member with nothing to send sends nothing; when its next message comes
// in pieces after a long quiet, the session is not cut off: the idle timeout
// runs from the first byte of the message in progress, not from the last
// whole message. A message left half there that long is still closed.
TEST_CASE("gossip: a quiet member's message that comes in pieces is not cut off") {
  ManualClock clock(/*wall_ms=*/1'700'000'000'000, /*monotonic_ms=*/1'000);
  TestNode node(1, &clock);
  StartWithIdleTimeout(&node, &clock);
  testing::TestPeer peer(node.gossip->port());
  REQUIRE(peer.Handshake(9, OptionsOn(&clock).cluster_secret));
  std::string heartbeat;
  protocol::EncodeHeartbeat(&heartbeat);
  peer.Send(peer.Sealed(heartbeat));  // proves the secret
  clock.AdvanceMs(10'000);            // quiet
  const std::string next = peer.Sealed(heartbeat);
  peer.Send(next.substr(0, 8));
  CHECK_FALSE(peer.connection().ClosedByPeer(120));  // rounds run every 50 ms of real time
  clock.AdvanceMs(4'000);
  CHECK_FALSE(peer.connection().ClosedByPeer(120));
  peer.Send(next.substr(8));
  const std::string stalled = peer.Sealed(heartbeat);
  peer.Send(stalled.substr(0, stalled.size() - 1));
  CHECK_FALSE(peer.connection().ClosedByPeer(120));
  clock.AdvanceMs(5'001);
  CHECK(peer.connection().ClosedByPeer(1'000));
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
