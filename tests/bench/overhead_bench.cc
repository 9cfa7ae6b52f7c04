// The replication overhead factor (cluster_bench.cc, part 6): the CPU time
// of every tallyd per decision in a gossiping cluster, divided by the same in
// as many local-only nodes, for the same tally-loadgen run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "tests/bench/cluster_bench.h"

namespace tally::bench {
namespace {

// Every node writes peers' slots that merges alone changed every
// kPeerFlushMs (tallyd's default is 10 s; shorter here, so that those
// writes fall within the measurement: fewer merges share a write than by
// default, so the figure is if anything high).
constexpr int kPeerFlushMs = 2'000;
// Settle waits until no node sent an entry for kQuietMs: by then every node
// has also written what it merged (a flush interval, 1 s, after the peer
// flush interval).
static_assert(kQuietMs >= kPeerFlushMs + 1'500);
// Full syncs (anti-entropy: every live key to every peer, 30 s apart by
// default) cost per key and interval, whatever the traffic; a run that
// waits for relayed counts to come back (up to twice the gossip delay, 20 s)
// would meet one or not by chance. They are moved beyond every run.
constexpr int kFullSyncIntervalMs = 600'000;

// The three workloads, for a run of `checks` checks. The 2x and mixed ones
// use a window of an hour, which holds the whole run: a key's demand in its
// window is what the run sends it.
std::vector<Workload> Workloads(uint64_t checks) {
  const Workload far = FarWorkload(100'000);
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

// One tally-loadgen run of `workload` on a new cluster, its CPU time read
// before the load and after Settle(settle_ms).
CpuRun Measure(const Settings& settings, size_t nodes, bool gossip, const Workload& workload,
               double settle_ms) {
  auto cluster = Start(settings, nodes, gossip,
                       {"--peer-flush-interval-ms", std::to_string(kPeerFlushMs),
                        "--full-sync-interval-ms", std::to_string(kFullSyncIntervalMs)});
  return MeasureCpu(settings, *cluster, "overhead-" + workload.name, workload,
                    {"--requests", std::to_string(settings.overhead_checks)}, settle_ms, 300'000);
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
