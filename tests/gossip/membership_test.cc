// Unit tests of the membership table (node/gossip/membership.h): heartbeats spread
// through a third node, failure detection on explicit times, leave, rejoin.
#include "node/gossip/membership.h"

#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace tally {
namespace {

using protocol::MemberState;

constexpr int64_t kWallMs = 1'800'000'000'000;

Membership::Options OptionsFor(NodeId id, uint64_t incarnation = 1) {
  Membership::Options options;
  options.self.node_id = id;
  options.self.address = "10.0.0." + std::to_string(id) + ":7421";
  options.self.incarnation = incarnation;
  options.suspect_after_ms = 1'000;
  options.dead_after_ms = 3'000;
  return options;
}

MemberState StateOf(const Membership& membership, NodeId id, int64_t now_ms) {
  for (const protocol::MemberStatus& member : membership.View(now_ms)) {
    if (member.node_id == id) return member.state;
  }
  FAIL("no such member: " << id);
  return MemberState::kLeft;
}

// One node's records reach a node it has no link to, through a third one.
TEST_CASE("membership: records travel through an intermediate node") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0), c(OptionsFor(3), 0);
  CHECK_FALSE(a.joined());
  a.Beat(kWallMs);
  b.Merge(a.Records(), 10, kWallMs + 5);
  c.Merge(b.Records(), 20, kWallMs + 9);
  REQUIRE(c.View(20).size() == 3);
  CHECK(c.joined());
  CHECK(c.cluster_size() == 3);
  const protocol::MemberStatus first = c.View(20)[0];
  CHECK(first.node_id == 1);
  CHECK(first.address == "10.0.0.1:7421");
  CHECK(first.state == MemberState::kAlive);
  CHECK(first.heartbeat == 1);
  CHECK(first.lag_ms == 9);  // the beat's age when it arrived
}

// No newer heartbeat: suspect after suspect_after_ms, dead after
// dead_after_ms; a newer beat makes it alive again.
TEST_CASE("membership: a silent member turns suspect, then dead, then alive on a beat") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0);
  b.Beat(kWallMs);
  a.Merge(b.Records(), 100, kWallMs);
  CHECK(StateOf(a, 2, 1'099) == MemberState::kAlive);
  CHECK(StateOf(a, 2, 1'100) == MemberState::kSuspect);
  CHECK(StateOf(a, 2, 3'099) == MemberState::kSuspect);
  CHECK(StateOf(a, 2, 3'100) == MemberState::kDead);
  CHECK(a.cluster_size() == 2);          // dead still counts: it may only be cut off
  a.Merge(b.Records(), 3'200, kWallMs);  // the same beat again: no news
  CHECK(StateOf(a, 2, 3'200) == MemberState::kDead);
  b.Beat(kWallMs + 3'200);
  a.Merge(b.Records(), 3'300, kWallMs + 3'300);
  CHECK(StateOf(a, 2, 3'300) == MemberState::kAlive);
  CHECK(StateOf(a, 1, 1'000'000) == MemberState::kAlive);  // never itself
}

// A stale record (an older heartbeat, relayed late) changes nothing.
TEST_CASE("membership: an older record does not replace a newer one") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0);
  b.Beat(kWallMs);
  const std::vector<protocol::MemberRecord> old = b.Records();
  b.Beat(kWallMs + 200);
  a.Merge(b.Records(), 200, kWallMs + 200);
  a.Merge(old, 2'500, kWallMs + 2'500);
  CHECK(a.View(2'500)[1].heartbeat == 2);
  CHECK(StateOf(a, 2, 2'500) == MemberState::kSuspect);
}

// Leave is final for an incarnation and stops the member counting; a
// restart (a newer incarnation) brings it back.
TEST_CASE("membership: a member that left stays left until it restarts") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2, 100), 0);
  b.Beat(kWallMs);
  a.Merge(b.Records(), 10, kWallMs);
  const std::vector<protocol::MemberRecord> alive = b.Records();
  b.Leave(kWallMs + 10);
  a.Merge(b.Records(), 20, kWallMs + 20);
  CHECK(StateOf(a, 2, 20) == MemberState::kLeft);
  CHECK(StateOf(a, 2, 100'000) == MemberState::kLeft);
  CHECK(a.cluster_size() == 1);
  a.Merge(alive, 30, kWallMs + 30);  // relayed from before the leave
  CHECK(StateOf(a, 2, 30) == MemberState::kLeft);
  Membership restarted(OptionsFor(2, 200), 0);
  restarted.Beat(kWallMs + 40);
  a.Merge(restarted.Records(), 40, kWallMs + 40);
  CHECK(StateOf(a, 2, 40) == MemberState::kAlive);
  CHECK(a.cluster_size() == 2);
}

// Records about this node itself, from others, are ignored.
TEST_CASE("membership: others' records of this node change nothing") {
  Membership a(OptionsFor(1), 0);
  protocol::MemberRecord forged = a.self();
  forged.incarnation = 99;
  forged.left = true;
  a.Merge(std::vector<protocol::MemberRecord>{forged}, 10, kWallMs);
  CHECK(a.self().incarnation == 1);
  CHECK_FALSE(a.self().left);
  CHECK(a.cluster_size() == 1);
}

// TakeChanges reports each member once per state it enters.
TEST_CASE("membership: changes are reported once per state") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0);
  CHECK(a.TakeChanges(0).size() == 1);  // itself, alive
  b.Beat(kWallMs);
  a.Merge(b.Records(), 0, kWallMs);
  std::vector<protocol::MemberStatus> changes = a.TakeChanges(0);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].node_id == 2);
  CHECK(a.TakeChanges(500).empty());
  changes = a.TakeChanges(1'500);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].state == MemberState::kSuspect);
  CHECK(a.TakeChanges(3'500).at(0).state == MemberState::kDead);
}

}  // namespace
}  // namespace tally

namespace tally {
namespace {

const protocol::MemberStatus& StatusOf(const std::vector<protocol::MemberStatus>& view, NodeId id) {
  for (const protocol::MemberStatus& member : view) {
    if (member.node_id == id) return member;
  }
  FAIL("no such member: " << id);
  return view.front();
}

// A member's clock offset comes from its own records heard straight from it,
// as the highest of the recent samples (the one with the quickest delivery);
// records relayed by others say nothing about it.
TEST_CASE("membership: clock offsets from a member's own heartbeats") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0), c(OptionsFor(3), 0);
  // b's clock is 500 ms ahead of a's: it beats at a's kWallMs + 500.
  b.Beat(kWallMs + 500);
  c.Merge(b.Records(), 0, kWallMs + 3);  // c hears b, and relays it to a
  c.Beat(kWallMs);
  a.Merge(c.Records(), 0, kWallMs + 10, /*sender=*/3);
  CHECK_FALSE(StatusOf(a.View(0), 2).clock_offset_known);
  CHECK(StatusOf(a.View(0), 3).clock_offset_known);
  CHECK(StatusOf(a.View(0), 3).clock_offset_ms == -10);  // c's beat took 10 ms to arrive
  // From b itself, delivered in 20 ms, then in 2 ms: the estimate is the quicker one.
  a.Merge(b.Records(), 10, kWallMs + 20, /*sender=*/2);
  CHECK(StatusOf(a.View(10), 2).clock_offset_ms == 480);
  b.Beat(kWallMs + 600);
  a.Merge(b.Records(), 20, kWallMs + 102, /*sender=*/2);
  CHECK(StatusOf(a.View(20), 2).clock_offset_ms == 498);
  // A slow delivery later does not lower it while the quick sample is recent.
  b.Beat(kWallMs + 700);
  a.Merge(b.Records(), 30, kWallMs + 400, /*sender=*/2);
  CHECK(StatusOf(a.View(30), 2).clock_offset_ms == 498);
}

// Crossing the threshold is reported once each way, so the log says it once.
TEST_CASE("membership: clock offset changes are reported once each way") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0);
  b.Beat(kWallMs + 500);
  a.Merge(b.Records(), 0, kWallMs, /*sender=*/2);
  std::vector<protocol::MemberStatus> changes = a.TakeClockChanges(100, 0);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].clock_offset_ms == 500);
  CHECK(a.TakeClockChanges(100, 0).empty());
  // b's clock is fixed: within 100 ms once the old samples have rolled out.
  for (size_t i = 0; i < Membership::kOffsetSamples; ++i) {
    b.Beat(kWallMs + 1'000 + static_cast<int64_t>(i) * 200);
    a.Merge(b.Records(), 0, kWallMs + 1'000 + static_cast<int64_t>(i) * 200, /*sender=*/2);
  }
  changes = a.TakeClockChanges(100, 0);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].clock_offset_ms == 0);
}

}  // namespace
}  // namespace tally
