// tallyctl inspect and reset against real tallyd processes: one node alone,
// and a 2-node cluster whose nodes each show both nodes' slots.
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "cluster/local_cluster.h"
#include "tests/support/must_check.h"
#include "tests/support/poll.h"
#include "tests/support/tallyd_process.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

using testing::PollUntil;
using testing::TempDir;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs tallyctl with `args` (stderr too into *output); returns its exit code.
int Tallyctl(const std::vector<std::string>& args, std::string* output) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", TALLYCTL_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunCommand(argv, output);
}

constexpr LimitSpec kHourly{Algorithm::kFixedWindow, 5, 3'600'000};

// Inspect shows the node's count of a limit; reset forgets it, so the next
// checks start from nothing; a second reset finds nothing. The reset
// outlasts a crash: the flush after it writes a checkpoint, which drops the
// key's earlier records from disk.
TEST_CASE("tallyctl inspect and reset on one node") {
  TempDir dir;
  const std::vector<std::string> args = {"--data-dir", dir.Path("data"), "--flush-interval-ms",
                                         "10"};
  std::unique_ptr<testing::TallydProcess> tallyd;
  Status started = testing::StartTallyd(args, &tallyd);
  REQUIRE_MESSAGE(started.ok(), started.ToString());
  std::unique_ptr<protocol::Client> client;
  REQUIRE(tallyd->Connect(&client).ok());
  for (int i = 0; i < 5; ++i) CHECK(testing::MustCheck(*client, {"user:1", kHourly, 1}).allowed);
  CHECK_FALSE(testing::MustCheck(*client, {"user:1", kHourly, 1}).allowed);
  const auto stats = [&] {
    protocol::StatsReply reply;
    REQUIRE(client->Stats(&reply).ok());
    return reply;
  };
  REQUIRE(PollUntil([&] { return stats().storage_keys_written > 0; }));  // the 5 are on disk

  const std::string port = std::to_string(tallyd->port());
  const auto command = [&](std::vector<std::string> words) {
    std::vector<std::string> all = {"--port", port};
    all.insert(all.end(), words.begin(), words.end());
    all.insert(all.end(), {"user:1", "--algorithm", "fixed_window", "--window-ms", "3600000"});
    return all;
  };
  std::string out;
  CHECK(Tallyctl(command({"--json", "inspect"}), &out) == 0);
  CHECK_MESSAGE(Contains(out, "\"found\":true"), out);
  CHECK_MESSAGE(Contains(out, "\"nodes\":[{\"node_id\":"), out);
  CHECK_MESSAGE(Contains(out, "\"current\":5,\"previous\":0}]"), out);
  CHECK(Tallyctl(command({"inspect"}), &out) == 0);
  CHECK_MESSAGE(Contains(out, "user:1 fixed_window window_ms=3600000"), out);

  CHECK(Tallyctl(command({"reset"}), &out) == 0);
  CHECK_MESSAGE(Contains(out, "reset: the node forgot this limit's state"), out);
  CHECK(Tallyctl(command({"--json", "reset"}), &out) == 0);
  CHECK_MESSAGE(Contains(out, "{\"erased\":false}"), out);
  CHECK(PollUntil([&] { return stats().storage_checkpoints == 1; }));
  const uint64_t flushes = stats().storage_flushes;
  CHECK(testing::MustCheck(*client, {"user:1", kHourly, 1}).allowed);
  CHECK(Tallyctl(command({"--json", "inspect"}), &out) == 0);
  CHECK_MESSAGE(Contains(out, "\"current\":1,"), out);
  CHECK(PollUntil([&] { return stats().storage_flushes > flushes; }));  // the 1 is on disk

  // A crash and a restart on the same data directory: 1 counted, not 6.
  client.reset();
  CHECK(tallyd->SignalAndWait(SIGKILL, 5'000) == 128 + SIGKILL);
  started = testing::StartTallyd(args, &tallyd);
  REQUIRE_MESSAGE(started.ok(), started.ToString());
  REQUIRE(tallyd->Connect(&client).ok());
  CHECK(testing::MustCheck(*client, {"user:1", kHourly, 0}).remaining == 4);
}

// A bad limit is refused before connecting; a missing --window-ms too.
TEST_CASE("tallyctl inspect and reset check their arguments first") {
  std::string out;
  CHECK(Tallyctl({"--port", "1", "inspect", "k", "--window-ms", "0"}, &out) == 2);
  CHECK_MESSAGE(Contains(out, "invalid_argument: window_ms"), out);
  CHECK(Tallyctl({"--port", "1", "reset", "k", "--algorithm", "leaky", "--window-ms", "10"},
                 &out) == 2);
  CHECK_MESSAGE(Contains(out, "invalid_argument: unknown algorithm leaky"), out);
  CHECK(Tallyctl({"--port", "1", "reset", "k"}, &out) == 2);
  CHECK_MESSAGE(Contains(out, "--window-ms is required"), out);
}

// In a 2-node cluster, each node's inspect shows both nodes' slots once
// gossip has carried them; --addr asks both nodes at once. A reset without
// --local is refused (the peers would send the counts back); with it, the
// node forgets its copy and the peer's full sync brings the counts back.
TEST_CASE("tallyctl inspect shows both nodes' slots in a 2-node cluster, reset needs --local") {
  cluster::LocalCluster::Options options;
  options.tallyd_path = TALLYD_PATH;
  options.nodes = 2;
  options.node_args = {"--memory-only", "--full-sync-interval-ms", "200"};
  std::unique_ptr<cluster::LocalCluster> cluster;
  const Status started = cluster::LocalCluster::Start(options, &cluster);
  REQUIRE_MESSAGE(started.ok(), started.ToString());
  for (size_t node = 0; node < 2; ++node) {
    std::unique_ptr<protocol::Client> client;
    REQUIRE(cluster->Connect(node, &client).ok());
    for (size_t i = 0; i <= node; ++i) {
      // Once the nodes know each other, a second admission in a row may wait
      // for this node's share of what remains (retry_after_ms: a round).
      for (int attempt = 0;; ++attempt) {
        const Decision decision = testing::MustCheck(*client, {"shared", kHourly, 1});
        if (decision.allowed) break;
        REQUIRE(attempt < 20);
        REQUIRE(decision.retry_after_ms <= 1'000);  // a share's wait, not the window's
        std::this_thread::sleep_for(std::chrono::milliseconds(decision.retry_after_ms));
      }
    }
  }
  const std::vector<std::string> limit = {"shared", "--algorithm", "fixed_window", "--window-ms",
                                          "3600000"};
  const std::string addrs = "127.0.0.1:" + std::to_string(cluster->client_port(0)) +
                            ",127.0.0.1:" + std::to_string(cluster->client_port(1));
  const std::string both =
      "\"nodes\":[{\"node_id\":1,\"current\":1,\"previous\":0},"
      "{\"node_id\":2,\"current\":2,\"previous\":0}]";
  std::vector<std::string> inspect = {"--json", "inspect", "--addr", addrs};
  inspect.insert(inspect.end(), limit.begin(), limit.end());
  std::string out;
  const bool converged = PollUntil([&] {
    return Tallyctl(inspect, &out) == 0 && out.find(both) != out.rfind(both);  // on both lines
  });
  CHECK_MESSAGE(converged, out);
  CHECK_MESSAGE(Contains(out, "\"node_id\":1,\"key\":\"shared\""), out);
  CHECK_MESSAGE(Contains(out, "\"node_id\":2,\"key\":\"shared\""), out);

  const std::string port = std::to_string(cluster->client_port(0));
  std::vector<std::string> reset = {"--port", port, "reset"};
  reset.insert(reset.end(), limit.begin(), limit.end());
  CHECK(Tallyctl(reset, &out) == 2);
  CHECK_MESSAGE(Contains(out, "this node is in a cluster"), out);
  CHECK_MESSAGE(Contains(out, "--local"), out);
  reset.push_back("--local");
  CHECK(Tallyctl(reset, &out) == 0);
  CHECK_MESSAGE(Contains(out, "forgot"), out);
  // Node 2's next complete full sync (every tenth; 200 ms apart here) brings both slots back.
  std::vector<std::string> inspect_first = {"--port", port, "--json", "inspect"};
  inspect_first.insert(inspect_first.end(), limit.begin(), limit.end());
  CHECK(PollUntil([&] { return Tallyctl(inspect_first, &out) == 0 && Contains(out, both); }));
}

}  // namespace
}  // namespace tally
