#include "node/gossip/link_sync.h"

#include <algorithm>
#include <iterator>

namespace tally {

void LinkSync::Connected() {
  wanted_ranges_.clear();
  again_.clear();
  sync_shard_ = 0;
}

std::vector<uint32_t> LinkSync::DigestsDue(std::span<const uint32_t> due_everywhere,
                                           std::span<const Limiter::RangeVersion> versions) const {
  std::vector<uint32_t> due;
  if (syncing()) return due;
  std::vector<uint32_t> again;
  for (const uint32_t range : again_) {
    if (versions[range].quiet) again.push_back(range);
  }
  std::set_union(due_everywhere.begin(), due_everywhere.end(), again.begin(), again.end(),
                 std::back_inserter(due));
  return due;
}

std::vector<protocol::RangeDigest> LinkSync::TakeDigests(std::span<const uint32_t> due,
                                                         std::span<const uint64_t> digests) {
  std::vector<protocol::RangeDigest> message;
  message.reserve(due.size());
  for (const uint32_t range : due) {
    message.push_back({range, digests[range]});
    again_.erase(range);
  }
  return message;
}

void LinkSync::AnswerReceived(std::span<const uint32_t> want, std::span<const uint32_t> later) {
  for (const uint32_t range : later) {
    if (range < Limiter::range_count()) again_.insert(range);
  }
  for (const uint32_t range : want) {
    if (range < Limiter::range_count()) wanted_ranges_.push_back(range);
  }
}

LinkSync::Piece LinkSync::Next(Limiter& limiter, size_t max_frame_bytes,
                               std::vector<std::string>* frames) {
  if (static_cast<size_t>(sync_shard_) == Limiter::shard_count()) {
    sync_shard_ = -1;
    frames->emplace_back();
    protocol::EncodeSyncDone(&frames->back());
    return Piece::kSyncDone;
  }
  if (sync_shard_ < 0 && wanted_ranges_.empty()) return Piece::kNothing;
  protocol::PeerStateEncoder encoder(limiter.node_id(), /*full=*/true, max_frame_bytes);
  const auto add = [&](const KeySnapshot& snapshot) { encoder.Add(snapshot, frames); };
  Piece piece = Piece::kSyncShard;
  if (sync_shard_ >= 0) {
    limiter.CollectReplica(static_cast<size_t>(sync_shard_++), add);
  } else {
    limiter.CollectRange(wanted_ranges_.front(), add);
    wanted_ranges_.pop_front();
    piece = Piece::kRange;
  }
  encoder.Finish(frames);
  return piece;
}

}  // namespace tally
