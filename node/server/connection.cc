#include "node/server/connection.h"

#include <algorithm>
#include <chrono>
#include <span>

#include <spdlog/spdlog.h>

#include "node/net/acceptor.h"

namespace tally {
namespace {

constexpr size_t kMinReadBytes = 4 * 1024;
constexpr size_t kMaxReadBytes = 64 * 1024;  // a large frame's buffer grows as it arrives

// What a client is told of a frame that does not decode as a Request. The
// decoder's own description quotes Cap'n Proto's internals: it goes to the log.
constexpr char kNotARequest[] = "malformed frame: not a valid request message";
// Scratch kept between requests, so that a steady stream of small ones
// allocates nothing; a large request's is freed once it is answered.
constexpr size_t kKeptChecks = 128;
constexpr size_t kKeptOutputBytes = 16 * 1024;

}  // namespace

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

Connection::Connection(tcp::socket socket, Worker& worker, const Server::Options& options,
                       Limiter* limiter, const Clock* clock, BufferBudget* budget,
                       RequestHandler::StatsSource stats)
    : socket_(std::move(socket)),
      timer_(worker.io),
      clock_(clock),
      deadline_ms_(clock->MonotonicMs() + options.idle_timeout_ms),
      worker_(worker),
      options_(options),
      peer_(PeerName(socket_)),
      handler_(limiter, &worker.counters, std::move(stats), options.policies),
      in_(budget, clock) {}

void Connection::Start() {
  worker_.connections.insert(shared_from_this());
  WorkerCounters::Add(worker_.counters.connections_open, 1);
  WorkerCounters::Add(worker_.counters.connections_total, 1);
  socket_.set_option(tcp::no_delay(true));
  auto self = shared_from_this();
  asio::co_spawn(worker_.io, Serve(),
                 [self](std::exception_ptr e) { LogFailure(e, "connection"); });
  asio::co_spawn(worker_.io, Watchdog(),
                 [self](std::exception_ptr e) { LogFailure(e, "watchdog"); });
}

void Connection::Stop() {
  stop_requested_ = true;
  if (reading_) socket_.cancel();
}

void Connection::Close() {
  if (!socket_.is_open()) return;
  asio::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  timer_.cancel();
  WorkerCounters::Add(worker_.counters.connections_open, static_cast<uint64_t>(-1));
  worker_.connections.erase(shared_from_this());
  if (worker_.stopping && worker_.connections.empty()) worker_.drain_timer.cancel();
}

asio::awaitable<void> Connection::Serve() {
  size_t bytes_wanted = kMinReadBytes;
  bool keep_open = true;
  while (keep_open && !stop_requested_) {
    std::span<std::byte> room;
    const Status room_status =
        in_.Writable(std::clamp(bytes_wanted, kMinReadBytes, kMaxReadBytes), &room);
    asio::error_code ec;
    if (room_status.ok()) {
      AwaitBytes();
      reading_ = true;
      const size_t received = co_await socket_.async_read_some(
          asio::buffer(room.data(), room.size()), asio::redirect_error(asio::use_awaitable, ec));
      reading_ = false;
      if (ec) break;  // end of stream, reset, or cancelled by Stop or the watchdog
      in_.Commit(received);
      keep_open = AnswerFrames(&bytes_wanted);
    } else {
      keep_open = RefuseFrame(protocol::ErrorCode::kResourceExhausted,
                              std::string(room_status.message()), room_status.message());
    }
    if (!out_.empty()) {
      SetDeadline(clock_->MonotonicMs() + options_.write_timeout_ms, Waiting::kWrite);
      co_await asio::async_write(socket_, asio::buffer(out_),
                                 asio::redirect_error(asio::use_awaitable, ec));
      out_.clear();
      if (ec) break;
    }
    TrimMemory();
  }
  Close();
}

void Connection::AwaitBytes() {
  const int64_t idle_deadline_ms = clock_->MonotonicMs() + options_.idle_timeout_ms;
  const int64_t frame_started_ms = in_.frame_started_ms();
  if (frame_started_ms >= 0 && frame_started_ms + options_.frame_timeout_ms < idle_deadline_ms) {
    SetDeadline(frame_started_ms + options_.frame_timeout_ms, Waiting::kFrame);
  } else {
    SetDeadline(idle_deadline_ms, Waiting::kRequest);
  }
}

void Connection::SetDeadline(int64_t deadline_ms, Waiting waiting) {
  const bool sooner = deadline_ms < deadline_ms_;
  deadline_ms_ = deadline_ms;
  waiting_ = waiting;
  if (sooner) timer_.cancel();
}

asio::awaitable<void> Connection::Watchdog() {
  while (socket_.is_open()) {
    timer_.expires_after(std::chrono::milliseconds(deadline_ms_ - clock_->MonotonicMs()));
    asio::error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!socket_.is_open() || clock_->MonotonicMs() < deadline_ms_) continue;
    switch (waiting_) {
      case Waiting::kRequest:
        spdlog::debug("closing connection from {}: idle for {} ms", peer_,
                      options_.idle_timeout_ms);
        break;
      case Waiting::kFrame:
        worker_.log.Warn("closing connection from " + peer_ + ": a frame not complete " +
                         std::to_string(options_.frame_timeout_ms) + " ms after its first byte");
        break;
      case Waiting::kWrite:
        worker_.log.Warn("closing connection from " + peer_ + ": responses not taken for " +
                         std::to_string(options_.write_timeout_ms) + " ms");
        break;
    }
    Close();
  }
}

bool Connection::AnswerFrames(size_t* bytes_wanted) {
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

void Connection::TrimMemory() {
  in_.ShrinkIfIdle();
  if (out_.capacity() > kKeptOutputBytes) std::string().swap(out_);
  if (request_.checks.capacity() > kKeptChecks) request_ = protocol::Request();
  if (response_.outcomes.capacity() > kKeptChecks) response_ = protocol::Response();
  handler_.TrimScratch(kKeptChecks);
}

bool Connection::RefuseFrame(protocol::ErrorCode code, std::string reply, std::string_view detail) {
  worker_.log.Warn("closing connection from " + peer_ + ": " + std::string(detail));
  out_ += ErrorFrame(code, std::move(reply));
  return false;
}

}  // namespace tally
