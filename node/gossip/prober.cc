#include "node/gossip/prober.h"

#include <algorithm>

namespace tally {

Prober::Prober(const Options& options) : options_(options), random_(options.seed) {}

void Prober::Start(NodeId target, int64_t now_ms, std::vector<Message>* out) {
  const uint64_t seq = next_seq_++;
  pending_.push_back({seq, target, now_ms, options_.timeout_ms * (1 + health_), false});
  out->push_back(To(target, seq, options_.self, target, /*ack=*/false));
}

bool Prober::UnderWay(NodeId member) const {
  return std::any_of(pending_.begin(), pending_.end(),
                     [&](const Pending& p) { return p.target == member; });
}

void Prober::Tick(int64_t now_ms, std::span<const NodeId> members, const Linked& linked,
                  std::vector<Message>* out, std::vector<NodeId>* failed) {
  const auto is_member = [&](NodeId id) {
    return std::find(members.begin(), members.end(), id) != members.end();
  };
  for (auto it = pending_.begin(); it != pending_.end();) {
    const int64_t waited_ms = now_ms - it->started_ms;
    if (waited_ms >= it->timeout_ms || !is_member(it->target)) {
      if (is_member(it->target)) {
        failed->push_back(it->target);
        Worsen();
      }
      it = pending_.erase(it);
      continue;
    }
    if (!it->indirect_sent && waited_ms >= it->timeout_ms / 2) {
      it->indirect_sent = true;
      std::vector<NodeId> helpers;
      for (NodeId id : members) {
        if (id != it->target && linked(id)) helpers.push_back(id);
      }
      std::shuffle(helpers.begin(), helpers.end(), random_);
      helpers.resize(std::min(helpers.size(), options_.indirect_probes));
      for (NodeId helper : helpers) {
        out->push_back(To(helper, it->seq, options_.self, it->target, /*ack=*/false));
      }
      // And the ping again: the first may not have gone (no link up yet).
      out->push_back(To(it->target, it->seq, options_.self, it->target, /*ack=*/false));
    }
    ++it;
  }
  if (members.empty() || (pinged_ && now_ms - last_ping_ms_ < options_.interval_ms)) return;
  // The next member in turn that is still a member and not probed already
  // (ProbeNow); a new shuffle after the last of the order.
  for (size_t tries = 0; tries <= 2 * members.size(); ++tries) {
    if (next_ >= order_.size()) {
      order_.assign(members.begin(), members.end());
      std::shuffle(order_.begin(), order_.end(), random_);
      next_ = 0;
    }
    const NodeId target = order_[next_++];
    if (!is_member(target) || UnderWay(target)) continue;
    pinged_ = true;
    last_ping_ms_ = now_ms;
    Start(target, now_ms, out);
    return;
  }
}

void Prober::ProbeNow(NodeId member, int64_t now_ms, std::vector<Message>* out) {
  if (!UnderWay(member) && member != options_.self) Start(member, now_ms, out);
}

void Prober::LinkUp(NodeId member, std::vector<Message>* out) {
  for (const Pending& pending : pending_) {
    if (pending.target != member) continue;
    out->push_back(To(member, pending.seq, options_.self, member, /*ack=*/false));
  }
}

std::optional<NodeId> Prober::Receive(NodeId from, const protocol::Probe& probe,
                                      std::vector<Message>* out) {
  if (!probe.ack) {
    if (probe.target == options_.self) {
      out->push_back(To(from, probe.seq, probe.origin, probe.target, /*ack=*/true));
    } else if (probe.origin == from) {  // a ping-req: this node pings for the origin
      out->push_back(To(probe.target, probe.seq, probe.origin, probe.target, /*ack=*/false));
    }
    return std::nullopt;
  }
  if (probe.origin != options_.self) {  // an ack for a ping this node forwarded
    if (from == probe.target) {
      out->push_back(To(probe.origin, probe.seq, probe.origin, probe.target, /*ack=*/true));
    }
    return std::nullopt;
  }
  const auto it = std::find_if(pending_.begin(), pending_.end(), [&](const Pending& p) {
    return p.seq == probe.seq && p.target == probe.target;
  });
  if (it == pending_.end()) return std::nullopt;  // late, or a duplicate
  pending_.erase(it);
  health_ = std::max(0, health_ - 1);
  return probe.target;
}

void Prober::Refuted() { Worsen(); }

void Prober::Stalled(int64_t stall_ms) {
  for (Pending& pending : pending_) pending.started_ms += stall_ms;
  Worsen();
}

}  // namespace tally
