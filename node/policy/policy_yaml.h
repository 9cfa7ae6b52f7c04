// Reading policy files: envoyproxy/ratelimit's YAML configuration format,
// with yaml-cpp.
//
//   domain: <name>                      required, unique across the files
//   shadow_mode: <bool>                 tally: every limit of the domain in shadow mode
//   descriptors:
//     - key: <key>                      required
//       value: <value>                  optional; a trailing '*' matches a prefix
//       rate_limit:                     optional
//         unit: second|minute|hour|day  (or window_ms, tally's addition)
//         requests_per_unit: <n>        0 denies everything
//         unlimited: <bool>             no unit then
//         name: <name>                  for `replaces`
//         replaces: [{name: <name>}]
//         algorithm: <name>             tally: fixed_window (the default, as in
//                                       envoyproxy/ratelimit), sliding_counter,
//                                       sliding_log or token_bucket
//         window_ms: <ms>               tally: a window that is not a whole unit
//       shadow_mode: <bool>
//       detailed_metric: <bool>         accepted (metrics are per rule here)
//       descriptors: [...]              nested rules, same form
//
// Files written for envoyproxy/ratelimit load unchanged and mean the same.
// Anything else is refused: an unknown or misspelt key, a wrong type, a unit
// tally does not have (month and year exceed its 30-day windows), a limit
// over 10^9, duplicates. Errors name the file and line.
//
// Thread safety: stateless functions.
#pragma once

#include <string>
#include <string_view>

#include "node/common/status.h"
#include "node/policy/policy.h"

namespace tally {

inline constexpr size_t kMaxDomainBytes = 128;

// Parses one file's text into *set (adding its domain). InvalidArgument
// "<file>:<line>: <reason>" when it is not a valid policy file; *set is
// then unchanged.
Status ParsePolicyFile(std::string_view file, const std::string& text, PolicySet* set);

// Reads every file ending in .yaml or .yml in `dir`, in name order, into
// *set. The first file that cannot be read or parsed is the error.
Status LoadPolicyDir(const std::string& dir, PolicySet* set);

}  // namespace tally
