// What a counter key costs one node's heap, by cluster size and by how many
// nodes admit on it: on a node that admits (itself and admitting - 1 peers,
// whose slots it merges as their gossip brings them) and on one that does not
// (admitting peers' slots). Not a test: it prints a table.
//
// Each row is a new Limiter holding --keys sliding-counter keys ("user:<i>",
// 6-11 bytes: the key itself fits in the entry), told the cluster size as
// gossip tells it; bytes are glibc's heap in use (mallinfo2) after the keys
// over before, per key.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "node/common/clock.h"
#include "node/common/version.h"
#include "node/engine/limiter.h"
#include "tests/bench/heap_bytes.h"

namespace {

using tally::bench::HeapBytesInUse;

// Heap bytes per key of `keys` keys that `admitting` of `members` nodes admit
// on, this node among them if `self_admits`.
double BytesPerKey(size_t members, size_t admitting, bool self_admits, size_t keys) {
  using tally::KeySnapshot;
  const tally::LimitSpec spec{tally::Algorithm::kSlidingWindowCounter, 1'000'000, 3'600'000};
  tally::ManualClock clock(1'700'000'000'000);
  tally::Limiter::Options options{1, 2 * keys + 16, &clock};
  options.replicate = true;
  const size_t before = HeapBytesInUse();
  tally::Limiter limiter(options);
  limiter.SetClusterSize(members);
  tally::Decision decision;
  KeySnapshot snapshot;
  snapshot.algorithm = spec.algorithm;
  snapshot.window_ms = spec.window_ms;
  snapshot.counts.window_index = clock.WallMs() / static_cast<int64_t>(spec.window_ms);
  for (size_t i = 0; i < keys; ++i) {
    const std::string key = "user:" + std::to_string(i);
    if (self_admits && !limiter.Check(key, spec, 1, &decision).ok()) std::abort();
    snapshot.key = key;
    const tally::NodeId last_peer = self_admits ? admitting : admitting + 1;
    for (tally::NodeId peer = 2; peer <= last_peer; ++peer) {
      snapshot.counts.current.Clear();
      snapshot.counts.current.MergeSlot(peer, 1);  // one peer's delta
      if (!limiter.Merge(snapshot).ok()) std::abort();
    }
  }
  return static_cast<double>(HeapBytesInUse() - before) / static_cast<double>(keys);
}

}  // namespace

int main(int argc, char** argv) {
  size_t keys = 200'000;
  std::vector<size_t> cluster_sizes = {3, 8, 32, 64};
  CLI::App app("key_memory_bench: what a counter key costs one node, by cluster size");
  app.set_version_flag("--version", tally::VersionLine("key_memory_bench"));
  app.add_option("--keys", keys, "Keys per row")->capture_default_str();
  app.add_option("--nodes", cluster_sizes, "Cluster sizes")->delimiter(',')->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::printf("%8s %10s %22s %22s\n", "nodes", "admitting", "bytes/key, admitting",
              "bytes/key, not admitting");
  std::string json = "[";
  for (const size_t members : cluster_sizes) {
    std::vector<size_t> admitting_counts = {1};
    if (members > 3) admitting_counts.push_back(3);
    if (members > 1) admitting_counts.push_back(members);
    for (const size_t admitting : admitting_counts) {
      const double admitter = BytesPerKey(members, admitting, true, keys);
      // A node that does not admit exists while some do not.
      const double other = admitting < members ? BytesPerKey(members, admitting, false, keys) : 0;
      std::printf("%8zu %10zu %22.1f %22s\n", members, admitting, admitter,
                  admitting < members ? std::to_string(static_cast<int>(other)).c_str() : "-");
      json += std::string(json.size() > 1 ? ", " : "") + "{\"nodes\": " + std::to_string(members) +
              ", \"admitting\": " + std::to_string(admitting) +
              ", \"bytes_per_key_admitting\": " + std::to_string(admitter) +
              ", \"bytes_per_key_not_admitting\": " + std::to_string(other) + "}";
    }
  }
  std::printf("%s]\n", json.c_str());
  return 0;
}
