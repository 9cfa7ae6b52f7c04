// The replication overhead factor (cluster_bench.cc, part 6): the CPU time
// of every tallyd per decision in a gossiping cluster, divided by the same in
// as many local-only nodes, for the same tally-loadgen run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/bench/cluster_bench.h"

namespace tally::bench {
namespace {

using cluster::LocalCluster;
using Clock = std::chrono::steady_clock;

constexpr int kPollMs = 100;
// Every node writes peers' slots that merges alone changed every
// kPeerFlushMs (tallyd's default is 10 s; shorter here, so that those
// writes fall within the measurement: fewer merges share a write than by
// default, so the figure is if anything high).
constexpr int kPeerFlushMs = 2'000;
// Gossip is quiet once no node sent an entry for this long: by then every
// node has merged what it was sent and written it (a flush interval, 1 s,
// after the peer flush interval).
constexpr int kQuietMs = kPeerFlushMs + 1'500;
constexpr int kMostSettleMs = 30'000;  // and waiting for that ends after this long anyway
// Full syncs (anti-entropy: every live key to every peer, 30 s apart by
// default) cost per key and interval, whatever the traffic; a run that
// waits for relayed counts to come back (up to twice the gossip delay, 20 s)
// would meet one or not by chance. They are moved beyond every run.
constexpr int kFullSyncIntervalMs = 600'000;
constexpr size_t kSampledKeys = 16;  // the keys Agree compares

struct Workload {
  std::string name;
  std::string distribution;  // tally-loadgen's --distribution
  uint64_t keys = 0;
  uint64_t limit = 0;
  uint64_t window_ms = 0;
};

// The three workloads, for a run of `checks` checks. The 2x and mixed ones
// use a window of an hour, which holds the whole run: a key's demand in its
// window is what the run sends it.
std::vector<Workload> Workloads(uint64_t checks) {
  // Every key far from its limit: the default limit (10^9 per 60 s).
  const Workload far{"far", "uniform", 100'000, 1'000'000'000, 60'000};
  // Every key at 2x its limit: 75k uniform keys get checks / 75k each on
  // average (20 at 1.5M checks); the limit is half of that.
  const uint64_t at_2x_keys = 75'000;
  const Workload at_2x{"2x", "uniform", at_2x_keys, std::max<uint64_t>(1, checks / at_2x_keys / 2),
                       3'600'000};
  // Mixed: zipf(1.0) over 100k keys: the key of rank r gets checks / (r H)
  // on average, H the 100k-th harmonic number; with the limit at what rank
  // 5000 gets, the top 5% of the keys reach it.
  const uint64_t mixed_keys = 100'000;
  double harmonic = 0;
  for (uint64_t rank = 1; rank <= mixed_keys; ++rank) harmonic += 1.0 / static_cast<double>(rank);
  const double share = 0.05;
  const auto mixed_limit = static_cast<uint64_t>(std::llround(
      static_cast<double>(checks) / (harmonic * share * static_cast<double>(mixed_keys))));
  const Workload mixed{"mixed", "zipf", mixed_keys, std::max<uint64_t>(1, mixed_limit), 3'600'000};
  return {far, at_2x, mixed};
}

double CpuSeconds(LocalCluster& cluster) {
  const std::vector<double> by_node = NodeCpuSeconds(cluster);
  return std::accumulate(by_node.begin(), by_node.end(), 0.0);
}

// The gossip delta entries every node has sent (0 for local-only nodes).
uint64_t EntriesSent(LocalCluster& cluster) {
  uint64_t sum = 0;
  for (size_t node = 0; node < cluster.size(); ++node) {
    protocol::StatsReply stats;
    if (Status status = cluster.Stats(node, &stats); !status.ok()) Die("stats", status);
    sum += stats.gossip_delta_entries_sent;
  }
  return sum;
}

// Whether every node holds the same counts (Inspect) of kSampledKeys keys of
// the workload, spread over its key space (tally-loadgen names them k:0 ..
// k:<keys-1>): a sign that no node still holds admissions back from the
// others.
bool Agree(LocalCluster& cluster, const Workload& workload) {
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, workload.limit, workload.window_ms};
  std::vector<std::unique_ptr<protocol::Client>> clients(cluster.size());
  for (size_t node = 0; node < cluster.size(); ++node) {
    if (Status status = cluster.Connect(node, &clients[node]); !status.ok()) Die("connect", status);
  }
  // What a node holds of a key: found, its window, and (node id, current,
  // previous) by node id.
  using Counts = std::vector<std::tuple<uint64_t, uint64_t, uint64_t>>;
  using Held = std::tuple<bool, int64_t, Counts>;
  for (size_t i = 0; i < kSampledKeys; ++i) {
    const std::string key = "k:" + std::to_string(i * workload.keys / kSampledKeys);
    std::vector<Held> held;
    for (const auto& client : clients) {
      protocol::InspectReply reply;
      if (Status status = client->Inspect({key, spec}, &reply); !status.ok())
        Die("inspect", status);
      Held& mine = held.emplace_back(reply.found, reply.window_index, Counts{});
      for (const protocol::NodeCounts& counts : reply.nodes) {
        std::get<2>(mine).emplace_back(counts.node_id, counts.current, counts.previous);
      }
      std::sort(std::get<2>(mine).begin(), std::get<2>(mine).end());
    }
    if (std::adjacent_find(held.begin(), held.end(), std::not_equal_to<>()) != held.end()) {
      return false;
    }
  }
  return true;
}

struct Settled {
  double ms = 0;          // how long Settle polled
  bool converged = true;  // the cluster's gossip went quiet and its nodes agreed
};

// Polls every node's stats every kPollMs: for settle_ms; or (settle_ms < 0)
// until no node's sent entries changed for kQuietMs and the nodes Agree on
// the workload's keys, at most kMostSettleMs.
Settled Settle(LocalCluster& cluster, const Workload& workload, double settle_ms) {
  const Clock::time_point start = Clock::now();
  Clock::time_point changed = start;
  uint64_t entries = EntriesSent(cluster);
  const auto since = [](Clock::time_point from) {
    return std::chrono::duration<double, std::milli>(Clock::now() - from).count();
  };
  Settled settled;
  for (;;) {
    if (settle_ms >= 0 && since(start) >= settle_ms) break;
    if (settle_ms < 0 && since(changed) >= kQuietMs && Agree(cluster, workload)) break;
    if (settle_ms < 0 && since(start) >= kMostSettleMs) {
      settled.converged = false;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    const uint64_t now_entries = EntriesSent(cluster);
    if (now_entries != entries) changed = Clock::now();
    entries = now_entries;
  }
  settled.ms = since(start);
  return settled;
}

struct CpuRun {
  uint64_t decisions = 0;
  uint64_t keys_denied = 0;
  double cpu_s = 0;
  uint64_t entries_sent = 0;
  Settled settled;
  double per_decision_us() const { return cpu_s * 1e6 / static_cast<double>(decisions); }
};

// One tally-loadgen run of `workload` on a new cluster, its CPU time read
// before the load and after Settle(settle_ms).
CpuRun Measure(const Settings& settings, size_t nodes, bool gossip, const Workload& workload,
               double settle_ms) {
  auto cluster = Start(settings, nodes, gossip,
                       {"--peer-flush-interval-ms", std::to_string(kPeerFlushMs),
                        "--full-sync-interval-ms", std::to_string(kFullSyncIntervalMs)});
  const double cpu_before = CpuSeconds(*cluster);
  const uint64_t entries_before = EntriesSent(*cluster);
  const nlohmann::json load =
      RunLoadgen(settings, *cluster, "overhead-" + workload.name,
                 {"--requests", std::to_string(settings.overhead_checks), "--algorithm",
                  "sliding_counter", "--keys", std::to_string(workload.keys), "--distribution",
                  workload.distribution, "--limit", std::to_string(workload.limit), "--window-ms",
                  std::to_string(workload.window_ms), "--count-denied-keys"},
                 300'000);
  CpuRun run;
  run.settled = Settle(*cluster, workload, settle_ms);
  run.cpu_s = CpuSeconds(*cluster) - cpu_before;
  run.entries_sent = EntriesSent(*cluster) - entries_before;
  run.decisions = load["decisions"];
  run.keys_denied = load["keys_denied"];
  return run;
}

}  // namespace

void Overhead(const Settings& settings) {
  std::printf(
      "\n== replication overhead: CPU seconds of every tallyd (/proc, user + system) per "
      "decision, a gossiping cluster / as many local-only nodes, for the same tally-loadgen run "
      "(%d connections, depth 16, %llu checks of sliding_counter); read before the load and once "
      "the cluster's gossip is quiet (no entry sent for %d ms, and every node holds the same "
      "counts of %zu sampled keys; at most %d ms, else settle_ms is marked !), the local-only "
      "nodes after the same wait; the median of %d pairs of runs, and the factors' range\n",
      settings.connections, static_cast<unsigned long long>(settings.overhead_checks), kQuietMs,
      kSampledKeys, kMostSettleMs, settings.overhead_runs);
  for (const Workload& workload : Workloads(settings.overhead_checks)) {
    std::printf("workload %-6s %llu %s keys, limit %llu per %llu ms\n", workload.name.c_str(),
                static_cast<unsigned long long>(workload.keys), workload.distribution.c_str(),
                static_cast<unsigned long long>(workload.limit),
                static_cast<unsigned long long>(workload.window_ms));
  }
  std::printf("%-5s %-8s %10s %9s %9s %8s %8s %7s %13s %9s %10s %11s %11s\n", "nodes", "workload",
              "decisions", "cpu_s", "local_s", "us/dec", "local", "factor", "min-max", "settle_ms",
              "entries/d", "denied_keys", "local_keys");
  for (const size_t nodes : {size_t{3}, size_t{5}, size_t{8}}) {
    for (const Workload& workload : Workloads(settings.overhead_checks)) {
      // --overhead-runs pairs, each a cluster run and a local-only run; the
      // row shows the pair with the median factor.
      std::vector<std::pair<CpuRun, CpuRun>> pairs;
      for (int run = 0; run < settings.overhead_runs; ++run) {
        const CpuRun cluster = Measure(settings, nodes, true, workload, -1);
        pairs.emplace_back(cluster, Measure(settings, nodes, false, workload, cluster.settled.ms));
      }
      const auto factor_of = [](const std::pair<CpuRun, CpuRun>& pair) {
        return pair.first.per_decision_us() / pair.second.per_decision_us();
      };
      std::sort(pairs.begin(), pairs.end(),
                [&](const auto& a, const auto& b) { return factor_of(a) < factor_of(b); });
      std::string factors;
      for (const auto& pair : pairs) {
        factors += (factors.empty() ? "" : ", ") + std::to_string(factor_of(pair));
      }
      const auto& [cluster, local] = pairs[(pairs.size() - 1) / 2];
      const double factor = factor_of(pairs[(pairs.size() - 1) / 2]);
      const double entries_per_decision =
          static_cast<double>(cluster.entries_sent) / static_cast<double>(cluster.decisions);
      const auto share = [&](const CpuRun& run) {
        return static_cast<double>(run.keys_denied) / static_cast<double>(workload.keys);
      };
      std::printf(
          "%-5zu %-8s %10llu %9.2f %9.2f %8.2f %8.2f %7.2f %6.2f-%-6.2f %8.0f%s %10.2f %10.2f%% "
          "%10.2f%%\n",
          nodes, workload.name.c_str(), static_cast<unsigned long long>(cluster.decisions),
          cluster.cpu_s, local.cpu_s, cluster.per_decision_us(), local.per_decision_us(), factor,
          factor_of(pairs.front()), factor_of(pairs.back()), cluster.settled.ms,
          cluster.settled.converged ? " " : "!", entries_per_decision, 100 * share(cluster),
          100 * share(local));
      std::fflush(stdout);
      Json("{\"scenario\": \"overhead\", \"nodes\": " + std::to_string(nodes) +
           ", \"workload\": \"" + workload.name + "\", \"keys\": " + std::to_string(workload.keys) +
           ", \"distribution\": \"" + workload.distribution +
           "\", \"limit\": " + std::to_string(workload.limit) +
           ", \"window_ms\": " + std::to_string(workload.window_ms) +
           ", \"decisions\": " + std::to_string(cluster.decisions) +
           ", \"local_decisions\": " + std::to_string(local.decisions) + ", \"cluster_cpu_s\": " +
           std::to_string(cluster.cpu_s) + ", \"local_cpu_s\": " + std::to_string(local.cpu_s) +
           ", \"cluster_cpu_us_per_decision\": " + std::to_string(cluster.per_decision_us()) +
           ", \"local_cpu_us_per_decision\": " + std::to_string(local.per_decision_us()) +
           ", \"factor\": " + std::to_string(factor) + ", \"factors\": [" + factors + "]" +
           ", \"settle_ms\": " + std::to_string(cluster.settled.ms) +
           ", \"converged\": " + (cluster.settled.converged ? "true" : "false") +
           ", \"gossip_entries_per_decision\": " + std::to_string(entries_per_decision) +
           ", \"keys_denied_share\": " + std::to_string(share(cluster)) +
           ", \"local_keys_denied_share\": " + std::to_string(share(local)) + "}");
    }
  }
}

}  // namespace tally::bench
