#include "node/gossip/anti_entropy.h"

namespace tally {

std::vector<Limiter::RangeVersion> AllRangeVersions(Limiter& limiter, int64_t quiet_ms) {
  std::vector<Limiter::RangeVersion> versions(Limiter::range_count());
  for (size_t shard = 0; shard < Limiter::shard_count(); ++shard) {
    limiter.RangeVersions(shard, quiet_ms,
                          std::span(versions).subspan(shard * kRangesPerShard, kRangesPerShard));
  }
  return versions;
}

std::vector<ShardRun> ShardRuns(std::span<const uint32_t> ranges) {
  std::vector<ShardRun> runs;
  for (size_t first = 0; first < ranges.size();) {
    const size_t shard = ranges[first] / kRangesPerShard;
    size_t end = first;
    while (end < ranges.size() && ranges[end] / kRangesPerShard == shard) ++end;
    runs.push_back({shard, first, end});
    first = end;
  }
  return runs;
}

IntervalDigests::IntervalDigests(const std::vector<bool>& wanted)
    : digests(Limiter::range_count()), current(Limiter::range_count()) {
  for (uint32_t range = 0; range < wanted.size(); ++range) {
    if (wanted[range]) ranges_.push_back(range);
  }
  runs = ShardRuns(ranges_);
}

void IntervalDigests::Compute(Limiter& limiter, const ShardRun& run, int64_t ref_ms) {
  const size_t first = run.shard * kRangesPerShard;
  const uint64_t mask =
      limiter.RangeDigests(run.shard, ref_ms, std::span(digests).subspan(first, kRangesPerShard));
  for (size_t i = 0; i < kRangesPerShard; ++i) current[first + i] = (mask >> i & 1) != 0;
}

void IntervalDigests::KeepCurrent(std::vector<uint32_t>* ranges) const {
  std::erase_if(*ranges, [&](uint32_t range) { return !current[range]; });
}

void CompareShardDigests(Limiter& limiter, size_t shard, int64_t quiet_ms, int64_t ref_ms,
                         std::span<const protocol::RangeDigest> digests,
                         std::vector<uint32_t>* want, std::vector<uint32_t>* later) {
  // Quiet as of ref_ms: a range that changed after it (a relayer's delta
  // that came in while the nodes computed their digests, each at its own
  // time) may hold what the peer's digest does not, or the other way round.
  Limiter::RangeVersion versions[kRangesPerShard];
  limiter.RangeVersions(shard, quiet_ms, versions, ref_ms);
  uint64_t own[kRangesPerShard];
  const uint64_t current = limiter.RangeDigests(shard, ref_ms, own);
  for (const protocol::RangeDigest& digest : digests) {
    const size_t i = digest.range % kRangesPerShard;
    if (!versions[i].quiet || (current >> i & 1) == 0) {
      later->push_back(digest.range);  // changed lately, or since its digest at ref_ms
    } else if (own[i] != digest.digest) {
      want->push_back(digest.range);
    }
  }
}

void CompareDigests(Limiter& limiter, int64_t quiet_ms, int64_t ref_ms,
                    std::span<const protocol::RangeDigest> digests, std::vector<uint32_t>* want,
                    std::vector<uint32_t>* later) {
  std::vector<uint32_t> ranges;
  for (const protocol::RangeDigest& digest : digests) ranges.push_back(digest.range);
  for (const ShardRun& run : ShardRuns(ranges)) {
    CompareShardDigests(limiter, run.shard, quiet_ms, ref_ms,
                        digests.subspan(run.first, run.end - run.first), want, later);
  }
}

std::vector<uint32_t> DigestLedger::Due(std::span<const Limiter::RangeVersion> versions) const {
  std::vector<uint32_t> due;
  for (uint32_t range = 0; range < versions.size(); ++range) {
    const uint64_t sent = range < sent_.size() ? sent_[range] : KeyRange{}.version;
    if (versions[range].quiet && versions[range].version != sent) due.push_back(range);
  }
  return due;
}

void DigestLedger::Sent(std::span<const uint32_t> ranges,
                        std::span<const Limiter::RangeVersion> versions) {
  if (sent_.empty()) sent_.assign(Limiter::range_count(), KeyRange{}.version);
  for (const uint32_t range : ranges) sent_[range] = versions[range].version;
}

void RangeAskBudget::Limit(int64_t ref_ms, NodeId peer, std::vector<uint32_t>* want,
                           std::vector<uint32_t>* later) {
  if (ref_ms != ref_ms_) {
    ref_ms_ = ref_ms;
    asked_of_.clear();
    asked_.clear();
  }
  size_t& asked_of_peer = asked_of_[peer];
  std::erase_if(*want, [&](uint32_t range) {
    if (asked_of_peer < kMostRangesAskedPerPeer && asked_.insert(range).second) {
      ++asked_of_peer;
      return false;
    }
    later->push_back(range);  // its digest comes again at the next interval
    return true;
  });
}

}  // namespace tally
