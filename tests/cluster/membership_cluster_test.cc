// Membership of clusters of real tallyd processes on loopback: joining
// through one seed (by address and by name), a clean stop seen as a leave,
// a kill detected as dead within the documented time, both nodes rejoining
// on restart, probes that go around a broken link, and a node stopped in
// bursts that declares no healthy member dead. Every wait is bounded.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "cluster/local_cluster.h"
#include "cluster/node_process.h"
#include "tests/support/poll.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

using cluster::LocalCluster;
using protocol::MemberState;
using protocol::StatsReply;
using std::chrono::steady_clock;
using testing::PollUntil;

// Fast failure detection, so the tests take little time: a killed node's
// links drop at once and it is probed then, so it is dead kDeadAfterMs
// (+ a round) after the kill.
constexpr int64_t kIntervalMs = 50;
constexpr int64_t kSuspectAfterMs = 300;
constexpr int64_t kDeadAfterMs = 800;

std::unique_ptr<LocalCluster> StartCluster(std::vector<size_t> seeds,
                                           std::string seed_host = "127.0.0.1") {
  LocalCluster::Options options;
  options.tallyd_path = TALLYD_PATH;
  options.gossip_max_delay_ms = 100;  // far keys converge within a poll too
  options.nodes = 3;
  options.seeds = std::move(seeds);
  options.seed_host = std::move(seed_host);
  options.node_args = {"--membership-interval-ms", std::to_string(kIntervalMs),
                       "--suspect-after-ms",       std::to_string(kSuspectAfterMs),
                       "--dead-after-ms",          std::to_string(kDeadAfterMs)};
  std::unique_ptr<LocalCluster> cluster;
  const Status status = LocalCluster::Start(options, &cluster);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return cluster;
}

// The node's view: member node id -> its status.
std::map<uint64_t, protocol::MemberStatus> ViewOf(const LocalCluster& cluster, size_t node) {
  StatsReply stats;
  std::map<uint64_t, protocol::MemberStatus> view;
  if (!cluster.Stats(node, &stats).ok()) return view;
  for (const protocol::MemberStatus& member : stats.members) view[member.node_id] = member;
  return view;
}

// Every running node but `except` sees node id `member` in `state`.
bool AllSee(const LocalCluster& cluster, uint64_t member, MemberState state, size_t except) {
  for (size_t node = 0; node < cluster.size(); ++node) {
    if (node == except) continue;
    const auto view = ViewOf(cluster, node);
    const auto it = view.find(member);
    if (it == view.end() || it->second.state != state) return false;
  }
  return true;
}

// Nodes given only node 0 as a seed learn of each other through it: every
// view lists all three alive at their advertised addresses, and tallyctl
// cluster shows it.
TEST_CASE("membership: nodes join through one seed and every view agrees") {
  auto cluster = StartCluster({0});  // Start waits until every view has everyone alive
  for (size_t node = 0; node < 3; ++node) {
    const auto view = ViewOf(*cluster, node);
    REQUIRE(view.size() == 3);
    for (const auto& [id, member] : view) {
      CHECK(member.state == MemberState::kAlive);
      CHECK(member.address.rfind("127.0.0.1:", 0) == 0);
    }
    StatsReply stats;
    REQUIRE(cluster->Stats(node, &stats).ok());
    size_t links_up = 0;
    for (const auto& link : stats.peer_links) links_up += link.up ? 1 : 0;
    CHECK(links_up == 2);  // one to each other member, none to itself
  }
  std::string out;
  REQUIRE(cluster::RunCommand({TALLYCTL_PATH, "--port", std::to_string(cluster->client_port(2)),
                               "--json", "cluster"},
                              &out) == 0);
  size_t alive = 0;
  for (size_t at = out.find("\"state\":\"alive\""); at != std::string::npos;
       at = out.find("\"state\":\"alive\"", at + 1)) {
    ++alive;
  }
  CHECK(alive == 3);
}

// A seed named by a host name is resolved; a node whose seed resolves to
// itself skips it; a seed found to be a member at another address gives way
// to that member's link.
TEST_CASE("membership: a seed given by name") {
  auto cluster = StartCluster({0}, "localhost");
  CHECK(PollUntil([&] {
    for (size_t node = 0; node < 3; ++node) {
      StatsReply stats;
      if (!cluster->Stats(node, &stats).ok()) return false;
      for (const auto& link : stats.peer_links) {
        if (link.address.rfind("localhost:", 0) == 0) return false;
      }
    }
    return true;
  }));
  for (size_t node = 0; node < 3; ++node) CHECK(ViewOf(*cluster, node).size() == 3);
}

// SIGTERM: the node leaves, and the others show it left at once (not dead
// after the timeout); restarted, it is alive again everywhere.
TEST_CASE("membership: a clean stop is a leave, and the node rejoins") {
  auto cluster = StartCluster({});
  const uint64_t before = ViewOf(*cluster, 0).at(3).incarnation;
  REQUIRE(cluster->Stop(2).ok());
  // Told, not detected: well before the dead-after timeout.
  CHECK(PollUntil([&] { return AllSee(*cluster, 3, MemberState::kLeft, 2); },
                  static_cast<int>(kSuspectAfterMs)));
  REQUIRE(cluster->Restart(2).ok());
  REQUIRE(cluster->WaitConnected(10'000).ok());
  CHECK(AllSee(*cluster, 3, MemberState::kAlive, 2));
  CHECK(ViewOf(*cluster, 0).at(3).incarnation > before);
}

// SIGKILL: the others see the node suspect, then dead within the detection
// time; restarted, it rejoins without anyone's help.
TEST_CASE("membership: a killed node is detected as dead and rejoins on restart") {
  auto cluster = StartCluster({});
  const auto killed_at = steady_clock::now();
  REQUIRE(cluster->Kill(1).ok());
  REQUIRE(PollUntil([&] { return AllSee(*cluster, 2, MemberState::kDead, 1); }, 5'000));
  const auto detected_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - killed_at)
          .count();
  MESSAGE("every view shows the killed node dead " << detected_ms << " ms after the kill");
  CHECK(detected_ms >= kDeadAfterMs - 2 * kIntervalMs);
  CHECK(detected_ms <= kDeadAfterMs + 1'000);  // + a loaded machine's scheduling
  REQUIRE(cluster->Restart(1).ok());
  REQUIRE(cluster->WaitConnected(10'000).ok());
  CHECK(AllSee(*cluster, 2, MemberState::kAlive, 1));
}

// Asks the node to forget member `member`: whether it was counted until
// then, or the refusal.
Status ForgetAt(const LocalCluster& cluster, size_t node, uint64_t member, bool* forgotten) {
  std::unique_ptr<protocol::Client> client;
  REQUIRE(cluster.Connect(node, &client).ok());
  return client->ForgetMember(member, forgotten);
}

// A member killed for good is forgotten at one node: every node sees it left
// and stops dialling it; the cluster's size no longer counts it (a limit's
// shares and the crash allowance follow); what its run kept back counts as
// lost once. An unknown id and the node's own are refused.
TEST_CASE("membership: a member gone for good is forgotten at one node, and at every node") {
  auto cluster = StartCluster({});
  REQUIRE(cluster->Kill(2).ok());
  REQUIRE(PollUntil([&] { return AllSee(*cluster, 3, MemberState::kDead, 2); }, 5'000));
  std::string out;  // as an operator does it
  REQUIRE(cluster::RunCommand({TALLYCTL_PATH, "--port", std::to_string(cluster->client_port(0)),
                               "members", "forget", "3"},
                              &out) == 0);
  CHECK(out.find("forgotten: every node drops this member") != std::string::npos);
  CHECK(PollUntil([&] { return AllSee(*cluster, 3, MemberState::kLeft, 2); }, 2'000));
  CHECK(PollUntil([&] {
    for (size_t node = 0; node < 2; ++node) {
      StatsReply stats;
      if (!cluster->Stats(node, &stats).ok() || stats.peer_links.size() != 1) return false;
    }
    return true;
  }));
  bool forgotten = true;
  REQUIRE(ForgetAt(*cluster, 1, 3, &forgotten).ok());
  CHECK_FALSE(forgotten);  // left already
  CHECK(ForgetAt(*cluster, 1, 99, &forgotten).code() == Status::Code::kInvalidArgument);
  CHECK(ForgetAt(*cluster, 1, 2, &forgotten).code() == Status::Code::kInvalidArgument);  // its own
  // One loss of a limit of 960 on the two members left: 960 / 64 = 15.
  for (size_t node = 0; node < 2; ++node) {
    std::unique_ptr<protocol::Client> client;
    REQUIRE(cluster->Connect(node, &client).ok());
    protocol::CheckOutcome outcome;
    REQUIRE(client->Check({"k", {Algorithm::kFixedWindow, 960, 86'400'000}, 0}, &outcome).ok());
    CHECK(outcome.decision.remaining == 945);
  }
}

// With the path between nodes 0 and 2 cut, their probes still reach each
// other through node 1 (indirect probes): neither turns suspect, though
// their link is down.
TEST_CASE("membership: probes travel around a broken link") {
  auto cluster = StartCluster({});
  cluster->Cut({0}, {2});
  const auto link_to_node_3_down = [&] {
    StatsReply stats;
    if (!cluster->Stats(0, &stats).ok()) return false;
    for (const auto& link : stats.peer_links) {
      if (link.node_id == 3) return !link.up;
    }
    return false;
  };
  REQUIRE(PollUntil(link_to_node_3_down));
  const auto until = steady_clock::now() + std::chrono::milliseconds(2 * kDeadAfterMs);
  while (steady_clock::now() < until) {
    const auto view_0 = ViewOf(*cluster, 0), view_2 = ViewOf(*cluster, 2);
    REQUIRE(view_0.at(3).state == MemberState::kAlive);
    REQUIRE(view_2.at(1).state == MemberState::kAlive);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(link_to_node_3_down());
  cluster->Heal();
  CHECK(cluster->WaitConnected(10'000).ok());
}

// Node 2 is stopped (SIGSTOP) for bursts longer than a probe's timeout and
// runs in between: the healthy nodes may suspect it, but no view, its own
// included, ever shows a healthy member dead (Lifeguard: a node that stood
// still discounts the time it stood still before it judges others).
TEST_CASE("membership: a node starved in bursts declares no healthy member dead") {
  auto cluster = StartCluster({});
  REQUIRE(cluster->WaitConnected(10'000).ok());
  const pid_t starved = cluster->process(2).pid();
  constexpr uint64_t kStarvedId = 3;
  // Any healthy member dead in any view but `skip`'s: the first such view
  // as "node N sees node M dead", else empty.
  const auto healthy_dead = [&](size_t skip) -> std::string {
    for (size_t node = 0; node < cluster->size(); ++node) {
      if (node == skip) continue;
      for (const auto& [id, member] : ViewOf(*cluster, node)) {
        if (id != kStarvedId && member.state == MemberState::kDead) {
          return "node " + std::to_string(node + 1) + " sees node " + std::to_string(id) + " dead";
        }
      }
    }
    return "";
  };
  size_t starved_suspected = 0;
  for (int burst = 0; burst < 8; ++burst) {
    REQUIRE(kill(starved, SIGSTOP) == 0);
    const auto stopped_until = steady_clock::now() + std::chrono::milliseconds(2 * kSuspectAfterMs);
    while (steady_clock::now() < stopped_until) {
      const std::string dead = healthy_dead(2);  // the stopped node does not answer
      REQUIRE_MESSAGE(dead.empty(), dead);
      starved_suspected += ViewOf(*cluster, 0)[kStarvedId].state != MemberState::kAlive ? 1 : 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    REQUIRE(kill(starved, SIGCONT) == 0);
    const auto running_until = steady_clock::now() + std::chrono::milliseconds(kDeadAfterMs);
    while (steady_clock::now() < running_until) {
      const std::string dead = healthy_dead(cluster->size());
      REQUIRE_MESSAGE(dead.empty(), dead);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  MESSAGE("node 1 saw the starved node not alive in " << starved_suspected << " polls");
  CHECK(PollUntil([&] { return AllSee(*cluster, kStarvedId, MemberState::kAlive, 2); }, 5'000));
  // Stopped past dead-after, it is dead everywhere; running again, its links
  // never dropped, it hears so with the acks to its own pings and refutes.
  REQUIRE(kill(starved, SIGSTOP) == 0);
  const bool dead_everywhere =
      PollUntil([&] { return AllSee(*cluster, kStarvedId, MemberState::kDead, 2); }, 5'000);
  // Long enough that the death has been sent on as often as it goes: only
  // the replies to the node's own pings still tell it.
  std::this_thread::sleep_for(std::chrono::milliseconds(1'000));
  REQUIRE(kill(starved, SIGCONT) == 0);
  REQUIRE(dead_everywhere);
  CHECK(PollUntil([&] { return AllSee(*cluster, kStarvedId, MemberState::kAlive, 2); }, 5'000));
}

// Membership settings that cannot work are refused at start, saying why:
// no address to advertise, and timeouts out of order.
TEST_CASE("membership: impossible settings are refused at start") {
  testing::TempDir dir;
  const std::string secret_path = dir.Path("secret");
  std::ofstream(secret_path) << "a secret the members share\n";
  const auto refused = [&](std::vector<std::string> args, const std::string& why) {
    std::vector<std::string> argv = {
        "/bin/sh",  "-c", "exec \"$0\" \"$@\" 2>&1", TALLYD_PATH, "--memory-only",
        "--port",   "0",  "--gossip-port",           "0",         "--cluster-secret-file",
        secret_path};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string log;
    CHECK(cluster::RunCommand(argv, &log, 5'000) == 1);
    CHECK_MESSAGE(log.find(why) != std::string::npos, log);
  };
  refused({"--address", "0.0.0.0"}, "--gossip-advertise");
  refused({"--address", "127.0.0.1", "--suspect-after-ms", "3000", "--dead-after-ms", "1000"},
          "--suspect-after-ms < --dead-after-ms");
}

}  // namespace
}  // namespace tally
