// The integration tests' way to start a tallyd: cluster::NodeProcess with the
// tallyd this build made (TALLYD_PATH, set by tests/CMakeLists.txt).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cluster/node_process.h"

namespace tally::testing {

using TallydProcess = cluster::NodeProcess;
using cluster::RunCommand;

inline Status StartTallyd(const std::vector<std::string>& args,
                          std::unique_ptr<TallydProcess>* process, int start_timeout_ms = 10'000) {
  return TallydProcess::Start({TALLYD_PATH, args, "", false}, process, start_timeout_ms);
}

}  // namespace tally::testing
