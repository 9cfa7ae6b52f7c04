#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <numeric>
#include <thread>
#include <tuple>

#include "cluster/cpu_usage.h"
#include "cluster/node_process.h"
#include "tests/bench/cluster_bench.h"

namespace tally::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSettlePollMs = 100;

std::vector<std::string> json_rows;

// Whether every node holds the same counts (Inspect) of kSampledKeys keys of
// the workload, spread over its key space.
bool Agree(cluster::LocalCluster& cluster, const Workload& workload) {
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

}  // namespace

void Json(const std::string& row) { json_rows.push_back(row); }

void WriteJson(const std::string& path) {
  std::ofstream out(path);
  out << "[\n";
  for (size_t i = 0; i < json_rows.size(); ++i)
    out << json_rows[i] << (i + 1 < json_rows.size() ? ",\n" : "\n");
  out << "]\n";
  std::printf("\nresults: %s\n", path.c_str());
}

void Die(const std::string& what, const Status& status) {
  std::fprintf(stderr, "cluster_bench: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::exit(1);
}

std::unique_ptr<cluster::LocalCluster> Start(const Settings& settings, size_t nodes, bool gossip,
                                             std::vector<std::string> flags,
                                             std::vector<size_t> seeds) {
  cluster::LocalCluster::Options options;
  options.tallyd_path = settings.tallyd;
  options.nodes = nodes;
  options.gossip = gossip;
  options.seeds = std::move(seeds);
  options.start_timeout_ms = 60'000;
  if (!settings.keep_dir.empty()) {
    static int clusters_started = 0;
    options.root = settings.keep_dir + "/cluster-" + std::to_string(++clusters_started);
  }
  options.node_args = {"--memory-only"};  // persistence has its own benchmark
  options.node_args.insert(options.node_args.end(), flags.begin(), flags.end());
  std::unique_ptr<cluster::LocalCluster> cluster;
  if (Status status = cluster::LocalCluster::Start(options, &cluster); !status.ok()) {
    Die("start", status);
  }
  return cluster;
}

std::vector<double> NodeCpuSeconds(cluster::LocalCluster& cluster) {
  std::vector<double> seconds(cluster.size());
  for (size_t node = 0; node < cluster.size(); ++node) {
    if (Status status = cluster::ProcessCpuSeconds(cluster.process(node).pid(), &seconds[node]);
        !status.ok()) {
      Die("cpu time", status);
    }
  }
  return seconds;
}

double CpuSeconds(cluster::LocalCluster& cluster) {
  const std::vector<double> by_node = NodeCpuSeconds(cluster);
  return std::accumulate(by_node.begin(), by_node.end(), 0.0);
}

uint64_t SumOfStats(cluster::LocalCluster& cluster, uint64_t protocol::StatsReply::*field) {
  uint64_t sum = 0;
  for (size_t node = 0; node < cluster.size(); ++node) {
    protocol::StatsReply stats;
    if (Status status = cluster.Stats(node, &stats); !status.ok()) Die("stats", status);
    sum += stats.*field;
  }
  return sum;
}

double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

double UntilAllSee(cluster::LocalCluster& cluster, uint64_t node_id, protocol::MemberState state,
                   size_t except, std::chrono::steady_clock::time_point start) {
  while (MsSince(start) < 30'000) {
    bool all = true;
    for (size_t node = 0; node < cluster.size() && all; ++node) {
      if (node == except || !cluster.running(node)) continue;
      protocol::StatsReply stats;
      all = cluster.Stats(node, &stats).ok() &&
            std::any_of(stats.members.begin(), stats.members.end(), [&](const auto& member) {
              return member.node_id == node_id && member.state == state;
            });
    }
    if (all) return MsSince(start);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Die("membership", Status::Unavailable("no agreement within 30 s"));
}

nlohmann::json RunLoadgen(const Settings& settings, cluster::LocalCluster& cluster,
                          const std::string& label, const std::vector<std::string>& load_args,
                          int timeout_ms, std::optional<size_t> only_node) {
  std::vector<std::string> argv;
  if (settings.loadgen_cpu >= 0)
    argv = {"/usr/bin/taskset", "-c", std::to_string(settings.loadgen_cpu)};
  argv.insert(argv.end(), {settings.loadgen, "--target", "tally", "--connections",
                           std::to_string(settings.connections), "--depth", "16", "--label", label,
                           "--no-header"});
  argv.insert(argv.end(), load_args.begin(), load_args.end());
  for (size_t node = 0; node < cluster.size(); ++node) {
    if (only_node && node != *only_node) continue;
    argv.insert(argv.end(),
                {"--address", "127.0.0.1:" + std::to_string(cluster.client_port(node))});
  }
  const std::string json_path = cluster.root() + "/" + label + ".json";
  argv.insert(argv.end(), {"--json", json_path});
  std::string out;
  if (cluster::RunCommand(argv, &out, timeout_ms) != 0) {
    Die("tally-loadgen", Status::IOError(out));
  }
  std::ifstream in(json_path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json result = nlohmann::json::parse(text, nullptr, false);
  if (result.is_discarded() || !result.contains("decisions_per_s")) {
    Die("tally-loadgen", Status::IOError("no decisions_per_s in " + text));
  }
  return result;
}

Workload FarWorkload(uint64_t keys) { return {"far", "uniform", keys, 1'000'000'000, 60'000}; }

Settled Settle(cluster::LocalCluster& cluster, const Workload& workload, double settle_ms) {
  const Clock::time_point start = Clock::now();
  Clock::time_point changed = start;
  const auto entries_sent = [&] {
    return SumOfStats(cluster, &protocol::StatsReply::gossip_delta_entries_sent);
  };
  uint64_t entries = entries_sent();
  Settled settled;
  for (;;) {
    if (settle_ms >= 0 && MsSince(start) >= settle_ms) break;
    if (settle_ms < 0 && MsSince(changed) >= kQuietMs && Agree(cluster, workload)) break;
    if (settle_ms < 0 && MsSince(start) >= kMostSettleMs) {
      settled.converged = false;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kSettlePollMs));
    const uint64_t now_entries = entries_sent();
    if (now_entries != entries) changed = Clock::now();
    entries = now_entries;
  }
  settled.ms = MsSince(start);
  return settled;
}

// After a load: polls every 500 ms until the nodes' digests sent moved past
// digests_before and then stood still for an interval (30 s) and 5 s more:
// the ranges quiet at a later interval than the first have had theirs sent,
// and the rechecks and the ranges asked for have gone. At most
// kMostAntiEntropyMs; returns how long it waited.
double WaitForAntiEntropy(cluster::LocalCluster& cluster, uint64_t digests_before) {
  constexpr int kMostAntiEntropyMs = 120'000;  // quiet after 2 x 10 s deferral, then intervals
  const Clock::time_point start = Clock::now();
  Clock::time_point changed = start;
  uint64_t digests = digests_before;
  while (MsSince(start) < kMostAntiEntropyMs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const uint64_t now_digests = SumOfStats(cluster, &protocol::StatsReply::gossip_digests_sent);
    if (now_digests != digests) changed = Clock::now();
    digests = now_digests;
    if (digests > digests_before && MsSince(changed) >= 35'000) break;
  }
  return MsSince(start);
}

CpuRun MeasureCpu(const Settings& settings, cluster::LocalCluster& cluster,
                  const std::string& label, const Workload& workload,
                  const std::vector<std::string>& load_args, double settle_ms, int timeout_ms,
                  bool anti_entropy) {
  const double cpu_before = CpuSeconds(cluster);
  const uint64_t entries_before =
      SumOfStats(cluster, &protocol::StatsReply::gossip_delta_entries_sent);
  const uint64_t syncs_before = SumOfStats(cluster, &protocol::StatsReply::gossip_full_syncs_sent);
  const uint64_t digests_before = SumOfStats(cluster, &protocol::StatsReply::gossip_digests_sent);
  const uint64_t ranges_before = SumOfStats(cluster, &protocol::StatsReply::gossip_ranges_sent);
  std::vector<std::string> args = {"--algorithm",
                                   "sliding_counter",
                                   "--keys",
                                   std::to_string(workload.keys),
                                   "--distribution",
                                   workload.distribution,
                                   "--limit",
                                   std::to_string(workload.limit),
                                   "--window-ms",
                                   std::to_string(workload.window_ms),
                                   "--count-denied-keys"};
  args.insert(args.end(), load_args.begin(), load_args.end());
  const nlohmann::json load = RunLoadgen(settings, cluster, label, args, timeout_ms);
  const double cpu_load_end = CpuSeconds(cluster);
  CpuRun run;
  run.settled = Settle(cluster, workload, settle_ms);
  if (anti_entropy && settle_ms < 0) run.settled.ms += WaitForAntiEntropy(cluster, digests_before);
  run.cpu_s = CpuSeconds(cluster) - cpu_before;
  run.cpu_after_load_s = CpuSeconds(cluster) - cpu_load_end;
  run.entries_sent =
      SumOfStats(cluster, &protocol::StatsReply::gossip_delta_entries_sent) - entries_before;
  run.full_syncs_sent =
      SumOfStats(cluster, &protocol::StatsReply::gossip_full_syncs_sent) - syncs_before;
  run.digests_sent =
      SumOfStats(cluster, &protocol::StatsReply::gossip_digests_sent) - digests_before;
  run.ranges_sent = SumOfStats(cluster, &protocol::StatsReply::gossip_ranges_sent) - ranges_before;
  run.decisions = load["decisions"];
  run.keys_denied = load["keys_denied"];
  return run;
}

}  // namespace tally::bench
