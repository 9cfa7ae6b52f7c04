// tallyd at start: flags, config files and the files it reads are checked
// before it does anything, and what it refuses ends it with exit 1 and one
// log line saying which flag, file, key or value is wrong.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include <doctest/doctest.h>

#include "tests/support/must_check.h"
#include "tests/support/tallyd_process.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

using testing::TempDir;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs tallyd with exactly `argv`, expecting a refusal: exit 1 and a log of
// one line "not starting: ..." holding each of `expected`.
void ExpectRefusal(const std::vector<std::string>& argv, const std::vector<std::string>& expected) {
  std::string log;
  CHECK_MESSAGE(testing::RunTallyd(argv, &log) == 1, log);
  CHECK_MESSAGE(Contains(log, "not starting: "), log);
  CHECK_MESSAGE(std::count(log.begin(), log.end(), '\n') == 1, log);
  for (const std::string& part : expected) CHECK_MESSAGE(Contains(log, part), log);
}

// ExpectRefusal of tallyd on an ephemeral port and off the disk with `args`.
void ExpectRefused(const std::vector<std::string>& args, const std::vector<std::string>& expected) {
  std::vector<std::string> argv = {"--address",     "127.0.0.1", "--port",       "0",
                                   "--gossip-port", "0",         "--memory-only"};
  argv.insert(argv.end(), args.begin(), args.end());
  ExpectRefusal(argv, expected);
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

// A config file is read whole or not at all: a misspelt key, a line that is
// not TOML, a key in a section or a key set twice stops tallyd, naming the
// file, the line and the key.
TEST_CASE("tallyd start: a config file with a key that is not a flag is refused") {
  TempDir dir;
  const auto refused = [&](const std::string& text, const std::vector<std::string>& expected) {
    const std::string path = WriteFile(dir.Path("tally.toml"), text);
    std::vector<std::string> all = {"--config " + path + ": "};
    all.insert(all.end(), expected.begin(), expected.end());
    ExpectRefused({"--config", path}, all);
  };
  refused("port = 0\nmax-key = 10\n", {"line 2: unknown key 'max-key'"});
  refused("# tally\nport = 0\nthis is not toml\n", {"line 3: unknown key 'this is not toml'"});
  refused("[server]\nport = 0\n", {"unknown key 'server.port'"});
  refused("max-keys = 5\nthreads = 2\nmax-keys = 6\n", {"line 3: 'max-keys' is set twice"});
  refused("config = \"other.toml\"\n", {"line 1: unknown key 'config'"});
}

// A config path that is a directory, missing, or endless is refused, not read.
TEST_CASE("tallyd start: a config path that is no readable file is refused") {
  TempDir dir;
  ExpectRefused({"--config", dir.Path("")}, {"--config " + dir.Path("") + ": no such file"});
  ExpectRefused({"--config", dir.Path("missing.toml")}, {"missing.toml: no such file"});
  ExpectRefused({"--config", "/dev/zero"}, {"--config /dev/zero: holds more than 1048576 bytes"});
}

// A valid config file still applies, comments and all; flags override it.
TEST_CASE("tallyd start: a valid config file applies") {
  TempDir dir;
  // Out of range, but StartTallyd's --threads 2 overrides it.
  const std::string path =
      WriteFile(dir.Path("tally.toml"), "# one key only\nmax-keys = 1  # tiny\nthreads = 300\n");
  std::unique_ptr<testing::TallydProcess> tallyd;
  const Status started = testing::StartTallyd({"--memory-only", "--config", path}, &tallyd);
  REQUIRE_MESSAGE(started.ok(), started.ToString());
  std::unique_ptr<protocol::Client> client;
  REQUIRE(tallyd->Connect(&client).ok());
  const LimitSpec spec{Algorithm::kFixedWindow, 10, 3'600'000};
  CHECK(testing::MustCheck(*client, {"first", spec, 1}).allowed);
  protocol::CheckOutcome second;
  REQUIRE(client->Check({"second", spec, 1}, &second).ok());
  CHECK(second.error == protocol::ErrorCode::kResourceExhausted);
}

// A --cluster-secret-file that cannot be read ends tallyd with one line, not
// with an uncaught exception (abort, exit 134), and before it opens a port.
TEST_CASE("tallyd start: an unreadable cluster secret file is refused in one line") {
  TempDir dir;
  const auto refused = [](const std::string& path, const std::string& why) {
    ExpectRefused({"--cluster-secret-file", path}, {"the cluster secret file " + path, why});
  };
  refused(dir.Path(""), "Is a directory");
  refused(dir.Path("missing"), "No such file or directory");
  refused("/dev/zero", "holds more than 4096 bytes");
}

// A seed or advertised address that is not host:port would leave the node
// serving alone: it is refused, naming the flag and the value.
TEST_CASE("tallyd start: a malformed --seed or --gossip-advertise is refused") {
  TempDir dir;
  const std::string secret = WriteFile(dir.Path("secret"), "a secret the members share\n");
  for (const std::string seed : {"tally-seeds", "127.0.0.1:", ":7421", "127.0.0.1:0",
                                 "127.0.0.1:70000", "127.0.0.1:abc", "::1:7421"}) {
    ExpectRefused({"--cluster-secret-file", secret, "--seed", "127.0.0.1:7421", "--seed", seed},
                  {"--seed: '" + seed + "' is not host:port ("});
  }
  ExpectRefused({"--cluster-secret-file", secret, "--gossip-advertise", "10.0.0.1"},
                {"--gossip-advertise: '10.0.0.1' is not host:port (no port)"});
  const std::string config =
      WriteFile(dir.Path("tally.toml"), "seed = [\"127.0.0.1:7421\", \"tally-seeds\"]\n");
  ExpectRefused({"--cluster-secret-file", secret, "--config", config},
                {"--seed: 'tally-seeds' is not host:port (no port)"});
}

// --memory-only keeps nothing on disk, so a --data-dir beside it (on the
// command line or in --config) is a contradiction tallyd refuses; a config
// file saying memory-only = false is no such contradiction.
TEST_CASE("tallyd start: --memory-only with --data-dir is refused") {
  TempDir dir;
  const std::string data_dir = dir.Path("data");
  const std::string why = "--memory-only keeps nothing on disk, but --data-dir is given";
  ExpectRefused({"--data-dir", data_dir}, {why});
  ExpectRefused({"--config", WriteFile(dir.Path("data.toml"), "data-dir = \"" + data_dir + "\"\n")},
                {why});
  CHECK_FALSE(std::filesystem::exists(data_dir));

  std::unique_ptr<testing::TallydProcess> tallyd;  // it adds a --data-dir of its own
  const Status started = testing::StartTallyd(
      {"--config", WriteFile(dir.Path("disk.toml"), "memory-only = false\n")}, &tallyd);
  CHECK_MESSAGE(started.ok(), started.ToString());
}

// Envoy takes a gRPC OK for "allowed": with no policies every call would be OK, so --grpc-port
// without --policy-dir is refused in one line (from a config file too), before any port opens.
TEST_CASE("tallyd start: --grpc-port without --policy-dir is refused") {
  TempDir dir;
  const std::string why = "--grpc-port needs --policy-dir";
  ExpectRefused({"--grpc-port", "0"}, {why, "it would answer OK to every call"});
  ExpectRefused({"--config", WriteFile(dir.Path("grpc.toml"), "grpc-port = 0\n")}, {why});
  std::unique_ptr<testing::TallydProcess> tallyd;  // with a policy directory, it starts
  const Status started = testing::StartTallyd(
      {"--memory-only", "--grpc-port", "0", "--policy-dir", dir.Path("")}, &tallyd);
  CHECK_MESSAGE(started.ok(), started.ToString());
}

// Two ports tallyd listens on set to one number (not 0) on addresses that clash would fail
// at the second bind, after the first port opened: tallyd refuses them at once, in one line
// naming both flags and the addresses, before it binds anything; from a config file too. A
// wildcard address clashes with the addresses of its family, and :: with IPv4 ones too.
TEST_CASE("tallyd start: two listening ports on one number are refused in one line") {
  TempDir dir;
  const std::string secret = WriteFile(dir.Path("secret"), "a secret the members share\n");
  const auto refused = [](std::vector<std::string> args, const std::string& why) {
    args.push_back("--memory-only");
    ExpectRefusal(args, {why, "each port tallyd listens on needs a number of its own"});
  };
  refused({"--port", "7431", "--gossip-port", "7431", "--cluster-secret-file", secret},
          "--port and --gossip-port are both 7431 on 127.0.0.1:");
  refused({"--port", "7431", "--gossip-port", "7431"},  // set, though the node does not gossip
          "--port and --gossip-port are both 7431 on 127.0.0.1:");
  refused({"--resp-port", "7420"}, "--port and --resp-port are both 7420 on 127.0.0.1:");
  refused(
      {"--port", "0", "--http-port", "7432", "--admin-port", "7432", "--admin-address", "0.0.0.0"},
      "--http-port and --admin-port are both 7432 on 127.0.0.1 and 0.0.0.0:");
  refused({"--port", "0", "--address", "::", "--grpc-port", "7433", "--http-port", "7433",
           "--http-address", "127.0.0.1"},
          "--grpc-port and --http-port are both 7433 on :: and 127.0.0.1:");
  refused({"--port", "0", "--config",
           WriteFile(dir.Path("ports.toml"), "http-port = 7434\nresp-port = 7434\n")},
          "--http-port and --resp-port are both 7434 on 127.0.0.1:");
}

// Port 0 (one picked at start) never clashes, the default gossip port of a node that does not
// gossip is no listening port, and one number on addresses that do not overlap is fine: the
// check passes them (the refusal of --data-dir beside --memory-only, checked after it, shows
// that tallyd got past it without binding a port).
TEST_CASE("tallyd start: listening ports that do not clash pass the check") {
  const auto passed = [](std::vector<std::string> args) {
    args.insert(args.end(), {"--memory-only", "--data-dir", "unused"});
    ExpectRefusal(args, {"--memory-only keeps nothing on disk, but --data-dir is given"});
  };
  passed({"--port", "0", "--gossip-port", "0", "--grpc-port", "0", "--http-port", "0",
          "--admin-port", "0", "--resp-port", "0"});
  passed({"--http-port", "7421"});  // the gossip port's default
  passed({"--port", "7435", "--http-port", "7435", "--http-address", "127.0.0.2"});
  passed(
      {"--port", "7435", "--address", "::1", "--resp-port", "7435", "--resp-address", "127.0.0.1"});
  passed(
      {"--port", "7435", "--address", "0.0.0.0", "--admin-port", "7435", "--admin-address", "::1"});
}

}  // namespace
}  // namespace tally
