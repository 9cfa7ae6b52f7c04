// CLI11 checks shared by tally's command-line tools, with errors a person can
// read. CLI11 puts the flag in front of each, e.g.
//   --idle-timeout-ms: -5 is not in 1..3600000
//   --seed: 'tally-seeds' is not host:port (no port)
// They check values from the command line and from a config file alike.
//
// Thread safety: the returned validators are values; use each from one thread.
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

namespace tally::bin {

// The upper bounds flags of durations use: timeouts up to an hour, intervals up to a day.
inline constexpr int64_t kHourMs = 3'600'000;
inline constexpr int64_t kDayMs = 24 * kHourMs;

// The value is a whole number (as CLI11 reads one) in [min, max].
CLI::Validator InRange(int64_t min, int64_t max);

// The value is host:port as ParseHostPort (node/common/host_port.h) reads it.
CLI::Validator HostPortCheck();

}  // namespace tally::bin
