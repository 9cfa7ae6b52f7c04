#include "cluster/link_proxy.h"

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <random>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include <asio.hpp>

#include "protocol/codec.h"
#include "protocol/frame_buffer.h"
#include "protocol/peer_codec.h"

namespace tally::cluster {
namespace {

using asio::ip::tcp;

// No co_await inside a condition in this file: g++ 12.2 miscompiles
// `if (co_await Open(...))` (the coroutine hits an illegal instruction).

// The bound on a connection's first frame: a hello is far smaller, and a
// larger frame is forwarded as from an unknown source.
protocol::FrameLimits FirstFrameLimits() {
  protocol::FrameLimits limits;
  limits.max_frame_bytes = 64 * 1024;
  return limits;
}

// One proxied connection: the dialler's socket and the upstream one, pumped
// both ways until either side ends; then both are closed. Owned by the hub's
// thread.
struct Pipe {
  Pipe(tcp::socket from, asio::io_context& io) : downstream(std::move(from)), upstream(io) {}

  void Close() {
    asio::error_code ignored;
    downstream.close(ignored);
    upstream.close(ignored);
  }

  tcp::socket downstream;
  tcp::socket upstream;
  uint64_t source = 0;  // the dialler's node id, from its hello; 0 until then, or if unknown
};

// Reads from the dialler into *received until its first frame is whole (or
// cannot be a frame), and sets pipe.source if that frame is a hello. False if
// the dialler's socket fails (or is closed) first.
asio::awaitable<bool> Identify(Pipe& pipe, protocol::FrameBuffer* received) {
  const protocol::FrameLimits limits = FirstFrameLimits();
  for (;;) {
    const std::span<const std::byte> bytes = received->readable();
    const protocol::FrameScan scan = protocol::ScanFrame(bytes, limits);
    if (scan.state == protocol::FrameScan::State::kInvalid) co_return true;
    if (scan.state == protocol::FrameScan::State::kComplete) {
      protocol::PeerMessage message;
      if (protocol::DecodePeerMessage(bytes.first(scan.frame_bytes), limits, &message).ok() &&
          message.kind == protocol::PeerMessageKind::kHello) {
        pipe.source = message.node_id;
      }
      co_return true;
    }
    const std::span<std::byte> room = received->writable(scan.frame_bytes - bytes.size());
    asio::error_code ec;
    const size_t read = co_await pipe.downstream.async_read_some(
        asio::buffer(room.data(), room.size()), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return false;
    received->Commit(read);
  }
}

}  // namespace

struct ProxyHub::Impl {
  // One proxy, in front of one node; owned by the hub's thread.
  struct Proxy {
    explicit Proxy(asio::io_context& io) : acceptor(io) {}
    tcp::acceptor acceptor;
    uint16_t upstream_port = 0;
    std::set<uint64_t> cut_sources;         // node ids whose connections are closed
    std::map<uint64_t, LinkFaults> faults;  // by source node id; absent: a perfect link
    std::set<std::shared_ptr<Pipe>> pipes;

    LinkFaults FaultsOf(uint64_t source) const {
      const auto found = faults.find(source);
      return found == faults.end() ? LinkFaults() : found->second;
    }

    // Whether connections from `source` are to be closed; unknown ones never are.
    bool IsCut(uint64_t source) const { return source != 0 && cut_sources.contains(source); }

    void CloseAll() {
      for (const auto& pipe : pipes) pipe->Close();
      pipes.clear();
    }
  };

  // Accepts the proxy's connections until its acceptor is closed.
  asio::awaitable<void> Accept(Proxy& proxy) {
    for (;;) {
      tcp::socket socket(io);
      asio::error_code ec;
      co_await proxy.acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
      if (!proxy.acceptor.is_open()) co_return;
      if (ec || proxy.upstream_port == 0) continue;  // the socket closes here
      auto pipe = std::make_shared<Pipe>(std::move(socket), io);
      proxy.pipes.insert(pipe);
      asio::co_spawn(io, Forward(proxy, pipe), asio::detached);
    }
  }

  // One connection, from its first byte to its end.
  asio::awaitable<void> Forward(Proxy& proxy, std::shared_ptr<Pipe> pipe) {
    const bool open = co_await Open(proxy, *pipe);
    if (open) {
      asio::co_spawn(io, Pump(proxy, pipe, pipe->upstream, pipe->downstream), asio::detached);
      co_await Pump(proxy, pipe, pipe->downstream, pipe->upstream);
    }
    pipe->Close();
    proxy.pipes.erase(pipe);
  }

  // Identifies the dialler; unless its source is cut, connects upstream and
  // sends everything read from it so far. False if the connection is to close.
  asio::awaitable<bool> Open(Proxy& proxy, Pipe& pipe) {
    protocol::FrameBuffer received;
    const bool identified = co_await Identify(pipe, &received);
    if (!identified || proxy.IsCut(pipe.source)) co_return false;
    asio::error_code ec;
    co_await pipe.upstream.async_connect({asio::ip::address_v4::loopback(), proxy.upstream_port},
                                         asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return false;
    pipe.upstream.set_option(tcp::no_delay(true), ec);
    pipe.downstream.set_option(tcp::no_delay(true), ec);
    const std::span<const std::byte> first = received.readable();
    co_await asio::async_write(pipe.upstream, asio::buffer(first.data(), first.size()),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return false;
    forwarded.fetch_add(first.size(), std::memory_order_relaxed);
    co_return true;
  }

  // Copies from `from` to `to` until either fails; then closes both. Each
  // read is held for the link's delay (and, when lost, a retransmission
  // timeout) before it is written.
  asio::awaitable<void> Pump(Proxy& proxy, std::shared_ptr<Pipe> pipe, tcp::socket& from,
                             tcp::socket& to) {
    std::vector<char> buffer(64 * 1024);
    asio::steady_timer hold(io);
    for (;;) {
      asio::error_code ec;
      const size_t read = co_await from.async_read_some(
          asio::buffer(buffer), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
      const int64_t hold_ms = HoldMs(proxy.FaultsOf(pipe->source));
      if (hold_ms > 0) {
        hold.expires_after(std::chrono::milliseconds(hold_ms));
        co_await hold.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      co_await asio::async_write(to, asio::buffer(buffer.data(), read),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
      forwarded.fetch_add(read, std::memory_order_relaxed);
    }
    pipe->Close();
  }

  // How long to hold the next read back under `faults`.
  int64_t HoldMs(const LinkFaults& faults) {
    int64_t hold_ms = faults.delay_ms;
    if (faults.jitter_ms > 0) {
      hold_ms +=
          std::uniform_int_distribution<int64_t>(-faults.jitter_ms, faults.jitter_ms)(random);
    }
    if (faults.loss > 0 && std::bernoulli_distribution(faults.loss)(random)) {
      hold_ms += LinkFaults::kRetransmitMs;
    }
    return std::max<int64_t>(hold_ms, 0);
  }

  // Runs f on the hub's thread and waits for it.
  template <typename F>
  auto OnThread(F&& f) {
    std::packaged_task<decltype(f())()> task(std::forward<F>(f));
    auto done = task.get_future();
    asio::post(io, [&task] { task(); });
    return done.get();
  }

  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::vector<std::unique_ptr<Proxy>> proxies;     // the hub's thread
  std::mt19937_64 random{std::random_device()()};  // the hub's thread
  std::atomic<uint64_t> forwarded{0};
  std::thread thread;
};

ProxyHub::ProxyHub() : impl_(std::make_unique<Impl>()) {
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

ProxyHub::~ProxyHub() {
  impl_->OnThread([impl = impl_.get()] {
    for (const auto& proxy : impl->proxies) {
      asio::error_code ignored;
      proxy->acceptor.close(ignored);
      proxy->CloseAll();
    }
    impl->io.stop();
    return 0;
  });
  impl_->thread.join();
}

Status ProxyHub::Add(size_t* proxy, uint16_t* listen_port) {
  return impl_->OnThread([&]() -> Status {
    Impl& impl = *impl_;
    auto added = std::make_unique<Impl::Proxy>(impl.io);
    asio::error_code ec;
    const tcp::endpoint endpoint(asio::ip::address_v4::loopback(), 0);
    added->acceptor.open(endpoint.protocol(), ec);
    if (!ec) added->acceptor.bind(endpoint, ec);
    if (!ec) added->acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status::IOError("proxy: " + ec.message());
    *listen_port = added->acceptor.local_endpoint().port();
    *proxy = impl.proxies.size();
    impl.proxies.push_back(std::move(added));
    asio::co_spawn(impl.io, impl.Accept(*impl.proxies.back()), asio::detached);
    return Status::OK();
  });
}

void ProxyHub::SetUpstream(size_t proxy, uint16_t port) {
  impl_->OnThread([&] { return impl_->proxies[proxy]->upstream_port = port; });
}

void ProxyHub::Cut(size_t proxy, uint64_t from_node_id) {
  impl_->OnThread([&] {
    Impl::Proxy& cut = *impl_->proxies[proxy];
    cut.cut_sources.insert(from_node_id);
    // Forward drops each closed pipe from the set once its operations end.
    for (const auto& pipe : cut.pipes) {
      if (cut.IsCut(pipe->source)) pipe->Close();
    }
    return 0;
  });
}

void ProxyHub::Heal(size_t proxy) {
  impl_->OnThread([&] {
    impl_->proxies[proxy]->cut_sources.clear();
    return 0;
  });
}

void ProxyHub::SetFaults(size_t proxy, uint64_t from_node_id, const LinkFaults& faults) {
  impl_->OnThread([&] {
    impl_->proxies[proxy]->faults[from_node_id] = faults;
    return 0;
  });
}

uint64_t ProxyHub::bytes_forwarded() const {
  return impl_->forwarded.load(std::memory_order_relaxed);
}

}  // namespace tally::cluster
