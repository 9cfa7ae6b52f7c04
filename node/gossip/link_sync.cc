#include "node/gossip/link_sync.h"

namespace tally {

void LinkSync::Connected() {
  told_versions_.assign(Limiter::range_count(), kNotTold);
  wanted_ranges_.clear();
  sync_shard_ = 0;
}

std::vector<uint32_t> LinkSync::DigestsDue(std::span<const Limiter::RangeVersion> versions) const {
  std::vector<uint32_t> due;
  if (syncing() || told_versions_.empty()) return due;
  for (uint32_t range = 0; range < versions.size(); ++range) {
    if (versions[range].quiet && versions[range].version != told_versions_[range]) {
      due.push_back(range);
    }
  }
  return due;
}

std::vector<protocol::RangeDigest> LinkSync::TakeDigests(
    std::span<const uint32_t> due, std::span<const uint64_t> digests,
    std::span<const Limiter::RangeVersion> versions) {
  std::vector<protocol::RangeDigest> message;
  message.reserve(due.size());
  for (const uint32_t range : due) {
    message.push_back({range, digests[range]});
    told_versions_[range] = versions[range].version;
  }
  return message;
}

void LinkSync::AnswerReceived(std::span<const uint32_t> want, std::span<const uint32_t> later) {
  for (const uint32_t range : later) {
    if (range < told_versions_.size()) told_versions_[range] = kNotTold;
  }
  for (const uint32_t range : want) {
    if (range < told_versions_.size()) wanted_ranges_.push_back(range);
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
  protocol::PeerStateEncoder encoder(limiter.node_id(), /*full=*/true, max_frame_bytes);
  const auto add = [&](const KeySnapshot& snapshot) { encoder.Add(snapshot, frames); };
  Piece piece = Piece::kNothing;
  if (sync_shard_ >= 0) {
    const size_t shard = static_cast<size_t>(sync_shard_++);
    limiter.CollectReplica(
        shard, add, std::span(told_versions_).subspan(shard * kRangesPerShard, kRangesPerShard));
    piece = Piece::kSyncShard;
  } else if (!wanted_ranges_.empty()) {
    const uint32_t range = wanted_ranges_.front();
    wanted_ranges_.pop_front();
    told_versions_[range] = limiter.CollectRange(range, add);
    piece = Piece::kRange;
  } else {
    return Piece::kNothing;
  }
  encoder.Finish(frames);
  return piece;
}

}  // namespace tally
