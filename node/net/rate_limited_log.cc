#include "node/net/rate_limited_log.h"

#include <spdlog/spdlog.h>

namespace tally {

void RateLimitedLog::Warn(const std::string& line) {
  const int64_t now_ms = clock_->MonotonicMs();
  if (now_ms - last_ms_ < 1'000) {
    ++suppressed_;
    return;
  }
  if (suppressed_ > 0) {
    spdlog::warn("{} (and {} similar {} in the last second)", line, suppressed_, what_);
  } else {
    spdlog::warn("{}", line);
  }
  last_ms_ = now_ms;
  suppressed_ = 0;
}

}  // namespace tally
