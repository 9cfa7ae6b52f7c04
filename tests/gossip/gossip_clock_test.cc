// The gossip layer in-process: two Gossip instances on loopback, every
// reading of time from one ManualClock, so membership timing is driven by
// the test rather than by waiting.
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

// A peer that goes silent turns suspect and then dead exactly when the injected clock passes
// suspect-after and dead-after.
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

  // Joining takes real round trips on loopback; the clock stands still meanwhile.
  REQUIRE(testing::PollUntil([&] {
    protocol::StatsReply stats;
    a.gossip->AddStats(&stats);
    return stats.members.size() == 2;
  }));
  CHECK(StateOf(*a.gossip, 2) == protocol::MemberState::kAlive);

  b.gossip->Stop();  // silent from now on, without a leave
  // Once A has read the end of B's session, nothing B sent is still on its way.
  REQUIRE(testing::PollUntil([&] {
    protocol::StatsReply stats;
    a.gossip->AddStats(&stats);
    for (const protocol::PeerNodeStatus& node : stats.peer_nodes) {
      if (node.node_id == 2 && node.connected) return false;
    }
    return true;
  }));
  clock.AdvanceMs(999);
  CHECK(StateOf(*a.gossip, 2) == protocol::MemberState::kAlive);
  clock.AdvanceMs(1);
  CHECK(StateOf(*a.gossip, 2) == protocol::MemberState::kSuspect);
  clock.AdvanceMs(1'999);
  CHECK(StateOf(*a.gossip, 2) == protocol::MemberState::kSuspect);
  clock.AdvanceMs(1);
  CHECK(StateOf(*a.gossip, 2) == protocol::MemberState::kDead);
  a.gossip->Stop();
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
