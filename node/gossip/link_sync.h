// LinkSync: what one link owes its peer beyond the deltas, with no I/O: the
// full sync after a (re)connect, shard by shard, and anti-entropy's side of
// the link (node/gossip/anti_entropy.h): the digests the peer answered it
// would compare later, and the ranges it asked for whole. What every peer
// is owed is the node's (DigestLedger): a link costs what its peer asked
// for, not a word per range. The daemon's PeerLink
// sends the pieces as its queue drains; a simulation sends them at once.
//
// Thread safety: none; one link's owner (the gossip thread in the daemon).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "node/engine/limiter.h"
#include "protocol/peer_codec.h"

namespace tally {

class LinkSync {
 public:
  // A new connection: the peer has had nothing on it yet; a full sync starts.
  void Connected();
  // The peer forgot state (kResync): every shard goes again, in a full sync
  // that starts now (over, if one is under way).
  void StartFullSync() { sync_shard_ = 0; }
  // The connection is gone: nothing more goes until Connected.
  void Disconnected() { sync_shard_ = -1; }
  bool syncing() const { return sync_shard_ >= 0; }

  // Anti-entropy: the ranges whose digests go to the peer now: those due at
  // every peer (DigestLedger::Due, sorted), and those the peer answered
  // `later` that are quiet now (versions: every range's). None while a full
  // sync is under way: it sends everything.
  std::vector<uint32_t> DigestsDue(std::span<const uint32_t> due_everywhere,
                                   std::span<const Limiter::RangeVersion> versions) const;
  // The digests (by range; at least those due) of the ranges due, to send.
  std::vector<protocol::RangeDigest> TakeDigests(std::span<const uint32_t> due,
                                                 std::span<const uint64_t> digests);
  // The peer's answer to digests: `want` goes whole (Next); `later`'s
  // digests go again at the next interval. Ranges out of bounds are ignored.
  void AnswerReceived(std::span<const uint32_t> want, std::span<const uint32_t> later);

  // What Next encoded.
  enum class Piece { kNothing, kSyncShard, kSyncDone, kRange };
  // Encodes the next piece into *frames (PeerState frames, or syncDone): the
  // full sync's next shard, its end, or else a range the peer wants.
  Piece Next(Limiter& limiter, size_t max_frame_bytes, std::vector<std::string>* frames);

 private:
  int sync_shard_ = -1;  // the next shard of a full sync in progress; -1: none
  // Ranges the peer wants whole (AnswerReceived).
  std::deque<uint32_t> wanted_ranges_;
  // Ranges the peer answered `later`: their digests go again.
  std::set<uint32_t> again_;
};

}  // namespace tally
