// Wire: one connection to an HTTP front, in-process, driven as the Server
// drives it: received bytes accumulate, consumed ones are dropped, answers
// accumulate in `out`. A ManualClock; no sockets.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "node/common/clock.h"
#include "node/net/rate_limited_log.h"
#include "node/net/stream_front.h"

namespace tally {

struct Wire {
  // front must outlive the wire.
  explicit Wire(StreamFront* front)
      : log(&clock, "test"), session(front->NewSession(SessionContext{peer, &clock, &log, 0})) {}

  StreamProgress Feed(std::string_view bytes) {
    received += bytes;
    const StreamProgress progress = session->Answer(
        std::as_bytes(std::span<const char>(received.data(), received.size())), &out);
    received.erase(0, progress.consumed_bytes);
    closed = closed || progress.close;
    return progress;
  }

  // How many times `text` occurs in what was answered.
  int Count(std::string_view text) const {
    int count = 0;
    for (size_t at = out.find(text); at != std::string::npos; at = out.find(text, at + 1)) ++count;
    return count;
  }

  // The body of the last answer.
  std::string LastBody() const { return out.substr(out.rfind("\r\n\r\n") + 4); }

  const std::string peer = "127.0.0.1:1";
  ManualClock clock{1'700'000'000'000};
  RateLimitedLog log;
  std::unique_ptr<StreamSession> session;
  std::string received;
  std::string out;
  bool closed = false;
};

}  // namespace tally
