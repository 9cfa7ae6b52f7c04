// PeerSession: the state a peer sends to this node, merged as it arrives;
// and the frame reading both ends of a gossip connection use.
#include <spdlog/spdlog.h>

#include "node/common/clock.h"
#include "node/gossip/anti_entropy.h"
#include "node/gossip/gossip_peer.h"
#include "node/net/acceptor.h"

namespace tally {
namespace {

constexpr size_t kMinReadBytes = 4 * 1024;
constexpr size_t kMaxReadBytes = 256 * 1024;

}  // namespace

protocol::FrameLimits PeerFrameLimits() {
  protocol::FrameLimits limits;
  limits.max_frame_bytes = 4 << 20;
  return limits;
}

protocol::FrameLimits HandshakeFrameLimits() {
  protocol::FrameLimits limits;
  limits.max_frame_bytes = 4 << 10;
  return limits;
}

asio::awaitable<Status> ReadFrames(NetStream& stream, ReceiveBuffer* buffer, size_t count,
                                   size_t sizes[2], const protocol::FrameLimits& limits,
                                   GossipShared& shared) {
  for (;;) {
    const std::span<const std::byte> received = buffer->readable();
    size_t offset = 0, found = 0, wanted = kMinReadBytes;
    while (found < count) {
      const protocol::FrameScan scan = protocol::ScanFrame(received.subspan(offset), limits);
      if (scan.state == protocol::FrameScan::State::kInvalid) {
        co_return Status::Corruption(scan.error_message);
      }
      if (scan.state == protocol::FrameScan::State::kNeedMore) {
        wanted = scan.frame_bytes - (received.size() - offset);
        break;
      }
      sizes[found++] = scan.frame_bytes;
      offset += scan.frame_bytes;
    }
    if (found == count) co_return Status::OK();
    std::span<std::byte> room;
    if (Status status = buffer->Writable(std::clamp(wanted, kMinReadBytes, kMaxReadBytes), &room);
        !status.ok()) {
      co_return status;
    }
    asio::error_code ec;
    const size_t read = co_await stream.async_read_some(
        asio::buffer(room.data(), room.size()), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Status::IOError(ec == asio::error::eof ? "closed by the peer" : ec.message());
    buffer->Commit(read);
    GossipShared::Add(shared.bytes_received, read);
  }
}

Status DecodeAt(const ReceiveBuffer& buffer, size_t offset, size_t bytes,
                protocol::PeerMessage* message) {
  return protocol::DecodePeerMessage(buffer.readable().subspan(offset, bytes), PeerFrameLimits(),
                                     message);
}

Status CheckSeal(const ReceiveBuffer& buffer, const size_t sizes[2], const protocol::PeerAuth& auth,
                 uint64_t seq) {
  protocol::PeerMessage seal;
  if (Status status = DecodeAt(buffer, sizes[0], sizes[1], &seal); !status.ok()) return status;
  if (seal.kind != protocol::PeerMessageKind::kSeal) {
    return Status::InvalidArgument("a message without its seal");
  }
  if (seal.seq != seq) {
    return Status::InvalidArgument("seal " + std::to_string(seal.seq) + " where " +
                                   std::to_string(seq) +
                                   " was due (a replayed or reordered message)");
  }
  if (!auth.Verify(seq, buffer.readable().first(sizes[0]), seal.mac)) {
    return Status::InvalidArgument(
        "a seal that does not match: the peer does not hold this "
        "cluster's secret, or the message was altered");
  }
  return Status::OK();
}

PeerSession::PeerSession(GossipShared& shared, tcp::socket socket,
                         std::set<std::shared_ptr<PeerSession>>* sessions, uint64_t sequence)
    : shared_(shared),
      stream_(std::move(socket), shared.options.tls),
      socket_(stream_.socket()),
      sessions_(sessions),
      address_(RemoteAddress(socket_)),
      peer_(PeerName(socket_)),
      sequence_(sequence),
      in_(&shared_.buffer_budget, shared_.options.clock),
      opened_ms_(shared_.NowMs()) {}

void PeerSession::Start() {
  sessions_->insert(shared_from_this());
  asio::co_spawn(socket_.get_executor(), Run(), [self = shared_from_this()](std::exception_ptr e) {
    if (e) spdlog::error("gossip session from {} failed: an exception escaped", self->peer_);
  });
}

void PeerSession::Close() {
  asio::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

void PeerSession::Tick(int64_t now_ms) {
  // Before the peer proves the secret: since the session opened. After: only
  // while a message (or its seal) is half there, since its first byte came;
  // a member with nothing to send sends nothing for as long as it likes.
  // Not while this node handles a message (a comparison of digests yields).
  const int64_t since_ms = !counted_ ? opened_ms_ : in_.frame_started_ms();
  if (since_ms < 0 || handling_ || !socket_.is_open()) return;
  if (now_ms - since_ms > shared_.options.idle_timeout_ms) {
    shared_.log.Warn("closing gossip session from " + peer_ + ": " +
                     (counted_ ? "a message half there for " : "no sealed message for ") +
                     std::to_string(now_ms - since_ms) + " ms, " + Progress());
    Close();
  }
}

std::string PeerSession::Progress() const {
  const std::span<const std::byte> received = in_.readable();
  size_t offset = 0;
  for (const char* what : {"a message", "its seal"}) {
    const protocol::FrameScan scan = protocol::ScanFrame(
        received.subspan(offset), counted_ ? PeerFrameLimits() : HandshakeFrameLimits());
    if (scan.state != protocol::FrameScan::State::kComplete) {
      return "with " + std::to_string(received.size() - offset) + " bytes of " + what +
             " received (" + std::to_string(scan.frame_bytes) + " needed to go on)";
    }
    offset += scan.frame_bytes;
  }
  return "with a whole message and its seal received, not yet read";
}

void PeerSession::Refuse(const std::string& why) {
  if (!refused_) {
    refused_ = true;
    GossipShared::Add(shared_.sessions_refused, 1);
    shared_.log.Warn("refusing gossip from " + peer_ + ": " + why);
  }
  Close();
}

asio::awaitable<void> PeerSession::Run() {
  const Status status = co_await Serve();
  if (!status.ok() && status.code() != Status::Code::kIOError) {
    Refuse(status.ToString());
  } else if (auth_ && !counted_ && node_id_ != shared_.limiter->node_id()) {
    // It saw our sealed hello and left: no member of ours.
    Refuse("node " + std::to_string(node_id_) +
           " ended the session before it proved the "
           "cluster secret: " +
           status.ToString());
  }
  stream_.ShutdownTls();  // here no read or write is pending on the stream
  Close();
  if (counted_) Heard(/*sessions=*/-1, 0, false);
  sessions_->erase(shared_from_this());
}

asio::awaitable<Status> PeerSession::Serve() {
  protocol::PeerMessage message;
  size_t sizes[2] = {0, 0};
  if (Status status = co_await stream_.Handshake(NetStream::Side::kServer); !status.ok()) {
    co_return status;
  }
  if (Status status = co_await ReadFrames(stream_, &in_, 1, sizes, HandshakeFrameLimits(), shared_);
      !status.ok()) {
    if (!stream_.tls() && LooksLikeTlsHandshake(in_.readable())) {
      co_return Status::InvalidArgument(
          "a TLS handshake on a plaintext gossip port (this node runs without --gossip-tls)");
    }
    co_return status;
  }
  if (Status status = DecodeAt(in_, 0, sizes[0], &message); !status.ok()) co_return status;
  if (message.kind != protocol::PeerMessageKind::kHello) {
    co_return Status::InvalidArgument("the first peer message is not a hello");
  }
  if (message.peer_version != protocol::kPeerProtocolVersion) {
    co_return Status::InvalidArgument(protocol::PeerVersionMismatch(message.peer_version));
  }
  // This node's own id: a seed that resolves to this node. The sealed hello
  // below tells the dialler so; nothing after it is read.
  const bool from_self = message.node_id == shared_.limiter->node_id();
  node_id_ = message.node_id;
  const uint64_t peer_incarnation = message.incarnation;
  const std::string nonce = protocol::RandomNonce();
  auth_.emplace(shared_.options.cluster_secret, message.nonce, nonce);
  in_.Consume(sizes[0]);
  std::string reply;  // our hello, sealed (seq 0): proof that we are a member
  protocol::EncodeHello(shared_.limiter->node_id(), nonce, shared_.options.relay,
                        shared_.incarnation, &reply);
  protocol::EncodeSeal(0, auth_->Mac(0, protocol::FrameBytes(reply)), &reply);
  asio::error_code ec;
  co_await asio::async_write(stream_, asio::buffer(reply),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return Status::IOError(ec.message());
  GossipShared::Add(shared_.bytes_sent, reply.size());
  if (from_self) co_return Status::IOError("this node dialled itself");
  for (;;) {
    // Until a seal checks out, only small frames: an outsider gets no large buffer.
    const protocol::FrameLimits limits = counted_ ? PeerFrameLimits() : HandshakeFrameLimits();
    if (Status status = co_await ReadFrames(stream_, &in_, 2, sizes, limits, shared_);
        !status.ok()) {
      co_return status;
    }
    if (Status status = CheckSeal(in_, sizes, *auth_, next_seq_); !status.ok()) co_return status;
    ++next_seq_;
    if (!counted_) {  // the first sealed message: the peer holds the secret
      Heard(/*sessions=*/+1, 0, false);
      counted_ = true;
      shared_.member_losses.Alive(node_id_, peer_incarnation);
    }
    if (Status status = DecodeAt(in_, 0, sizes[0], &message); !status.ok()) co_return status;
    switch (message.kind) {
      case protocol::PeerMessageKind::kState:
        if (Status status = Merge(message); !status.ok()) co_return status;
        break;
      case protocol::PeerMessageKind::kMembers: MergeMembers(message); break;
      case protocol::PeerMessageKind::kResync:
        if (PeerLink* const link = shared_.link_to(node_id_)) link->ResyncAll();
        Heard(0, 0, false);
        break;
      case protocol::PeerMessageKind::kDigests:
        handling_ = true;
        co_await CompareDigests(message);
        handling_ = false;
        Heard(0, 0, false);
        break;
      case protocol::PeerMessageKind::kRanges:
        if (PeerLink* const link = shared_.link_to(node_id_)) {
          link->AnswerReceived(message.want, message.later);
        }
        Heard(0, 0, false);
        break;
      case protocol::PeerMessageKind::kSyncDone:
        GossipShared::Add(shared_.full_syncs_received, 1);
        Heard(0, 0, /*synced=*/true);
        break;
      case protocol::PeerMessageKind::kHello: co_return Status::InvalidArgument("a second hello");
      case protocol::PeerMessageKind::kSeal:
        co_return Status::InvalidArgument("a seal without a message");
      case protocol::PeerMessageKind::kHeartbeat:
      case protocol::PeerMessageKind::kUnknown:  // a newer peer's message: ignored
        Heard(0, 0, false);
        break;
    }
    in_.Consume(sizes[0] + sizes[1]);
    in_.ShrinkIfIdle();
  }
}

Status PeerSession::Merge(const protocol::PeerMessage& message) {
  uint64_t merged = 0;
  const Status status = merger_.Merge(
      *shared_.limiter, node_id_, message, shared_.options.relay,
      [&](const Status& rejected) {
        GossipShared::Add(shared_.entries_rejected, 1);
        if (rejected.code() == Status::Code::kResourceExhausted) ++shared_.refused_at_cap;
        shared_.log.Warn("gossip from node " + std::to_string(node_id_) + " (" + peer_ +
                         "): a key's state was not merged: " + rejected.ToString());
      },
      &merged);
  GossipShared::Add(shared_.entries_merged, merged);
  if (status.ok()) Heard(0, merged, false);
  return status;
}

asio::awaitable<void> CompareInTurns(GossipShared& shared, int64_t ref_ms,
                                     std::span<const protocol::RangeDigest> digests,
                                     std::vector<uint32_t>* want, std::vector<uint32_t>* later) {
  std::vector<uint32_t> ranges;
  for (const protocol::RangeDigest& digest : digests) ranges.push_back(digest.range);
  const int64_t quiet_ms = QuietMs(shared.options.interval_ms);
  const std::vector<ShardRun> runs = ShardRuns(ranges);
  for (size_t i = 0; i < runs.size(); ++i) {
    // One shard's pass at a time: the rounds and other sessions run in between.
    if (i > 0) co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    CompareShardDigests(*shared.limiter, runs[i].shard, quiet_ms, ref_ms,
                        digests.subspan(runs[i].first, runs[i].end - runs[i].first), want, later);
  }
}

asio::awaitable<void> PeerSession::CompareDigests(protocol::PeerMessage& message) {
  std::vector<protocol::RangeDigest>& digests = message.digests;
  std::erase_if(digests, [](const protocol::RangeDigest& digest) {
    return digest.range >= Limiter::range_count();  // a peer that speaks garbage
  });
  std::sort(digests.begin(), digests.end(),
            [](const auto& a, const auto& b) { return a.range < b.range; });
  std::vector<uint32_t> again;  // differ, or not quiet here: both are compared again
  co_await CompareInTurns(shared_, message.ref_ms, digests, &again, &again);
  if (again.empty()) co_return;
  std::sort(again.begin(), again.end());
  GossipShared::Recheck recheck{
      node_id_, message.ref_ms, shared_.NowMs() + RecheckMs(shared_.options.interval_ms), {}};
  for (const protocol::RangeDigest& digest : digests) {
    if (std::binary_search(again.begin(), again.end(), digest.range)) {
      recheck.digests.push_back(digest);
    }
  }
  shared_.rechecks.push_back(std::move(recheck));
  shared_.end_rest();  // a resting round wakes for it
}

void PeerSession::MergeMembers(const protocol::PeerMessage& message) {
  std::vector<Membership::Restart> restarts;
  shared_.probes->Receive(node_id_, message, &restarts);
  // Before the sender's full sync, which follows its table on the link: a
  // restarting node counts its losses before it serves.
  for (const Membership::Restart& restart : restarts) {
    shared_.member_losses.Restarted(restart.node_id, restart.incarnation, shared_.WallMs());
    shared_.flush_deferred = true;
  }
  if (!restarts.empty()) shared_.end_rest();
  shared_.member_losses.Merge(message.losses, shared_.WallMs());
  shared_.recovery_changed.notify_all();
  Heard(0, 0, false);
}

void PeerSession::Heard(int sessions, uint64_t merged, bool synced) {
  std::lock_guard<std::mutex> lock(shared_.mu);
  GossipShared::NodeState& node = shared_.nodes[node_id_];
  node.status.node_id = node_id_;
  node.sessions += sessions;
  node.status.connected = node.sessions > 0;
  node.status.entries_merged += merged;
  node.last_heard_ms = shared_.NowMs();
  if (synced) {
    ++node.status.full_syncs;
    shared_.synced.insert(node_id_);
    shared_.recovery_changed.notify_all();
  }
}

}  // namespace tally
