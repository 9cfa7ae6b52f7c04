#include "node/server/server.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "node/net/accept_loop.h"
#include "node/net/acceptor.h"
#include "node/net/receive_buffer.h"
#include "node/server/connection.h"
#include "node/server/protocol_front.h"

namespace tally {

struct Server::Impl {
  Impl(const Options& opts, Limiter* lim, const Clock* clk)
      : options(opts),
        limiter(lim),
        clock(clk),
        started_ms(clk->MonotonicMs()),
        buffer_budget(opts.max_buffer_bytes),
        workers(MakeWorkers(std::max(1, opts.threads), clk)),
        protocol_front(
            lim, opts.policies, opts.limits, workers.size(), [this] { return Stats(); },
            opts.forget_member),
        signals(workers[0].io),
        sweep_timer(workers[0].io) {
    AddPort("the client port", opts.address, opts.port, &protocol_front);
  }

  static std::deque<Worker> MakeWorkers(int count, const Clock* clock) {
    std::deque<Worker> made;
    for (int i = 0; i < count; ++i) made.emplace_back(clock, static_cast<size_t>(i));
    return made;
  }

  void AddPort(const std::string& name, const std::string& address, uint16_t port_number,
               StreamFront* front) {
    Port& port = ports.emplace_back();
    port.name = name;
    port.address = address;
    port.requested_port = port_number;
    port.front = front;
    port.acceptor = std::make_unique<tcp::acceptor>(workers[0].io);
    port.accept_loop = std::make_unique<AcceptLoop>(
        port.acceptor.get(), &workers[0].log, name,
        [this] { return asio::any_io_executor(NextWorker().io.get_executor()); },
        [this, &port](tcp::socket socket) { Admit(port, std::move(socket)); });
  }

  // The worker the next connection is accepted onto: the workers take turns.
  Worker& NextWorker() { return workers[next_worker % workers.size()]; }

  // On worker 0: hands a new connection to its worker, or refuses it at
  // max_connections on its port.
  void Admit(Port& port, tcp::socket socket) {
    Worker& worker = NextWorker();
    ++next_worker;
    if (port.connections_open.load(std::memory_order_relaxed) >= options.max_connections) {
      workers[0].log.Warn("refusing connection from " + PeerName(socket) + " on " + port.name +
                          ": " + std::to_string(options.max_connections) + " connections open");
      asio::error_code ignored;  // under TLS the refusal would be garbage: only the close
      if (options.tls == nullptr) {
        asio::write(socket, asio::buffer(port.front->TooManyConnections()), ignored);
      }
      return;  // the socket closes as it goes out of scope
    }
    asio::post(worker.io, [this, &worker, &port, socket = std::move(socket)]() mutable {
      if (worker.stopping) return;
      std::make_shared<Connection>(std::move(socket), worker, options, clock, &buffer_budget, port)
          ->Start();
    });
  }

  asio::awaitable<void> SweepPeriodically() {
    while (ports.front().acceptor->is_open()) {
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
    if (options.on_shutdown) options.on_shutdown();
    for (Port& port : ports) port.accept_loop->Stop();
    asio::error_code ignored;
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

  // SIGTERM and SIGINT shut down; SIGHUP reloads and waits for the next one.
  void WaitForSignal() {
    signals.async_wait([this](asio::error_code ec, int signal_number) {
      if (ec) return;
      if (signal_number != SIGHUP) {
        spdlog::info("received signal {}: shutting down", signal_number);
        BeginShutdown();
        return;
      }
      if (options.on_reload) {
        spdlog::info("received SIGHUP: reloading policies");
        options.on_reload();
      } else {
        spdlog::info("received SIGHUP: nothing to reload (no --policy-dir)");
      }
      WaitForSignal();
    });
  }

  protocol::StatsReply Stats() const {
    protocol::StatsReply stats;
    stats.uptime_ms = static_cast<uint64_t>(clock->MonotonicMs() - started_ms);
    stats.keys = limiter->key_count();
    const FrontCounters::Outcomes decided = protocol_front.counters().Read().Total();
    stats.checks = decided.checks();
    stats.allowed = decided.allowed;
    stats.denied = decided.denied;
    stats.errors = decided.errors;
    stats.shadow_denied = decided.shadow_denied;
    for (const Port& port : ports) {
      stats.connections_open += port.connections_open.load(std::memory_order_relaxed);
      stats.connections_total += port.connections_total.load(std::memory_order_relaxed);
    }
    if (options.add_stats) options.add_stats(&stats);
    return stats;
  }

  const Port* FindPort(const std::string& name) const {
    for (const Port& port : ports) {
      if (port.name == name) return &port;
    }
    return nullptr;
  }

  // On worker 0 (or before it runs): accepts on `port`.
  void Accept(Port& port) {
    port.serving = true;
    asio::co_spawn(workers[0].io, port.accept_loop->Run(),
                   [](std::exception_ptr e) { LogFailure(e, "accept loop"); });
  }

  // Runs every worker not running yet on a thread of its own; worker 0 too
  // unless `worker0_on_caller`.
  void StartThreads(bool worker0_on_caller) {
    for (size_t i = worker0_on_caller ? 1 : 0; i < workers.size(); ++i) {
      if (i < threads.size() && threads[i].joinable()) continue;
      if (threads.size() <= i) threads.resize(i + 1);
      threads[i] = std::thread([&worker = workers[i]] { worker.io.run(); });
    }
  }

  // Waits for every worker thread to return.
  void JoinThreads() {
    for (std::thread& thread : threads) {
      if (thread.joinable()) thread.join();
    }
  }

  const Options options;
  Limiter* const limiter;
  const Clock* const clock;
  const int64_t started_ms;
  BufferBudget buffer_budget;      // shared by the connections of every worker
  std::deque<Worker> workers;      // never resized: connections hold references
  ProtocolFront protocol_front;    // tally's protocol, on ports.front()
  std::deque<Port> ports;          // acceptors and loops on worker 0; never shrinks
  size_t next_worker = 0;          // worker 0
  asio::signal_set signals;        // worker 0
  asio::steady_timer sweep_timer;  // worker 0
  bool shutting_down = false;      // worker 0
  // The workers' threads, by worker index; the caller's of Server's methods.
  // Empty until ServeEarly or Run; an entry not joinable is not started.
  std::vector<std::thread> threads;
};

Server::Server(const Options& options, Limiter* limiter, const Clock* clock)
    : impl_(std::make_unique<Impl>(options, limiter, clock)) {}

Server::~Server() {
  // Workers started by ServeEarly of a Server that never ran: stop them
  // before their io_contexts go.
  for (Worker& worker : impl_->workers) worker.io.stop();
  impl_->JoinThreads();
}

void Server::AddFront(const std::string& name, const std::string& address, uint16_t port,
                      StreamFront* front) {
  impl_->AddPort(name, address, port, front);
}

Status Server::ServeEarly(const std::string& name) {
  Impl& impl = *impl_;
  Port* port = const_cast<Port*>(impl.FindPort(name));
  if (port == nullptr) return Status::InvalidArgument("no front named " + name);
  if (Status status = tally::Listen(*port->acceptor, port->address, port->requested_port, name);
      !status.ok()) {
    return status;
  }
  impl.Accept(*port);
  impl.StartThreads(/*worker0_on_caller=*/false);
  return Status::OK();
}

Status Server::Listen() {
  Impl& impl = *impl_;
  for (Port& port : impl.ports) {
    if (port.serving) continue;
    if (Status status = tally::Listen(*port.acceptor, port.address, port.requested_port, port.name);
        !status.ok()) {
      return status;
    }
  }
  // From here a signal is held for Run() (asio queues it until the wait)
  // instead of ending the process: a caller may say it is ready (sd_notify,
  // /readyz) before Run() has begun, and a SIGTERM then must drain, not kill.
  // No handler of `signals` runs yet, so adding from this thread is safe.
  if (impl.options.handle_signals) {
    impl.signals.add(SIGTERM);
    impl.signals.add(SIGINT);
    impl.signals.add(SIGHUP);
  }
  return Status::OK();
}

uint16_t Server::port() const { return BoundPort(*impl_->ports.front().acceptor); }

uint16_t Server::front_port(const std::string& name) const {
  const Port* port = impl_->FindPort(name);
  return port == nullptr ? 0 : BoundPort(*port->acceptor);
}

void Server::Run() {
  Impl& impl = *impl_;
  spdlog::info("serving on {}:{} with {} threads", impl.options.address, port(),
               impl.workers.size());
  // On worker 0, which may be running already (ServeEarly).
  asio::post(impl.workers[0].io, [&impl] {
    for (Port& port : impl.ports) {
      if (!port.serving) impl.Accept(port);
    }
    if (impl.options.sweep_interval_ms > 0) {
      asio::co_spawn(impl.workers[0].io, impl.SweepPeriodically(),
                     [](std::exception_ptr e) { LogFailure(e, "sweep"); });
    }
    if (impl.options.handle_signals) impl.WaitForSignal();  // signals added by Listen()
  });
  const bool worker0_on_caller = impl.threads.empty();
  impl.StartThreads(worker0_on_caller);
  if (worker0_on_caller) impl.workers[0].io.run();
  impl.JoinThreads();
  spdlog::info("stopped");
}

void Server::Shutdown() {
  asio::post(impl_->workers[0].io, [impl = impl_.get()] { impl->BeginShutdown(); });
}

protocol::StatsReply Server::Stats() const { return impl_->Stats(); }

const FrontCounters& Server::protocol_counters() const { return impl_->protocol_front.counters(); }

}  // namespace tally
