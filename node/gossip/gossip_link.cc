// PeerLink: the connection this node dials to one peer, carrying its state.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "node/common/host_port.h"
#include "node/gossip/gossip_peer.h"
#include "node/net/acceptor.h"

namespace tally {
namespace {

// A full sync queues its next shard only below this: it paces itself to the
// link instead of queueing the whole state at once.
constexpr size_t kSyncWatermarkBytes = 1 << 20;
Frame FrameOf(void (*encode)(std::string*)) {
  auto frame = std::make_shared<std::string>();
  encode(frame.get());
  return frame;
}

}  // namespace

PeerLink::PeerLink(GossipShared& shared, asio::io_context& io, std::string address)
    : shared_(shared),
      address_(std::move(address)),
      stream_(io, shared_.options.tls),
      socket_(stream_.socket()),
      backoff_timer_(io),
      in_(&shared_.buffer_budget, shared_.options.clock) {}

void PeerLink::Start() {
  asio::co_spawn(socket_.get_executor(), Run(), [self = shared_from_this()](std::exception_ptr e) {
    if (e) spdlog::error("gossip link to {} failed: an exception escaped", self->address_);
  });
}

void PeerLink::Stop() {
  stopping_ = true;
  backoff_timer_.cancel();
  asio::error_code ignored;
  socket_.close(ignored);
}

asio::awaitable<void> PeerLink::Run() {
  int64_t backoff_ms = shared_.options.reconnect_min_ms;
  while (!stopping_ && !is_self_) {
    const Status connected = co_await Connect();
    if (connected.ok()) {
      backoff_ms = shared_.options.reconnect_min_ms;
      // The peer sends nothing after its hello: reading only notices the end.
      std::array<char, 512> ignored;
      asio::error_code ec;
      while (!ec) {
        co_await stream_.async_read_some(asio::buffer(ignored),
                                         asio::redirect_error(asio::use_awaitable, ec));
      }
      Reset((ec == asio::error::eof ? "closed by the peer" : ec.message()) + WriteState());
    } else if (is_self_) {
      spdlog::info("gossip seed {} is this node: not dialled", address_);
      break;
    } else {
      Reset(connected.ToString());
    }
    if (stopping_) break;
    backoff_timer_.expires_after(std::chrono::milliseconds(backoff_ms));
    asio::error_code ec;
    co_await backoff_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    backoff_ms = redial_now_ ? shared_.options.reconnect_min_ms
                             : std::min(2 * backoff_ms, shared_.options.reconnect_max_ms);
    redial_now_ = false;
  }
}

void PeerLink::RedialNow() {
  if (up_ || stopping_) return;
  redial_now_ = true;
  backoff_timer_.cancel();  // a connect in progress goes on: the flag only ends a backoff
}

asio::awaitable<Status> PeerLink::Connect() {
  HostPort target;
  if (Status status = ParseHostPort(address_, &target); !status.ok()) co_return status;
  deadline_ms_ =
      shared_.NowMs() + shared_.options.connect_timeout_ms;  // Tick closes the socket then
  asio::error_code ec;
  tcp::resolver resolver(socket_.get_executor());
  const auto endpoints = co_await resolver.async_resolve(
      target.host, std::to_string(target.port), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return Status::Unavailable("cannot resolve " + address_ + ": " + ec.message());
  std::vector<tcp::endpoint> others;
  for (const auto& entry : endpoints) {
    if (!shared_.self_endpoints.contains(entry.endpoint())) others.push_back(entry.endpoint());
  }
  if (others.empty()) {
    is_self_ = true;
    co_return Status::Unavailable("every address of it is this node's");
  }
  co_await asio::async_connect(socket_, others, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return Status::Unavailable("cannot connect: " + ec.message());
  socket_.set_option(tcp::no_delay(true), ec);
  KeepAlive(socket_);
  if (Status status = co_await stream_.Handshake(NetStream::Side::kClient); !status.ok()) {
    co_return status;
  }
  std::string hello;
  const std::string nonce = protocol::RandomNonce();
  protocol::EncodeHello(shared_.limiter->node_id(), nonce, shared_.options.relay,
                        shared_.incarnation, &hello);
  co_await asio::async_write(stream_, asio::buffer(hello),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return Status::Unavailable("cannot send hello: " + ec.message());
  // The peer's hello, sealed with seq 0: it proves the peer holds the secret.
  protocol::PeerMessage reply;
  size_t sizes[2] = {0, 0};
  in_.Clear();
  if (Status status = co_await ReadFrames(stream_, &in_, 2, sizes, HandshakeFrameLimits(), shared_);
      !status.ok()) {
    co_return Status::Unavailable("no sealed hello in reply: " + status.ToString());
  }
  if (Status status = DecodeAt(in_, 0, sizes[0], &reply); !status.ok()) co_return status;
  if (reply.kind != protocol::PeerMessageKind::kHello) {
    co_return Status::Unavailable("the peer answered with something other than hello");
  }
  if (reply.peer_version != protocol::kPeerProtocolVersion) {
    co_return Status::Unavailable(protocol::PeerVersionMismatch(reply.peer_version));
  }
  auth_.emplace(shared_.options.cluster_secret, nonce, reply.nonce);
  if (Status status = CheckSeal(in_, sizes, *auth_, 0); !status.ok()) {
    co_return Status::Unavailable("refusing the peer: " + std::string(status.message()));
  }
  if (reply.node_id == shared_.limiter->node_id()) {  // a seed that resolves to this node
    spdlog::info("gossip seed {} at {} answers with this node's id {}: skipping that address",
                 address_, PeerName(socket_), reply.node_id);
    shared_.self_endpoints.insert(socket_.remote_endpoint(ec));
    socket_.close(ec);
    co_return co_await Connect();  // the seed's other addresses, if any
  }
  next_seq_ = 1;
  deadline_ms_ = 0;
  peer_id_ = reply.node_id;
  peer_relays_ = reply.relays;
  peer_incarnation_ = reply.incarnation;
  shared_.member_losses.Alive(peer_id_, peer_incarnation_);
  up_ = true;
  ++connects_;
  GossipShared::Add(shared_.bytes_sent, hello.size());
  bytes_sent_ += hello.size();
  if (ever_up_ && !reported_down_) {
    spdlog::debug("gossip link to {} (node {}) up again", address_, peer_id_);
  } else {
    spdlog::info("gossip link to {} up: node {}", address_, peer_id_);
  }
  ever_up_ = true;
  reported_down_ = false;
  // First a heartbeat: the peer takes only small frames until one of ours
  // proves the secret (HandshakeFrameLimits); the membership table may be large.
  Enqueue(FrameOf(&protocol::EncodeHeartbeat));
  Enqueue(shared_.probes->TableFrame());
  sync_.Connected();  // a new connection gets everything
  PumpSync();
  if (const auto pending = shared_.pending_ranges.find(peer_id_);
      pending != shared_.pending_ranges.end()) {
    std::vector<uint32_t> want(pending->second.want.begin(), pending->second.want.end());
    std::vector<uint32_t> later(pending->second.later.begin(), pending->second.later.end());
    shared_.pending_ranges.erase(pending);
    shared_.AnswerDigests(peer_id_, std::move(want), std::move(later));  // on this link, up now
  }
  shared_.probes->LinkUp(peer_id_);
  PublishStatus();
  co_return Status::OK();
}

std::string PeerLink::WriteState() const {
  if (!writing_) return " (nothing being written)";
  return " (a write under way for " + std::to_string(shared_.NowMs() - write_started_ms_) +
         " ms, " + std::to_string(queued_bytes_) + " bytes queued)";
}

void PeerLink::Reset(const std::string& why) {
  const bool was_up = up_;
  up_ = false;
  ++generation_;
  deadline_ms_ = 0;
  queue_.clear();
  queued_bytes_ = 0;
  writing_ = false;
  sync_.Disconnected();
  asio::error_code ignored;
  socket_.close(ignored);
  went_down_ = went_down_ || (was_up && !stopping_);
  if (was_up && !stopping_ && shared_.end_rest) shared_.end_rest();
  if (!stopping_ && !reported_down_) {
    spdlog::warn("gossip link to {} down: {}; this node decides from what it knows", address_, why);
    reported_down_ = true;
  } else if (was_up && !stopping_) {
    spdlog::debug("gossip link to {} down again: {}", address_, why);
  }
  PublishStatus();
}

void PeerLink::Send(const Frame& frame) {
  if (up_) Enqueue(frame);
}

void PeerLink::SendDelta(const std::vector<Frame>& frames, uint64_t entries) {
  if (!up_) return;  // the full sync after the reconnect will carry it
  for (const Frame& frame : frames) {
    GossipShared::Add(shared_.delta_bytes_sent, frame->size());
    Enqueue(frame);
    if (!up_) return;  // reset: too slow
  }
  GossipShared::Add(shared_.delta_entries_sent, entries);
}

void PeerLink::Enqueue(Frame frame) {
  if (queued_bytes_ + frame->size() > shared_.options.max_queued_bytes) {
    Reset("the peer takes state slower than it is made (" + std::to_string(queued_bytes_) +
          " bytes queued); reconnecting to resynchronise");
    return;
  }
  auto seal = std::make_shared<std::string>();
  protocol::EncodeSeal(next_seq_, auth_->Mac(next_seq_, protocol::FrameBytes(*frame)), seal.get());
  ++next_seq_;
  queued_bytes_ += frame->size() + seal->size();
  if (idle()) busy_since_ms_ = shared_.NowMs();
  queue_.push_back(std::move(frame));
  queue_.push_back(std::move(seal));
  if (!writing_) WriteNext();
}

void PeerLink::WriteNext() {
  if (queue_.empty()) {
    writing_ = false;
    return;
  }
  writing_ = true;
  write_started_ms_ = shared_.NowMs();
  const Frame frame = queue_.front();
  asio::async_write(stream_, asio::buffer(*frame),
                    [this, self = shared_from_this(), frame, generation = generation_](
                        asio::error_code ec, size_t written) {
                      if (generation != generation_) return;  // a connection since closed
                      if (ec) {
                        Reset("write failed: " + ec.message());
                        return;
                      }
                      queue_.pop_front();
                      queued_bytes_ -= frame->size();
                      bytes_sent_ += written;
                      GossipShared::Add(shared_.bytes_sent, written);
                      PumpSync();
                      WriteNext();
                    });
}

void PeerLink::ResyncAll() {
  if (!up_) return;  // the full sync after the reconnect sends everything
  sync_.StartFullSync();
  PumpSync();
}

std::vector<uint32_t> PeerLink::DigestsDue(
    std::span<const uint32_t> due_everywhere,
    const std::vector<Limiter::RangeVersion>& versions) const {
  if (!up_) return {};
  return sync_.DigestsDue(due_everywhere, versions);
}

void PeerLink::SendDigests(int64_t ref_ms, std::span<const uint32_t> due,
                           const std::vector<uint64_t>& digests) {
  if (!up_) return;
  // This node forgot state since it last told this peer: the peer sends it
  // everything again (PeerSession, kResync), as after a reconnect.
  if (const uint64_t forgotten = shared_.Forgotten(); forgotten != forgotten_told_) {
    forgotten_told_ = forgotten;
    Enqueue(FrameOf(&protocol::EncodeResync));
  }
  if (due.empty() || sync_.syncing()) return;  // a full sync under way sends everything
  const std::vector<protocol::RangeDigest> message = sync_.TakeDigests(due, digests);
  auto frame = std::make_shared<std::string>();
  protocol::EncodeDigests(ref_ms, message, frame.get());
  GossipShared::Add(shared_.digests_sent, message.size());
  Enqueue(std::move(frame));
}

void PeerLink::AnswerReceived(std::span<const uint32_t> want, std::span<const uint32_t> later) {
  if (!up_) return;  // the full sync after the reconnect sends everything
  sync_.AnswerReceived(want, later);
  PumpSync();
}

void PeerLink::PumpSync() {
  std::vector<std::string> frames;
  while (up_ && queued_bytes_ < kSyncWatermarkBytes) {
    frames.clear();
    const LinkSync::Piece piece =
        sync_.Next(*shared_.limiter, shared_.options.max_frame_bytes, &frames);
    if (piece == LinkSync::Piece::kNothing) return;
    if (piece == LinkSync::Piece::kSyncDone) {
      ++full_syncs_sent_;
      GossipShared::Add(shared_.full_syncs_sent, 1);
    } else if (piece == LinkSync::Piece::kRange) {
      GossipShared::Add(shared_.ranges_sent, 1);
    }
    for (std::string& frame : frames) {
      Enqueue(std::make_shared<const std::string>(std::move(frame)));
    }
  }
}

void PeerLink::Tick(int64_t now_ms) {
  if (deadline_ms_ != 0 && now_ms > deadline_ms_) {
    asio::error_code ignored;
    socket_.close(ignored);  // the pending connect or hello read fails, and Run retries
    deadline_ms_ = 0;
  }
  if (up_ && writing_ && now_ms - write_started_ms_ > shared_.options.write_timeout_ms) {
    Reset("a write stalled for " + std::to_string(now_ms - write_started_ms_) + " ms");
  }
  PublishStatus();
}

void GossipShared::AnswerDigests(NodeId peer, std::vector<uint32_t> want,
                                 std::vector<uint32_t> later) {
  if (want.empty() && later.empty()) return;
  if (PeerLink* const link = link_to(peer)) {
    auto frame = std::make_shared<std::string>();
    protocol::EncodeRanges(want, later, frame.get());
    link->Send(frame);
    return;
  }
  PendingRanges& pending = pending_ranges[peer];  // sent when the link comes up
  pending.want.insert(want.begin(), want.end());
  pending.later.insert(later.begin(), later.end());
}

void PeerLink::PublishStatus() {
  if (stopping_) return;  // dropped from shared_.links
  std::lock_guard<std::mutex> lock(shared_.mu);
  protocol::PeerLinkStatus& status = shared_.links[address_];
  status.address = address_;
  status.up = up_;
  status.node_id = peer_id_;
  status.bytes_sent = bytes_sent_;
  status.queued_bytes = queued_bytes_;
  status.lag_ms = up_ && !idle() ? static_cast<uint64_t>(shared_.NowMs() - busy_since_ms_) : 0;
  status.full_syncs_sent = full_syncs_sent_;
  status.connects = connects_;
}

}  // namespace tally
