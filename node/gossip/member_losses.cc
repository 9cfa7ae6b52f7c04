#include "node/gossip/member_losses.h"

#include <spdlog/spdlog.h>

namespace tally {

void MemberLosses::LinkWentDown(const protocol::MemberRecord& record) {
  if (record.left || pending_.contains(record.node_id)) return;
  spdlog::debug(
      "node {} dropped its link without leaving: what it may have kept back counts as spent "
      "until it is heard alive",
      record.node_id);
  pending_[record.node_id] = {record.incarnation, record.heartbeat, limiter_->NoteDeferralLoss()};
}

void MemberLosses::Follow(std::span<const protocol::MemberRecord> records, NodeId self_id) {
  for (const protocol::MemberRecord& record : records) {
    if (record.node_id == self_id) continue;
    const auto pending = pending_.find(record.node_id);
    if (pending != pending_.end()) {
      const Pending& loss = pending->second;
      if (record.incarnation > loss.incarnation) {
        spdlog::info("node {} restarted: what it kept back is lost and counts as spent",
                     record.node_id);
        pending_.erase(pending);
      } else if (record.left || record.heartbeat >= loss.heartbeat + kAliveBeats) {
        spdlog::debug("node {} is {}: nothing it kept back was lost", record.node_id,
                      record.left ? "leaving" : "alive");
        limiter_->ForgetDeferralLoss(loss.ticket);
        pending_.erase(pending);
      }
    } else if (const auto seen = seen_.find(record.node_id);
               seen != seen_.end() && record.incarnation > seen->second.incarnation &&
               !seen->second.left) {
      spdlog::info("node {} restarted without leaving: what it kept back counts as spent",
                   record.node_id);
      limiter_->NoteDeferralLoss();
    }
    seen_[record.node_id] = {record.incarnation, record.left};
  }
}

}  // namespace tally
