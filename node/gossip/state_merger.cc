#include "node/gossip/state_merger.h"

#include <span>

namespace tally {

Status StateMerger::Merge(Limiter& limiter, NodeId from, const protocol::PeerMessage& message,
                          bool relays, const Rejected& rejected, uint64_t* merged) {
  const MergeSource source = message.full              ? MergeSource::kSync
                             : message.relay && relays ? MergeSource::kRelay
                                                       : MergeSource::kDelta;
  size_t pending = 0;
  for (const protocol::PeerClassView& view : message.classes) {
    protocol::PeerClassDecoder decoder(view, from);
    for (;;) {
      if (pending == batch_.size()) {
        batch_.emplace_back();
        statuses_.emplace_back();
      }
      if (!decoder.Next(&batch_[pending])) break;
      if (++pending == kBatchKeys) {
        MergeDecoded(limiter, from, pending, source, rejected, merged);
        pending = 0;
      }
    }
    if (!decoder.status().ok()) {
      // The entries before the bad bytes.
      MergeDecoded(limiter, from, pending, source, rejected, merged);
      return decoder.status();
    }
  }
  MergeDecoded(limiter, from, pending, source, rejected, merged);
  return Status::OK();
}

void StateMerger::MergeDecoded(Limiter& limiter, NodeId from, size_t pending, MergeSource source,
                               const Rejected& rejected, uint64_t* merged) {
  const std::span<Status> statuses(statuses_.data(), pending);
  const std::span<const KeySnapshot> entries(batch_.data(), pending);
  limiter.MergeBatch(entries, statuses, source);
  if (merged_) merged_(from, entries);
  for (const Status& status : statuses) {
    if (status.ok()) {
      ++*merged;
    } else {
      rejected(status);
    }
  }
}

}  // namespace tally
