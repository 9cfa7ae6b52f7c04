#include "node/gossip/member_agent.h"

namespace tally {

MemberAgent::MemberAgent(const Options& options, int64_t now_ms)
    : membership_(options.membership, now_ms), prober_(options.prober) {}

void MemberAgent::Add(const Prober::Message& message, std::vector<Outgoing>* out) {
  const protocol::Probe& probe = message.probe;
  const bool own_ping =
      !probe.ack && probe.origin == membership_.self().node_id && probe.target == message.to;
  Outgoing& outgoing = out->emplace_back();
  outgoing.to = message.to;
  outgoing.probe = probe;
  outgoing.records = own_ping && ++pings_sent_ % kTableEvery == 0
                         ? membership_.Records()
                         : membership_.RecordsFor(message.to, probe.ack, kUpdatesPerMessage);
}

void MemberAgent::Tick(int64_t now_ms, const Linked& linked, std::vector<Outgoing>* out) {
  const std::vector<NodeId> members = membership_.Probeable();
  std::vector<Prober::Message> messages;
  std::vector<NodeId> failed;
  prober_.Tick(now_ms, members, linked, &messages, &failed);
  for (NodeId member : failed) membership_.Suspect(member, now_ms);
  membership_.Expire(now_ms);
  for (const Prober::Message& message : messages) Add(message, out);
}

void MemberAgent::LinkDown(NodeId member, int64_t now_ms, std::vector<Outgoing>* out) {
  std::vector<Prober::Message> messages;
  prober_.ProbeNow(member, now_ms, &messages);
  for (const Prober::Message& message : messages) Add(message, out);
}

void MemberAgent::LinkUp(NodeId member, std::vector<Outgoing>* out) {
  std::vector<Prober::Message> messages;
  prober_.LinkUp(member, &messages);
  for (const Prober::Message& message : messages) Add(message, out);
}

void MemberAgent::Receive(NodeId from, const protocol::PeerMessage& message, int64_t now_ms,
                          int64_t wall_ms, std::vector<Membership::Restart>* restarts,
                          std::vector<Outgoing>* out) {
  if (membership_.Merge(message.members, now_ms, wall_ms, restarts)) {
    prober_.Refuted();
    out->push_back({kEveryone, {membership_.self()}, std::nullopt});
  }
  membership_.HeardFrom(from, message.probe ? message.probe->wall_ms : 0, now_ms, wall_ms);
  if (!message.probe) return;
  std::vector<Prober::Message> messages;
  const std::optional<NodeId> acked = prober_.Receive(from, *message.probe, &messages);
  if (acked && *acked != from) membership_.HeardThrough(*acked, now_ms);
  for (const Prober::Message& reply : messages) Add(reply, out);
}

void MemberAgent::Stalled(int64_t stall_ms) {
  prober_.Stalled(stall_ms);
  membership_.Postpone(stall_ms);
}

}  // namespace tally
