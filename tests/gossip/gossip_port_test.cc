// A live tallyd's gossip port against too many, unauthenticated or
// oversized connections: the node bounds what they cost and its members'
// sessions go on.
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "tests/support/poll.h"
#include "tests/support/proc_stats.h"
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

std::string Hello(NodeId id) {
  std::string hello;
  protocol::EncodeHello(id, protocol::RandomNonce(), false, 0, &hello);
  return hello;
}

// The segment table of a one-segment frame of `frame_bytes` in all.
std::string FrameHeader(uint32_t frame_bytes) {
  const uint32_t table[2] = {0, (frame_bytes - 8) / 8};  // little-endian on x86
  return std::string(reinterpret_cast<const char*>(table), sizeof(table));
}

// A clustered tallyd alone (no seeds) and a client to read its stats.
struct GossipNode {
  explicit GossipNode(std::vector<std::string> args = {}) {
    std::ofstream(dir.Path("secret")) << kSecret << "\n";
    args.insert(args.end(), {"--node-id", "5", "--memory-only", "--cluster-secret-file",
                             dir.Path("secret"), "--recovery-timeout-ms", "0"});
    TallydProcess::Options options;
    options.tallyd_path = TALLYD_PATH;
    options.args = args;
    options.gossip_port = true;
    const Status started = TallydProcess::Start(options, &process);
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
  std::unique_ptr<protocol::Client> client;
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

// Before its first seal checks out, a peer may send no frame over 4 KiB:
// outsiders that follow their hello with most of a 4 MiB frame are closed at
// its segment table, counted as refused, and the node's memory stays put.
TEST_CASE("gossip port: before the secret is proven, a large frame is refused unread") {
  GossipNode node;
  const int64_t resident_before_kb = testing::ResidentKb(node.process->pid());
  const std::string attack = Hello(4242) + FrameHeader(4 << 20) + std::string(1 << 20, '\0');
  const char* sources[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"};
  std::vector<RawConnection> outsiders;
  for (int i = 0; i < 32; ++i) {
    outsiders.emplace_back(node.process->gossip_port(), sources[i % 4]);
    REQUIRE(outsiders.back().connected());
    (void)outsiders.back().Send(attack);  // the node may close it midway
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int64_t grown_kb = testing::ResidentKb(node.process->pid()) - resident_before_kb;
  MESSAGE("32 outsiders with 1 MiB each cost " << grown_kb << " KiB of resident memory");
  CHECK(grown_kb < 8 * 1024);
  size_t closed = 0;
  for (RawConnection& outsider : outsiders) closed += outsider.ClosedByPeer(200) ? 1 : 0;
  CHECK(closed == outsiders.size());
  CHECK(node.Stats().gossip_sessions_refused == outsiders.size());
}

// Sessions that have not proven the secret: at most 8 from one address (the
// ninth is refused), 64 in all (the oldest makes room for a newcomer, so a
// member still gets in).
TEST_CASE("gossip port: unauthenticated sessions are capped per address and in all") {
  GossipNode node;
  const uint16_t port = node.process->gossip_port();
  // A connection whose hello the node has answered: a session, not proven.
  const auto unproven = [&](const std::string& source) {
    RawConnection connection(port, source.c_str());
    REQUIRE(connection.connected());
    REQUIRE(connection.Send(Hello(4242)));
    std::string reply;
    REQUIRE(connection.Receive(1, &reply));
    REQUIRE(!reply.empty());
    return connection;
  };
  std::vector<RawConnection> held;
  for (int i = 0; i < 8; ++i) held.push_back(unproven("127.0.0.2"));
  RawConnection ninth(port, "127.0.0.2");
  REQUIRE(ninth.connected());
  CHECK(ninth.ClosedByPeer(1'000));
  for (int host = 3; host <= 9; ++host) {
    for (int i = 0; i < 8; ++i) held.push_back(unproven("127.0.0." + std::to_string(host)));
  }
  const auto member = node.Member(71);
  CHECK(testing::PollUntil([&] { return node.MembersConnected() == 1; }));
  CHECK(held.front().ClosedByPeer(1'000));
  CHECK(node.Stats().gossip_sessions_refused == 2);  // the ninth, and the oldest
}

// A member's frame that needs more receive buffer than --max-buffer-bytes
// has left refuses its session; the budget comes back and the next
// session is taken.
TEST_CASE("gossip port: a frame past --max-buffer-bytes refuses the session") {
  GossipNode node({"--max-buffer-bytes", "65536"});
  auto member = node.Member(71);
  REQUIRE(testing::PollUntil([&] { return node.MembersConnected() == 1; }));
  const std::string large = FrameHeader(200 * 1024) + std::string(200 * 1024 - 8, '\0');
  (void)member->connection().Send(member->Sealed(large));  // refused midway
  CHECK(member->ClosedByNode());
  CHECK(node.Stats().gossip_sessions_refused == 1);
  CHECK(node.process->Log().find("at their limit") != std::string::npos);
  REQUIRE(testing::PollUntil([&] { return node.MembersConnected() == 0; }));
  const auto next = node.Member(72);
  CHECK(testing::PollUntil([&] { return node.MembersConnected() == 1; }));
}

}  // namespace
}  // namespace tally
