// tallyd at start: flags, config files and the files it reads are checked
// before it does anything, and what it refuses ends it with exit 1 and one
// log line saying which flag, file, key or value is wrong.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/must_check.h"
#include "tests/tallyd_process.h"
#include "tests/temp_dir.h"

namespace tally {
namespace {

using testing::TempDir;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs tallyd on an ephemeral port and off the disk with `args`, expecting a
// refusal: exit 1 and a log of one line "not starting: ..." holding each of
// `expected`.
void ExpectRefused(const std::vector<std::string>& args, const std::vector<std::string>& expected) {
  std::vector<std::string> argv = {"--address",     "127.0.0.1", "--port",       "0",
                                   "--gossip-port", "0",         "--memory-only"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string log;
  CHECK_MESSAGE(testing::RunTallyd(argv, &log) == 1, log);
  CHECK_MESSAGE(Contains(log, "not starting: "), log);
  CHECK_MESSAGE(std::count(log.begin(), log.end(), '\n') == 1, log);
  for (const std::string& part : expected) CHECK_MESSAGE(Contains(log, part), log);
}

// Writes `text` to `path` and returns the path.
std::string WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// A value out of its range is named with the flag and the range, not with
// CLI11's 300-digit bound of a double.
TEST_CASE("tallyd start: a range error names the flag, the value and the range") {
  ExpectRefused({"--idle-timeout-ms", "-5"}, {"--idle-timeout-ms: -5 is not in 1..3600000"});
  ExpectRefused({"--max-keys", "0"}, {"--max-keys: 0 is not in 1..1000000000"});
  ExpectRefused({"--threads", "two"}, {"--threads: two is not a whole number"});
  TempDir dir;
  ExpectRefused({"--config", WriteFile(dir.Path("tally.toml"), "drain-timeout-ms = -1\n")},
                {"--drain-timeout-ms: -1 is not in 0..3600000"});
}

}  // namespace
}  // namespace tally
