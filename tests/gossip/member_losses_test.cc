// MemberLosses (node/gossip/member_losses.h): a peer's link going down
// counts what it may have kept back as spent until the membership settles
// it: a restart keeps the loss, heartbeats or a leave forget it.
#include "node/gossip/member_losses.h"

#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"

namespace tally {
namespace {

constexpr int64_t kStartMs = 1'700'000'040'000;  // a minute's start
constexpr NodeId kSelf = 1;
const LimitSpec kSpec{Algorithm::kFixedWindow, 960, 60'000};  // a share: 960 / 96 = 10

// This node's limiter, in a cluster of 3 with a gossip delay.
struct Fixture {
  Fixture() : clock(kStartMs), limiter(Options(&clock)), losses(&limiter) {}
  static Limiter::Options Options(ManualClock* clock) {
    Limiter::Options options{kSelf, 1'000, clock};
    options.replicate = true;
    options.gossip_max_delay_ms = 10'000;
    options.cluster_size = 3;
    return options;
  }
  uint64_t Remaining() {
    Decision decision;
    REQUIRE(limiter.Check("k", kSpec, 0, &decision).ok());
    return decision.remaining;
  }
  ManualClock clock;
  Limiter limiter;
  MemberLosses losses;
};

protocol::MemberRecord Record(NodeId node, uint64_t incarnation, uint64_t heartbeat,
                              bool left = false) {
  protocol::MemberRecord record;
  record.node_id = node;
  record.address = "127.0.0.1:1";
  record.incarnation = incarnation;
  record.heartbeat = heartbeat;
  record.left = left;
  return record;
}

// A link down counts a loss at once; a newer incarnation keeps it.
TEST_CASE("member losses: a member that restarts after its link went down lost what it kept") {
  Fixture f;
  f.losses.Follow(std::vector{Record(2, 100, 7)}, kSelf);
  f.losses.LinkWentDown(Record(2, 100, 7));
  CHECK(f.Remaining() == 950);
  f.losses.Follow(std::vector{Record(2, 100, 8)}, kSelf);  // a relayed beat: not yet alive
  CHECK(f.losses.pending() == 1);
  f.losses.Follow(std::vector{Record(2, 200, 1)}, kSelf);
  CHECK(f.losses.pending() == 0);
  CHECK(f.Remaining() == 950);
  f.losses.Follow(std::vector{Record(2, 200, 40)}, kSelf);
  CHECK(f.Remaining() == 950);  // settled: its beats no longer matter
}

// Heartbeats of the same incarnation show it alive: nothing lost, forgotten.
TEST_CASE("member losses: a member heard alive after its link dropped lost nothing") {
  Fixture f;
  f.losses.LinkWentDown(Record(2, 100, 7));
  f.losses.LinkWentDown(Record(2, 100, 7));  // already pending: one loss
  CHECK(f.Remaining() == 950);
  f.losses.Follow(std::vector{Record(2, 100, 7 + MemberLosses::kAliveBeats - 1)}, kSelf);
  CHECK(f.Remaining() == 950);
  f.losses.Follow(std::vector{Record(2, 100, 7 + MemberLosses::kAliveBeats)}, kSelf);
  CHECK(f.losses.pending() == 0);
  CHECK(f.Remaining() == 960);
}

// A member that leaves sent what it kept back first: forgotten; and a
// leaving record's link dropping notes nothing.
TEST_CASE("member losses: a member that leaves lost nothing") {
  Fixture f;
  f.losses.LinkWentDown(Record(2, 100, 7));
  f.losses.Follow(std::vector{Record(2, 100, 7, /*left=*/true)}, kSelf);
  CHECK(f.Remaining() == 960);
  f.losses.LinkWentDown(Record(3, 100, 7, /*left=*/true));
  CHECK(f.losses.pending() == 0);
  CHECK(f.Remaining() == 960);
}

// A restart seen only in the membership (its link was down or never up)
// counts a loss, unless its last incarnation was seen leaving.
TEST_CASE("member losses: a restart without a leave counts a loss, one after a leave does not") {
  Fixture f;
  f.losses.Follow(std::vector{Record(2, 100, 7), Record(3, 100, 7, /*left=*/true)}, kSelf);
  f.losses.Follow(std::vector{Record(2, 200, 1), Record(3, 200, 1)}, kSelf);
  CHECK(f.Remaining() == 950);                                 // node 2's restart only
  f.losses.Follow(std::vector{Record(kSelf, 300, 1)}, kSelf);  // this node's own record: ignored
  CHECK(f.Remaining() == 950);
}

// A loss counts in the windows that began before it, and no longer once they pass.
TEST_CASE("member losses: a loss no longer counts once its window has passed") {
  Fixture f;
  f.clock.AdvanceMs(1'000);
  f.losses.LinkWentDown(Record(2, 100, 7));
  f.losses.Follow(std::vector{Record(2, 200, 1)}, kSelf);
  CHECK(f.Remaining() == 950);
  f.clock.AdvanceMs(59'000);
  CHECK(f.Remaining() == 960);
}

}  // namespace
}  // namespace tally
