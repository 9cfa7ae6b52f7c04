// tallyd's log format (--log-format): text for people (spdlog's default
// pattern), or json for log shippers: one JSON object per line,
//   {"time":"2026-12-04T16:52:52.123Z","level":"info","logger":"tallyd","message":"..."}
// with the time in RFC 3339, UTC, to the millisecond, and the message
// escaped by nlohmann-json (quotes, backslashes, control characters and
// newlines; bytes that are not UTF-8 become U+FFFD), so a message is always
// one line that parses.
//
// Thread safety: call from main's thread before other threads log.
#pragma once

#include <CLI/CLI.hpp>

namespace tally::bin {

// Adds --log-format to `app`. Add it before every other option: it takes
// effect as soon as it is parsed, so the refusal of a later flag is logged
// in the chosen format too.
void AddLogFormatOption(CLI::App* app);

// Makes every sink of spdlog's default logger write JSON lines.
void UseJsonLogs();

}  // namespace tally::bin
