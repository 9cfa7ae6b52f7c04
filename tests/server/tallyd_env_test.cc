// tallyd and tallyctl read their options from TALLY_* environment variables
// too, as containers expect: the command line wins over the environment,
// which wins over --config; a bad value is refused naming the variable.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>

#include <doctest/doctest.h>

#include "tests/support/must_check.h"
#include "tests/support/poll.h"
#include "tests/support/tallyd_process.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

using testing::TempDir;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using Variables = std::map<std::string, std::string>;

// Sets environment variables for its lifetime; tallyd processes started
// meanwhile inherit them.
class ScopedEnv {
 public:
  explicit ScopedEnv(const Variables& variables) : variables_(variables) {
    for (const auto& [name, value] : variables_) setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : variables_) unsetenv(name.c_str());
  }

 private:
  Variables variables_;
};

std::string WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// Starts a memory-only tallyd with `args` and says how many new keys it
// accepts out of three: its --max-keys in effect.
int KeysAccepted(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"--memory-only"};
  all.insert(all.end(), args.begin(), args.end());
  std::unique_ptr<testing::TallydProcess> tallyd;
  const Status started = testing::StartTallyd(all, &tallyd);
  REQUIRE_MESSAGE(started.ok(), started.ToString());
  std::unique_ptr<protocol::Client> client;
  REQUIRE(tallyd->Connect(&client).ok());
  int accepted = 0;
  for (const char* key : {"a", "b", "c"}) {
    protocol::CheckOutcome outcome;
    REQUIRE(client->Check({key, {Algorithm::kFixedWindow, 10, 3'600'000}, 1}, &outcome).ok());
    if (outcome.error == protocol::ErrorCode::kOk) ++accepted;
  }
  return accepted;
}

// An environment variable sets an option; a flag on the command line
// overrides it; it overrides the config file; the config file still applies
// where no variable is set.
TEST_CASE("tallyd env: command line over environment over config file over default") {
  TempDir dir;
  const std::string config = WriteFile(dir.Path("tally.toml"), "max-keys = 2\n");
  CHECK(KeysAccepted({}) == 3);                    // default: 10M
  CHECK(KeysAccepted({"--config", config}) == 2);  // the file
  ScopedEnv env(Variables{{"TALLY_MAX_KEYS", "1"}});
  CHECK(KeysAccepted({}) == 1);                                       // the environment
  CHECK(KeysAccepted({"--config", config}) == 1);                     // environment over the file
  CHECK(KeysAccepted({"--config", config, "--max-keys", "3"}) == 3);  // the command line over both
  CHECK(KeysAccepted({"--max-keys=2"}) == 2);
}

// TALLY_CONFIG names the config file; one that does not exist is refused
// naming the variable rather than silently ignored.
TEST_CASE("tallyd env: TALLY_CONFIG names the config file") {
  TempDir dir;
  {
    ScopedEnv env(Variables{{"TALLY_CONFIG", WriteFile(dir.Path("tally.toml"), "max-keys = 1\n")}});
    CHECK(KeysAccepted({}) == 1);
  }
  ScopedEnv env(Variables{{"TALLY_CONFIG", dir.Path("missing.toml")}});
  std::string log;
  CHECK(testing::RunTallyd({"--memory-only", "--port", "0"}, &log) == 1);
  CHECK_MESSAGE(
      Contains(log, "not starting: TALLY_CONFIG=" + dir.Path("missing.toml") + ": no such file"),
      log);
}

// A bad value from the environment stops tallyd with exit 1 and a line that
// names the variable and its value, before any port opens; the same bad value
// is ignored when the command line overrides it.
TEST_CASE("tallyd env: a bad value is refused naming the variable") {
  TempDir dir;
  const std::string secret = WriteFile(dir.Path("secret"), "a secret the members share\n");
  const std::vector<std::pair<Variables, std::string>> cases = {
      {{{"TALLY_MAX_KEYS", "0"}}, "TALLY_MAX_KEYS=0: --max-keys: 0 is not in 1..1000000000"},
      {{{"TALLY_IDLE_TIMEOUT_MS", "soon"}},
       "TALLY_IDLE_TIMEOUT_MS=soon: --idle-timeout-ms: soon is not a whole number"},
      {{{"TALLY_MEMORY_ONLY", "maybe"}}, "TALLY_MEMORY_ONLY=maybe: "},
      {{{"TALLY_PARTITION_MODE", "open"}}, "TALLY_PARTITION_MODE=open: --partition-mode"},
      // A list is comma-separated; each item is checked.
      {{{"TALLY_SEED", "127.0.0.1:7421,tally-seeds"}, {"TALLY_CLUSTER_SECRET_FILE", secret}},
       "TALLY_SEED=127.0.0.1:7421,tally-seeds: --seed: 'tally-seeds' is not host:port (no port)"},
  };
  for (const auto& [variables, expected] : cases) {
    ScopedEnv env(variables);
    std::string log;
    CHECK_MESSAGE(testing::RunTallyd({"--port", "0", "--gossip-port", "0"}, &log) == 1, log);
    CHECK_MESSAGE(Contains(log, "not starting: " + expected), log);
  }
  ScopedEnv env(Variables{{"TALLY_MAX_KEYS", "0"}});
  CHECK(KeysAccepted({"--max-keys", "2"}) == 2);
}

// A list from the environment is split at commas: two seeds, both dialled.
TEST_CASE("tallyd env: TALLY_SEED takes several seeds separated by commas") {
  TempDir dir;
  ScopedEnv env(Variables{
      {"TALLY_SEED", "127.0.0.1:1,127.0.0.1:2"},
      {"TALLY_CLUSTER_SECRET_FILE", WriteFile(dir.Path("secret"), "a secret the members share\n")},
      {"TALLY_RECOVERY_TIMEOUT_MS", "0"}});
  std::unique_ptr<testing::TallydProcess> tallyd;
  const Status started = testing::StartTallyd({"--memory-only", "--gossip-port", "0"}, &tallyd);
  REQUIRE_MESSAGE(started.ok(), started.ToString());
  std::unique_ptr<protocol::Client> client;
  REQUIRE(tallyd->Connect(&client).ok());
  const std::vector<std::string> seeds = {"127.0.0.1:1", "127.0.0.1:2"};
  std::vector<std::string> dialled;
  const bool both = testing::PollUntil([&] {  // the gossip thread adds the links as it starts
    protocol::StatsReply stats;
    REQUIRE(client->Stats(&stats).ok());
    dialled.clear();
    for (const protocol::PeerLinkStatus& link : stats.peer_links) dialled.push_back(link.address);
    std::sort(dialled.begin(), dialled.end());
    return dialled == seeds;
  });
  CHECK_MESSAGE(both, dialled.size());
}

// tallyctl's global options come from the environment too: TALLY_JSON turns
// on JSON, and a bad TALLY_TIMEOUT_MS is refused (exit 2) naming it.
TEST_CASE("tallyctl env: global options from TALLY_* variables") {
  std::string output;
  {
    ScopedEnv env(Variables{{"TALLY_ADDR", "127.0.0.1:1"}, {"TALLY_JSON", "1"}});
    CHECK(testing::RunCommand({TALLYCTL_PATH, "stats"}, &output) == 2);
    CHECK_MESSAGE(Contains(output, "{\"error\":\"unavailable\""), output);
  }
  ScopedEnv env(Variables{{"TALLY_TIMEOUT_MS", "abc"}});
  CHECK(testing::RunCommand({"/bin/sh", "-c", "exec \"$0\" stats 2>&1", TALLYCTL_PATH}, &output) ==
        2);
  CHECK_MESSAGE(Contains(output, "tallyctl: invalid_argument: TALLY_TIMEOUT_MS=abc: --timeout-ms"),
                output);
}

}  // namespace
}  // namespace tally
