#include "node/bin/tallyctl_limits.h"

#include <cstdio>

namespace tally::bin {
namespace {

using Json = nlohmann::ordered_json;

bool Counting(Algorithm algorithm) {
  return algorithm == Algorithm::kFixedWindow || algorithm == Algorithm::kSlidingWindowCounter;
}

// printf into a std::string.
template <typename... Args>
std::string Format(const char* format, Args... args) {
  char line[256];
  std::snprintf(line, sizeof line, format, args...);
  return line;
}

}  // namespace

std::string InspectText(std::string_view target, const protocol::KeyLimit& limit,
                        const protocol::InspectReply& reply, int64_t now_ms) {
  using ull = unsigned long long;
  const Algorithm algorithm = limit.spec.algorithm;
  std::string text = Format(
      "node %llu at %.*s: %.*s %s window_ms=%llu\n", ull(reply.node_id),
      static_cast<int>(target.size()), target.data(), static_cast<int>(limit.key.size()),
      limit.key.data(), std::string(AlgorithmName(algorithm)).c_str(), ull(limit.spec.window_ms));
  if (!reply.found) return text + "  holds nothing live for this limit\n";
  if (algorithm == Algorithm::kTokenBucket) {
    text += Format(
        "  tokens %.3f as of %lld ms ago (as this node decides: it refills at the limit per "
        "window_ms, up to the limit)\n",
        static_cast<double>(reply.bucket_level) / static_cast<double>(limit.spec.window_ms),
        static_cast<long long>(now_ms - reply.bucket_refilled_at_ms));
    text += Format("  %-20s %12s\n", "node", "cost");  // in the slices not yet folded
    for (const protocol::NodeCounts& node : reply.nodes) {
      text += Format("  %-20llu %12llu\n", ull(node.node_id), ull(node.current));
    }
    return text;
  }
  const bool counting = Counting(algorithm);
  if (counting)
    text += Format("  window %lld (current)\n", static_cast<long long>(reply.window_index));
  text += counting ? Format("  %-20s %12s %12s\n", "node", "current", "previous")
                   : Format("  %-20s %12s %12s\n", "node", "cost", "stamps");
  uint64_t first = 0, second = 0;
  for (const protocol::NodeCounts& node : reply.nodes) {
    const uint64_t other = counting ? node.previous : node.stamps;
    text += Format("  %-20llu %12llu %12llu\n", ull(node.node_id), ull(node.current), ull(other));
    first += node.current;
    second += other;
  }
  return text + Format("  %-20s %12llu %12llu\n", "all", ull(first), ull(second));
}

Json InspectJson(std::string_view target, const protocol::KeyLimit& limit,
                 const protocol::InspectReply& reply) {
  Json out = {{"target", target},
              {"node_id", reply.node_id},
              {"key", limit.key},
              {"algorithm", AlgorithmName(limit.spec.algorithm)},
              {"window_ms", limit.spec.window_ms},
              {"found", reply.found}};
  if (!reply.found) return out;
  if (limit.spec.algorithm == Algorithm::kTokenBucket) {
    out["bucket_level_token_ms"] = reply.bucket_level;
    out["bucket_level_at_ms"] = reply.bucket_refilled_at_ms;
    Json costs = Json::object();
    for (const protocol::NodeCounts& node : reply.nodes) {
      costs[std::to_string(node.node_id)] = node.current;
    }
    out["bucket_recent_cost_by_node"] = costs;
    return out;
  }
  const bool counting = Counting(limit.spec.algorithm);
  if (counting) out["window_index"] = reply.window_index;
  Json nodes = Json::array();
  for (const protocol::NodeCounts& node : reply.nodes) {
    nodes.push_back(
        counting
            ? Json{{"node_id", node.node_id},
                   {"current", node.current},
                   {"previous", node.previous}}
            : Json{{"node_id", node.node_id}, {"cost", node.current}, {"stamps", node.stamps}});
  }
  out["nodes"] = std::move(nodes);
  return out;
}

}  // namespace tally::bin
