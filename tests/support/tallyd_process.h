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
  TallydProcess::Options options;
  options.tallyd_path = TALLYD_PATH;
  options.args = args;
  return TallydProcess::Start(options, process, start_timeout_ms);
}

// Runs tallyd with exactly `args` until it exits; its stderr and stdout (the
// log) go to *output. Returns the exit code, or -1 if it still ran after
// timeout_ms (it is then killed): for flags and files tallyd must refuse.
inline int RunTallyd(const std::vector<std::string>& args, std::string* output,
                     int timeout_ms = 5'000) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", TALLYD_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, output, timeout_ms);
}

}  // namespace tally::testing
