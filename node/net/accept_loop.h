// AcceptLoop: the one accept loop of the server and of gossip.
//
// An accept that fails for want of resources (EMFILE or ENFILE: no file
// descriptor left; ENOBUFS, ENOMEM) leaves the connection queued, so trying
// again at once would spin a core and fill the log. After such a failure the
// loop waits, from AcceptBackoff::kMinMs doubling to kMaxMs, and the first
// accept that succeeds ends the backoff. Connections already open go on
// being served meanwhile, and queued ones are accepted once descriptors are
// freed. Any other failure concerns one connection, and the next accept
// follows at once. Every failure goes to the RateLimitedLog.
//
// Include it only from .cc files that include asio anyway.
//
// Thread safety: Run, Stop and the callbacks run on the acceptor's executor
// (one thread); the loop owns nothing another thread touches.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <asio.hpp>

#include "node/net/rate_limited_log.h"

namespace tally {

// How long to wait before the next accept, given how the last ones ended.
class AcceptBackoff {
 public:
  static constexpr int64_t kMinMs = 10;
  static constexpr int64_t kMaxMs = 1'000;

  // True for the failures that leave the connection queued until resources
  // are freed: no descriptors (per process or system-wide), no buffers, no memory.
  static bool IsShortage(const asio::error_code& error);

  // After an accept that failed with `error`: the wait in ms before the next
  // one; 0 when it may follow at once.
  int64_t Failed(const asio::error_code& error);
  // After an accept that succeeded: the next failure starts from kMinMs.
  void Succeeded() { wait_ms_ = 0; }

 private:
  int64_t wait_ms_ = 0;  // the last wait; 0: none since the last success
};

class AcceptLoop {
 public:
  // The executor the next connection is to live on (e.g. the next worker's).
  using NextExecutor = std::function<asio::any_io_executor()>;
  // Takes each accepted connection, on the acceptor's executor.
  using Accepted = std::function<void(asio::ip::tcp::socket)>;

  // `acceptor` (listening) and `log` are not owned and must outlive the
  // loop; `what` names the port in log lines, e.g. "the gossip port".
  AcceptLoop(asio::ip::tcp::acceptor* acceptor, RateLimitedLog* log, std::string what,
             NextExecutor next_executor, Accepted accepted);

  // Accepts until Stop() or until the acceptor is closed.
  asio::awaitable<void> Run();
  // Closes the acceptor; Run ends, at once also when it is waiting out a backoff.
  void Stop();

 private:
  asio::ip::tcp::acceptor* const acceptor_;
  RateLimitedLog* const log_;
  const std::string what_;
  const NextExecutor next_executor_;
  const Accepted accepted_;
  asio::steady_timer backoff_timer_;
};

}  // namespace tally
