// AcceptBackoff: which accept failures wait, and for how long.
#include <cerrno>

#include <doctest/doctest.h>

#include "node/net/accept_loop.h"

namespace tally {
namespace {

asio::error_code SystemError(int value) {
  return asio::error_code(value, asio::error::get_system_category());
}

// Running out of descriptors waits 10 ms, doubling to 1 s; a success starts over.
TEST_CASE("accept backoff: a shortage doubles the wait up to a second, a success resets it") {
  AcceptBackoff backoff;
  const int64_t expected[] = {10, 20, 40, 80, 160, 320, 640, 1'000, 1'000};
  for (const int64_t wait_ms : expected) CHECK(backoff.Failed(SystemError(EMFILE)) == wait_ms);
  backoff.Succeeded();
  CHECK(backoff.Failed(SystemError(ENFILE)) == 10);
  CHECK(backoff.Failed(SystemError(ENOBUFS)) == 20);
  CHECK(backoff.Failed(SystemError(ENOMEM)) == 40);
}

// A failure that concerns one connection is no shortage: the next accept follows at once.
TEST_CASE("accept backoff: other failures do not wait") {
  AcceptBackoff backoff;
  CHECK(backoff.Failed(SystemError(ECONNABORTED)) == 0);
  CHECK(backoff.Failed(SystemError(EPROTO)) == 0);
  CHECK(backoff.Failed(SystemError(EMFILE)) == 10);
  CHECK(backoff.Failed(SystemError(ECONNABORTED)) == 0);
  CHECK(backoff.Failed(SystemError(EMFILE)) == 20);  // still in the same shortage
}

}  // namespace
}  // namespace tally
