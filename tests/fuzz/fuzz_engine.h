// FuzzEngine: the engine a fuzz target decides with: a Limiter on a
// ManualClock (fuzzer-driven time), at most 10,000 keys, logging off (a
// fuzzer provokes warnings at every step).
#pragma once

#include <spdlog/spdlog.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"

namespace tally::fuzz {

struct FuzzEngine {
  // replicate: node 1 of a cluster, merging peers' state.
  explicit FuzzEngine(bool replicate = false) : limiter(Options(&clock, replicate)) {
    spdlog::set_level(spdlog::level::off);
  }
  static Limiter::Options Options(const Clock* clock, bool replicate) {
    Limiter::Options options;
    options.clock = clock;
    options.max_keys = 10'000;
    options.replicate = replicate;
    if (replicate) options.node_id = 1;
    return options;
  }

  ManualClock clock{1'700'000'000'000};
  Limiter limiter;
};

}  // namespace tally::fuzz
