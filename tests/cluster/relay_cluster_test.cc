// Relay on real tallyd processes (node/engine/headroom.h): a far key's
// admissions reach every node through the key's relayer, and reach them
// again through another when the relayer dies holding them.
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cluster/local_cluster.h"
#include "node/engine/headroom.h"
#include "tests/support/cluster_client.h"
#include "tests/support/must_check.h"
#include "tests/support/poll.h"

namespace tally {
namespace {

using cluster::LocalCluster;
using testing::ConnectTo;
using testing::MustCheck;
using testing::PollUntil;

constexpr uint64_t kDayMs = 86'400'000;
const LimitSpec kFar{Algorithm::kSlidingWindowCounter, 1'000'000, kDayMs};
const std::vector<NodeId> kIds = {1, 2, 3};  // LocalCluster's node i is id i + 1

// Three gossiping nodes; `max_delay_ms[i]` is node i's --gossip-max-delay-ms.
std::unique_ptr<LocalCluster> StartCluster(const std::vector<int64_t>& max_delay_ms) {
  LocalCluster::Options options;
  options.tallyd_path = TALLYD_PATH;
  options.nodes = kIds.size();
  for (size_t node = 0; node < kIds.size(); ++node) {
    options.node_env[node] = {"TALLY_GOSSIP_MAX_DELAY_MS=" + std::to_string(max_delay_ms[node])};
  }
  return testing::MustStart(options);
}

// A key whose relayer is node `relayer_index` while all three are members.
std::string KeyRelayedBy(size_t relayer_index) {
  for (int i = 0;; ++i) {
    std::string key = "user:" + std::to_string(i);
    if (RelayerFor(RelayHash(key), kIds) == kIds[relayer_index]) return key;
  }
}

// What node `node` holds of `key` in node `slot_index`'s slot (current window).
uint64_t SlotAt(const LocalCluster& cluster, size_t node, const std::string& key,
                size_t slot_index) {
  protocol::InspectReply reply;
  REQUIRE(ConnectTo(cluster, node)->Inspect({key, kFar}, &reply).ok());
  for (const protocol::NodeCounts& counts : reply.nodes) {
    if (counts.node_id == kIds[slot_index]) return counts.current;
  }
  return 0;
}

uint64_t EntriesSent(const LocalCluster& cluster, size_t node) {
  protocol::StatsReply stats;
  REQUIRE(cluster.Stats(node, &stats).ok());
  return stats.gossip_delta_entries_sent;
}

// Node 0's admissions on a far key go to its relayer, node 1, which sends
// them on to node 2: node 1 sends entries though it admitted nothing, node 2
// (neither admitting nor relaying) sends none.
TEST_CASE("relay cluster: a far key's admissions reach every node through its relayer") {
  auto cluster = StartCluster({200, 200, 200});
  REQUIRE(cluster->WaitConnected(10'000).ok());
  const std::string key = KeyRelayedBy(1);
  auto client = ConnectTo(*cluster, 0);
  for (int i = 0; i < 5; ++i) CHECK(MustCheck(*client, {key, kFar, 1}).allowed);
  CHECK(PollUntil([&] { return SlotAt(*cluster, 2, key, 0) == 5; }));
  CHECK(SlotAt(*cluster, 1, key, 0) == 5);
  CHECK(EntriesSent(*cluster, 1) >= 2);  // its delta, to both peers
  CHECK(EntriesSent(*cluster, 2) == 0);
}

// The relayer holds what it is sent for its own delay (a minute here) and
// is killed holding it: node 0, not seeing its slot come back, relays it
// again to the relayer of the moment, and node 2 learns of it.
TEST_CASE("relay cluster: what a dead relayer held reaches the others again") {
  auto cluster = StartCluster({200, 60'000, 200});
  REQUIRE(cluster->WaitConnected(10'000).ok());
  const std::string key = KeyRelayedBy(1);
  auto client = ConnectTo(*cluster, 0);
  for (int i = 0; i < 5; ++i) CHECK(MustCheck(*client, {key, kFar, 1}).allowed);
  CHECK(PollUntil([&] { return SlotAt(*cluster, 1, key, 0) == 5; }));  // relayed, held
  CHECK(SlotAt(*cluster, 2, key, 0) == 0);
  REQUIRE(cluster->Kill(1).ok());
  CHECK(PollUntil([&] { return SlotAt(*cluster, 2, key, 0) == 5; }));
}

}  // namespace
}  // namespace tally
