// The cluster benchmark: not a test, it prints figures (a table, and JSON to
// --json). Run it with tests/bench/run_cluster_bench.sh. For 3 and 5 nodes:
//
//  1. admitted / limit per window, local-only nodes against a tally cluster
//     with plain gossip and with share of remaining (--escrow), at demand 2x
//     and 10x the limit, clients spread evenly and skewed (70%
//     to node 0): sliding_counter, limit 100 per 1 s window, --windows whole
//     windows each; the mean and the largest window;
//  1b. the same during a partition (the last node cut off from the others,
//     fixed window), --partition-mode fail-open against share: what each
//     side admits;
//  2. convergence latency: a check admitted at one node (each in turn, at a
//     random phase of the gossip rounds) until a peek sees it on every other
//     node; p50 and p99 of --samples;
//  3. gossip bytes: tally-loadgen at full speed over every node (uniform
//     keys) for --duration-ms: bytes on the wire per changed key-slot (delta
//     bytes / delta key entries, each per link) and gossip bytes per second
//     in all, beside the load that made them;
//  4. throughput: the same tally-loadgen run against one local-only node and
//     against the cluster, and the ratio;
//  1c. the token bucket (capacity 100, refilled 100 per 1 s) under the same
//     demands and modes, as admitted / what one central node admits for the
//     same paced demand, per window: the mean (all windows' admissions over
//     the central node's) and the lowest and highest window; and how evenly
//     each node's clients fare, as in 1;
//  3b. gossip bytes per admission and per changed key of the token bucket
//     beside the sliding counter's, under the same tally-loadgen load;
//  5. membership, with the default parameters: a node SIGKILLed until every
//     other node shows it suspect and dead (failure detection), restarted
//     until every node shows it alive (rejoin), and SIGTERMed until every
//     other node shows it left; --trials times, mean and max.
//  6. replication overhead factor (overhead_bench.cc; for 3, 5 and 8 nodes):
//     the CPU seconds of every tallyd process (utime + stime from
//     /proc/<pid>/stat) per decision in a gossiping cluster, divided by the
//     same in as many local-only nodes, for the same tally-loadgen run
//     (--connections, depth 16, --overhead-checks checks of sliding_counter
//     over every node, a new cluster for each run); --overhead-runs pairs of
//     runs, the median factor and the range of the factors (the CPU time per
//     decision grows when the machine is busy, so one pair is noisy). CPU time, so how many
//     cores the nodes share does not matter. Read before the load and, for
//     the cluster, once its gossip is quiet: no node's sent delta entries
//     changed for 3.5 s (polled every 100 ms; the nodes write peers' slots
//     every 2 s, --peer-flush-interval-ms, so those writes are in) and every node holds the same
//     counts (inspect) of 16 keys sampled over the workload's key space; at
//     most 30 s (then settle_ms is marked !). A node may defer sending keys
//     far from their limits, so the load's end is not the gossip's. The
//     wait is reported (settle_ms, those 3.5 s included); the local-only
//     nodes are polled for the same time. Three workloads: "far", every key far from its
//     limit (100k uniform keys, the default limit 10^9 per 60 s); "2x",
//     every key at twice its limit (75k uniform keys, each sent checks /
//     75k on average, the limit half of that, a window of an hour that holds
//     the run); "mixed", zipf(1.0) over 100k keys with one limit, what the
//     key of rank 5000 gets on average, so that ~5% of the keys reach it
//     (the share of keys denied at least once is reported, from
//     tally-loadgen --count-denied-keys, for the cluster and for the
//     local-only nodes, where every node counts alone);
//  7. accuracy against one central node (accuracy_bench.cc; 3 and 5 nodes,
//     each replication mode the daemon offers: plain gossip, --escrow):
//     the same seeded schedule of arrivals replayed against the cluster and
//     against one local-only node (which gets every client), sliding_counter,
//     limit 100 per 1 s, admitted / central's admissions:
//     a. demand below the limit: Poisson arrivals at 0.5x and 0.8x the
//        limit, each from one of the nodes' clients at random, over
//        --accuracy-windows windows; over the run and the lowest and
//        highest window;
//     b. a coordinated burst on a fresh key: 5x the limit at even intervals
//        within 20 ms, dealt to every node in turn (4 clients per node, so
//        that they keep up; the largest measured span of the sends is
//        reported); --burst-trials trials, each on a fresh key; mean and max.
//     The clients run pinned to --loadgen-cpu, away from the nodes.
//  8. what a cluster costs by its size (scale_bench.cc; --scale-nodes, 3 to
//     64): formation through one seed, CPU and memory per node at rest,
//     false suspicions, failure detection and leave; and the replication
//     overhead of a sustained load (--scale-load-rate checks/s for
//     --scale-load-s over --scale-load-keys far keys, default anti-entropy)
//     against as many local-only nodes. Only with --only scale.
//  9. agreement with the simulation (agreement_bench.cc; --agreement-nodes,
//     3, 5 and 8): one seed of tally-sim without faults, then its requests
//     replayed at the same times to the same nodes of a real cluster and to
//     one central node; delta entries per decision and admitted / central
//     by kind of load, side by side. Only with --only agreement.
//
// --only admission, membership, overhead, accuracy, scale or agreement runs
// only part 1, 5, 6, 7, 8 or 9; --bucket-only only 1c and 3b; by default
// every part but 8 and 9 runs.
//
// The nodes inherit this process's CPU affinity (the script pins it to CPU
// 0); tally-loadgen runs pinned to --loadgen-cpu, so that one node and a
// whole cluster get the same core to share.
#include "tests/bench/cluster_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "cluster/demand.h"
#include "cluster/local_cluster.h"
#include "node/common/version.h"
#include "node/gossip/gossip.h"

namespace {

using tally::Status;
using tally::bench::Die;
using tally::bench::Json;
using tally::bench::MsSince;
using tally::bench::Settings;
using tally::bench::Start;
using tally::bench::UntilAllSee;
using tally::cluster::LocalCluster;
using Clock = std::chrono::steady_clock;

// The modes of the admission tables: local-only nodes, a cluster (shares of
// what remains, the default), one with plain gossip, one with escrow.
struct Mode {
  const char* name;
  bool gossip;
  const char* flag;  // nullptr: none
};
constexpr Mode kModes[] = {{"local-only", false, nullptr},
                           {"tally", true, nullptr},
                           {"tally+plain", true, "--plain-gossip"},
                           {"tally+escrow", true, "--escrow"}};

std::unique_ptr<LocalCluster> Start(const Settings& settings, size_t nodes, const Mode& mode) {
  return Start(settings, nodes, mode.gossip,
               mode.flag ? std::vector<std::string>{mode.flag} : std::vector<std::string>{});
}

// `factor` times the limit per window on `key`, spread evenly over `nodes` or skewed (70% to
// node 0).
tally::cluster::DemandOptions DemandOf(const Settings& settings, const tally::LimitSpec& spec,
                                       size_t nodes, int factor, bool skewed, std::string key) {
  tally::cluster::DemandOptions demand;
  demand.spec = spec;
  demand.key = std::move(key);
  demand.demand_per_window = static_cast<uint64_t>(factor) * spec.limit;
  demand.windows = settings.windows;
  if (skewed) {
    demand.shares.assign(nodes, 0.3 / static_cast<double>(nodes - 1));
    demand.shares[0] = 0.7;
  }
  return demand;
}

// Runs `demand` against `cluster`; dies on failure.
std::vector<tally::cluster::WindowTally> Drive(LocalCluster& cluster,
                                               const tally::cluster::DemandOptions& demand) {
  std::vector<tally::cluster::WindowTally> tallies;
  if (Status status = tally::cluster::DriveDemand(cluster, demand, &tallies); !status.ok()) {
    Die("demand", status);
  }
  return tallies;
}

// The share of its requests each node's clients got admitted, over all windows, divided by the
// share over all nodes (what a central limiter that admitted as many gives every client): the
// lowest and the highest node.
std::pair<double, double> NodeFairness(const std::vector<tally::cluster::WindowTally>& tallies) {
  std::vector<double> sent, admitted;
  double all_sent = 0, all_admitted = 0;
  for (const auto& tally : tallies) {
    sent.resize(tally.sent.size());
    admitted.resize(tally.sent.size());
    for (size_t node = 0; node < tally.sent.size(); ++node) {
      sent[node] += static_cast<double>(tally.sent[node]);
      admitted[node] += static_cast<double>(tally.admitted[node]);
      all_sent += static_cast<double>(tally.sent[node]);
      all_admitted += static_cast<double>(tally.admitted[node]);
    }
  }
  double lowest = 1e9, highest = 0;
  for (size_t node = 0; node < sent.size(); ++node) {
    if (sent[node] == 0 || all_admitted == 0) continue;
    const double relative = (admitted[node] / sent[node]) / (all_admitted / all_sent);
    lowest = std::min(lowest, relative);
    highest = std::max(highest, relative);
  }
  return {lowest, highest};
}

// 1. Admitted / limit per window, and how evenly the nodes' clients fared.
void Admission(const Settings& settings, size_t nodes, tally::Algorithm algorithm) {
  const std::string algorithm_name(tally::AlgorithmName(algorithm));
  std::printf(
      "\n== %zu nodes: admitted / limit per window (%s, limit 100 per 1000 ms, "
      "%d windows); per node, its clients' share admitted / all clients' share: lowest, "
      "highest\n%-12s %-7s %-8s %10s %10s %10s %10s\n",
      nodes, algorithm_name.c_str(), settings.windows, "mode", "demand", "spread", "mean", "max",
      "node_min", "node_max");
  for (const Mode& mode : kModes) {
    auto cluster = Start(settings, nodes, mode);
    for (const int factor : {2, 10}) {
      for (const bool skewed : {false, true}) {
        const std::vector<tally::cluster::WindowTally> tallies =
            Drive(*cluster,
                  DemandOf(settings, {algorithm, 100, 1'000}, nodes, factor, skewed,
                           "admission-" + std::to_string(factor) + (skewed ? "-skewed" : "-even")));
        double sum = 0, largest = 0;
        std::string per_window;
        for (const auto& tally : tallies) {
          const double ratio = static_cast<double>(tally.total_admitted()) / 100.0;
          sum += ratio;
          largest = std::max(largest, ratio);
          per_window += (per_window.empty() ? "" : ", ") + std::to_string(ratio);
        }
        const double mean = sum / static_cast<double>(tallies.size());
        const char* const name = mode.name;
        const auto [node_min, node_max] = NodeFairness(tallies);
        std::printf("%-12s %-7s %-8s %10.2f %10.2f %10.2f %10.2f\n", name,
                    (std::to_string(factor) + "x").c_str(), skewed ? "skewed" : "even", mean,
                    largest, node_min, node_max);
        Json("{\"scenario\": \"admission\", \"nodes\": " + std::to_string(nodes) +
             ", \"algorithm\": \"" + algorithm_name + "\", \"mode\": \"" + name +
             "\", \"demand_x_limit\": " + std::to_string(factor) + ", \"spread\": \"" +
             (skewed ? "skewed" : "even") + "\", \"admitted_over_limit_mean\": " +
             std::to_string(mean) + ", \"admitted_over_limit_max\": " + std::to_string(largest) +
             ", \"node_share_min\": " + std::to_string(node_min) + ", \"node_share_max\": " +
             std::to_string(node_max) + ", \"per_window\": [" + per_window + "]}");
      }
    }
  }
}

// 1b. The same during a partition: the last node cut off from the others.
void Partition(const Settings& settings, size_t nodes) {
  std::printf(
      "\n== %zu nodes, node %zu cut off from the others: admitted / limit per window "
      "(fixed_window, limit 100 per 1000 ms, %d windows, demand spread evenly)\n"
      "%-10s %-7s %12s %12s %10s\n",
      nodes, nodes - 1, settings.windows, "mode", "demand", "big side", "small side", "total");
  for (const char* mode : {"fail-open", "share"}) {
    auto cluster = Start(settings, nodes, true, {"--partition-mode", mode});
    std::vector<size_t> rest;
    for (size_t node = 0; node + 1 < nodes; ++node) rest.push_back(node);
    cluster->Cut({nodes - 1}, rest);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the links notice
    for (const int factor : {2, 10}) {
      tally::cluster::DemandOptions demand;
      demand.spec = {tally::Algorithm::kFixedWindow, 100, 1'000};
      demand.key = std::string("partition-") + std::to_string(factor);
      demand.demand_per_window = static_cast<uint64_t>(factor) * demand.spec.limit;
      demand.windows = settings.windows;
      std::vector<tally::cluster::WindowTally> tallies;
      if (Status status = tally::cluster::DriveDemand(*cluster, demand, &tallies); !status.ok()) {
        Die("demand", status);
      }
      double big = 0, small = 0;
      for (const auto& tally : tallies) {
        small += static_cast<double>(tally.admitted[nodes - 1]);
        big += static_cast<double>(tally.total_admitted() - tally.admitted[nodes - 1]);
      }
      const double windows = static_cast<double>(tallies.size()) * 100.0;
      std::printf("%-10s %-7s %12.2f %12.2f %10.2f\n", mode, (std::to_string(factor) + "x").c_str(),
                  big / windows, small / windows, (big + small) / windows);
      Json("{\"scenario\": \"partition\", \"nodes\": " + std::to_string(nodes) + ", \"mode\": \"" +
           mode + "\", \"demand_x_limit\": " + std::to_string(factor) +
           ", \"big_side_over_limit\": " + std::to_string(big / windows) +
           ", \"small_side_over_limit\": " + std::to_string(small / windows) + "}");
    }
  }
}

// 1c. The token bucket: admitted / what one central node admits for the same demand.
void BucketAdmission(const Settings& settings, size_t nodes) {
  const tally::LimitSpec spec{tally::Algorithm::kTokenBucket, 100, 1'000};
  // The central node: all of the same paced demand on one node (a fresh key, a full bucket).
  std::vector<uint64_t> central[11];
  {
    auto one = Start(settings, 1, false);
    for (const int factor : {2, 10}) {
      for (const auto& tally : Drive(*one, DemandOf(settings, spec, 1, factor, false,
                                                    "central-" + std::to_string(factor)))) {
        central[factor].push_back(tally.total_admitted());
      }
    }
  }
  std::printf(
      "\n== %zu nodes: token bucket (capacity 100, refilled 100 per 1000 ms, %d windows): "
      "admitted / one central node's admissions for the same demand; per node, its clients' "
      "share admitted / all clients' share: lowest, highest\n%-12s %-7s %-8s %10s %10s %10s %10s "
      "%10s\n",
      nodes, settings.windows, "mode", "demand", "spread", "mean", "min", "max", "node_min",
      "node_max");
  for (const Mode& mode : kModes) {
    auto cluster = Start(settings, nodes, mode);
    for (const int factor : {2, 10}) {
      for (const bool skewed : {false, true}) {
        const std::string key = "bucket-" + std::to_string(factor) + (skewed ? "-skewed" : "-even");
        const std::vector<tally::cluster::WindowTally> tallies =
            Drive(*cluster, DemandOf(settings, spec, nodes, factor, skewed, key));
        double admitted = 0, admitted_central = 0, lowest = 1e9, highest = 0;
        std::string per_window;
        for (size_t i = 0; i < tallies.size() && i < central[factor].size(); ++i) {
          const double mine = static_cast<double>(tallies[i].total_admitted());
          const double theirs = static_cast<double>(central[factor][i]);
          admitted += mine;
          admitted_central += theirs;
          const double ratio = theirs > 0 ? mine / theirs : 0;
          lowest = std::min(lowest, ratio);
          highest = std::max(highest, ratio);
          per_window += (per_window.empty() ? "" : ", ") + std::to_string(ratio);
        }
        const double mean = admitted_central > 0 ? admitted / admitted_central : 0;
        const auto [node_min, node_max] = NodeFairness(tallies);
        std::printf("%-12s %-7s %-8s %10.3f %10.3f %10.3f %10.2f %10.2f\n", mode.name,
                    (std::to_string(factor) + "x").c_str(), skewed ? "skewed" : "even", mean,
                    lowest, highest, node_min, node_max);
        Json("{\"scenario\": \"bucket_admission\", \"nodes\": " + std::to_string(nodes) +
             ", \"mode\": \"" + mode.name + "\", \"demand_x_limit\": " + std::to_string(factor) +
             ", \"spread\": \"" + (skewed ? "skewed" : "even") +
             "\", \"admitted_over_central_mean\": " + std::to_string(mean) +
             ", \"admitted_over_central_min\": " + std::to_string(lowest) +
             ", \"admitted_over_central_max\": " + std::to_string(highest) +
             ", \"node_share_min\": " + std::to_string(node_min) + ", \"node_share_max\": " +
             std::to_string(node_max) + ", \"per_window\": [" + per_window + "]}");
      }
    }
  }
}

// 5. Failure detection, rejoin and leave.
void Membership(const Settings& settings, size_t nodes) {
  using tally::protocol::MemberState;
  auto cluster = Start(settings, nodes, true);
  const size_t victim = nodes - 1;
  const uint64_t victim_id = victim + 1;
  std::vector<double> suspect_ms, dead_ms, rejoin_ms, left_ms;
  for (int trial = 0; trial < settings.trials; ++trial) {
    Clock::time_point start = Clock::now();
    if (Status status = cluster->Kill(victim); !status.ok()) Die("kill", status);
    suspect_ms.push_back(UntilAllSee(*cluster, victim_id, MemberState::kSuspect, victim, start));
    dead_ms.push_back(UntilAllSee(*cluster, victim_id, MemberState::kDead, victim, start));
    start = Clock::now();
    if (Status status = cluster->Restart(victim); !status.ok()) Die("restart", status);
    rejoin_ms.push_back(UntilAllSee(*cluster, victim_id, MemberState::kAlive, nodes, start));
    start = Clock::now();
    if (Status status = cluster->Stop(victim); !status.ok()) Die("stop", status);
    left_ms.push_back(UntilAllSee(*cluster, victim_id, MemberState::kLeft, victim, start));
    if (Status status = cluster->Restart(victim); !status.ok()) Die("restart", status);
    if (Status status = cluster->WaitConnected(30'000); !status.ok()) Die("rejoin", status);
  }
  const auto mean = [](const std::vector<double>& values) {
    double sum = 0;
    for (const double value : values) sum += value;
    return sum / static_cast<double>(values.size());
  };
  const auto largest = [](const std::vector<double>& values) {
    return *std::max_element(values.begin(), values.end());
  };
  const tally::Gossip::Options defaults;  // what the nodes run with
  std::printf(
      "\n== %zu nodes: membership (membership interval %lld ms, suspect after %lld ms, dead "
      "after %lld ms; %d trials)\n%-44s %10s %10s\n",
      nodes, static_cast<long long>(defaults.membership_interval_ms),
      static_cast<long long>(defaults.suspect_after_ms),
      static_cast<long long>(defaults.dead_after_ms), settings.trials,
      "every other "
      "node shows the node ...",
      "mean_ms", "max_ms");
  const std::pair<const char*, const std::vector<double>*> rows[] = {
      {"suspect, after SIGKILL", &suspect_ms},
      {"dead, after SIGKILL (failure detection)", &dead_ms},
      {"alive, after its restart (rejoin)", &rejoin_ms},
      {"left, after SIGTERM (graceful leave)", &left_ms}};
  std::string json = "{\"scenario\": \"membership\", \"nodes\": " + std::to_string(nodes);
  const char* const keys[] = {"suspect_ms", "dead_ms", "rejoin_ms", "left_ms"};
  for (size_t i = 0; i < 4; ++i) {
    std::printf("%-44s %10.0f %10.0f\n", rows[i].first, mean(*rows[i].second),
                largest(*rows[i].second));
    json += std::string(", \"") + keys[i] + "_mean\": " + std::to_string(mean(*rows[i].second)) +
            ", \"" + keys[i] + "_max\": " + std::to_string(largest(*rows[i].second));
  }
  Json(json + "}");
}

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1,
                         static_cast<size_t>(p * static_cast<double>(values.size())))];
}

// 2. Convergence latency.
void Convergence(const Settings& settings, LocalCluster& cluster) {
  const size_t nodes = cluster.size();
  std::vector<std::unique_ptr<tally::protocol::Client>> clients(nodes);
  for (size_t node = 0; node < nodes; ++node) {
    if (Status status = cluster.Connect(node, &clients[node]); !status.ok()) Die("connect", status);
  }
  const tally::LimitSpec spec{tally::Algorithm::kSlidingWindowCounter, 1'000, 86'400'000};
  std::vector<double> latencies_ms;
  std::mt19937 rng(7);
  for (int sample = 0; sample < settings.samples; ++sample) {
    // At a random phase of the gossip rounds: right after one converged is
    // right after a round, which would bias every sample alike.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50'000));
    const size_t at = static_cast<size_t>(sample) % nodes;
    const std::string key = "converge-" + std::to_string(sample);
    tally::protocol::CheckOutcome outcome;
    if (Status status = clients[at]->Check({key, spec, 1}, &outcome); !status.ok())
      Die("check", status);
    const Clock::time_point admitted = Clock::now();
    std::vector<bool> seen(nodes, false);
    seen[at] = true;
    while (std::count(seen.begin(), seen.end(), false) > 0 &&
           Clock::now() - admitted < std::chrono::seconds(5)) {
      for (size_t node = 0; node < nodes; ++node) {
        if (seen[node]) continue;
        if (clients[node]->Check({key, spec, 0}, &outcome).ok() &&
            outcome.decision.remaining == 999) {
          seen[node] = true;
        }
      }
    }
    latencies_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - admitted).count());
  }
  const double p50 = Percentile(latencies_ms, 0.50), p99 = Percentile(latencies_ms, 0.99);
  std::printf(
      "\n== %zu nodes: convergence, an increment until every other node sees it (%d samples)\n"
      "p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
      nodes, settings.samples, p50, p99, Percentile(latencies_ms, 1.0));
  Json("{\"scenario\": \"convergence\", \"nodes\": " + std::to_string(nodes) +
       ", \"samples\": " + std::to_string(settings.samples) +
       ", \"p50_ms\": " + std::to_string(p50) + ", \"p99_ms\": " + std::to_string(p99) + "}");
}

// Runs tally-loadgen against every node of the cluster; returns decisions/s.
double Loadgen(const Settings& settings, LocalCluster& cluster, const std::string& label,
               const std::string& algorithm = "sliding_counter") {
  return tally::bench::RunLoadgen(settings, cluster, label,
                                  {"--keys", std::to_string(settings.keys), "--duration-ms",
                                   std::to_string(settings.duration_ms), "--algorithm", algorithm},
                                  settings.duration_ms + 30'000)["decisions_per_s"];
}

tally::protocol::StatsReply Sum(LocalCluster& cluster) {
  tally::protocol::StatsReply sum;
  for (size_t node = 0; node < cluster.size(); ++node) {
    tally::protocol::StatsReply stats;
    if (Status status = cluster.Stats(node, &stats); !status.ok()) Die("stats", status);
    sum.gossip_bytes_sent += stats.gossip_bytes_sent;
    sum.gossip_delta_bytes_sent += stats.gossip_delta_bytes_sent;
    sum.gossip_delta_entries_sent += stats.gossip_delta_entries_sent;
  }
  return sum;
}

// What a tally-loadgen run over the cluster decided and made the nodes gossip.
struct GossipLoad {
  double decisions_per_s = 0;
  double seconds = 0;
  double delta_bytes = 0;  // deltas' bytes, all links
  double entries = 0;      // deltas' key entries, all links
  double bytes = 0;        // everything gossip sent
};

GossipLoad RunLoad(const Settings& settings, LocalCluster& cluster, const std::string& label,
                   const std::string& algorithm) {
  const tally::protocol::StatsReply before = Sum(cluster);
  const Clock::time_point start = Clock::now();
  GossipLoad load;
  load.decisions_per_s = Loadgen(settings, cluster, label, algorithm);
  load.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const tally::protocol::StatsReply after = Sum(cluster);
  load.delta_bytes =
      static_cast<double>(after.gossip_delta_bytes_sent - before.gossip_delta_bytes_sent);
  load.entries =
      static_cast<double>(after.gossip_delta_entries_sent - before.gossip_delta_entries_sent);
  load.bytes = static_cast<double>(after.gossip_bytes_sent - before.gossip_bytes_sent);
  return load;
}

// 3 and 4. Gossip bytes under load, throughput against one node.
void Load(const Settings& settings, LocalCluster& cluster, double single_node_decisions_per_s) {
  const size_t nodes = cluster.size();
  const GossipLoad load =
      RunLoad(settings, cluster, "cluster-" + std::to_string(nodes), "sliding_counter");
  const double decisions_per_s = load.decisions_per_s;
  const double seconds = load.seconds;
  const double delta_bytes = load.delta_bytes;
  const double entries = load.entries;
  const double bytes_per_s = load.bytes / seconds;
  const double ratio = decisions_per_s / single_node_decisions_per_s;
  std::printf(
      "\n== %zu nodes: load from tally-loadgen over every node (%d connections, depth 16, %llu "
      "uniform keys, %d ms)\n"
      "decisions/s %.0f (one local-only node: %.0f; cluster / one node %.2f)\n"
      "gossip: %.1f bytes per changed key-slot; %.0f key-slots/s; %.0f bytes/s on the wire "
      "in all (%.1f per decision)\n",
      nodes, settings.connections, static_cast<unsigned long long>(settings.keys),
      settings.duration_ms, decisions_per_s, single_node_decisions_per_s, ratio,
      entries > 0 ? delta_bytes / entries : 0, entries / seconds, bytes_per_s,
      bytes_per_s / decisions_per_s);
  Json("{\"scenario\": \"load\", \"nodes\": " + std::to_string(nodes) +
       ", \"decisions_per_s\": " + std::to_string(decisions_per_s) +
       ", \"single_node_decisions_per_s\": " + std::to_string(single_node_decisions_per_s) +
       ", \"cluster_over_single_node\": " + std::to_string(ratio) +
       ", \"bytes_per_key_slot\": " + std::to_string(entries > 0 ? delta_bytes / entries : 0) +
       ", \"key_slots_per_s\": " + std::to_string(entries / seconds) +
       ", \"gossip_bytes_per_s\": " + std::to_string(bytes_per_s) + "}");
}

// 3b. Gossip of the token bucket beside the sliding counter's, under the same load.
void BucketGossip(const Settings& settings, LocalCluster& cluster) {
  std::printf(
      "\n== %zu nodes: gossip per algorithm under tally-loadgen over every node (%llu uniform "
      "keys, %d ms)\n%-16s %14s %16s %16s\n",
      cluster.size(), static_cast<unsigned long long>(settings.keys), settings.duration_ms,
      "algorithm", "decisions/s", "bytes/key-entry", "bytes/decision");
  for (const char* algorithm : {"sliding_counter", "token_bucket"}) {
    const GossipLoad load =
        RunLoad(settings, cluster, std::string("gossip-") + algorithm, algorithm);
    const double decisions_per_s = load.decisions_per_s;
    const double entries = load.entries;
    const double delta_bytes = load.delta_bytes;
    const double per_decision = load.bytes / (decisions_per_s * load.seconds);
    std::printf("%-16s %14.0f %16.1f %16.2f\n", algorithm, decisions_per_s,
                entries > 0 ? delta_bytes / entries : 0, per_decision);
    Json(std::string("{\"scenario\": \"gossip_per_algorithm\", \"nodes\": ") +
         std::to_string(cluster.size()) + ", \"algorithm\": \"" + algorithm +
         "\", \"decisions_per_s\": " + std::to_string(decisions_per_s) +
         ", \"bytes_per_key_entry\": " + std::to_string(entries > 0 ? delta_bytes / entries : 0) +
         ", \"gossip_bytes_per_decision\": " + std::to_string(per_decision) + "}");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  std::string json_path;
  CLI::App app("cluster_bench: tally clusters of 3 and 5 local nodes against local-only nodes");
  app.set_version_flag("--version", tally::VersionLine("cluster_bench"));
  app.add_option("--tallyd", settings.tallyd, "tallyd binary")->required();
  app.add_option("--loadgen", settings.loadgen, "tally-loadgen binary")->required();
  app.add_option("--loadgen-cpu", settings.loadgen_cpu, "Pin tally-loadgen to this CPU (-1: no)");
  app.add_option("--windows", settings.windows, "Windows per admission run")->capture_default_str();
  app.add_option("--samples", settings.samples, "Convergence samples")->capture_default_str();
  app.add_option("--trials", settings.trials, "Membership trials")->capture_default_str();
  app.add_option("--duration-ms", settings.duration_ms, "Each load run")->capture_default_str();
  app.add_option("--json", json_path, "Write the results here (a JSON array)");
  CLI::Option* bucket_only = app.add_flag("--bucket-only", settings.bucket_only,
                                          "Only the token bucket's figures (1c and 3b)");
  app.add_option(
         "--only", settings.only,
         "Only the counters' admission per window (1), failure detection (5), the "
         "replication overhead factor (6), the accuracy against one central node (7) or "
         "what a cluster costs by its size (8), or the agreement with the simulation (9); 8 "
         "and 9 run only when asked")
      ->check(
          CLI::IsMember({"admission", "membership", "overhead", "accuracy", "scale", "agreement"}))
      ->excludes(bucket_only);
  app.add_option("--overhead-checks", settings.overhead_checks, "Checks per run of part 6")
      ->capture_default_str();
  app.add_option("--overhead-runs", settings.overhead_runs,
                 "Pairs of runs (cluster, local-only) per row of part 6; the median is shown")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--accuracy-windows", settings.accuracy_windows,
                 "Windows per Poisson run of part 7")
      ->capture_default_str();
  app.add_option("--burst-trials", settings.burst_trials, "Coordinated bursts per mode in part 7")
      ->capture_default_str();
  app.add_option("--scale-nodes", settings.scale_nodes, "Cluster sizes of part 8")
      ->delimiter(',')
      ->check(CLI::Range(size_t{1}, size_t{64}))
      ->capture_default_str();
  app.add_option("--scale-quiet-s", settings.scale_quiet_s,
                 "Seconds at rest per size in part 8 (CPU, false suspicions)")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_flag("--scale-fill-one", settings.scale_fill_one,
               "Admit the scale part's keys through node 0 only (every node holds them; one "
               "admits): a key's memory is then one admitting node's, not all");
  app.add_option("--scale-keys", settings.scale_keys,
                 "Keys the nodes of part 8 hold at rest (0: none)")
      ->capture_default_str();
  app.add_option("--scale-load-rate", settings.scale_load_rate,
                 "Checks per second, over every node, of part 8's sustained load")
      ->check(CLI::Range(uint64_t{1}, uint64_t{10'000'000}))
      ->capture_default_str();
  app.add_option("--scale-load-s", settings.scale_load_s,
                 "Seconds of part 8's sustained load per size and run (0: none; 60 or more for "
                 "the documented figure, two full syncs)")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  app.add_option("--scale-load-keys", settings.scale_load_keys,
                 "Uniform keys of part 8's sustained load, far from their limits")
      ->check(CLI::Range(uint64_t{1}, uint64_t{10'000'000}))
      ->capture_default_str();
  app.add_option("--agreement-nodes", settings.agreement_nodes, "Cluster sizes of part 9")
      ->delimiter(',')
      ->check(CLI::Range(size_t{1}, size_t{64}))
      ->capture_default_str();
  app.add_option("--agreement-seed", settings.agreement_seed, "The simulation's seed in part 9")
      ->capture_default_str();
  app.add_option("--agreement-load-s", settings.agreement_load_s,
                 "Seconds of the simulation's load replayed in part 9")
      ->check(CLI::Range(1, 600))
      ->capture_default_str();
  app.add_option("--keep-dir", settings.keep_dir,
                 "Keep every cluster's data directories and node logs here (cluster-1, "
                 "cluster-2, ... in start order) instead of removing them");
  bool agreement_check = false;
  app.add_flag("--agreement-check", agreement_check,
               "Exit 1 when a measure of part 9 is not within 20% of the simulation's (a test)");
  std::vector<std::string> algorithm_names;
  app.add_option("--algorithms", algorithm_names,
                 "The algorithms of the admission (1) and accuracy (7) parts (default: "
                 "sliding_counter)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fixed_window", "sliding_log", "sliding_counter", "token_bucket"}));
  CLI11_PARSE(app, argc, argv);
  if (!algorithm_names.empty()) {
    settings.algorithms.clear();
    for (const std::string& name : algorithm_names) {
      settings.algorithms.push_back(*tally::ParseAlgorithm(name));
    }
  }

  const bool all = settings.only.empty() && !settings.bucket_only;
  if (settings.bucket_only) {
    for (const size_t nodes : {size_t{3}, size_t{5}}) {
      BucketAdmission(settings, nodes);
      auto cluster = Start(settings, nodes, true);
      BucketGossip(settings, *cluster);
    }
  }
  for (const size_t nodes : {size_t{3}, size_t{5}}) {
    if (!all) break;
    if (nodes == 3) {
      auto single = Start(settings, 1, false);
      settings.single_node_decisions_per_s = Loadgen(settings, *single, "single-node");
    }
    for (const tally::Algorithm algorithm : settings.algorithms) {
      Admission(settings, nodes, algorithm);
    }
    Partition(settings, nodes);
    BucketAdmission(settings, nodes);
    auto cluster = Start(settings, nodes, true);
    Convergence(settings, *cluster);
    Load(settings, *cluster, settings.single_node_decisions_per_s);
    BucketGossip(settings, *cluster);
    cluster.reset();
    Membership(settings, nodes);
  }
  for (const size_t nodes : {size_t{3}, size_t{5}}) {
    if (settings.only == "admission") {
      for (const tally::Algorithm algorithm : settings.algorithms) {
        Admission(settings, nodes, algorithm);
      }
    }
    if (settings.only == "membership") Membership(settings, nodes);
  }
  if (all || settings.only == "overhead") tally::bench::Overhead(settings);
  if (all || settings.only == "accuracy") {
    for (const size_t nodes : {size_t{3}, size_t{5}}) {
      for (const tally::Algorithm algorithm : settings.algorithms) {
        tally::bench::Accuracy(settings, nodes, algorithm);
      }
    }
  }
  if (settings.only == "scale") tally::bench::Scale(settings);
  bool agreed = true;
  if (settings.only == "agreement") {
    for (const size_t nodes : settings.agreement_nodes) {
      agreed = tally::bench::Agreement(settings, nodes) && agreed;
    }
  }
  if (!json_path.empty()) tally::bench::WriteJson(json_path);
  return agreement_check && !agreed ? 1 : 0;
}
