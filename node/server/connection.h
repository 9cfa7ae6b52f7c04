// Internal to node/server: one worker thread of the Server, the ports it
// serves, and the client connections it serves on them. Includes asio:
// include it only from node/server/*.cc.
//
// Threads: a connection lives on one worker from accept to close; every
// member of a Connection, and the Worker's fields, are owned by that
// worker's thread. A Port's counters are atomics that any worker updates and
// any thread reads. The BufferBudget that receive buffers charge is the
// Server's, shared by all workers (thread-safe).
//
// Warnings a client can provoke at will (refused connections, bad requests,
// timeouts) go through the worker's RateLimitedLog: at most one line a
// second per worker.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <unordered_set>

#include <asio.hpp>

#include "node/common/clock.h"
#include "node/net/accept_loop.h"
#include "node/net/rate_limited_log.h"
#include "node/net/receive_buffer.h"
#include "node/net/stream_front.h"
#include "node/server/server.h"
#include "node/tls/tls_stream.h"

namespace tally {

using asio::ip::tcp;

// co_spawn's completion: an escaped exception is a bug; log it, never lose it.
void LogFailure(std::exception_ptr failure, const char* what);

class Connection;

// One listening port and the front that speaks on it. The acceptor and its
// loop belong to worker 0; the counters are updated by the workers whose
// connections open and close (relaxed atomics) and read by any thread.
struct Port {
  std::string name;  // "the client port", "the HTTP port", ...
  std::string address;
  uint16_t requested_port = 0;
  StreamFront* front = nullptr;  // not owned
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<AcceptLoop> accept_loop;
  bool serving = false;  // its accept loop runs (worker 0, or before the workers start)
  std::atomic<uint64_t> connections_open{0};
  std::atomic<uint64_t> connections_total{0};
};

// One worker thread and what it owns. The clock must outlive it.
struct Worker {
  Worker(const Clock* clock, size_t worker_index)
      : index(worker_index), log(clock, "client-port warnings") {}

  const size_t index;
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  // The rest is owned by this worker's thread.
  std::unordered_set<std::shared_ptr<Connection>> connections;
  bool stopping = false;
  asio::steady_timer drain_timer{io};  // bounds the drain at shutdown
  RateLimitedLog log;
};

// One client connection; every member is owned by its worker's thread.
// Shared ownership: its coroutines keep it alive until both have ended.
//
// Deadlines: under TLS, the handshake within frame_timeout_ms of the
// accept; waiting for a request, idle_timeout_ms after the last bytes;
// with part of a request received, also frame_timeout_ms after that
// request's first byte; writing, write_timeout_ms. Its receive buffer's
// growth is charged to the server's BufferBudget: a request that needs more
// than the budget has left is refused (StreamSession::Refuse) and the
// connection is closed. Once a large request is answered, what it grew is
// freed.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // worker, options, clock, budget and port must outlive the connection.
  Connection(tcp::socket socket, Worker& worker, const Server::Options& options, const Clock* clock,
             BufferBudget* budget, Port& port);

  // Registers with the worker and starts serving. On the worker's thread.
  void Start();
  // Shutdown: answer what has been received, then close. A connection
  // waiting for its next request is closed now.
  void Stop();
  void Close();

 private:
  // What the deadline is for.
  enum class Waiting { kHandshake, kRequest, kFrame, kWrite };

  asio::awaitable<void> Serve();
  // Under TLS: the handshake, under its deadline; false (logged) when it fails.
  asio::awaitable<bool> Handshake();
  // The deadline for the next read: idle or, within a request, whole-request.
  void AwaitBytes();
  // Moves the deadline; an earlier one wakes the watchdog to rearm.
  void SetDeadline(int64_t deadline_ms, Waiting waiting);
  // Closes the connection when its deadline passes without being moved on.
  asio::awaitable<void> Watchdog();
  // Frees what a large request grew (receive buffer, output, the session's
  // scratch): an idle connection keeps only what small ones need.
  void TrimMemory();

  NetStream stream_;
  tcp::socket& socket_;  // stream_'s
  asio::steady_timer timer_;
  const Clock* const clock_;
  int64_t deadline_ms_;  // clock_->MonotonicMs() at which the watchdog closes the connection
  Waiting waiting_ = Waiting::kRequest;
  Worker& worker_;
  const Server::Options& options_;
  Port& port_;
  const std::string peer_;
  ReceiveBuffer in_;
  std::string out_;
  std::unique_ptr<StreamSession> session_;  // after peer_: it refers to it
  bool reading_ = false;
  bool stop_requested_ = false;
};

}  // namespace tally
