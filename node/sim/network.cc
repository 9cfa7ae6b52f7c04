#include "node/sim/network.h"

namespace tally::sim {

void Network::Send(NodeId from, NodeId to, const Frame& frame) {
  ++messages_;
  bytes_ += frame->size();
  if (!Reaches(from, to)) {
    held_[{from, to}].emplace_back(frame, events_->now_ms());
    return;
  }
  Schedule(from, to, frame, events_->now_ms());
}

void Network::Schedule(NodeId from, NodeId to, const Frame& frame, int64_t sent_at_ms) {
  if (random_->Chance(faults_.loss)) {
    ++lost_;
    return;
  }
  const int copies = random_->Chance(faults_.duplicate) ? 2 : 1;
  for (int i = 0; i < copies; ++i) {
    int64_t delay_ms =
        LinkExtraMs(from, to) + random_->Between(faults_.delay_min_ms, faults_.delay_max_ms);
    if (random_->Chance(faults_.reorder))
      delay_ms += random_->Between(1, 10 * faults_.delay_max_ms);
    events_->After(delay_ms,
                   [this, from, to, frame, sent_at_ms] { deliver_(from, to, frame, sent_at_ms); });
  }
}

int64_t Network::LinkExtraMs(NodeId from, NodeId to) {
  if (faults_.link_extra_max_ms <= 0) return 0;
  const auto [link, added] = link_extra_ms_.try_emplace({from, to}, 0);
  if (added) link->second = random_->Between(0, faults_.link_extra_max_ms);
  return link->second;
}

void Network::Heal(NodeId from, NodeId to) {
  cuts_.erase({from, to});
  const auto held = held_.find({from, to});
  if (held == held_.end()) return;
  const std::vector<std::pair<Frame, int64_t>> frames = std::move(held->second);
  held_.erase(held);
  for (const auto& [frame, sent_at_ms] : frames) Schedule(from, to, frame, sent_at_ms);
}

void Network::HealAll() {
  const std::set<std::pair<NodeId, NodeId>> cuts = cuts_;
  for (const auto& [from, to] : cuts) Heal(from, to);
}

}  // namespace tally::sim
