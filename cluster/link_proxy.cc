#include "cluster/link_proxy.h"

#include <asio.hpp>

#include <atomic>
#include <future>
#include <set>
#include <thread>
#include <vector>

namespace tally::cluster {
namespace {

using asio::ip::tcp;

// One proxied connection: the dialler's socket and the upstream one, pumped
// both ways until either side ends; then both are closed.
struct Pipe : std::enable_shared_from_this<Pipe> {
  Pipe(tcp::socket from, asio::io_context& io) : downstream(std::move(from)), upstream(io) {}

  void Close() {
    asio::error_code ignored;
    downstream.close(ignored);
    upstream.close(ignored);
  }

  tcp::socket downstream;
  tcp::socket upstream;
};

}  // namespace

struct ProxyHub::Impl {
  // One proxy; owned by the hub's thread.
  struct Proxy {
    explicit Proxy(asio::io_context& io) : acceptor(io) {}
    tcp::acceptor acceptor;
    uint16_t upstream_port = 0;
    bool cut = false;
    std::set<std::shared_ptr<Pipe>> pipes;

    void CloseAll() {
      for (const auto& pipe : pipes) pipe->Close();
      pipes.clear();
    }
  };

  asio::awaitable<void> Accept(Proxy& proxy) {
    for (;;) {
      tcp::socket socket(io);
      asio::error_code ec;
      co_await proxy.acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
      if (!proxy.acceptor.is_open()) co_return;
      if (ec || proxy.cut || proxy.upstream_port == 0) continue;  // the socket closes here
      auto pipe = std::make_shared<Pipe>(std::move(socket), io);
      proxy.pipes.insert(pipe);
      asio::co_spawn(io, Forward(proxy, pipe), asio::detached);
    }
  }

  asio::awaitable<void> Forward(Proxy& proxy, std::shared_ptr<Pipe> pipe) {
    asio::error_code ec;
    co_await pipe->upstream.async_connect({asio::ip::address_v4::loopback(), proxy.upstream_port},
                                         asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) {
      pipe->upstream.set_option(tcp::no_delay(true), ec);
      pipe->downstream.set_option(tcp::no_delay(true), ec);
      asio::co_spawn(io, Pump(pipe, pipe->upstream, pipe->downstream), asio::detached);
      co_await Pump(pipe, pipe->downstream, pipe->upstream);
    }
    pipe->Close();
    proxy.pipes.erase(pipe);
  }

  // Copies from `from` to `to` until either fails; then closes both.
  asio::awaitable<void> Pump(std::shared_ptr<Pipe> pipe, tcp::socket& from, tcp::socket& to) {
    std::vector<char> buffer(64 * 1024);
    for (;;) {
      asio::error_code ec;
      const size_t read = co_await from.async_read_some(asio::buffer(buffer),
                                                        asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
      co_await asio::async_write(to, asio::buffer(buffer.data(), read),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
      forwarded.fetch_add(read, std::memory_order_relaxed);
    }
    pipe->Close();
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
  std::vector<std::unique_ptr<Proxy>> proxies;  // the hub's thread
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

void ProxyHub::Cut(size_t proxy) {
  impl_->OnThread([&] {
    impl_->proxies[proxy]->cut = true;
    impl_->proxies[proxy]->CloseAll();
    return 0;
  });
}

void ProxyHub::Heal(size_t proxy) {
  impl_->OnThread([&] { return impl_->proxies[proxy]->cut = false; });
}

uint64_t ProxyHub::bytes_forwarded() const {
  return impl_->forwarded.load(std::memory_order_relaxed);
}

}  // namespace tally::cluster
