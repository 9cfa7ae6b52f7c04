// Unit tests of the membership table (node/gossip/membership.h): records
// spread through a third node, suspicions time out into deaths on explicit
// times, a suspected member refutes, leave, rejoin, dissemination counts.
#include "node/gossip/membership.h"

#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace tally {
namespace {

using protocol::MemberRecord;
using protocol::MemberState;

constexpr int64_t kWallMs = 1'800'000'000'000;

Membership::Options OptionsFor(NodeId id, uint64_t incarnation = 1) {
  Membership::Options options;
  options.self.node_id = id;
  options.self.address = "10.0.0." + std::to_string(id) + ":7421";
  options.self.incarnation = incarnation;
  options.suspicion_ms = 2'000;
  return options;
}

const protocol::MemberStatus& StatusOf(const std::vector<protocol::MemberStatus>& view, NodeId id) {
  for (const protocol::MemberStatus& member : view) {
    if (member.node_id == id) return member;
  }
  FAIL("no such member: " << id);
  return view.front();
}

MemberState StateOf(const Membership& membership, NodeId id, int64_t now_ms) {
  return StatusOf(membership.View(now_ms), id).state;
}

// One node's records reach a node it has no link to, through a third one.
TEST_CASE("membership: records travel through an intermediate node") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0), c(OptionsFor(3), 0);
  CHECK_FALSE(a.joined());
  b.Merge(a.Records(), 10, kWallMs + 5);
  c.Merge(b.Records(), 20, kWallMs + 9);
  REQUIRE(c.View(20).size() == 3);
  CHECK(c.joined());
  CHECK(c.cluster_size() == 3);
  const protocol::MemberStatus first = c.View(20)[0];
  CHECK(first.node_id == 1);
  CHECK(first.address == "10.0.0.1:7421");
  CHECK(first.state == MemberState::kAlive);
  // Members merely added are not sent on: each sends its own table.
  CHECK(c.TakeUpdates(8).empty());
}

// A failed probe makes a member suspect; without a refutation it is dead
// suspicion_ms later, and still counts; the same record again is no news.
TEST_CASE("membership: a suspect that does not refute turns dead") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0);
  a.Merge(b.Records(), 100, kWallMs);
  CHECK(StateOf(a, 2, 100) == MemberState::kAlive);
  a.Suspect(2, 1'000);
  CHECK(StateOf(a, 2, 1'000) == MemberState::kSuspect);
  CHECK(a.AnySuspect());
  a.Expire(2'999);
  CHECK(StateOf(a, 2, 2'999) == MemberState::kSuspect);
  a.Expire(3'000);
  CHECK(StateOf(a, 2, 3'000) == MemberState::kDead);
  CHECK_FALSE(a.AnySuspect());
  CHECK(a.cluster_size() == 2);          // dead still counts: it may only be cut off
  CHECK(a.Probeable().empty());          // not probed: its link's redials find it again
  a.Merge(b.Records(), 3'200, kWallMs);  // its old alive record: no news
  CHECK(StateOf(a, 2, 3'200) == MemberState::kDead);
  CHECK(StateOf(a, 1, 1'000'000) == MemberState::kAlive);  // never itself
}

// A suspicion of a member reaches it with the probes; it refutes with a
// newer version, which overrides the suspicion (and a death) everywhere.
TEST_CASE("membership: a suspected member refutes, and is alive again everywhere") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0), c(OptionsFor(3), 0);
  a.Merge(b.Records(), 0, kWallMs);
  c.Merge(b.Records(), 0, kWallMs);
  a.Suspect(2, 100);
  const std::vector<MemberRecord> suspicion = a.TakeUpdates(8);
  REQUIRE(suspicion.size() == 1);
  CHECK(suspicion[0].state == MemberState::kSuspect);
  c.Merge(suspicion, 150, kWallMs + 150);  // c counts down from when it heard
  c.Expire(2'149);
  CHECK(StateOf(c, 2, 2'149) == MemberState::kSuspect);
  CHECK(b.Merge(suspicion, 200, kWallMs + 200));  // refuted
  CHECK(b.self().heartbeat == 1);
  CHECK(b.self().heartbeat_wall_ms == kWallMs + 200);
  const std::vector<MemberRecord> refutation = b.TakeUpdates(8);
  REQUIRE(refutation.size() == 1);
  c.Expire(2'150);
  CHECK(StateOf(c, 2, 2'150) == MemberState::kDead);
  for (Membership* node : {&a, &c}) {
    CHECK_FALSE(node->Merge(refutation, 2'200, kWallMs + 2'200));
    CHECK(StateOf(*node, 2, 2'200) == MemberState::kAlive);
  }
  CHECK_FALSE(b.Merge(suspicion, 2'300, kWallMs));  // the old suspicion: answered already
  CHECK(b.self().heartbeat == 1);
}

// A stale record (an older version, relayed late) changes nothing.
TEST_CASE("membership: an older record does not replace a newer one") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0);
  a.Merge(b.Records(), 0, kWallMs);
  a.Suspect(2, 10);
  b.Merge(a.TakeUpdates(8), 20, kWallMs);  // b refutes: version 1
  a.Merge(b.TakeUpdates(8), 30, kWallMs);
  a.Merge(std::vector<MemberRecord>{MemberRecord{2, "10.0.0.2:7421", 1, 0, 0, false, false,
                                                 MemberState::kDead}},
          40, kWallMs);
  CHECK(StatusOf(a.View(40), 2).heartbeat == 1);
  CHECK(StateOf(a, 2, 40) == MemberState::kAlive);
}

// Leave is final for an incarnation and stops the member counting; a
// restart (a newer incarnation) brings it back and is reported as one.
TEST_CASE("membership: a member that left stays left until it restarts") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2, 100), 0);
  a.Merge(b.Records(), 10, kWallMs);
  const std::vector<MemberRecord> alive = b.Records();
  b.Leave(kWallMs + 10);
  a.Merge(b.Records(), 20, kWallMs + 20);
  CHECK(StateOf(a, 2, 20) == MemberState::kLeft);
  CHECK(a.cluster_size() == 1);
  a.Merge(alive, 30, kWallMs + 30);  // relayed from before the leave
  CHECK(StateOf(a, 2, 30) == MemberState::kLeft);
  Membership restarted(OptionsFor(2, 200), 0);
  std::vector<Membership::Restart> restarts;
  a.Merge(restarted.Records(), 40, kWallMs + 40, &restarts);
  CHECK(StateOf(a, 2, 40) == MemberState::kAlive);
  CHECK(a.cluster_size() == 2);
  CHECK(restarts.empty());  // it had left: nothing kept back was lost
}

// Records of this node's other runs change nothing here; a newer run of it
// is not taken, and an older one that had not left is its own restart.
TEST_CASE("membership: others' records of this node's other runs change nothing") {
  Membership a(OptionsFor(1, 50), 0);
  MemberRecord forged = a.self();
  forged.incarnation = 99;
  forged.left = true;
  CHECK_FALSE(a.Merge(std::vector<MemberRecord>{forged}, 10, kWallMs));
  CHECK(a.self().incarnation == 50);
  CHECK_FALSE(a.self().left);
  MemberRecord previous = a.self();
  previous.incarnation = 10;
  std::vector<Membership::Restart> restarts;
  a.Merge(std::vector<MemberRecord>{previous}, 20, kWallMs, &restarts);
  REQUIRE(restarts.size() == 1);
  CHECK(restarts[0].node_id == 1);
  // The previous run's suspicion and death come later: no second report.
  previous.state = MemberState::kDead;
  a.Merge(std::vector<MemberRecord>{previous}, 30, kWallMs, &restarts);
  CHECK(restarts.size() == 1);
}

// A record that changed is sent kTransmitFactor x ceil(log2(n + 1)) times,
// those sent least first, at most `max` per message.
TEST_CASE("membership: updates are sent a bounded number of times") {
  Membership a(OptionsFor(1), 0);
  for (NodeId id = 2; id <= 4; ++id) a.Merge(Membership(OptionsFor(id), 0).Records(), 0, kWallMs);
  a.Suspect(2, 10);
  a.Suspect(3, 20);
  CHECK(a.TakeUpdates(1).at(0).node_id == 2);
  CHECK(a.TakeUpdates(1).at(0).node_id == 3);  // sent less often now
  size_t sent = 2;
  for (std::vector<MemberRecord> updates = a.TakeUpdates(8); !updates.empty();
       updates = a.TakeUpdates(8)) {
    sent += updates.size();
  }
  // 4 members: ceil(log2(5)) = 3, so 3 x 3 each.
  CHECK(sent == 2 * Membership::kTransmitFactor * 3);
}

// A member this node holds dead hears it in every message sent to it, long
// after the death's updates ran out, and so can refute; an ack also says how
// its sender sees itself.
TEST_CASE("membership: a message tells its receiver how the sender sees it") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0);
  a.Merge(b.Records(), 0, kWallMs);
  CHECK(a.RecordsFor(2, /*ack=*/false, 8).empty());
  a.Suspect(2, 10);
  a.Expire(2'010);
  while (!a.TakeUpdates(8).empty()) {
  }
  const std::vector<MemberRecord> ack = a.RecordsFor(2, /*ack=*/true, 8);
  REQUIRE(ack.size() == 2);
  CHECK(ack[0].node_id == 2);
  CHECK(ack[0].state == MemberState::kDead);
  CHECK(ack[1].node_id == 1);
  CHECK(b.Merge(ack, 2'100, kWallMs));  // b refutes
}

// Postpone: the time this node stood still does not count towards its suspicions.
TEST_CASE("membership: a stall postpones the suspicions counting down") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0);
  a.Merge(b.Records(), 0, kWallMs);
  a.Suspect(2, 1'000);
  a.Postpone(1'500);
  a.Expire(3'000);
  CHECK(StateOf(a, 2, 3'000) == MemberState::kSuspect);
  a.Expire(4'500);
  CHECK(StateOf(a, 2, 4'500) == MemberState::kDead);
}

// TakeChanges reports each member once per state it enters.
TEST_CASE("membership: changes are reported once per state") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0);
  CHECK(a.TakeChanges(0).size() == 1);  // itself, alive
  a.Merge(b.Records(), 0, kWallMs);
  std::vector<protocol::MemberStatus> changes = a.TakeChanges(0);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].node_id == 2);
  CHECK(a.TakeChanges(500).empty());
  a.Suspect(2, 600);
  changes = a.TakeChanges(600);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].state == MemberState::kSuspect);
  a.Expire(2'600);
  CHECK(a.TakeChanges(2'600).at(0).state == MemberState::kDead);
}

// A member's clock offset comes from messages straight from it, as the
// highest of the recent samples (the one with the quickest delivery);
// messages without a time say nothing about it.
TEST_CASE("membership: clock offsets from a member's own messages") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0);
  a.Merge(b.Records(), 0, kWallMs);
  a.HeardFrom(2, 0, 5, kWallMs);
  CHECK_FALSE(StatusOf(a.View(5), 2).clock_offset_known);
  // b's clock is 500 ms ahead of a's; delivered in 20 ms, then in 2 ms.
  a.HeardFrom(2, kWallMs + 500, 10, kWallMs + 20);
  CHECK(StatusOf(a.View(10), 2).clock_offset_ms == 480);
  CHECK(StatusOf(a.View(10), 2).lag_ms == -480);
  a.HeardFrom(2, kWallMs + 600, 20, kWallMs + 102);
  CHECK(StatusOf(a.View(20), 2).clock_offset_ms == 498);
  // A slow delivery later does not lower it while the quick sample is recent.
  a.HeardFrom(2, kWallMs + 700, 30, kWallMs + 400);
  CHECK(StatusOf(a.View(30), 2).clock_offset_ms == 498);
  CHECK(StatusOf(a.View(130), 2).last_heard_ms_ago == 100);
}

// Crossing the threshold is reported once each way, so the log says it once.
TEST_CASE("membership: clock offset changes are reported once each way") {
  Membership a(OptionsFor(1), 0), b(OptionsFor(2), 0);
  a.Merge(b.Records(), 0, kWallMs);
  a.HeardFrom(2, kWallMs + 500, 0, kWallMs);
  std::vector<protocol::MemberStatus> changes = a.TakeClockChanges(100, 0);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].clock_offset_ms == 500);
  CHECK(a.TakeClockChanges(100, 0).empty());
  // b's clock is fixed: within 100 ms once the old samples have rolled out.
  for (size_t i = 0; i < Membership::kOffsetSamples; ++i) {
    const int64_t at_ms = kWallMs + 1'000 + static_cast<int64_t>(i) * 200;
    a.HeardFrom(2, at_ms, 0, at_ms);
  }
  changes = a.TakeClockChanges(100, 0);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].clock_offset_ms == 0);
}

}  // namespace
}  // namespace tally
