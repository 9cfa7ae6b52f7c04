// MemberLosses (node/gossip/member_losses.h): a peer's link going down
// counts what it may have kept back as spent until the membership settles
// it; a restart without a leave is a crash loss that every node stores,
// gossips and counts alike.
#include "node/gossip/member_losses.h"

#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/gossip/membership.h"

namespace tally {
namespace {

constexpr int64_t kStartMs = 1'700'000'040'000;  // a minute's start
constexpr NodeId kSelf = 1;
const LimitSpec kSpec{Algorithm::kFixedWindow, 960, 60'000};  // a share: 960 / 96 = 10

// A node's limiter, in a cluster of 3 with a gossip delay, and its losses;
// `stored` holds what the losses last asked to store.
struct Fixture {
  explicit Fixture(NodeId self = kSelf)
      : clock(kStartMs),
        limiter(Options(&clock, self)),
        losses(&limiter, [this](std::span<const CrashLoss> changed) {
          stored.assign(changed.begin(), changed.end());
          ++stores;
        }) {}
  static Limiter::Options Options(ManualClock* clock, NodeId self) {
    Limiter::Options options{self, 1'000, clock};
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
  std::vector<CrashLoss> stored;
  int stores = 0;
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

// A link down counts a loss at once; the restart makes it a crash loss,
// seen when the link went down, stored, and no longer settled by beats.
TEST_CASE("member losses: a member that restarts after its link went down lost what it kept") {
  Fixture f;
  f.losses.LinkWentDown(Record(2, 100, 7), 100, f.clock.WallMs());
  CHECK(f.Remaining() == 950);
  CHECK(f.stores == 0);  // a suspicion is this node's own
  f.losses.Follow(std::vector{Record(2, 100, 8)}, kSelf, f.clock.WallMs());  // a relayed beat
  CHECK(f.losses.pending() == 1);
  const int64_t down_ms = f.clock.WallMs();
  f.clock.AdvanceMs(500);
  f.losses.Restarted(2, 200, f.clock.WallMs());
  CHECK(f.losses.pending() == 0);
  CHECK(f.Remaining() == 950);
  CHECK(f.stored == std::vector<CrashLoss>{{2, 200, down_ms}});
  f.losses.Follow(std::vector{Record(2, 200, 40)}, kSelf, f.clock.WallMs());
  CHECK(f.Remaining() == 950);  // settled: its beats no longer matter
}

// A link that drops after the membership already took the member's next
// run counted nothing more: its run was followed and has been counted. One
// whose hello said a run newer than the record waits for that run.
TEST_CASE("member losses: a link to a run already followed by a newer one counts nothing more") {
  Fixture f;
  f.losses.Restarted(2, 200, f.clock.WallMs());
  f.losses.LinkWentDown(Record(2, 200, 1), 100, f.clock.WallMs());
  CHECK(f.losses.pending() == 0);
  CHECK(f.Remaining() == 950);
  f.losses.LinkWentDown(Record(3, 100, 5), 300, f.clock.WallMs());
  CHECK(f.losses.pending() == 1);
  CHECK(f.Remaining() == 940);
  f.losses.Alive(3, 100);  // the run the record had: not the one the link reached
  CHECK(f.losses.pending() == 1);
  f.losses.Alive(3, 300);
  CHECK(f.losses.pending() == 0);
  CHECK(f.Remaining() == 950);
}

// A new connection with the same run shows it alive: nothing lost, forgotten.
TEST_CASE("member losses: a member heard alive after its link dropped lost nothing") {
  Fixture f;
  f.losses.LinkWentDown(Record(2, 100, 7), 100, f.clock.WallMs());
  f.losses.LinkWentDown(Record(2, 100, 7), 100, f.clock.WallMs());  // already pending: one loss
  CHECK(f.Remaining() == 950);
  f.losses.Follow(std::vector{Record(2, 100, 8)}, kSelf, f.clock.WallMs());  // a relayed record
  CHECK(f.Remaining() == 950);
  f.losses.Alive(2, 100);
  CHECK(f.losses.pending() == 0);
  CHECK(f.Remaining() == 960);
  CHECK(f.losses.crash_losses().empty());
}

// A member that leaves sent what it kept back first: forgotten; and a
// leaving record's link dropping notes nothing.
TEST_CASE("member losses: a member that leaves lost nothing") {
  Fixture f;
  f.losses.LinkWentDown(Record(2, 100, 7), 100, f.clock.WallMs());
  f.losses.Follow(std::vector{Record(2, 100, 7, /*left=*/true)}, kSelf, f.clock.WallMs());
  CHECK(f.Remaining() == 960);
  f.losses.LinkWentDown(Record(3, 100, 7, /*left=*/true), 100, f.clock.WallMs());
  CHECK(f.losses.pending() == 0);
  CHECK(f.Remaining() == 960);
}

// The membership says who restarted without leaving: a peer whose record of
// a run that had not left gives way to a newer incarnation, and this node
// itself when its peers hold a record of its previous run that had not left
// (a wiped data directory under a known id). A member first heard of, one
// whose last run left, and a record of this node's own run, are no restart.
TEST_CASE("member losses: the membership reports restarts without a leave, this node's too") {
  Membership::Options options;
  options.self = Record(kSelf, 500, 0);
  Membership membership(options, 0);
  std::vector<Membership::Restart> restarts;
  membership.Merge(std::vector{Record(2, 100, 7), Record(3, 100, 7, /*left=*/true)}, 0, kStartMs,
                   &restarts);
  CHECK(restarts.empty());  // first heard of
  membership.Merge(std::vector{Record(2, 200, 1), Record(3, 200, 1), Record(kSelf, 500, 3)}, 0,
                   kStartMs, &restarts);
  REQUIRE(restarts.size() == 1);
  CHECK(restarts[0].node_id == 2);
  CHECK(restarts[0].incarnation == 200);
  restarts.clear();
  membership.Merge(std::vector{Record(kSelf, 400, 9, /*left=*/true)}, 0, kStartMs, &restarts);
  CHECK(restarts.empty());  // its previous run left
  membership.Merge(std::vector{Record(kSelf, 400, 9)}, 0, kStartMs, &restarts);
  REQUIRE(restarts.size() == 1);
  CHECK(restarts[0].node_id == kSelf);
  CHECK(restarts[0].incarnation == 500);
}

// An operator forgets a member gone for good: it counts as left here and,
// its record merged, at every other node, which counts what its run kept
// back as lost; a beat of the same run brings it back. This node's own id
// and an unknown one are refused.
TEST_CASE("member losses: a forgotten member counts as left, and its run as lost") {
  Membership::Options options;
  options.self = Record(kSelf, 500, 0);
  Membership here(options, 0);
  options.self = Record(3, 600, 0);
  Membership there(options, 0);
  here.Merge(std::vector{Record(2, 100, 7)}, 0, kStartMs);
  there.Merge(std::vector{Record(2, 100, 7)}, 0, kStartMs);
  bool forgotten = false;
  CHECK(here.Forget(kSelf, &forgotten).code() == Status::Code::kInvalidArgument);
  CHECK(here.Forget(4, &forgotten).code() == Status::Code::kInvalidArgument);
  REQUIRE(here.Forget(2, &forgotten).ok());
  CHECK(forgotten);
  CHECK(here.cluster_size() == 1);
  REQUIRE(here.Forget(2, &forgotten).ok());
  CHECK_FALSE(forgotten);  // once
  std::vector<Membership::Restart> restarts;
  there.Merge(here.Records(), 0, kStartMs, &restarts);
  REQUIRE(restarts.size() == 1);  // the forgotten run: its losses count
  CHECK(restarts[0].node_id == 2);
  CHECK(restarts[0].incarnation == 100);
  CHECK(there.cluster_size() == 2);  // itself and this node
  Fixture f;
  f.losses.LinkWentDown(Record(2, 100, 7), 100, f.clock.WallMs());
  f.losses.Restarted(restarts[0].node_id, restarts[0].incarnation, f.clock.WallMs());
  CHECK(f.losses.pending() == 0);
  CHECK(f.Remaining() == 950);
  there.Merge(std::vector{Record(2, 100, 8)}, 0, kStartMs);  // it beats: it was not gone
  CHECK(there.cluster_size() == 3);
}

// Crash losses are replicated: a node that hears a peer's losses counts
// them as the peer does, stores them, and keeps the earliest time of a loss
// that both noted; merging them again changes nothing.
TEST_CASE("member losses: crash losses merged from a peer count alike on both nodes") {
  Fixture a(1), b(2);
  a.losses.LinkWentDown(Record(3, 100, 7), 100, a.clock.WallMs());
  a.clock.AdvanceMs(300);
  a.losses.Restarted(3, 200, a.clock.WallMs());
  b.clock.AdvanceMs(400);
  b.losses.Restarted(3, 200, b.clock.WallMs());  // b saw no link go down
  CHECK(b.stored[0].at_ms == kStartMs + 400);
  b.losses.Merge(a.losses.crash_losses(), b.clock.WallMs());
  a.losses.Merge(b.losses.crash_losses(), a.clock.WallMs());
  CHECK(a.losses.crash_losses() == b.losses.crash_losses());
  CHECK(b.stored == std::vector<CrashLoss>{{3, 200, kStartMs}});
  const int stores = b.stores;
  b.losses.Merge(a.losses.crash_losses(), b.clock.WallMs());
  CHECK(b.stores == stores);
  CHECK(a.Remaining() == 950);
  CHECK(b.Remaining() == 950);
}

// A node that crashed five times in a window and restarted with its data
// counts all five: its own from its data directory, the ones before from
// what it stored, whatever its peers remember.
TEST_CASE("member losses: a node remembers its own crashes across restarts") {
  std::vector<CrashLoss> stored;
  for (uint64_t run = 1; run <= 5; ++run) {
    Fixture f;
    f.clock.AdvanceMs(static_cast<int64_t>(run) * 1'000);
    f.losses.Start(stored, kSelf, 1'000 + run, /*crashed=*/true, f.clock.WallMs());
    CHECK(f.Remaining() == 960 - 10 * run);
    stored = f.stored;
  }
  CHECK(stored.size() == 5);
  Fixture clean;  // a clean stop: nothing new, the stored ones still count
  clean.losses.Start(stored, kSelf, 2'000, /*crashed=*/false, clean.clock.WallMs() + 6'000);
  CHECK(clean.Remaining() == 910);
}

// A node that never lost a member counts nothing, and a loss far older
// than the longest window is dropped, at a round or on arrival.
TEST_CASE("member losses: nothing counts where nothing was lost, nor once too old") {
  Fixture f;
  f.losses.Start({}, kSelf, 1'000, /*crashed=*/false, f.clock.WallMs());
  CHECK(f.Remaining() == 960);
  CHECK(f.stores == 0);
  const int64_t old_ms = f.clock.WallMs() - MemberLosses::kKeepMs - 1;
  f.losses.Merge(std::vector<CrashLoss>{{2, 5, old_ms}}, f.clock.WallMs());
  CHECK(f.losses.crash_losses().empty());
  f.losses.Restarted(2, 200, f.clock.WallMs());
  CHECK(f.losses.crash_losses().size() == 1);
  f.clock.AdvanceMs(MemberLosses::kKeepMs + 1);
  f.losses.Follow({}, kSelf, f.clock.WallMs());
  CHECK(f.losses.crash_losses().empty());
  CHECK(f.stored.empty());
}

// At most kMaxCrashLosses are kept: the oldest go first.
TEST_CASE("member losses: beyond the most kept, the oldest loss goes") {
  Fixture f;
  for (uint64_t i = 0; i <= kMaxCrashLosses; ++i) {
    f.losses.Restarted(2, 100 + i, f.clock.WallMs() + static_cast<int64_t>(i));
  }
  REQUIRE(f.losses.crash_losses().size() == kMaxCrashLosses);
  CHECK(f.losses.crash_losses().front().incarnation == 101);
}

// A loss counts in the windows that began before it, and no longer once they pass.
TEST_CASE("member losses: a loss no longer counts once its window has passed") {
  Fixture f;
  f.clock.AdvanceMs(1'000);
  f.losses.LinkWentDown(Record(2, 100, 7), 100, f.clock.WallMs());
  f.losses.Restarted(2, 200, f.clock.WallMs());
  CHECK(f.Remaining() == 950);
  f.clock.AdvanceMs(59'000);
  CHECK(f.Remaining() == 960);
}

}  // namespace
}  // namespace tally
