// Internal to node/server: one worker thread of the Server and the client
// connections it serves. Includes asio: include it only from node/server/*.cc.
//
// Threads: a connection lives on one worker from accept to close; every
// member of a Connection, and the Worker's fields below `counters`, are owned
// by that worker's thread. WorkerCounters are written by the worker only and
// read by any thread (stats). The BufferBudget that receive buffers charge
// is the Server's, shared by all workers (thread-safe).
//
// Warnings a client can provoke at will (refused connections, bad frames,
// timeouts) go through the worker's RateLimitedLog: at most one line a
// second per worker.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <unordered_set>

#include <asio.hpp>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/net/rate_limited_log.h"
#include "node/net/receive_buffer.h"
#include "node/server/request_handler.h"
#include "node/server/server.h"
#include "protocol/codec.h"
#include "protocol/messages.h"

namespace tally {

using asio::ip::tcp;

// co_spawn's completion: an escaped exception is a bug; log it, never lose it.
void LogFailure(std::exception_ptr failure, const char* what);

// An error response (id 0) as one frame.
std::string ErrorFrame(protocol::ErrorCode code, std::string message);

class Connection;

// One worker thread and what it owns. The clock must outlive it.
struct Worker {
  explicit Worker(const Clock* clock) : log(clock, "client-port warnings") {}

  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  WorkerCounters counters;
  // The rest is owned by this worker's thread.
  std::unordered_set<std::shared_ptr<Connection>> connections;
  bool stopping = false;
  asio::steady_timer drain_timer{io};  // bounds the drain at shutdown
  RateLimitedLog log;
};

// One client connection; every member is owned by its worker's thread.
// Shared ownership: its coroutines keep it alive until both have ended.
//
// Deadlines: waiting for a request, idle_timeout_ms after the last bytes;
// with part of a frame received, also frame_timeout_ms after that frame's
// first byte; writing, write_timeout_ms. Its receive buffer's growth is
// charged to the server's BufferBudget: a frame that needs more than the
// budget has left gets kResourceExhausted and the connection is closed.
// Once a large request is answered, what it grew is freed.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // worker, options, limiter, clock and budget must outlive the connection.
  Connection(tcp::socket socket, Worker& worker, const Server::Options& options, Limiter* limiter,
             const Clock* clock, BufferBudget* budget, RequestHandler::StatsSource stats);

  // Registers with the worker and starts serving. On the worker's thread.
  void Start();
  // Shutdown: answer what has been received, then close. A connection
  // waiting for its next request is closed now.
  void Stop();
  void Close();

 private:
  // What the deadline is for.
  enum class Waiting { kRequest, kFrame, kWrite };

  asio::awaitable<void> Serve();
  // The deadline for the next read: idle or, within a frame, whole-frame.
  void AwaitBytes();
  // Moves the deadline; an earlier one wakes the watchdog to rearm.
  void SetDeadline(int64_t deadline_ms, Waiting waiting);
  // Closes the connection when its deadline passes without being moved on.
  asio::awaitable<void> Watchdog();
  // Decodes and answers every complete frame received, appending responses
  // to out_. Returns false when the connection must close (a bad frame, after
  // an error frame has been queued). *bytes_wanted: how much more to read.
  bool AnswerFrames(size_t* bytes_wanted);
  // Queues an error frame saying `reply`, logs `detail` (rate-limited) and
  // returns false: the connection closes once the frame is written.
  bool RefuseFrame(protocol::ErrorCode code, std::string reply, std::string_view detail);
  // Frees what a large request grew (receive buffer, decoded request,
  // response, output): an idle connection keeps only what small ones need.
  void TrimMemory();

  tcp::socket socket_;
  asio::steady_timer timer_;
  const Clock* const clock_;
  int64_t deadline_ms_;  // clock_->MonotonicMs() at which the watchdog closes the connection
  Waiting waiting_ = Waiting::kRequest;
  Worker& worker_;
  const Server::Options& options_;
  const std::string peer_;
  RequestHandler handler_;
  ReceiveBuffer in_;
  std::string out_;
  protocol::Request request_;    // string_views into in_, valid until Consume
  protocol::Response response_;  // reused: its vectors keep their memory
  bool reading_ = false;
  bool stop_requested_ = false;
};

}  // namespace tally
