// Engine tests of coordination: Limiters in one process standing for the
// nodes of a cluster, one ManualClock for all, and gossip rounds run by hand
// (each node's deltas merged into every other node).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"

namespace tally::testing {

// One node: a replicating Limiter.
struct EngineNode {
  // `options` with node_id = id, replicate on and the clock set.
  EngineNode(ManualClock* clock, NodeId id, Limiter::Options options) {
    options.node_id = id;
    options.clock = clock;
    options.replicate = true;
    limiter = std::make_unique<Limiter>(options);
  }
  Decision Check(std::string_view key, const LimitSpec& spec, uint64_t cost = 1) {
    Decision decision;
    REQUIRE(limiter->Check(key, spec, cost, &decision).ok());
    return decision;
  }
  bool Admit(std::string_view key, const LimitSpec& spec, uint64_t cost = 1) {
    return Check(key, spec, cost).allowed;
  }
  // What CollectGossip hands out now (flush: what waits too).
  std::vector<KeySnapshot> Collect(bool flush = false) {
    std::vector<KeySnapshot> deltas;
    limiter->CollectGossip([&](const KeySnapshot& s) { deltas.push_back(s); }, flush);
    return deltas;
  }
  std::unique_ptr<Limiter> limiter;
};

// `members` nodes, ids 1 .. members, cluster_size = members.
inline std::vector<EngineNode> MakeNodes(ManualClock* clock, size_t members,
                                         Limiter::Options options) {
  options.cluster_size = members;
  std::vector<EngineNode> nodes;
  for (size_t i = 0; i < members; ++i)
    nodes.emplace_back(clock, static_cast<NodeId>(i + 1), options);
  return nodes;
}

// One gossip round: every node's deltas, merged into every other node.
inline void RunRound(std::vector<EngineNode>& nodes) {
  std::vector<std::vector<KeySnapshot>> deltas;
  for (EngineNode& node : nodes) deltas.push_back(node.Collect());
  for (size_t from = 0; from < nodes.size(); ++from) {
    for (size_t to = 0; to < nodes.size(); ++to) {
      if (from == to) continue;
      for (const KeySnapshot& delta : deltas[from]) REQUIRE(nodes[to].limiter->Merge(delta).ok());
    }
  }
}

}  // namespace tally::testing
