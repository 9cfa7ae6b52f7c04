#include "node/server/connection.h"

#include <algorithm>
#include <chrono>
#include <span>

#include <spdlog/spdlog.h>

#include "node/net/acceptor.h"

namespace tally {
namespace {

constexpr size_t kMinReadBytes = 4 * 1024;
constexpr size_t kMaxReadBytes = 64 * 1024;  // a large request's buffer grows as it arrives
// Output kept between requests; a large answer's is freed once it is written.
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

Connection::Connection(tcp::socket socket, Worker& worker, const Server::Options& options,
                       const Clock* clock, BufferBudget* budget, Port& port)
    : stream_(std::move(socket), options.tls),
      socket_(stream_.socket()),
      timer_(worker.io),
      clock_(clock),
      deadline_ms_(clock->MonotonicMs() +
                   (stream_.tls() ? options.frame_timeout_ms : options.idle_timeout_ms)),
      waiting_(stream_.tls() ? Waiting::kHandshake : Waiting::kRequest),
      worker_(worker),
      options_(options),
      port_(port),
      peer_(PeerName(socket_)),
      in_(budget, clock),
      session_(port.front->NewSession(SessionContext{peer_, clock, &worker.log, worker.index})) {}

void Connection::Start() {
  worker_.connections.insert(shared_from_this());
  port_.connections_open.fetch_add(1, std::memory_order_relaxed);
  port_.connections_total.fetch_add(1, std::memory_order_relaxed);
  socket_.set_option(tcp::no_delay(true));
  socket_.non_blocking(true);  // Serve writes what fits at once, then waits for the rest
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
  port_.connections_open.fetch_sub(1, std::memory_order_relaxed);
  worker_.connections.erase(shared_from_this());
  if (worker_.stopping && worker_.connections.empty()) worker_.drain_timer.cancel();
}

asio::awaitable<bool> Connection::Handshake() {
  const Status status = co_await stream_.Handshake(NetStream::Side::kServer);
  if (!status.ok() && socket_.is_open()) {  // else the watchdog has said why
    worker_.log.Warn("closing connection from " + peer_ + " on " + port_.name + ": " +
                     std::string(status.message()));
  }
  co_return status.ok();
}

asio::awaitable<void> Connection::Serve() {
  size_t bytes_wanted = kMinReadBytes;
  bool keep_open = !stream_.tls() || co_await Handshake();
  bool first_bytes = true;
  while (keep_open && !stop_requested_) {
    std::span<std::byte> room;
    const Status room_status =
        in_.Writable(std::clamp(bytes_wanted, kMinReadBytes, kMaxReadBytes), &room);
    asio::error_code ec;
    if (room_status.ok()) {
      AwaitBytes();
      reading_ = true;
      const size_t received = co_await stream_.async_read_some(
          asio::buffer(room.data(), room.size()), asio::redirect_error(asio::use_awaitable, ec));
      reading_ = false;
      if (ec) break;  // end of stream, reset, or cancelled by Stop or the watchdog
      in_.Commit(received);
      if (first_bytes && !stream_.tls() && LooksLikeTlsHandshake(in_.readable())) {
        worker_.log.Warn("closing connection from " + peer_ + " on " + port_.name +
                         ": a TLS handshake on a plaintext port (TLS is off on the client ports)");
        break;
      }
      first_bytes = false;
      const StreamProgress progress = session_->Answer(in_.readable(), &out_);
      if (progress.consumed_bytes > 0) in_.Consume(progress.consumed_bytes);
      bytes_wanted = progress.wanted_bytes;
      keep_open = !progress.close;
    } else {
      worker_.log.Warn("closing connection from " + peer_ + ": " +
                       std::string(room_status.message()));
      session_->Refuse(StreamRefusal::kBufferBudget, room_status.message(), &out_);
      keep_open = false;
    }
    if (!out_.empty()) {
      // Most answers fit in the socket's send buffer and go out at once; only
      // the rest of one that does not waits, under the write deadline (arming
      // it for every answer would wake the watchdog on every request).
      // The socket does not block; under TLS everything is written asynchronously.
      const size_t written = stream_.TryWrite(asio::buffer(out_), ec);
      if (!ec && written < out_.size()) {
        SetDeadline(clock_->MonotonicMs() + options_.write_timeout_ms, Waiting::kWrite);
        co_await asio::async_write(stream_,
                                   asio::buffer(out_.data() + written, out_.size() - written),
                                   asio::redirect_error(asio::use_awaitable, ec));
      }
      out_.clear();
      if (ec) break;
    }
    TrimMemory();
  }
  stream_.ShutdownTls();  // here no read or write is pending on the stream
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
      case Waiting::kHandshake:
        worker_.log.Warn("closing connection from " + peer_ + " on " + port_.name +
                         ": TLS handshake not complete " +
                         std::to_string(options_.frame_timeout_ms) + " ms after the connection");
        break;
      case Waiting::kRequest:
        spdlog::debug("closing connection from {}: idle for {} ms", peer_,
                      options_.idle_timeout_ms);
        break;
      case Waiting::kFrame:
        worker_.log.Warn("closing connection from " + peer_ + " on " + port_.name +
                         ": a request not complete " + std::to_string(options_.frame_timeout_ms) +
                         " ms after its first byte");
        break;
      case Waiting::kWrite:
        worker_.log.Warn("closing connection from " + peer_ + " on " + port_.name +
                         ": responses not taken for " + std::to_string(options_.write_timeout_ms) +
                         " ms");
        break;
    }
    Close();
  }
}

void Connection::TrimMemory() {
  in_.ShrinkIfIdle();
  if (out_.capacity() > kKeptOutputBytes) std::string().swap(out_);
  session_->TrimMemory();
}

}  // namespace tally
