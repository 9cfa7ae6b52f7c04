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
    : shared_(shared), links_(links) {}

void MemberProbes::Tick(int64_t now_ms) {
  std::vector<MemberAgent::Outgoing> out;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    shared_.agent->Tick(
        now_ms, [&](NodeId member) { return shared_.link_to(member) != nullptr; }, &out);
  }
  Deliver(out);
}

void MemberProbes::LinkDown(NodeId member, int64_t now_ms) {
  std::vector<MemberAgent::Outgoing> out;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    shared_.agent->LinkDown(member, now_ms, &out);
  }
  Deliver(out);
}

void MemberProbes::LinkUp(NodeId member) {
  std::vector<MemberAgent::Outgoing> out;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    shared_.agent->LinkUp(member, &out);
  }
  Deliver(out);
}

void MemberProbes::Receive(NodeId from, const protocol::PeerMessage& message,
                           std::vector<Membership::Restart>* restarts) {
  std::vector<MemberAgent::Outgoing> out;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    shared_.agent->Receive(from, message, shared_.NowMs(), shared_.WallMs(), restarts, &out);
  }
  Deliver(out);
}

void MemberProbes::Stalled(int64_t stall_ms) {
  std::lock_guard<std::mutex> lock(shared_.mu);
  shared_.agent->Stalled(stall_ms);
}

void MemberProbes::SendTable() {
  const Frame frame = TableFrame();
  for (const auto& [address, link] : *links_) link->Send(frame);
}

Frame MemberProbes::TableFrame() {
  std::vector<protocol::MemberRecord> records;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    const Membership& membership = shared_.agent->membership();
    if (table_frame_ && table_version_ == membership.records_version()) return table_frame_;
    table_version_ = membership.records_version();
    records = membership.Records();
  }
  auto frame = std::make_shared<std::string>();
  protocol::EncodeMembers(records, shared_.member_losses.crash_losses(), nullptr, frame.get());
  table_frame_ = std::move(frame);
  return table_frame_;
}

bool MemberProbes::busy() const {
  std::lock_guard<std::mutex> lock(shared_.mu);
  return shared_.agent->busy();
}

int64_t MemberProbes::next_ping_in_ms(int64_t now_ms) const {
  std::lock_guard<std::mutex> lock(shared_.mu);
  return shared_.agent->next_ping_in_ms(now_ms);
}

void MemberProbes::Deliver(const std::vector<MemberAgent::Outgoing>& out) {
  for (const MemberAgent::Outgoing& message : out) {
    std::optional<protocol::Probe> probe = message.probe;
    if (probe) probe->wall_ms = shared_.WallMs();
    auto frame = std::make_shared<std::string>();
    protocol::EncodeMembers(message.records, shared_.member_losses.crash_losses(),
                            probe ? &*probe : nullptr, frame.get());
    if (message.to == MemberAgent::kEveryone) {
      for (const auto& [address, link] : *links_) link->Send(frame);
    } else if (PeerLink* const link = shared_.link_to(message.to)) {
      link->Send(frame);
    }  // else unanswered, as if lost: the probe's timeout tells
  }
}

}  // namespace tally
