// MemberProbes: the membership's messages over the gossip links.
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "node/gossip/gossip_peer.h"

namespace tally {

void KeepAlive(tcp::socket& socket) {
  asio::error_code ignored;
  socket.set_option(asio::socket_base::keep_alive(true), ignored);
  // First probe after 15 s idle, then every 5 s; 6 unanswered end it.
  const int idle_s = 15, interval_s = 5, count = 6;
  const int fd = socket.native_handle();
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

MemberProbes::MemberProbes(GossipShared& shared,
                           const std::map<std::string, std::shared_ptr<PeerLink>>* links)
    : shared_(shared),
      links_(links),
      prober_(Prober::Options{shared.limiter->node_id(), shared.options.membership_interval_ms,
                              shared.options.suspect_after_ms, 3,
                              shared.limiter->node_id() ^ shared.incarnation}) {}

void MemberProbes::Tick(int64_t now_ms) {
  last_tick_ms_ = now_ms;
  std::vector<Prober::Message> out;
  std::vector<NodeId> failed;
  std::vector<NodeId> members;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    members = shared_.membership->Probeable();
  }
  std::vector<NodeId> linked;
  for (NodeId member : members) {
    if (LinkTo(member) != nullptr) linked.push_back(member);
  }
  prober_.Tick(now_ms, members, linked, &out, &failed);
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    for (NodeId member : failed) shared_.membership->Suspect(member, now_ms);
    shared_.membership->Expire(now_ms);
  }
  for (const Prober::Message& message : out) Send(message);
}

void MemberProbes::LinkDown(NodeId member, int64_t now_ms) {
  std::vector<Prober::Message> out;
  prober_.ProbeNow(member, now_ms, &out);
  for (const Prober::Message& message : out) Send(message);
}

void MemberProbes::LinkUp(NodeId member) {
  std::vector<Prober::Message> out;
  prober_.LinkUp(member, &out);
  for (const Prober::Message& message : out) Send(message);
}

void MemberProbes::Receive(NodeId from, const protocol::Probe& probe) {
  std::vector<Prober::Message> out;
  const std::optional<NodeId> acked = prober_.Receive(from, probe, &out);
  if (acked && *acked != from) {
    std::lock_guard<std::mutex> lock(shared_.mu);
    shared_.membership->HeardThrough(*acked, shared_.NowMs());
  }
  for (const Prober::Message& message : out) Send(message);
}

void MemberProbes::Refuted() {
  prober_.Refuted();
  std::vector<protocol::MemberRecord> self;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    self.push_back(shared_.membership->self());
  }
  auto frame = std::make_shared<std::string>();
  protocol::EncodeMembers(self, shared_.member_losses.crash_losses(), nullptr, frame.get());
  for (const auto& [address, link] : *links_) link->Send(frame);
}

void MemberProbes::Stalled(int64_t stall_ms) {
  prober_.Stalled(stall_ms);
  std::lock_guard<std::mutex> lock(shared_.mu);
  shared_.membership->Postpone(stall_ms);
}

void MemberProbes::SendTable() {
  const Frame frame = TableFrame();
  for (const auto& [address, link] : *links_) link->Send(frame);
}

Frame MemberProbes::TableFrame() {
  std::vector<protocol::MemberRecord> records;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    if (table_frame_ && table_version_ == shared_.membership->records_version()) {
      return table_frame_;
    }
    table_version_ = shared_.membership->records_version();
    records = shared_.membership->Records();
  }
  auto frame = std::make_shared<std::string>();
  protocol::EncodeMembers(records, shared_.member_losses.crash_losses(), nullptr, frame.get());
  table_frame_ = std::move(frame);
  return table_frame_;
}

bool MemberProbes::busy() const {
  if (prober_.busy()) return true;
  std::lock_guard<std::mutex> lock(shared_.mu);
  return shared_.membership->AnySuspect();
}

int64_t MemberProbes::next_ping_in_ms(int64_t now_ms) const {
  return prober_.next_ping_in_ms(now_ms);
}

PeerLink* MemberProbes::LinkTo(NodeId member) const { return shared_.link_to(member); }

void MemberProbes::Send(const Prober::Message& message) {
  PeerLink* const link = LinkTo(message.to);
  if (link == nullptr) return;  // unanswered, as if lost: the probe's timeout tells
  protocol::Probe probe = message.probe;
  probe.wall_ms = shared_.WallMs();
  const NodeId self = shared_.limiter->node_id();
  const bool own_ping = !probe.ack && probe.origin == self && probe.target == message.to;
  std::vector<protocol::MemberRecord> records;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    Membership& membership = *shared_.membership;
    if (own_ping && ++pings_sent_ % kTableEvery == 0) {
      records = membership.Records();
    } else {
      records = membership.RecordsFor(message.to, probe.ack, kUpdatesPerMessage);
    }
  }
  auto frame = std::make_shared<std::string>();
  protocol::EncodeMembers(records, shared_.member_losses.crash_losses(), &probe, frame.get());
  link->Send(frame);
}

}  // namespace tally
