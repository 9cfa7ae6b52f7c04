// CLI11 checks shared by tally's command-line tools, with errors a person can
// read. CLI11 puts the flag in front of each, e.g.
//   --idle-timeout-ms: -5 is not in 1..3600000
//   --seed: 'tally-seeds' is not host:port (no port)
// They check values from the command line and from a config file alike.
//
// Thread safety: the returned validators are values; use each from one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace tally::bin {

// The upper bounds flags of durations use: timeouts up to an hour, intervals up to a day.
inline constexpr int64_t kHourMs = 3'600'000;
inline constexpr int64_t kDayMs = 24 * kHourMs;

// The value is a whole number (as CLI11 reads one) in [min, max].
CLI::Validator InRange(int64_t min, int64_t max);

// The value is host:port as ParseHostPort (node/common/host_port.h) reads it.
CLI::Validator HostPortCheck();

// Lets every option of `app` itself (not of its subcommands) with a long name
// also come from the environment variable `prefix` + that name in upper snake
// case (--max-keys: TALLY_MAX_KEYS), as --help then shows. An option taking
// several values (--seed) reads them comma-separated, from the variable and
// the command line alike. A value on the command line wins over the variable;
// an empty variable counts as unset. Call once, after the last option is added
// and before parsing. Options a config file cannot set either, --config aside
// (--help, --version: commands, not configuration), have no variable.
void AddEnvironmentNames(CLI::App* app, std::string_view prefix);

// The value of the environment variable named `option`'s, when it is set
// and not empty; nullptr otherwise.
const char* EnvironmentValue(const CLI::Option& option);

// "NAME=value" when `option` takes its value from its environment variable
// (set, and the option not on argv's command line); otherwise empty.
std::string EnvironmentSource(const CLI::Option& option, int argc, const char* const* argv);

// The same for the option whose value `error`, thrown by parsing `app` from
// argv, refuses.
std::string EnvironmentSource(const CLI::App& app, const CLI::Error& error, int argc,
                              const char* const* argv);

}  // namespace tally::bin
