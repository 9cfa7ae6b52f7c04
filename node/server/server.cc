#include "node/server/server.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <thread>
#include <unordered_set>
#include <vector>

#include <asio.hpp>
#include <spdlog/spdlog.h>

#include "node/net/acceptor.h"
#include "node/server/request_handler.h"
#include "protocol/frame_buffer.h"

namespace tally {
namespace {

using asio::ip::tcp;

constexpr size_t kMinReadBytes = 4 * 1024;
constexpr size_t kMaxReadBytes = 64 * 1024;  // a large frame's buffer grows as it arrives

// What a client is told of a frame that does not decode as a Request. The
// decoder's own description quotes Cap'n Proto's internals: it goes to the log.
constexpr char kNotARequest[] = "malformed frame: not a valid request message";

// co_spawn's completion: an escaped exception is a bug; log it, never lose it.
void LogFailure(std::exception_ptr failure, const char* what) {
  if (!failure) return;
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    spdlog::error("{} failed: {}", what, e.what());
  }
}

std::string ErrorFrame(protocol::ErrorCode code, std::string message) {
  protocol::Response response;
  response.kind = protocol::ResponseKind::kError;
  response.error = code;
  response.error_message = std::move(message);
  std::string frame;
  protocol::EncodeResponse(response, &frame);
  return frame;
}

class Connection;

// One worker thread and what it owns.
struct Worker {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  WorkerCounters counters;
  // The rest is owned by this worker's thread.
  std::unordered_set<std::shared_ptr<Connection>> connections;
  bool stopping = false;
  asio::steady_timer drain_timer{io};  // bounds the drain at shutdown
};

// One client connection; every member is owned by its worker's thread.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, Worker& worker, const Server::Options& options, Limiter* limiter,
             const Clock* clock, RequestHandler::StatsSource stats)
      : socket_(std::move(socket)),
        timer_(worker.io),
        clock_(clock),
        deadline_ms_(clock->MonotonicMs()),
        worker_(worker),
        options_(options),
        peer_(PeerName(socket_)),
        handler_(limiter, &worker.counters, std::move(stats)) {}

  void Start() {
    worker_.connections.insert(shared_from_this());
    WorkerCounters::Add(worker_.counters.connections_open, 1);
    WorkerCounters::Add(worker_.counters.connections_total, 1);
    socket_.set_option(tcp::no_delay(true));
    auto self = shared_from_this();
    asio::co_spawn(worker_.io, Serve(), [self](std::exception_ptr e) { LogFailure(e, "connection"); });
    asio::co_spawn(worker_.io, Watchdog(), [self](std::exception_ptr e) { LogFailure(e, "watchdog"); });
  }

  // Shutdown: answer what has been received, then close. A connection
  // waiting for its next request is closed now.
  void Stop() {
    stop_requested_ = true;
    if (reading_) socket_.cancel();
  }

  void Close() {
    if (!socket_.is_open()) return;
    asio::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    timer_.cancel();
    WorkerCounters::Add(worker_.counters.connections_open, static_cast<uint64_t>(-1));
    worker_.connections.erase(shared_from_this());
    if (worker_.stopping && worker_.connections.empty()) worker_.drain_timer.cancel();
  }

 private:
  asio::awaitable<void> Serve() {
    size_t bytes_wanted = kMinReadBytes;
    while (!stop_requested_) {
      deadline_ms_ = clock_->MonotonicMs() + options_.idle_timeout_ms;
      const std::span<std::byte> room =
          in_.writable(std::clamp(bytes_wanted, kMinReadBytes, kMaxReadBytes));
      asio::error_code ec;
      reading_ = true;
      const size_t received = co_await socket_.async_read_some(
          asio::buffer(room.data(), room.size()), asio::redirect_error(asio::use_awaitable, ec));
      reading_ = false;
      if (ec) break;  // end of stream, reset, or cancelled by Stop or the watchdog
      in_.Commit(received);
      const bool keep_open = AnswerFrames(&bytes_wanted);
      if (!out_.empty()) {
        deadline_ms_ = clock_->MonotonicMs() + options_.write_timeout_ms;
        co_await asio::async_write(socket_, asio::buffer(out_),
                                   asio::redirect_error(asio::use_awaitable, ec));
        out_.clear();
        if (ec) break;
      }
      if (!keep_open) break;
      in_.ShrinkIfIdle();
    }
    Close();
  }

  // Closes the connection when its deadline passes without being moved on.
  asio::awaitable<void> Watchdog() {
    while (socket_.is_open()) {
      timer_.expires_after(std::chrono::milliseconds(deadline_ms_ - clock_->MonotonicMs()));
      asio::error_code ec;
      co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (socket_.is_open() && clock_->MonotonicMs() >= deadline_ms_) {
        spdlog::info("closing connection from {}: {} timeout", peer_, reading_ ? "idle" : "write");
        Close();
      }
    }
  }

  // Decodes and answers every complete frame received, appending responses
  // to out_. Returns false when the connection must close (a bad frame, after
  // an error frame has been queued). *bytes_wanted: how much more to read.
  bool AnswerFrames(size_t* bytes_wanted) {
    for (;;) {
      const std::span<const std::byte> received = in_.readable();
      const protocol::FrameScan scan = protocol::ScanFrame(received, options_.limits);
      if (scan.state == protocol::FrameScan::State::kNeedMore) {
        *bytes_wanted = scan.frame_bytes - received.size();
        return true;
      }
      if (scan.state == protocol::FrameScan::State::kInvalid) {
        return RefuseFrame(scan.error, scan.error_message, scan.error_message);
      }
      const Status decoded =
          protocol::DecodeRequest(received.first(scan.frame_bytes), options_.limits, &request_);
      if (!decoded.ok()) {
        const protocol::ErrorCode code = protocol::ErrorCodeFor(decoded);
        const bool malformed = code == protocol::ErrorCode::kMalformedFrame;
        return RefuseFrame(code, malformed ? kNotARequest : std::string(decoded.message()),
                           decoded.message());
      }
      handler_.Handle(request_, &response_);
      protocol::EncodeResponse(response_, &out_);
      in_.Consume(scan.frame_bytes);
    }
  }

  // Queues an error frame saying `reply` and logs `detail`.
  bool RefuseFrame(protocol::ErrorCode code, std::string reply, std::string_view detail) {
    spdlog::warn("closing connection from {}: {}", peer_, detail);
    out_ += ErrorFrame(code, std::move(reply));
    return false;
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  const Clock* const clock_;
  int64_t deadline_ms_;  // clock_->MonotonicMs() at which the watchdog closes the connection
  Worker& worker_;
  const Server::Options& options_;
  const std::string peer_;
  RequestHandler handler_;
  protocol::FrameBuffer in_;
  std::string out_;
  protocol::Request request_;    // string_views into in_, valid until Consume
  protocol::Response response_;  // reused: its vectors keep their memory
  bool reading_ = false;
  bool stop_requested_ = false;
};

}  // namespace

struct Server::Impl {
  Impl(const Options& opts, Limiter* lim, const Clock* clk)
      : options(opts),
        limiter(lim),
        clock(clk),
        started_ms(clk->MonotonicMs()),
        workers(static_cast<size_t>(std::max(1, opts.threads))),
        acceptor(workers[0].io),
        signals(workers[0].io),
        sweep_timer(workers[0].io) {}

  asio::awaitable<void> Accept() {
    size_t next = 0;
    for (;;) {
      Worker& worker = workers[next++ % workers.size()];
      tcp::socket socket(worker.io);
      asio::error_code ec;
      co_await acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) {
        spdlog::warn("accept failed: {}", ec.message());
        continue;
      }
      if (OpenConnections() >= options.max_connections) {
        spdlog::warn("refusing connection from {}: {} connections open", PeerName(socket),
                     options.max_connections);
        asio::write(socket, asio::buffer(ErrorFrame(protocol::ErrorCode::kResourceExhausted,
                                                    "too many connections")),
                    ec);
        continue;  // the socket closes as it goes out of scope
      }
      asio::post(worker.io, [this, &worker, socket = std::move(socket)]() mutable {
        if (worker.stopping) return;
        std::make_shared<Connection>(std::move(socket), worker, options, limiter, clock,
                                     [this] { return Stats(); })
            ->Start();
      });
    }
  }

  asio::awaitable<void> SweepPeriodically() {
    while (acceptor.is_open()) {
      sweep_timer.expires_after(std::chrono::milliseconds(options.sweep_interval_ms));
      asio::error_code ec;
      co_await sweep_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      const size_t freed = limiter->SweepExpired();
      if (freed > 0) spdlog::debug("swept {} expired keys", freed);
    }
  }

  // Runs on worker 0.
  void BeginShutdown() {
    if (shutting_down) return;
    shutting_down = true;
    spdlog::info("shutting down: no new connections; draining");
    asio::error_code ignored;
    acceptor.close(ignored);
    signals.cancel(ignored);
    sweep_timer.cancel();
    for (Worker& worker : workers) {
      asio::post(worker.io, [this, &worker] { StopWorker(worker); });
    }
  }

  // Runs on `worker`'s thread.
  void StopWorker(Worker& worker) {
    worker.stopping = true;
    const std::vector<std::shared_ptr<Connection>> open(worker.connections.begin(),
                                                        worker.connections.end());
    for (const auto& connection : open) connection->Stop();
    if (!worker.connections.empty()) {
      worker.drain_timer.expires_after(std::chrono::milliseconds(options.drain_timeout_ms));
      worker.drain_timer.async_wait([&worker](asio::error_code ec) {
        if (ec) return;  // cancelled: every connection closed in time
        spdlog::warn("drain timeout: closing {} connections", worker.connections.size());
        const std::vector<std::shared_ptr<Connection>> left(worker.connections.begin(),
                                                            worker.connections.end());
        for (const auto& connection : left) connection->Close();
      });
    }
    worker.work.reset();  // run() returns once this worker has nothing left to do
  }

  size_t OpenConnections() const {
    size_t open = 0;
    for (const Worker& worker : workers) {
      open += worker.counters.connections_open.load(std::memory_order_relaxed);
    }
    return open;
  }

  protocol::StatsReply Stats() const {
    protocol::StatsReply stats;
    stats.uptime_ms = static_cast<uint64_t>(clock->MonotonicMs() - started_ms);
    stats.keys = limiter->key_count();
    for (const Worker& worker : workers) {
      const WorkerCounters& counters = worker.counters;
      stats.checks += counters.checks.load(std::memory_order_relaxed);
      stats.allowed += counters.allowed.load(std::memory_order_relaxed);
      stats.denied += counters.denied.load(std::memory_order_relaxed);
      stats.errors += counters.errors.load(std::memory_order_relaxed);
      stats.connections_open += counters.connections_open.load(std::memory_order_relaxed);
      stats.connections_total += counters.connections_total.load(std::memory_order_relaxed);
    }
    if (options.add_stats) options.add_stats(&stats);
    return stats;
  }

  const Options options;
  Limiter* const limiter;
  const Clock* const clock;
  const int64_t started_ms;
  std::vector<Worker> workers;
  tcp::acceptor acceptor;       // worker 0
  asio::signal_set signals;     // worker 0
  asio::steady_timer sweep_timer;  // worker 0
  bool shutting_down = false;   // worker 0
};

Server::Server(const Options& options, Limiter* limiter, const Clock* clock)
    : impl_(std::make_unique<Impl>(options, limiter, clock)) {}

Server::~Server() = default;

Status Server::Listen() {
  return tally::Listen(impl_->acceptor, impl_->options.address, impl_->options.port,
                       "the client port");
}

uint16_t Server::port() const { return BoundPort(impl_->acceptor); }

void Server::Run() {
  Impl& impl = *impl_;
  asio::io_context& io = impl.workers[0].io;
  asio::co_spawn(io, impl.Accept(), [](std::exception_ptr e) { LogFailure(e, "accept loop"); });
  if (impl.options.sweep_interval_ms > 0) {
    asio::co_spawn(io, impl.SweepPeriodically(), [](std::exception_ptr e) { LogFailure(e, "sweep"); });
  }
  if (impl.options.handle_signals) {
    impl.signals.add(SIGTERM);
    impl.signals.add(SIGINT);
    impl.signals.async_wait([&impl](asio::error_code ec, int signal_number) {
      if (ec) return;
      spdlog::info("received signal {}", signal_number);
      impl.BeginShutdown();
    });
  }
  spdlog::info("serving on {}:{} with {} threads", impl.options.address, port(),
               impl.workers.size());
  std::vector<std::thread> threads;
  for (size_t i = 1; i < impl.workers.size(); ++i) {
    threads.emplace_back([&worker = impl.workers[i]] { worker.io.run(); });
  }
  impl.workers[0].io.run();
  for (std::thread& thread : threads) thread.join();
  spdlog::info("stopped");
}

void Server::Shutdown() {
  asio::post(impl_->workers[0].io, [impl = impl_.get()] { impl->BeginShutdown(); });
}

protocol::StatsReply Server::Stats() const { return impl_->Stats(); }

}  // namespace tally
