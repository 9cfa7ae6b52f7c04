// Relay (node/engine/headroom.h): admissions that waited go to the key's
// relayer alone, which sends every node's slots on to every peer; the sender
// keeps them as unsent until that comes back, and relays again if it does not.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "node/engine/headroom.h"
#include "node/engine/limiter.h"
#include "tests/engine/engine_cluster.h"

namespace tally {
namespace {

using testing::EngineNode;

constexpr int64_t kStartMs = 1'700'000'080'000;  // 40 s into a minute
constexpr int64_t kDelayMs = 1'000;              // --gossip-max-delay-ms
const LimitSpec kFar{Algorithm::kSlidingWindowCounter, 1'000'000, 60'000};
const std::vector<NodeId> kMembers = {1, 2, 3};

// What one collection hands out: to every peer, and to each relayer.
struct Collected {
  std::vector<KeySnapshot> to_every_peer;
  std::vector<std::pair<NodeId, KeySnapshot>> relayed;
};

Collected Collect(EngineNode& node, bool flush = false) {
  Collected out;
  const GossipRelay relay{kMembers, [&](NodeId relayer, const KeySnapshot& snapshot) {
                            out.relayed.emplace_back(relayer, snapshot);
                          }};
  node.limiter->CollectGossip(
      [&](const KeySnapshot& snapshot) { out.to_every_peer.push_back(snapshot); }, flush, &relay);
  return out;
}

void Merge(EngineNode& node, const KeySnapshot& snapshot, MergeSource source) {
  Status status;
  node.limiter->MergeBatch(std::span<const KeySnapshot>(&snapshot, 1),
                           std::span<Status>(&status, 1), source);
  REQUIRE(status.ok());
}

// Nodes 1 .. 3 of a cluster whose admissions far from a limit wait kDelayMs.
std::vector<EngineNode> Nodes(ManualClock* clock) {
  Limiter::Options options{0, 1'000'000, clock};
  options.gossip_max_delay_ms = kDelayMs;
  return testing::MakeNodes(clock, kMembers.size(), options);
}

// Three nodes and their clock, for a test case.
struct RelayCluster {
  ManualClock clock{kStartMs};
  std::vector<EngineNode> nodes = Nodes(&clock);
};

// A key that `relayer` relays among kMembers.
std::string KeyRelayedBy(NodeId relayer) {
  for (int i = 0;; ++i) {
    std::string key = "user:" + std::to_string(i);
    if (RelayerFor(RelayHash(key), kMembers) == relayer) return key;
  }
}

// The node admits `cost` on `key` (far from its limit) and collects a wait later.
Collected AdmitAndWait(EngineNode& node, ManualClock& clock, const std::string& key,
                       uint64_t cost) {
  REQUIRE(node.Admit(key, kFar, cost));
  clock.AdvanceMs(kDelayMs);
  return Collect(node);
}

uint64_t SlotOf(EngineNode& node, const std::string& key, NodeId slot_node) {
  KeySnapshot snapshot;
  if (!node.limiter->Read(key, kFar, &snapshot).ok()) return 0;
  return snapshot.counts.current.Get(slot_node);
}

// Every node computes the same relayer, whatever the order of the members;
// keys spread over the members; a member that goes moves only its keys.
TEST_CASE("relay: the relayer is the members' rendezvous choice") {
  CHECK(RelayerFor(RelayHash("k"), {}) == 0);
  const std::vector<NodeId> members = {11, 12, 13, 14, 15};
  std::vector<NodeId> shuffled = {14, 12, 15, 11, 13};
  const std::vector<NodeId> fewer = {11, 12, 14, 15};
  std::map<NodeId, int> keys_of;
  constexpr int kKeys = 10'000;
  for (int i = 0; i < kKeys; ++i) {
    const uint64_t hash = RelayHash("key " + std::to_string(i));
    const NodeId relayer = RelayerFor(hash, members);
    CHECK(RelayerFor(hash, shuffled) == relayer);
    if (relayer != 13) CHECK(RelayerFor(hash, fewer) == relayer);
    ++keys_of[relayer];
  }
  REQUIRE(keys_of.size() == members.size());
  for (const auto& [relayer, keys] : keys_of) {
    CAPTURE(relayer);
    CHECK(keys > kKeys / 5 * 8 / 10);  // within 20% of an even spread
    CHECK(keys < kKeys / 5 * 12 / 10);
  }
  CHECK(RelayHash("user:42") == RelayHash(std::string("user:") + "42"));
}

// Admissions that waited go to the relayer alone; it holds them for the
// deferral, then sends every node's slots to every peer; that delta ends the
// sender's wait, so it sends nothing more.
TEST_CASE_FIXTURE(RelayCluster, "relay: what waited goes through the relayer to every peer, once") {
  const std::string key = KeyRelayedBy(2);
  REQUIRE(nodes[0].Admit(key, kFar, 3));
  CHECK(Collect(nodes[0]).relayed.empty());  // waits
  clock.AdvanceMs(kDelayMs);
  Collected sent = Collect(nodes[0]);
  CHECK(sent.to_every_peer.empty());
  REQUIRE(sent.relayed.size() == 1);
  CHECK(sent.relayed[0].first == 2);
  CHECK(sent.relayed[0].second.counts.current.Get(1) == 3);

  REQUIRE(nodes[2].Admit(key, kFar, 5));  // node 3's own, waiting too
  clock.AdvanceMs(kDelayMs);
  Collected from_third = Collect(nodes[2]);
  REQUIRE(from_third.relayed.size() == 1);
  Merge(nodes[1], sent.relayed[0].second, MergeSource::kRelay);
  Merge(nodes[1], from_third.relayed[0].second, MergeSource::kRelay);
  CHECK(Collect(nodes[1]).to_every_peer.empty());  // held
  clock.AdvanceMs(kDelayMs - 1);
  CHECK(Collect(nodes[1]).to_every_peer.empty());
  clock.AdvanceMs(1);
  Collected relayed = Collect(nodes[1]);
  REQUIRE(relayed.to_every_peer.size() == 1);  // both nodes' slots in one delta
  CHECK(relayed.to_every_peer[0].counts.current.Get(1) == 3);
  CHECK(relayed.to_every_peer[0].counts.current.Get(3) == 5);
  CHECK(relayed.relayed.empty());

  Merge(nodes[0], relayed.to_every_peer[0], MergeSource::kDelta);
  Merge(nodes[2], relayed.to_every_peer[0], MergeSource::kDelta);
  CHECK(SlotOf(nodes[0], key, 3) == 5);
  CHECK(SlotOf(nodes[2], key, 1) == 3);
  clock.AdvanceMs(RelayConfirmMs(kDelayMs));
  for (EngineNode& node : nodes) {
    const Collected after = Collect(node);
    CHECK(after.to_every_peer.empty());
    CHECK(after.relayed.empty());
  }
}

// When the relayer's delta does not come back in time (it crashed, or its
// view differs), the sender relays its admissions again, all of them.
TEST_CASE_FIXTURE(RelayCluster, "relay: what the relayer does not send back is relayed again") {
  const std::string key = KeyRelayedBy(3);
  REQUIRE(AdmitAndWait(nodes[0], clock, key, 2).relayed.size() == 1);
  REQUIRE(nodes[0].Admit(key, kFar, 4));  // waits with what was relayed
  clock.AdvanceMs(RelayConfirmMs(kDelayMs) - 1);
  CHECK(Collect(nodes[0]).relayed.empty());
  clock.AdvanceMs(1);
  const Collected again = Collect(nodes[0]);
  CHECK(again.to_every_peer.empty());
  REQUIRE(again.relayed.size() == 1);
  CHECK(again.relayed[0].first == 3);
  CHECK(again.relayed[0].second.counts.current.Get(1) == 6);
}

// A delta that brings back less than this node admitted (it admitted more
// since it relayed) does not end the wait: the rest is relayed in time.
TEST_CASE_FIXTURE(RelayCluster,
                  "relay: a delta with fewer of this node's admissions leaves the rest waiting") {
  const std::string key = KeyRelayedBy(2);
  const Collected sent = AdmitAndWait(nodes[0], clock, key, 1);
  REQUIRE(sent.relayed.size() == 1);
  REQUIRE(nodes[0].Admit(key, kFar, 1));
  Merge(nodes[1], sent.relayed[0].second, MergeSource::kRelay);
  clock.AdvanceMs(kDelayMs);
  const Collected relayed = Collect(nodes[1]);
  REQUIRE(relayed.to_every_peer.size() == 1);
  Merge(nodes[0], relayed.to_every_peer[0], MergeSource::kDelta);
  clock.AdvanceMs(RelayConfirmMs(kDelayMs));
  const Collected rest = Collect(nodes[0]);
  REQUIRE(rest.relayed.size() == 1);
  CHECK(rest.relayed[0].second.counts.current.Get(1) == 2);
}

// The relayer's own admissions that waited are held with what others relay,
// then go with every node's slots.
TEST_CASE_FIXTURE(RelayCluster,
                  "relay: the relayer holds its own admissions with the relayed ones") {
  const std::string key = KeyRelayedBy(1);
  const Collected due = AdmitAndWait(nodes[0], clock, key, 7);
  CHECK(due.to_every_peer.empty());
  CHECK(due.relayed.empty());
  clock.AdvanceMs(kDelayMs);
  const Collected held = Collect(nodes[0]);
  REQUIRE(held.to_every_peer.size() == 1);
  CHECK(held.to_every_peer[0].counts.current.Get(1) == 7);
}

// An admission that must go at once (beyond the headroom share) goes to
// every peer, even if earlier ones were due for the relayer; leaving, a node
// sends everything that waits to every peer.
TEST_CASE_FIXTURE(RelayCluster, "relay: near the limit and when leaving, deltas go to every peer") {
  const LimitSpec near{Algorithm::kSlidingWindowCounter, 9'600, 60'000};  // share ~ 100
  const std::string key = KeyRelayedBy(2);
  REQUIRE(nodes[0].Admit(key, near, 10));
  clock.AdvanceMs(kDelayMs);
  REQUIRE(nodes[0].Admit(key, near, 200));  // beyond the share: at once
  Collected sent = Collect(nodes[0]);
  REQUIRE(sent.to_every_peer.size() == 1);
  CHECK(sent.to_every_peer[0].counts.current.Get(1) == 210);
  CHECK(sent.relayed.empty());

  const std::string other = KeyRelayedBy(3);
  REQUIRE(nodes[0].Admit(other, kFar, 1));
  clock.AdvanceMs(kDelayMs);
  REQUIRE(Collect(nodes[0]).relayed.size() == 1);  // waiting for node 3's delta
  REQUIRE(nodes[0].Admit(other, kFar, 1));
  const Collected leaving = Collect(nodes[0], /*flush=*/true);
  REQUIRE(leaving.to_every_peer.size() == 1);
  CHECK(leaving.to_every_peer[0].counts.current.Get(1) == 2);
  CHECK(leaving.relayed.empty());
  clock.AdvanceMs(RelayConfirmMs(kDelayMs));
  CHECK(Collect(nodes[0]).relayed.empty());  // nothing waits any more
}

// Without relay members (or alone), deltas go to every peer as before.
TEST_CASE_FIXTURE(RelayCluster, "relay: with one member or none, nothing is relayed") {
  REQUIRE(nodes[0].Admit("k", kFar, 1));
  clock.AdvanceMs(kDelayMs);
  Collected out;
  const std::vector<NodeId> alone = {1};
  const GossipRelay relay{alone, [&](NodeId relayer, const KeySnapshot& snapshot) {
                            out.relayed.emplace_back(relayer, snapshot);
                          }};
  nodes[0].limiter->CollectGossip(
      [&](const KeySnapshot& snapshot) { out.to_every_peer.push_back(snapshot); }, false, &relay);
  CHECK(out.to_every_peer.size() == 1);
  CHECK(out.relayed.empty());
}

}  // namespace
}  // namespace tally
