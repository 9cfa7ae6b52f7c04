// LinkSync and RangeAskBudget: what a link owes its peer beyond deltas, and
// how many ranges a node asks its peers for (node/gossip/link_sync.h,
// anti_entropy.h). No I/O: the Limiter and the codec only.
#include "node/gossip/link_sync.h"

#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/gossip/anti_entropy.h"
#include "protocol/peer_codec.h"

namespace tally {
namespace {

constexpr int64_t kWallMs = 1'800'000'000'000;

Limiter::Options Replicating(const ManualClock* clock) {
  Limiter::Options options;
  options.clock = clock;
  options.replicate = true;
  return options;
}

// The kinds of the frames a piece encoded.
std::vector<protocol::PeerMessageKind> Kinds(const std::vector<std::string>& frames) {
  std::vector<protocol::PeerMessageKind> kinds;
  for (const std::string& frame : frames) {
    protocol::PeerMessage message;
    REQUIRE(protocol::DecodePeerMessage(std::as_bytes(std::span(frame.data(), frame.size())), {},
                                        &message)
                .ok());
    kinds.push_back(message.kind);
  }
  return kinds;
}

}  // namespace

// A connection's full sync goes shard by shard, ends with syncDone, and then
// nothing is owed until the peer asks for ranges.
TEST_CASE("link sync: a new connection gets every shard, then syncDone, then nothing") {
  ManualClock clock(kWallMs);
  Limiter limiter(Replicating(&clock));
  Decision decision;
  REQUIRE(limiter.Check("k", {Algorithm::kFixedWindow, 10, 60'000}, 1, &decision).ok());
  LinkSync sync;
  sync.Connected();
  size_t shards = 0, state_frames = 0;
  std::vector<std::string> frames;
  for (;;) {
    frames.clear();
    const LinkSync::Piece piece = sync.Next(limiter, 256 * 1024, &frames);
    if (piece == LinkSync::Piece::kSyncDone) {
      CHECK(Kinds(frames) == std::vector{protocol::PeerMessageKind::kSyncDone});
      break;
    }
    REQUIRE(piece == LinkSync::Piece::kSyncShard);
    ++shards;
    state_frames += frames.size();
  }
  CHECK(shards == Limiter::shard_count());
  CHECK(state_frames == 1);  // the one key's shard
  CHECK_FALSE(sync.syncing());
  frames.clear();
  CHECK(sync.Next(limiter, 256 * 1024, &frames) == LinkSync::Piece::kNothing);
  CHECK(frames.empty());
}

// A quiet range that changed is due at every peer once; a range the peer
// answered `later` goes to that peer again; a wanted range goes whole once.
TEST_CASE("digest ledger and link sync: each change's digest once, again when later") {
  ManualClock clock(kWallMs);
  Limiter limiter(Replicating(&clock));
  const LimitSpec spec{Algorithm::kFixedWindow, 10, 60'000};
  DigestLedger ledger;
  std::vector<Limiter::RangeVersion> versions = AllRangeVersions(limiter, 200);
  CHECK(ledger.Due(versions).empty());  // nothing ever changed
  Decision decision;
  REQUIRE(limiter.Check("k", spec, 1, &decision).ok());
  CHECK(ledger.Due(AllRangeVersions(limiter, 200)).empty());  // not quiet yet
  clock.AdvanceMs(10'000);
  versions = AllRangeVersions(limiter, 200);
  const std::vector<uint32_t> due = ledger.Due(versions);
  REQUIRE(due.size() == 1);
  LinkSync sync;
  sync.Connected();
  CHECK(sync.DigestsDue(due, versions).empty());  // its full sync sends everything
  std::vector<std::string> frames;
  while (sync.Next(limiter, 256 * 1024, &frames) != LinkSync::Piece::kSyncDone) {
  }
  CHECK(sync.DigestsDue(due, versions) == due);
  const std::vector<uint64_t> digests(Limiter::range_count(), 7);
  CHECK(sync.TakeDigests(due, digests).size() == 1);
  ledger.Sent(due, versions);
  CHECK(ledger.Due(versions).empty());  // sent: due again only when it changes
  CHECK(sync.DigestsDue({}, versions).empty());
  sync.AnswerReceived(due, {});
  frames.clear();
  CHECK(sync.Next(limiter, 256 * 1024, &frames) == LinkSync::Piece::kRange);
  CHECK(Kinds(frames) == std::vector{protocol::PeerMessageKind::kState});
  frames.clear();
  CHECK(sync.Next(limiter, 256 * 1024, &frames) == LinkSync::Piece::kNothing);
  sync.AnswerReceived({}, due);  // "later": to this peer again
  CHECK(sync.DigestsDue({}, versions) == due);
  CHECK(sync.TakeDigests(due, digests).size() == 1);
  CHECK(sync.DigestsDue({}, versions).empty());
}

// A node asks each peer for at most kMostRangesAskedPerPeer ranges an
// interval, each range of one peer only; a new interval starts afresh.
TEST_CASE("range ask budget: per peer, each range once an interval") {
  RangeAskBudget budget;
  std::vector<uint32_t> want, later;
  for (uint32_t range = 0; range < 100; ++range) want.push_back(range);
  budget.Limit(1'000, /*peer=*/2, &want, &later);
  CHECK(want.size() == kMostRangesAskedPerPeer);
  CHECK(later.size() == 100 - kMostRangesAskedPerPeer);
  std::vector<uint32_t> want_3 = {0, 1, 70, 71}, later_3;
  budget.Limit(1'000, /*peer=*/3, &want_3, &later_3);
  CHECK(want_3 == std::vector<uint32_t>{70, 71});  // 0 and 1 were asked of node 2
  CHECK(later_3 == std::vector<uint32_t>{0, 1});
  std::vector<uint32_t> again = {0, 1}, again_later;
  budget.Limit(2'000, /*peer=*/3, &again, &again_later);  // the next interval
  CHECK(again == std::vector<uint32_t>{0, 1});
  CHECK(again_later.empty());
}

}  // namespace tally
