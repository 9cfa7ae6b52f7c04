// Unit tests of one node's membership logic (node/gossip/member_agent.h),
// several agents wired by hand on explicit times: every message goes
// through the peer codec and arrives at once.
#include "node/gossip/member_agent.h"

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

namespace tally {
namespace {

using protocol::MemberState;

constexpr int64_t kWallMs = 1'800'000'000'000;
constexpr int64_t kRoundMs = 50;

// Agents 1..n that know each other; `down` ones neither send nor receive.
struct Net {
  explicit Net(NodeId nodes) {
    for (NodeId id = 1; id <= nodes; ++id) {
      MemberAgent::Options options;
      options.membership.self = {id, "10.0.0." + std::to_string(id) + ":7421", 1};
      options.membership.suspicion_ms = 1'500;
      options.prober = {id, 500, 1'000, 3, id};
      agents[id] = std::make_unique<MemberAgent>(options, 0);
    }
    for (auto& [id, agent] : agents) {
      for (auto& [other, other_agent] : agents) {
        agent->membership().Merge(other_agent->membership().Records(), 0, kWallMs);
      }
    }
  }

  // Delivers `out` from `from`, and the replies to it, until none is left.
  void Deliver(NodeId from, std::vector<MemberAgent::Outgoing> out) {
    std::deque<std::pair<NodeId, MemberAgent::Outgoing>> queue;
    for (MemberAgent::Outgoing& message : out) queue.emplace_back(from, std::move(message));
    while (!queue.empty()) {
      auto [sender, message] = std::move(queue.front());
      queue.pop_front();
      std::string frame;
      protocol::EncodeMembers(message.records, {}, message.probe ? &*message.probe : nullptr,
                              &frame);
      for (auto& [id, agent] : agents) {
        if (id == sender || down.contains(id)) continue;
        if (message.to != MemberAgent::kEveryone && message.to != id) continue;
        // Cap'n Proto reads whole words: the frame goes into word-aligned memory.
        std::vector<uint64_t> words((frame.size() + 7) / 8);
        std::memcpy(words.data(), frame.data(), frame.size());
        protocol::PeerMessage decoded;
        REQUIRE(protocol::DecodePeerMessage(
                    {reinterpret_cast<const std::byte*>(words.data()), frame.size()}, {}, &decoded)
                    .ok());
        std::vector<MemberAgent::Outgoing> replies;
        agent->Receive(sender, decoded, now_ms, kWallMs + now_ms, nullptr, &replies);
        for (MemberAgent::Outgoing& reply : replies) queue.emplace_back(id, std::move(reply));
      }
    }
  }

  // Rounds of every running agent until now_ms reaches until_ms.
  void RunUntil(int64_t until_ms) {
    for (; now_ms < until_ms; now_ms += kRoundMs) {
      for (auto& [id, agent] : agents) {
        if (down.contains(id)) continue;
        std::vector<MemberAgent::Outgoing> out;
        agent->Tick(
            now_ms, [&](NodeId peer) { return !down.contains(peer); }, &out);
        Deliver(id, std::move(out));
      }
    }
  }

  // Whether every running agent but `member` sees it in `state`.
  bool AllSee(NodeId member, MemberState state) const {
    for (const auto& [id, agent] : agents) {
      if (id == member || down.contains(id)) continue;
      for (const protocol::MemberStatus& status : agent->membership().View(now_ms)) {
        if (status.node_id == member && status.state != state) return false;
      }
    }
    return true;
  }

  std::map<NodeId, std::unique_ptr<MemberAgent>> agents;
  std::set<NodeId> down;
  int64_t now_ms = 0;
};

// Agents that all answer never suspect one another.
TEST_CASE("member agent: members that answer stay alive") {
  Net net(5);
  for (int64_t until_ms = 1'000; until_ms <= 20'000; until_ms += 1'000) {
    net.RunUntil(until_ms);
    for (NodeId id = 1; id <= 5; ++id) REQUIRE(net.AllSee(id, MemberState::kAlive));
  }
}

// A member that goes silent is suspect, then dead in every view (probed in
// turn: within a round of the order, the timeout and the suspicion); back,
// it hears so in the acks to its own pings, refutes, and is alive everywhere.
TEST_CASE("member agent: a silent member is found dead, and comes back by refuting") {
  Net net(4);
  net.RunUntil(2'000);
  net.down.insert(4);
  const int64_t silent_from_ms = net.now_ms;
  while (!net.AllSee(4, MemberState::kDead)) {
    REQUIRE(net.now_ms < silent_from_ms + 3 * 500 + 2'500 + 2 * kRoundMs);
    net.RunUntil(net.now_ms + kRoundMs);
  }
  net.RunUntil(net.now_ms + 5'000);  // the death's updates have all been sent
  net.down.erase(4);
  const int64_t back_from_ms = net.now_ms;
  while (!net.AllSee(4, MemberState::kAlive)) {
    REQUIRE(net.now_ms < back_from_ms + 1'000);
    net.RunUntil(net.now_ms + kRoundMs);
  }
  CHECK(net.agents.at(4)->membership().self().heartbeat >= 1);  // it refuted
}

}  // namespace
}  // namespace tally
