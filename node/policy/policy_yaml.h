// Reading policy files: envoyproxy/ratelimit's YAML configuration format,
// every key of it, with yaml-cpp.
//
//   domain: <name>                      required; unique across the files
//                                       (unless merge_domains)
//   shadow_mode: <bool>                 tally: every limit of the domain in shadow mode
//   descriptors:
//     - key: <key>                      required
//       value: <value>                  optional; each '*' in it is a wildcard
//       rate_limit:                     optional
//         unit: second|minute|hour|day|week|month|year
//                                       (or window_ms, tally's addition)
//         requests_per_unit: <n>        0 denies everything
//         unlimited: <bool>             no unit then
//         name: <name>                  for `replaces`
//         replaces: [{name: <name>}]
//         algorithm: <name>             tally: fixed_window (the default, as in
//                                       envoyproxy/ratelimit), sliding_counter,
//                                       sliding_log or token_bucket
//         window_ms: <ms>               tally: a window that is not a whole unit
//       shadow_mode: <bool>             this descriptor's limit in shadow mode
//       quota_mode: <bool>              this descriptor's limit is soft (policy_checker.h)
//       detailed_metric: <bool>         metric names carry every entry's value
//       value_to_metric: <bool>         metric names carry this entry's value
//       share_threshold: <bool>         a wildcard's values share one counter
//       metadata: <mapping>             returned with decisions (policy_metadata.h)
//       descriptors: [...]              nested rules, same form
//
// Units are fixed lengths, as envoyproxy/ratelimit has them: a week is 7
// days, a month 30, a year 365; windows are aligned to the Unix epoch.
// Files written for envoyproxy/ratelimit load unchanged and mean the same.
// Anything else is refused: an unknown or misspelt key, a wrong type, an
// unknown unit, a limit over 10^9 (over MaxLimitFor beyond 30 days),
// share_threshold on a value without '*', duplicates. Errors name the file
// and line.
//
// Thread safety: stateless functions.
#pragma once

#include <string>
#include <string_view>

#include "node/common/status.h"
#include "node/policy/policy.h"

namespace tally {

inline constexpr size_t kMaxDomainBytes = 128;

struct PolicyLoadOptions {
  // Files that name one domain add their descriptors to it (a descriptor
  // another file already has at the top level is refused), as
  // envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG; otherwise a domain defined
  // twice is refused.
  bool merge_domains = false;
};

// Parses one file's text into *set (adding its domain, or merging it).
// InvalidArgument "<file>:<line>: <reason>" when it is not a valid policy
// file; *set is then unchanged. The set needs PolicySet::Finish after the
// last file.
Status ParsePolicyFile(std::string_view file, const std::string& text, PolicySet* set,
                       const PolicyLoadOptions& options = {});

// Reads every file ending in .yaml or .yml in `dir`, in name order, into
// *set, then finishes it. The first file that cannot be read or parsed is
// the error.
Status LoadPolicyDir(const std::string& dir, PolicySet* set, const PolicyLoadOptions& options = {});

}  // namespace tally
