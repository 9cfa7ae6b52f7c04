#include "node/net/accept_loop.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>

namespace tally {

bool AcceptBackoff::IsShortage(const asio::error_code& error) {
  // asio's error_code is its own type: compare with its enums (ENFILE has none).
  return error == asio::error::no_descriptors || error == asio::error::no_buffer_space ||
         error == asio::error::no_memory ||
         error == asio::error_code(ENFILE, asio::error::get_system_category());
}

int64_t AcceptBackoff::Failed(const asio::error_code& error) {
  if (!IsShortage(error)) return 0;
  wait_ms_ = wait_ms_ == 0 ? kMinMs : std::min(2 * wait_ms_, kMaxMs);
  return wait_ms_;
}

AcceptLoop::AcceptLoop(asio::ip::tcp::acceptor* acceptor, RateLimitedLog* log, std::string what,
                       NextExecutor next_executor, Accepted accepted)
    : acceptor_(acceptor),
      log_(log),
      what_(std::move(what)),
      next_executor_(std::move(next_executor)),
      accepted_(std::move(accepted)),
      backoff_timer_(acceptor->get_executor()) {}

asio::awaitable<void> AcceptLoop::Run() {
  AcceptBackoff backoff;
  while (acceptor_->is_open()) {
    asio::ip::tcp::socket socket(next_executor_());
    asio::error_code ec;
    co_await acceptor_->async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_->is_open()) co_return;
    if (!ec) {
      backoff.Succeeded();
      accepted_(std::move(socket));
      continue;
    }
    const int64_t wait_ms = backoff.Failed(ec);
    if (wait_ms == 0) {
      log_->Warn("accepting on " + what_ + " failed: " + ec.message());
      continue;
    }
    log_->Warn("accepting on " + what_ + " failed: " + ec.message() + "; next try in " +
               std::to_string(wait_ms) + " ms");
    backoff_timer_.expires_after(std::chrono::milliseconds(wait_ms));
    co_await backoff_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

void AcceptLoop::Stop() {
  asio::error_code ignored;
  acceptor_->close(ignored);
  backoff_timer_.cancel();
}

}  // namespace tally
