#include "node/gossip.h"

#include <pthread.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "node/acceptor.h"
#include "node/gossip_peer.h"

namespace tally {

using gossip::Frame;
using gossip::GossipShared;
using gossip::PeerLink;
using gossip::PeerSession;
using gossip::tcp;

struct Gossip::Impl {
  Impl(const Options& gossip_options, Limiter* limiter)
      : shared(gossip_options, limiter), acceptor(io), round_timer(io) {
    const std::vector<std::string>& peers = shared.options.peers;
    shared.links.resize(peers.size());
    for (size_t i = 0; i < peers.size(); ++i) {
      shared.links[i].address = peers[i];
      links.push_back(std::make_unique<PeerLink>(shared, io, i));
    }
  }

  asio::awaitable<void> Accept() {
    for (;;) {
      tcp::socket socket(io);
      asio::error_code ec;
      co_await acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) {
        shared.log.Warn("gossip accept failed: " + ec.message());
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);
      std::make_shared<PeerSession>(shared, std::move(socket), &sessions)->Start();
    }
  }

  // Every interval_ms: this node's delta to every link that is up, then the
  // links' and sessions' housekeeping.
  asio::awaitable<void> Rounds() {
    while (!stopping) {
      round_timer.expires_after(std::chrono::milliseconds(shared.options.interval_ms));
      asio::error_code ec;
      co_await round_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (stopping) co_return;
      Round();
    }
  }

  void Round() {
    protocol::PeerStateEncoder encoder(shared.limiter->node_id(), /*full=*/false,
                                       shared.options.max_frame_bytes);
    std::vector<std::string> encoded;
    shared.limiter->CollectGossip([&](const KeySnapshot& snapshot) { encoder.Add(snapshot, &encoded); });
    encoder.Finish(&encoded);
    std::vector<Frame> frames;
    for (std::string& frame : encoded) frames.push_back(std::make_shared<const std::string>(std::move(frame)));
    const int64_t now_ms = gossip::SteadyNowMs();
    bool any_up = false;
    size_t down = 0;
    for (const auto& link : links) {
      link->SendDelta(frames, encoder.entries());
      link->Tick(now_ms);
      any_up = any_up || link->up();
      down += link->up() ? 0 : 1;
    }
    shared.limiter->SetUnreachablePeers(down);
    const std::vector<std::shared_ptr<PeerSession>> open(sessions.begin(), sessions.end());
    for (const auto& session : open) session->Tick(now_ms);
    GossipShared::Add(shared.rounds, 1);
    if (!any_up && !links.empty() && !alone) {
      spdlog::warn("no peer reachable: enforcing limits from this node's own knowledge only");
    } else if (any_up && alone) {
      spdlog::info("a peer is reachable again");
    }
    alone = !any_up && !links.empty();
  }

  // On the gossip thread.
  void Shutdown() {
    stopping = true;
    asio::error_code ignored;
    acceptor.close(ignored);
    round_timer.cancel();
    for (const auto& link : links) link->Stop();
    const std::vector<std::shared_ptr<PeerSession>> open(sessions.begin(), sessions.end());
    for (const auto& session : open) session->Close();
    io.stop();
  }

  GossipShared shared;
  // Owned by the gossip thread once it runs.
  asio::io_context io{1};
  tcp::acceptor acceptor;
  asio::steady_timer round_timer;
  std::vector<std::unique_ptr<PeerLink>> links;
  std::set<std::shared_ptr<PeerSession>> sessions;
  bool stopping = false;
  bool alone = false;  // no link up at the last round (logged once)
  std::thread thread;
};

Gossip::Gossip(const Options& options, Limiter* limiter)
    : impl_(std::make_unique<Impl>(options, limiter)) {}

Gossip::~Gossip() { Stop(); }

Status Gossip::Listen() {
  const Options& options = impl_->shared.options;
  if (options.cluster_secret.size() < protocol::kMinSecretBytes) {
    return Status::InvalidArgument("the cluster secret must be at least " +
                                   std::to_string(protocol::kMinSecretBytes) + " bytes");
  }
  return tally::Listen(impl_->acceptor, options.listen_address, options.listen_port,
                       "the gossip port");
}

uint16_t Gossip::port() const { return BoundPort(impl_->acceptor); }

void Gossip::Start() {
  Impl& impl = *impl_;
  const auto log_failure = [](const char* what) {
    return [what](std::exception_ptr e) {
      if (e) spdlog::error("gossip {} failed: an exception escaped", what);
    };
  };
  asio::co_spawn(impl.io, impl.Accept(), log_failure("accept loop"));
  asio::co_spawn(impl.io, impl.Rounds(), log_failure("rounds"));
  for (const auto& link : impl.links) link->Start();
  impl.thread = std::thread([&impl] {
    pthread_setname_np(pthread_self(), "tally-gossip");
    impl.io.run();
  });
  spdlog::info("gossip on {}:{} to {} peers, every {} ms", impl.shared.options.listen_address, port(),
               impl.links.size(), impl.shared.options.interval_ms);
}

size_t Gossip::WaitForPeerSyncs(int64_t timeout_ms) {
  GossipShared& shared = impl_->shared;
  std::unique_lock<std::mutex> lock(shared.mu);
  shared.synced_changed.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    return shared.synced.size() >= shared.options.peers.size();
  });
  return shared.synced.size();
}

void Gossip::Stop() {
  Impl& impl = *impl_;
  if (!impl.thread.joinable()) return;
  asio::post(impl.io, [&impl] { impl.Shutdown(); });
  impl.thread.join();
}

void Gossip::AddStats(protocol::StatsReply* stats) const {
  const GossipShared& shared = impl_->shared;
  const auto get = [](const std::atomic<uint64_t>& counter) {
    return counter.load(std::memory_order_relaxed);
  };
  stats->gossip_rounds = get(shared.rounds);
  stats->gossip_bytes_sent = get(shared.bytes_sent);
  stats->gossip_bytes_received = get(shared.bytes_received);
  stats->gossip_delta_bytes_sent = get(shared.delta_bytes_sent);
  stats->gossip_delta_entries_sent = get(shared.delta_entries_sent);
  stats->gossip_full_syncs_sent = get(shared.full_syncs_sent);
  stats->gossip_full_syncs_received = get(shared.full_syncs_received);
  stats->gossip_entries_merged = get(shared.entries_merged);
  stats->gossip_entries_rejected = get(shared.entries_rejected);
  stats->gossip_sessions_refused = get(shared.sessions_refused);
  const int64_t now_ms = gossip::SteadyNowMs();
  std::lock_guard<std::mutex> lock(shared.mu);
  stats->peer_links = shared.links;
  stats->peer_nodes.clear();
  for (const auto& [node_id, node] : shared.nodes) {
    protocol::PeerNodeStatus& status = stats->peer_nodes.emplace_back(node.status);
    status.last_heard_ms_ago = static_cast<uint64_t>(now_ms - node.last_heard_ms);
  }
}

}  // namespace tally
