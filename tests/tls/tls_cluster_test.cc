// Clusters of real tallyd processes gossiping over TLS 1.3 (--gossip-tls psk
// and cert, cluster/local_cluster.h): they converge on one limit as plain
// gossip does, and a node with another secret, one whose certificate is from
// another CA, and a plaintext node are refused, each logged with its reason.
// Certificates come from make_certs.sh at run time. Every wait is bounded.
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "cluster/local_cluster.h"
#include "tests/support/must_check.h"
#include "tests/support/poll.h"
#include "tests/support/raw_connection.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

using cluster::LocalCluster;
using cluster::NodeProcess;
using protocol::StatsReply;
using testing::MustCheck;
using testing::PollUntil;
using testing::RawConnection;
using testing::TempDir;

constexpr uint64_t kDayMs = 86'400'000;

std::unique_ptr<LocalCluster> StartCluster(std::vector<std::string> node_args) {
  LocalCluster::Options options;
  options.tallyd_path = TALLYD_PATH;
  options.gossip_max_delay_ms = 100;  // far keys converge within a poll too
  options.nodes = 3;
  options.node_args = std::move(node_args);
  std::unique_ptr<LocalCluster> cluster;
  const Status status = LocalCluster::Start(options, &cluster);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return cluster;
}

uint64_t Remaining(const LocalCluster& cluster, size_t node, const std::string& key,
                   const LimitSpec& spec) {
  std::unique_ptr<protocol::Client> client;
  REQUIRE(cluster.Connect(node, &client).ok());
  return MustCheck(*client, {key, spec, 0}).remaining;
}

// 50 checks of `key` at node 0 show at nodes 1 and 2: one view of one limit.
void ExpectConvergence(const LocalCluster& cluster, const std::string& key) {
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 1'000, kDayMs};
  std::unique_ptr<protocol::Client> client;
  REQUIRE(cluster.Connect(0, &client).ok());
  for (int i = 0; i < 50; ++i) CHECK(MustCheck(*client, {key, spec, 1}).allowed);
  CHECK(PollUntil(
      [&] {
        return Remaining(cluster, 1, key, spec) == 950 && Remaining(cluster, 2, key, spec) == 950;
      },
      5'000));
  StatsReply stats;
  REQUIRE(cluster.Stats(0, &stats).ok());
  CHECK(stats.gossip_sessions_refused == 0);
}

// A node outside the cluster dialling member `seed` with `args` besides
// the seed: its checks must not reach the members, and `seed` must log
// `reason` (its warnings are rate-limited: one outsider per member).
void ExpectRefused(LocalCluster& cluster, size_t seed, std::vector<std::string> args,
                   const std::string& key, const std::string& reason) {
  NodeProcess::Options options;
  options.tallyd_path = TALLYD_PATH;
  options.args = {"--seed", "127.0.0.1:" + std::to_string(cluster.process(seed).gossip_port()),
                  "--recovery-timeout-ms", "500"};
  options.args.insert(options.args.end(), args.begin(), args.end());
  options.gossip_port = true;
  std::unique_ptr<NodeProcess> outsider;
  const Status started = NodeProcess::Start(options, &outsider);
  REQUIRE_MESSAGE(started.ok(), started.ToString());
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 1'000, kDayMs};
  std::unique_ptr<protocol::Client> client;
  REQUIRE(outsider->Connect(&client).ok());
  for (int i = 0; i < 20; ++i) CHECK(MustCheck(*client, {key, spec, 1}).allowed);
  CHECK_MESSAGE(
      PollUntil([&] { return cluster.process(seed).Log().find(reason) != std::string::npos; }),
      cluster.process(seed).Log());
  StatsReply stats;
  REQUIRE(cluster.Stats(seed, &stats).ok());
  CHECK(stats.gossip_sessions_refused > 0);
  for (size_t node = 0; node < cluster.size(); ++node) {
    CHECK(Remaining(cluster, node, key, spec) == 1'000);
  }
}

// PSK mode: three nodes converge; a node with another cluster secret fails
// the handshake (the PSK differs), and a plaintext node is told it does not
// speak TLS; a connection that never starts its handshake is closed after
// the gossip idle timeout (5 s) while the cluster goes on.
TEST_CASE(
    "tls cluster: three nodes over TLS-PSK converge, other secrets and plain text are refused") {
  auto cluster = StartCluster({"--gossip-tls", "psk"});
  CHECK(cluster->process(0).Log().find("gossip over TLS 1.3 with a pre-shared key") !=
        std::string::npos);
  RawConnection silent(cluster->process(0).gossip_port());
  REQUIRE(silent.connected());
  ExpectConvergence(*cluster, "burst");
  TempDir dir;
  std::ofstream(dir.Path("wrong")) << "another cluster's secret\n";
  ExpectRefused(*cluster, 1, {"--cluster-secret-file", dir.Path("wrong"), "--gossip-tls", "psk"},
                "psk-intruder", "pre-shared key differs");
  ExpectRefused(*cluster, 2, {"--cluster-secret-file", cluster->secret_path()}, "plain-intruder",
                "does not speak TLS");
  CHECK(silent.ClosedByPeer(8'000));
  CHECK(cluster->process(0).Log().find("no sealed message for") != std::string::npos);
  ExpectConvergence(*cluster, "after-silence");
}

// Certificate mode: three nodes with certificates from one CA converge; a
// node with the cluster's secret but a certificate from another CA is refused.
TEST_CASE("tls cluster: three nodes over mutual TLS converge, another CA certificate is refused") {
  TempDir dir;
  REQUIRE(std::system((std::string("sh ") + MAKE_CERTS_PATH + " " + dir.Path("c")).c_str()) == 0);
  auto cluster = StartCluster({"--gossip-tls", "cert", "--tls-cert-file", dir.Path("c/node.pem"),
                               "--tls-key-file", dir.Path("c/node.key"), "--tls-ca-file",
                               dir.Path("c/ca.pem")});
  ExpectConvergence(*cluster, "burst");
  ExpectRefused(*cluster, 1,
                {"--cluster-secret-file", cluster->secret_path(), "--gossip-tls", "cert",
                 "--tls-cert-file", dir.Path("c/rogue.pem"), "--tls-key-file",
                 dir.Path("c/rogue.key"), "--tls-ca-file", dir.Path("c/ca.pem")},
                "rogue-intruder", "does not chain to the CA file");
}

}  // namespace
}  // namespace tally
