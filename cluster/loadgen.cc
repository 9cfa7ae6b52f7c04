#include "cluster/loadgen.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include <asio.hpp>

#include "cluster/target_session.h"

namespace tally::cluster {
namespace {

using asio::ip::tcp;

constexpr auto kWatchdogPeriod = std::chrono::milliseconds(100);

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Counters of one event-loop thread, written by that thread only.
struct WorkerStats {
  uint64_t requests = 0;
  ReplyCounts replies;
  LatencyHistogram latency;
};

// The state of the run that all threads see.
struct Shared {
  explicit Shared(const LoadOptions& load_options)
      : options(load_options),
        keys(load_options),
        interval_ns(load_options.rate_per_s > 0 ? static_cast<uint64_t>(load_options.connections) *
                                                      1'000'000'000 / load_options.rate_per_s
                                                : 0) {}

  const LoadOptions& options;
  const KeySpace keys;
  // Paced runs (rate_per_s): the time between two requests of one connection; 0: closed loop.
  const uint64_t interval_ns;
  std::atomic<uint64_t> requests_claimed{0};
  std::atomic<bool> aborted{false};
  uint64_t deadline_ns = UINT64_MAX;  // set before the run phase starts

  std::mutex mutex;
  Status failure;  // guarded by mutex: the first reason the run aborted

  void Fail(Status status) {
    std::lock_guard lock(mutex);
    if (failure.ok()) failure = std::move(status);
    aborted.store(true, std::memory_order_relaxed);
  }
  // Whether one more request may be sent now.
  bool ClaimRequest(uint64_t now_ns) {
    if (aborted.load(std::memory_order_relaxed) || now_ns >= deadline_ns) return false;
    return options.max_requests == 0 ||
           requests_claimed.fetch_add(1, std::memory_order_relaxed) < options.max_requests;
  }
  // Whether the run may still send: a paced connection with nothing in
  // flight waits for its next request while it may.
  bool Running(uint64_t now_ns) const {
    return !aborted.load(std::memory_order_relaxed) && now_ns < deadline_ns &&
           (options.max_requests == 0 ||
            requests_claimed.load(std::memory_order_relaxed) < options.max_requests);
  }
};

// One connection; owned by its worker's thread.
struct Connection {
  Connection(asio::io_context& io, const tcp::resolver::results_type& addresses,
             std::string peer_name, std::unique_ptr<Session> wire_session)
      : socket(io),
        pace(io),
        endpoints(addresses),
        peer(std::move(peer_name)),
        session(std::move(wire_session)) {}

  tcp::socket socket;
  asio::steady_timer pace;  // paced runs: waits for the next request with none in flight
  const tcp::resolver::results_type& endpoints;
  const std::string peer;  // "host:port", for messages
  std::unique_ptr<Session> session;
  std::deque<uint64_t> sent_ns;   // send times of the requests in flight, oldest first
  bool active = false;            // in a phase and not yet done with it
  uint64_t last_progress_ns = 0;  // for the watchdog
  std::string out;                // bytes to write next
  uint64_t next_due_ns = 0;       // paced runs: when the next request is due
};

// An event-loop thread and the connections it owns.
struct Worker {
  asio::io_context io{1};
  asio::steady_timer watchdog{io};
  std::vector<std::unique_ptr<Connection>> connections;
  size_t active = 0;
  uint64_t finished_ns = 0;  // when the last connection of the phase finished
  WorkerStats stats;
};

// Closes connections that made no progress for stall_timeout_ms, and all of
// them once the run has aborted. Ends when the phase's connections are done.
asio::awaitable<void> Watchdog(Shared& shared, Worker& worker) {
  const uint64_t stall_ns = shared.options.stall_timeout_ms * 1'000'000;
  while (worker.active > 0) {
    worker.watchdog.expires_after(kWatchdogPeriod);
    asio::error_code ec;
    co_await worker.watchdog.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    const uint64_t now_ns = NowNs();
    for (const auto& connection : worker.connections) {
      const bool aborted = shared.aborted.load(std::memory_order_relaxed);
      if (!connection->active || (!aborted && now_ns - connection->last_progress_ns < stall_ns))
        continue;
      if (!aborted) {
        shared.Fail(Status::Unavailable(connection->peer + " did not answer for " +
                                        std::to_string(shared.options.stall_timeout_ms) + " ms"));
      }
      connection->socket.close(ec);
    }
  }
}

void FinishPhase(Worker& worker, Connection& connection) {
  connection.active = false;
  if (--worker.active == 0) {
    worker.finished_ns = NowNs();
    worker.watchdog.cancel();
  }
}

// Reads once into the session's buffer. False (after failing the run) on error.
asio::awaitable<bool> Receive(Shared& shared, Connection& connection) {
  asio::error_code ec;
  const std::span<std::byte> room = connection.session->writable();
  const size_t received = co_await connection.socket.async_read_some(
      asio::buffer(room.data(), room.size()), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    if (!shared.aborted.load(std::memory_order_relaxed)) {
      shared.Fail(Status::IOError(connection.peer + (ec == asio::error::eof
                                                         ? " closed the connection"
                                                         : ": read failed: " + ec.message())));
    }
    co_return false;
  }
  connection.session->Commit(received);
  connection.last_progress_ns = NowNs();
  co_return true;
}

asio::awaitable<bool> Send(Shared& shared, Connection& connection) {
  asio::error_code ec;
  co_await asio::async_write(connection.socket, asio::buffer(connection.out),
                             asio::redirect_error(asio::use_awaitable, ec));
  connection.out.clear();
  if (ec && !shared.aborted.load(std::memory_order_relaxed)) {
    shared.Fail(Status::IOError("writing to " + connection.peer + ": " + ec.message()));
  }
  co_return !ec;
}

// Phase 1: connect and complete the session's handshake.
// No co_await inside a condition with && or || in this file: g++ 12.2 got
// `while (!done && co_await Receive(...))` wrong here (it kept looping after
// done was set).
asio::awaitable<void> Open(Shared& shared, Worker& worker, Connection& connection) {
  asio::error_code ec;
  co_await asio::async_connect(connection.socket, connection.endpoints,
                               asio::redirect_error(asio::use_awaitable, ec));
  bool healthy = !ec;
  if (healthy) {
    connection.socket.set_option(tcp::no_delay(true), ec);
    connection.session->AppendHandshake(&connection.out);
    if (!connection.out.empty()) healthy = co_await Send(shared, connection);
  } else {
    shared.Fail(
        Status::Unavailable("could not connect to " + connection.peer + ": " + ec.message()));
  }
  while (healthy) {
    bool done = false;
    if (Status status = connection.session->TakeHandshakeReply(&done); !status.ok()) {
      shared.Fail(Status::Corruption(connection.peer + ": " + std::string(status.message())));
      break;
    }
    if (done) break;
    healthy = co_await Receive(shared, connection);
  }
  FinishPhase(worker, connection);
}

// How many requests the connection may send now: in a closed loop, one for
// each of the `answered` replies; paced, those that fell due, up to `depth`
// in flight.
size_t Allowance(const Shared& shared, const Connection& connection, size_t answered,
                 uint64_t now_ns) {
  if (shared.interval_ns == 0) return answered;
  if (now_ns < connection.next_due_ns) return 0;
  const uint64_t due = (now_ns - connection.next_due_ns) / shared.interval_ns + 1;
  const size_t room = static_cast<size_t>(shared.options.depth) - connection.sent_ns.size();
  return static_cast<size_t>(std::min<uint64_t>(due, room));
}

// Appends the requests the connection may send (Allowance, as the budget and
// clock allow) and records their send time. Returns how many.
size_t AppendRequests(Shared& shared, Connection& connection, size_t answered) {
  size_t appended = 0;
  const uint64_t now_ns = NowNs();
  const size_t count = Allowance(shared, connection, answered, now_ns);
  while (appended < count && shared.ClaimRequest(now_ns)) {
    connection.session->AppendRequest(&connection.out);
    ++appended;
  }
  for (size_t i = 0; i < appended; ++i) connection.sent_ns.push_back(now_ns);
  connection.next_due_ns += appended * shared.interval_ns;
  return appended;
}

// Phase 2: keep requests in flight until the run ends (closed loop: `depth`
// of them; paced: each as it falls due), then drain.
asio::awaitable<void> Drive(Shared& shared, Worker& worker, Connection& connection) {
  bool healthy = true;
  size_t answered = static_cast<size_t>(shared.options.depth);  // a closed loop starts full
  while (healthy) {
    if (AppendRequests(shared, connection, answered) > 0) {
      healthy = co_await Send(shared, connection);
      if (!healthy) break;
    }
    answered = 0;
    if (connection.sent_ns.empty()) {
      if (shared.interval_ns == 0 || !shared.Running(NowNs())) break;
      asio::error_code ec;
      connection.pace.expires_at(
          std::chrono::steady_clock::time_point(std::chrono::nanoseconds(connection.next_due_ns)));
      co_await connection.pace.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      connection.last_progress_ns = NowNs();  // nothing was awaited from the server
      continue;
    }
    healthy = co_await Receive(shared, connection);
    if (!healthy) break;
    const uint64_t now_ns = connection.last_progress_ns;
    for (bool done = true; healthy && done;) {
      const Status status = connection.session->TakeReply(&done, &worker.stats.replies);
      if (!status.ok() || (done && connection.sent_ns.empty())) {
        shared.Fail(Status::Corruption(
            connection.peer + ": " +
            (status.ok() ? "a reply to no request" : std::string(status.message()))));
        healthy = false;
      } else if (done) {
        worker.stats.latency.Record(now_ns - connection.sent_ns.front());
        connection.sent_ns.pop_front();
        ++worker.stats.requests;
        ++answered;
      }
    }
  }
  asio::error_code ignored;
  connection.socket.close(ignored);
  FinishPhase(worker, connection);
}

// Runs every worker's io_context on its own thread until all are out of work.
void RunWorkers(std::vector<std::unique_ptr<Worker>>& workers) {
  std::vector<std::jthread> threads;
  for (auto& worker : workers) {
    worker->io.restart();
    threads.emplace_back([&io = worker->io] { io.run(); });
  }
}

// Starts `phase` for every connection, plus the watchdogs, then runs them.
template <typename Phase>
void RunPhase(Shared& shared, std::vector<std::unique_ptr<Worker>>& workers, Phase phase) {
  auto rethrow_as_failure = [&shared](std::exception_ptr error) {
    if (!error) return;
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      shared.Fail(Status::IOError(std::string("unexpected exception: ") + e.what()));
    } catch (...) {
      shared.Fail(Status::IOError("unexpected exception"));
    }
  };
  for (auto& worker : workers) {
    if (worker->connections.empty()) continue;
    worker->active = worker->connections.size();
    for (auto& connection : worker->connections) {
      connection->active = true;
      connection->last_progress_ns = NowNs();
      asio::co_spawn(worker->io, phase(*worker, *connection), rethrow_as_failure);
    }
    asio::co_spawn(worker->io, Watchdog(shared, *worker), rethrow_as_failure);
  }
  RunWorkers(workers);
}

}  // namespace

Status RunLoad(const LoadOptions& options, LoadResult* result) {
  Shared shared(options);

  // Resolve each endpoint once; connections share the results.
  std::vector<tcp::resolver::results_type> addresses;
  std::vector<std::string> peers;
  {
    asio::io_context io;
    tcp::resolver resolver(io);
    for (const HostPort& endpoint : options.endpoints) {
      asio::error_code ec;
      addresses.push_back(resolver.resolve(endpoint.host, std::to_string(endpoint.port), ec));
      peers.push_back(FormatHostPort(endpoint.host, endpoint.port));
      if (ec)
        return Status::InvalidArgument("cannot resolve " + peers.back() + ": " + ec.message());
    }
  }

  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < options.threads; ++i) workers.push_back(std::make_unique<Worker>());
  for (int i = 0; i < options.connections; ++i) {
    Worker& worker = *workers[static_cast<size_t>(i % options.threads)];
    const size_t endpoint = static_cast<size_t>(i) % addresses.size();
    const uint64_t seed = options.seed * 1'000'003 + static_cast<uint64_t>(i);
    worker.connections.push_back(std::make_unique<Connection>(
        worker.io, addresses[endpoint], peers[endpoint], NewSession(options, shared.keys, seed)));
  }

  RunPhase(shared, workers, [&shared](Worker& worker, Connection& connection) {
    return Open(shared, worker, connection);
  });
  if (!shared.failure.ok()) return shared.failure;

  const uint64_t start_ns = NowNs();
  if (options.duration_ms > 0) shared.deadline_ns = start_ns + options.duration_ms * 1'000'000;
  // Paced: the connections' first requests spread over one interval.
  uint64_t staggered = 0;
  for (auto& worker : workers) {
    for (auto& connection : worker->connections) {
      connection->next_due_ns =
          start_ns + staggered++ * shared.interval_ns / static_cast<uint64_t>(options.connections);
    }
  }
  RunPhase(shared, workers, [&shared](Worker& worker, Connection& connection) {
    return Drive(shared, worker, connection);
  });
  if (!shared.failure.ok()) return shared.failure;

  *result = LoadResult();
  ReplyCounts replies;
  uint64_t end_ns = start_ns;
  for (const auto& worker : workers) {
    end_ns = std::max(end_ns, worker->finished_ns);
    result->requests += worker->stats.requests;
    replies.Merge(worker->stats.replies);
    result->latency.Merge(worker->stats.latency);
  }
  result->allowed = replies.allowed;
  result->denied = replies.denied;
  result->errors = replies.errors;
  result->first_error = replies.first_error;
  result->keys_denied = static_cast<uint64_t>(
      std::count(replies.denied_keys.begin(), replies.denied_keys.end(), true));
  result->decisions = result->allowed + result->denied + result->errors;
  result->duration_s = static_cast<double>(end_ns - start_ns) / 1e9;
  return Status::OK();
}

std::string_view LoadTargetName(LoadTarget target) {
  switch (target) {
    case LoadTarget::kTally: return "tally";
    case LoadTarget::kRedisLua: return "redis-lua";
    case LoadTarget::kRedisIncr: return "redis-incr";
  }
  return "unknown";
}

std::string_view KeyDistributionName(KeyDistribution distribution) {
  return distribution == KeyDistribution::kZipf ? "zipf" : "uniform";
}

}  // namespace tally::cluster
