// RateLimitedLog: warnings that a peer or client can provoke at will (bad
// frames, refused connections, failed accepts), logged at most once a second
// so that a flood of them costs neither CPU nor disk. The line that ends a
// quiet second says how many were suppressed before it.
//
// Thread safety: not thread-safe; each instance belongs to one thread or
// strand (the owner says which). The clock is not owned and must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "node/common/clock.h"

namespace tally {

class RateLimitedLog {
 public:
  // `what` names the kind of warning in the suppression count, e.g. "gossip warnings".
  RateLimitedLog(const Clock* clock, std::string what) : clock_(clock), what_(std::move(what)) {}

  void Warn(const std::string& line);

 private:
  const Clock* const clock_;
  const std::string what_;
  int64_t last_ms_ = -1'000'000;
  uint64_t suppressed_ = 0;
};

}  // namespace tally
