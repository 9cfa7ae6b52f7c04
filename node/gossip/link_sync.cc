#include "node/gossip/link_sync.h"

namespace tally {

void LinkSync::Connected() {
  told_versions_.clear();
  wanted_ranges_.clear();
  sync_shard_ = 0;
}

uint64_t LinkSync::Told(uint32_t range) const {
  const auto told = told_versions_.find(range);
  return told == told_versions_.end() ? kUnchanged : told->second;
}

void LinkSync::SetTold(uint32_t range, uint64_t version) {
  if (version == kUnchanged) {
    told_versions_.erase(range);
  } else {
    told_versions_[range] = version;
  }
}

std::vector<uint32_t> LinkSync::DigestsDue(std::span<const Limiter::RangeVersion> versions,
                                           std::span<const uint32_t> candidates) const {
  std::vector<uint32_t> due;
  if (syncing()) return due;
  for (const uint32_t range : candidates) {
    if (versions[range].version != Told(range)) due.push_back(range);
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
    SetTold(range, versions[range].version);
  }
  return message;
}

void LinkSync::AnswerReceived(std::span<const uint32_t> want, std::span<const uint32_t> later) {
  for (const uint32_t range : later) SetTold(range, kNotTold);
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
  protocol::PeerStateEncoder encoder(limiter.node_id(), /*full=*/true, max_frame_bytes);
  const auto add = [&](const KeySnapshot& snapshot) { encoder.Add(snapshot, frames); };
  Piece piece = Piece::kNothing;
  if (sync_shard_ >= 0) {
    const size_t shard = static_cast<size_t>(sync_shard_++);
    std::array<uint64_t, kRangesPerShard> versions{};
    limiter.CollectReplica(shard, add, versions);
    for (size_t i = 0; i < kRangesPerShard; ++i) {
      SetTold(static_cast<uint32_t>(shard * kRangesPerShard + i), versions[i]);
    }
    piece = Piece::kSyncShard;
  } else if (!wanted_ranges_.empty()) {
    const uint32_t range = wanted_ranges_.front();
    wanted_ranges_.pop_front();
    SetTold(range, limiter.CollectRange(range, add));
    piece = Piece::kRange;
  } else {
    return Piece::kNothing;
  }
  encoder.Finish(frames);
  return piece;
}

}  // namespace tally
