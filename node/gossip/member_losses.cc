#include "node/gossip/member_losses.h"

#include <algorithm>
#include <tuple>

#include <spdlog/spdlog.h>

namespace tally {

void MemberLosses::Start(std::span<const CrashLoss> stored, NodeId self_id, uint64_t incarnation,
                         bool crashed, int64_t wall_ms) {
  for (const CrashLoss& loss : stored) Add(loss, wall_ms);
  if (crashed) Add({self_id, incarnation, wall_ms}, wall_ms);
  Publish(crashed);
}

void MemberLosses::LinkWentDown(const protocol::MemberRecord& record, uint64_t link_incarnation,
                                int64_t wall_ms) {
  const uint64_t incarnation = link_incarnation != 0 ? link_incarnation : record.incarnation;
  if (record.left || record.incarnation > incarnation || pending_.contains(record.node_id)) return;
  spdlog::debug(
      "node {} dropped its link without leaving: what it may have kept back counts as spent "
      "until it is heard alive",
      record.node_id);
  pending_[record.node_id] = {incarnation, wall_ms};
  Publish(false);
}

void MemberLosses::Alive(NodeId node, uint64_t incarnation) {
  const auto pending = pending_.find(node);
  if (pending == pending_.end() || pending->second.incarnation != incarnation) return;
  spdlog::debug("node {} is alive: nothing it kept back was lost", node);
  pending_.erase(pending);
  Publish(false);
}

void MemberLosses::Restarted(NodeId node, uint64_t incarnation, int64_t wall_ms) {
  int64_t at_ms = wall_ms;
  if (const auto pending = pending_.find(node); pending != pending_.end()) {
    at_ms = pending->second.at_ms;  // lost since its link went down
    pending_.erase(pending);
  }
  const bool added = Add({node, incarnation, at_ms}, wall_ms);
  if (added) {
    spdlog::info("node {} restarted without leaving: what it kept back counts as spent", node);
  }
  Publish(added);
}

void MemberLosses::Merge(std::span<const CrashLoss> losses, int64_t wall_ms) {
  bool changed = false;
  for (const CrashLoss& loss : losses) changed = Add(loss, wall_ms) || changed;
  if (changed) Publish(true);
}

void MemberLosses::Follow(std::span<const protocol::MemberRecord> records, NodeId self_id,
                          int64_t wall_ms) {
  bool changed = false;
  for (const protocol::MemberRecord& record : records) {
    const auto pending = pending_.find(record.node_id);
    if (record.node_id == self_id || pending == pending_.end()) continue;
    const Pending& loss = pending->second;
    // A newer incarnation is settled by Restarted, as the record arrives.
    if (record.incarnation == loss.incarnation && record.left) {
      spdlog::debug("node {} is leaving: nothing it kept back was lost", record.node_id);
      pending_.erase(pending);
      changed = true;
    }
  }
  const size_t before = crash_losses_.size();
  std::erase_if(crash_losses_,
                [&](const CrashLoss& loss) { return loss.at_ms < wall_ms - kKeepMs; });
  if (changed || crash_losses_.size() != before) Publish(crash_losses_.size() != before);
}

bool MemberLosses::Add(const CrashLoss& loss, int64_t wall_ms) {
  if (loss.node_id == 0 || loss.at_ms < wall_ms - kKeepMs) return false;
  const auto key = [](const CrashLoss& l) { return std::tie(l.node_id, l.incarnation); };
  const auto it =
      std::lower_bound(crash_losses_.begin(), crash_losses_.end(), loss,
                       [&](const CrashLoss& a, const CrashLoss& b) { return key(a) < key(b); });
  if (it != crash_losses_.end() && key(*it) == key(loss)) {
    if (loss.at_ms >= it->at_ms) return false;
    it->at_ms = loss.at_ms;
    return true;
  }
  crash_losses_.insert(it, loss);
  if (crash_losses_.size() > kMaxCrashLosses) {
    const auto oldest =
        std::min_element(crash_losses_.begin(), crash_losses_.end(),
                         [](const CrashLoss& a, const CrashLoss& b) { return a.at_ms < b.at_ms; });
    spdlog::warn("more than {} crash losses: the oldest (node {}) no longer counts",
                 kMaxCrashLosses, oldest->node_id);
    crash_losses_.erase(oldest);
  }
  return true;
}

void MemberLosses::Publish(bool crash_losses_changed) {
  std::vector<int64_t> seen_at_ms;
  seen_at_ms.reserve(pending_.size() + crash_losses_.size());
  for (const auto& [node, loss] : pending_) seen_at_ms.push_back(loss.at_ms);
  for (const CrashLoss& loss : crash_losses_) seen_at_ms.push_back(loss.at_ms);
  limiter_->SetDeferralLosses(seen_at_ms);
  if (crash_losses_changed && changed_) changed_(crash_losses_);
}

}  // namespace tally
