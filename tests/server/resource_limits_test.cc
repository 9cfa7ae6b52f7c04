// Resource exhaustion against a live tallyd: out of file descriptors, slow
// and half-sent frames, buffer memory. The node must stay cheap to run and
// go on serving well-behaved clients.
#include <chrono>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <sys/resource.h>

#include "tests/support/must_check.h"
#include "tests/support/poll.h"
#include "tests/support/proc_stats.h"
#include "tests/support/raw_connection.h"
#include "tests/support/sanitizers.h"
#include "tests/support/tallyd_process.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

using testing::RawConnection;
using testing::TallydProcess;

constexpr LimitSpec kSpec{Algorithm::kFixedWindow, 1'000'000, 3'600'000};

std::unique_ptr<TallydProcess> StartTallyd(const std::vector<std::string>& args) {
  std::unique_ptr<TallydProcess> process;
  const Status status = testing::StartTallyd(args, &process);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return process;
}

// The segment table of a one-segment frame of `frame_bytes` in all.
std::string FrameHeader(uint32_t frame_bytes) {
  const uint32_t table[2] = {0, (frame_bytes - 8) / 8};  // little-endian on x86
  return std::string(reinterpret_cast<const char*>(table), sizeof(table));
}

// A client that connects and gets a decision (not an error) within its timeout.
bool NewClientServed(const TallydProcess& process) {
  std::unique_ptr<protocol::Client> client;
  if (!process.Connect(&client).ok()) return false;
  protocol::CheckOutcome outcome;
  return client->Check({"new-client", kSpec, 1}, &outcome).ok() &&
         outcome.error == protocol::ErrorCode::kOk;
}

// Out of file descriptors, with connections queued on both the client and
// the gossip port, tallyd waits between accepts instead of spinning: little
// CPU, a few log lines. The connection it already has is served, and once
// the queued connections go, new clients are served again. (Not under the
// sanitizers: see kSurvivesDescriptorExhaustion.)
TEST_CASE("limits: out of file descriptors, the accept loops back off" *
          doctest::skip(!testing::kSurvivesDescriptorExhaustion)) {
  testing::TempDir dir;
  std::ofstream(dir.Path("secret")) << "a secret the members share\n";
  TallydProcess::Options options;
  options.tallyd_path = TALLYD_PATH;
  options.args = {"--memory-only", "--cluster-secret-file", dir.Path("secret"),
                  "--recovery-timeout-ms", "0"};
  options.gossip_port = true;
  std::unique_ptr<TallydProcess> node;
  const Status started = TallydProcess::Start(options, &node);
  REQUIRE_MESSAGE(started.ok(), started.ToString());
  REQUIRE(node->WaitForGossipPort(1'000).ok());
  std::unique_ptr<protocol::Client> open_before;
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

// A frame sent a byte at a time is closed --frame-timeout-ms after its first
// byte, although every byte comes well within --idle-timeout-ms; the slots
// the drippers held at --max-connections then serve new clients.
TEST_CASE("limits: a frame dripped a byte at a time is closed at --frame-timeout-ms") {
  auto node = StartTallyd({"--memory-only", "--max-connections", "4", "--frame-timeout-ms", "500"});
  const std::string header = FrameHeader(8 * 1024);
  std::vector<RawConnection> drippers;
  for (int i = 0; i < 4; ++i) {
    drippers.emplace_back(node->port());
    REQUIRE(drippers.back().connected());
  }
  const auto started = std::chrono::steady_clock::now();
  std::vector<bool> closed(drippers.size(), false);
  size_t open = drippers.size();
  bool refused_while_dripping = false;
  for (size_t step = 0; step < 30 && open > 0; ++step) {  // a byte every 100 ms, 3 s at most
    const char byte = step < header.size() ? header[step] : '\0';
    for (size_t i = 0; i < drippers.size(); ++i) {
      if (closed[i]) continue;
      if (!drippers[i].Send(std::string_view(&byte, 1)) || drippers[i].ClosedByPeer(1)) {
        closed[i] = true;
        --open;
      }
    }
    if (step == 2) refused_while_dripping = !NewClientServed(*node);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto elapsed = std::chrono::steady_clock::now() - started;
  CHECK(refused_while_dripping);
  CHECK(open == 0);
  CHECK(elapsed >= std::chrono::milliseconds(500));
  CHECK(elapsed < std::chrono::milliseconds(2'500));
  CHECK(testing::PollUntil([&] { return NewClientServed(*node); }, 2'000));
}

// Past --max-buffer-bytes, a frame that needs its buffer to grow gets
// resource_exhausted and its connection is closed; small requests are still
// served, and once the big frame's connection goes, a big request is.
TEST_CASE("limits: past --max-buffer-bytes a big frame is refused with resource_exhausted") {
  auto node = StartTallyd({"--memory-only", "--max-buffer-bytes", "512000"});
  std::unique_ptr<protocol::Client> hog, late;
  REQUIRE(node->Connect(&hog).ok());
  // 400 KiB of a 1 MiB frame: its buffer grows to 512 KiB, 496 KiB of the budget.
  REQUIRE(hog->SendRaw(FrameHeader(1 << 20) + std::string(400 * 1024 - 8, '\0')).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // read by now
  REQUIRE(node->Connect(&late).ok());
  // Exactly the initial 16 KiB of a 256 KiB frame: the rest needs a larger buffer.
  REQUIRE(late->SendRaw(FrameHeader(256 * 1024) + std::string(16 * 1024 - 8, '\0')).ok());
  protocol::Response response;
  REQUIRE(late->Receive(&response).ok());
  CHECK(response.error == protocol::ErrorCode::kResourceExhausted);
  CHECK(late->Receive(&response).code() == Status::Code::kUnavailable);
  CHECK(NewClientServed(*node));

  hog.reset();
  const std::string key(100, 'k');
  const std::vector<protocol::Check> big(2'000, protocol::Check{key, kSpec, 1});
  CHECK(testing::PollUntil(
      [&] {  // the node notices the close asynchronously
        std::unique_ptr<protocol::Client> client;
        std::vector<protocol::CheckOutcome> outcomes;
        return node->Connect(&client).ok() && client->CheckBatch(big, &outcomes).ok();
      },
      2'000));
}

// Sixty-four connections each holding half of a 1 MiB frame cost about
// --max-buffer-bytes of memory, not a MiB each; new clients are served.
TEST_CASE("limits: half-sent frames hold at most --max-buffer-bytes") {
  auto node = StartTallyd({"--memory-only", "--max-buffer-bytes", "4194304"});
  const int64_t resident_before_kb = testing::ResidentKb(node->pid());
  const std::string half_frame = FrameHeader(1 << 20) + std::string(512 * 1024, '\0');
  std::vector<RawConnection> holders;
  for (int i = 0; i < 64; ++i) {
    holders.emplace_back(node->port());
    REQUIRE(holders.back().connected());
    (void)holders.back().Send(half_frame);  // refused ones are closed midway
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int64_t grown_kb = testing::ResidentKb(node->pid()) - resident_before_kb;
  MESSAGE("64 half frames of 1 MiB cost " << grown_kb << " KiB of resident memory");
  // Without the budget: over 64 MiB. Under ASan, freed buffers stay resident
  // in its quarantine, so resident memory says nothing of what tallyd holds.
  if (testing::kResidentFollowsFrees) CHECK(grown_kb < 24 * 1024);
  CHECK(NewClientServed(*node));
}

// A connection that sent one large request and went idle keeps none of the
// memory that request grew: 40 of them after 5,000 checks each cost little.
TEST_CASE("limits: an idle connection keeps no memory a large request grew") {
  auto node = StartTallyd({"--memory-only"});
  const int64_t resident_before_kb = testing::ResidentKb(node->pid());
  std::vector<std::string> keys;
  for (int i = 0; i < 5'000; ++i) keys.push_back(std::string(100, 'k') + std::to_string(i));
  std::vector<protocol::Check> checks;
  for (const std::string& key : keys) checks.push_back({key, kSpec, 1});
  std::vector<std::unique_ptr<protocol::Client>> idle;
  for (int i = 0; i < 40; ++i) {
    idle.emplace_back();
    REQUIRE(node->Connect(&idle.back()).ok());
    std::vector<protocol::CheckOutcome> outcomes;
    REQUIRE(idle.back()->CheckBatch(checks, &outcomes).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t grown_kb = testing::ResidentKb(node->pid()) - resident_before_kb;
  MESSAGE("40 idle connections after 5,000 checks each hold " << grown_kb << " KiB");
  if (testing::kResidentFollowsFrees) CHECK(grown_kb < 24 * 1024);  // the keys take about 1 MiB
}

}  // namespace
}  // namespace tally
