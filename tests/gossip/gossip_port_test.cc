// A live tallyd's gossip port against too many, unauthenticated or
// oversized connections: the node bounds what they cost and its members'
// sessions go on.
#include <doctest/doctest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/poll.h"
#include "tests/support/raw_connection.h"
#include "tests/support/tallyd_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_peer.h"

namespace tally {
namespace {

using protocol::StatsReply;
using testing::RawConnection;
using testing::TallydProcess;
using testing::TestPeer;

const std::string kSecret = "a secret the members share";

// A clustered tallyd alone (no seeds) and a client to read its stats.
struct GossipNode {
  explicit GossipNode(std::vector<std::string> args = {}) {
    std::ofstream(dir.Path("secret")) << kSecret << "\n";
    args.insert(args.end(), {"--node-id", "5", "--memory-only", "--cluster-secret-file",
                             dir.Path("secret"), "--recovery-timeout-ms", "0"});
    const Status started = TallydProcess::Start({TALLYD_PATH, args, "", /*gossip_port=*/true},
                                                &process);
    REQUIRE_MESSAGE(started.ok(), started.ToString());
    REQUIRE(process->WaitForGossipPort(1'000).ok());
    REQUIRE(process->Connect(&client).ok());
  }
  StatsReply Stats() const {
    StatsReply stats;
    REQUIRE(client->Stats(&stats).ok());
    return stats;
  }
  // Peer nodes with a session open that has proven the secret.
  size_t MembersConnected() const {
    size_t connected = 0;
    for (const protocol::PeerNodeStatus& node : Stats().peer_nodes) connected += node.connected;
    return connected;
  }
  // A member: handshake and a first sealed message, so the node counts it.
  std::unique_ptr<TestPeer> Member(NodeId id) const {
    auto member = std::make_unique<TestPeer>(process->gossip_port());
    REQUIRE(member->Handshake(id, kSecret));
    std::string heartbeat;
    protocol::EncodeHeartbeat(&heartbeat);
    member->Send(member->Sealed(heartbeat));
    return member;
  }

  testing::TempDir dir;
  std::unique_ptr<TallydProcess> process;
  std::unique_ptr<Client> client;
};

// At --max-gossip-connections sessions a new connection is closed before
// anything is read from it, and counted as refused; once a session ends,
// the next is taken.
TEST_CASE("gossip port: --max-gossip-connections caps the sessions") {
  GossipNode node({"--max-gossip-connections", "3"});
  std::vector<std::unique_ptr<TestPeer>> members;
  for (NodeId id = 71; id <= 73; ++id) members.push_back(node.Member(id));
  REQUIRE(testing::PollUntil([&] { return node.MembersConnected() == 3; }));
  RawConnection fourth(node.process->gossip_port());
  REQUIRE(fourth.connected());
  CHECK(fourth.ClosedByPeer(1'000));
  CHECK(node.Stats().gossip_sessions_refused == 1);
  members.pop_back();
  REQUIRE(testing::PollUntil([&] { return node.MembersConnected() == 2; }));
  members.push_back(node.Member(74));
  CHECK(testing::PollUntil([&] { return node.MembersConnected() == 3; }));
}

}  // namespace
}  // namespace tally
