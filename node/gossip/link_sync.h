// LinkSync: what one link owes its peer beyond the deltas, with no I/O: the
// full sync after a (re)connect, shard by shard, and anti-entropy's side of
// the link (node/gossip/anti_entropy.h): which ranges' digests the peer
// should get, and the ranges it asked for whole. The daemon's PeerLink
// sends the pieces as its queue drains; a simulation sends them at once.
//
// Thread safety: none; one link's owner (the gossip thread in the daemon).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include <absl/container/flat_hash_map.h>

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

  // The ranges whose digests the peer should get now: quiet, and changed
  // since it last had them or their digest (versions: every range's;
  // candidates: the quiet ranges whose version is not 0, QuietRanges). None
  // while a full sync is under way.
  std::vector<uint32_t> DigestsDue(std::span<const Limiter::RangeVersion> versions,
                                   std::span<const uint32_t> candidates) const;
  // The digests (by range; at least those due) of the ranges due, to send;
  // the peer counts as told of each range's version.
  std::vector<protocol::RangeDigest> TakeDigests(std::span<const uint32_t> due,
                                                 std::span<const uint64_t> digests,
                                                 std::span<const Limiter::RangeVersion> versions);
  // The peer's answer to digests: `want` goes whole (Next); `later`'s
  // digests go again at the next interval. Ranges out of bounds are ignored.
  void AnswerReceived(std::span<const uint32_t> want, std::span<const uint32_t> later);

  // What Next encoded.
  enum class Piece { kNothing, kSyncShard, kSyncDone, kRange };
  // Encodes the next piece into *frames (PeerState frames, or syncDone): the
  // full sync's next shard, its end, or else a range the peer wants.
  Piece Next(Limiter& limiter, size_t max_frame_bytes, std::vector<std::string>* frames);

 private:
  // A range's version before anything changed it: it holds nothing, so a
  // peer needs no word of it.
  static constexpr uint64_t kUnchanged = KeyRange{}.version;
  // A version no range has: its digest goes at the next interval.
  static constexpr uint64_t kNotTold = 0;
  // What the peer was told of a range (kUnchanged: nothing, nor needs it).
  uint64_t Told(uint32_t range) const;
  void SetTold(uint32_t range, uint64_t version);

  int sync_shard_ = -1;  // the next shard of a full sync in progress; -1: none
  // By range, the version (Limiter::RangeVersion) the peer had in full, or
  // had the digest of, when this link last sent it: anti-entropy tells it
  // of a range again once the version moved. Only ranges that ever changed
  // (not kUnchanged): a link costs what its ranges hold, not 4,096 entries,
  // in a cluster of many members.
  absl::flat_hash_map<uint32_t, uint64_t> told_versions_;
  // Ranges the peer wants whole (AnswerReceived).
  std::deque<uint32_t> wanted_ranges_;
};

}  // namespace tally
