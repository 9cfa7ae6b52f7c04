// Resource exhaustion against a live tallyd: out of file descriptors, slow
// and half-sent frames, buffer memory. The node must stay cheap to run and
// go on serving well-behaved clients.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "tests/support/must_check.h"
#include "tests/support/poll.h"
#include "tests/support/proc_stats.h"
#include "tests/support/raw_connection.h"
#include "tests/support/tallyd_process.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

using testing::RawConnection;
using testing::TallydProcess;

constexpr LimitSpec kSpec{Algorithm::kFixedWindow, 1'000'000, 3'600'000};

// A client that connects and gets a decision (not an error) within its timeout.
bool NewClientServed(const TallydProcess& process) {
  std::unique_ptr<Client> client;
  if (!process.Connect(&client).ok()) return false;
  protocol::CheckOutcome outcome;
  return client->Check({"new-client", kSpec, 1}, &outcome).ok() &&
         outcome.error == protocol::ErrorCode::kOk;
}

// Out of file descriptors, with connections queued on both the client and
// the gossip port, tallyd waits between accepts instead of spinning: little
// CPU, a few log lines. The connection it already has is served, and once
// the queued connections go, new clients are served again.
TEST_CASE("limits: out of file descriptors, the accept loops back off") {
  testing::TempDir dir;
  std::ofstream(dir.Path("secret")) << "a secret the members share\n";
  std::unique_ptr<TallydProcess> node;
  const Status started = TallydProcess::Start(
      {TALLYD_PATH,
       {"--memory-only", "--cluster-secret-file", dir.Path("secret"), "--recovery-timeout-ms", "0"},
       "", /*gossip_port=*/true},
      &node);
  REQUIRE_MESSAGE(started.ok(), started.ToString());
  REQUIRE(node->WaitForGossipPort(1'000).ok());
  std::unique_ptr<Client> open_before;
  REQUIRE(node->Connect(&open_before).ok());
  CHECK(testing::MustCheck(*open_before, {"open-before", kSpec, 1}).allowed);

  const rlimit few_descriptors{64, 64};
  REQUIRE(prlimit(node->pid(), RLIMIT_NOFILE, &few_descriptors, nullptr) == 0);
  std::vector<RawConnection> queued;  // more than the node has descriptors for
  for (int i = 0; i < 100; ++i) queued.emplace_back(node->port());
  for (int i = 0; i < 20; ++i) queued.emplace_back(node->gossip_port());
  for (const RawConnection& connection : queued) REQUIRE(connection.connected());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // accepted what it could

  const int64_t cpu_before_ms = testing::CpuTimeMs(node->pid());
  const size_t log_before = node->Log().size();
  const auto measured_from = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int64_t wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - measured_from)
                              .count();
  const int64_t cpu_ms = testing::CpuTimeMs(node->pid()) - cpu_before_ms;
  const size_t log_bytes = node->Log().size() - log_before;
  MESSAGE("out of descriptors: " << cpu_ms << " ms of CPU in " << wall_ms << " ms, " << log_bytes
                                 << " bytes of log");
  CHECK(cpu_ms < wall_ms / 5);  // under 20% of one core
  CHECK(log_bytes < 4'096);
  CHECK(testing::MustCheck(*open_before, {"open-before", kSpec, 1}).allowed);

  queued.clear();
  CHECK(testing::PollUntil([&] { return NewClientServed(*node); }, 5'000));
}

}  // namespace
}  // namespace tally
