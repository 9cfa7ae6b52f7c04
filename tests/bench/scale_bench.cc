// What a cluster costs by its size (cluster_bench.cc, part 8): for each
// size, memory-only nodes that all list node 0 as their only seed.
//  - formation: from starting the processes until every node shows every
//    member alive;
//  - at rest, with no keys, over --scale-quiet-s seconds: CPU per node (% of
//    one core, from /proc) and RSS per node at the end; every node is polled
//    every 2 s and any member it shows not alive is a false suspicion;
//  - failure detection: the last node SIGKILLed until every other node shows
//    it dead; restarted until all show it alive; SIGTERMed until all show it
//    left.
// With --scale-keys N, tally-loadgen first admits 3N checks over N uniform
// keys through every node (far from their limits), and the quiet window
// starts once their deferrals, their deltas and the full syncs after them
// are over (SettleAfterFill): the nodes hold the keys at rest. The window
// may hold one of the complete full syncs that go every tenth interval. Not measured here yet: the
// replication overhead of a sustained load at every size.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/bench/cluster_bench.h"
#include "tests/support/proc_stats.h"

namespace tally::bench {
namespace {

using cluster::LocalCluster;
using Clock = std::chrono::steady_clock;
using protocol::MemberState;

constexpr int kPollMs = 2'000;

// Members shown not alive, summed over every node's view (0 when all agree all are alive).
size_t NotAlive(LocalCluster& cluster) {
  size_t not_alive = 0;
  for (size_t node = 0; node < cluster.size(); ++node) {
    protocol::StatsReply stats;
    if (Status status = cluster.Stats(node, &stats); !status.ok()) Die("stats", status);
    for (const protocol::MemberStatus& member : stats.members) {
      if (member.state != MemberState::kAlive) ++not_alive;
    }
  }
  return not_alive;
}

// After the fill: deferrals end (10 s), the deltas land, and the next full
// sync of each link (30 s later at most) sends what changed since the one
// before. Waits 40 s, then until the nodes spend under kSettledCpuPercent of
// a core each, on average, over two consecutive 5 s spans (at most 10 min).
void SettleAfterFill(LocalCluster& cluster) {
  constexpr double kSettledCpuPercent = 1.0;
  std::this_thread::sleep_for(std::chrono::seconds(40));
  int quiet_spans = 0;
  const Clock::time_point start = Clock::now();
  while (quiet_spans < 2 && MsSince(start) < 600'000) {
    const std::vector<double> before = NodeCpuSeconds(cluster);
    std::this_thread::sleep_for(std::chrono::seconds(5));
    const std::vector<double> after = NodeCpuSeconds(cluster);
    double busy_s = 0;
    for (size_t node = 0; node < cluster.size(); ++node) busy_s += after[node] - before[node];
    const double percent = busy_s / 5.0 * 100.0 / static_cast<double>(cluster.size());
    quiet_spans = percent < kSettledCpuPercent ? quiet_spans + 1 : 0;
  }
}

void ScaleOne(const Settings& settings, size_t nodes) {
  const Clock::time_point start = Clock::now();
  cluster::LocalCluster::Options options;
  options.tallyd_path = settings.tallyd;
  options.nodes = nodes;
  options.node_args = {"--memory-only"};
  options.seeds = {0};
  options.start_timeout_ms = 60'000;
  std::unique_ptr<LocalCluster> cluster;
  if (Status status = LocalCluster::Start(options, &cluster); !status.ok()) Die("start", status);
  for (size_t member = 0; member < nodes; ++member) {
    UntilAllSee(*cluster, member + 1, MemberState::kAlive, nodes, start);
  }
  const double formation_ms = MsSince(start);
  if (settings.scale_keys > 0) {
    const std::string keys = std::to_string(settings.scale_keys);
    RunLoadgen(settings, *cluster, "fill-" + std::to_string(nodes),
               {"--keys", keys, "--requests", std::to_string(3 * settings.scale_keys),
                "--duration-ms", "0"},
               30 * 60'000);
    SettleAfterFill(*cluster);
  }

  const std::vector<double> cpu_before = NodeCpuSeconds(*cluster);
  const Clock::time_point quiet_start = Clock::now();
  size_t false_suspicions = 0;
  while (MsSince(quiet_start) < settings.scale_quiet_s * 1000.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    false_suspicions += NotAlive(*cluster);
  }
  const double quiet_s = MsSince(quiet_start) / 1000.0;
  const std::vector<double> cpu_after = NodeCpuSeconds(*cluster);
  double cpu_sum = 0, cpu_max = 0, rss_sum = 0;
  for (size_t node = 0; node < nodes; ++node) {
    const double percent = (cpu_after[node] - cpu_before[node]) / quiet_s * 100.0;
    cpu_sum += percent;
    cpu_max = std::max(cpu_max, percent);
    rss_sum += static_cast<double>(testing::ResidentKb(cluster->process(node).pid())) / 1024.0;
  }

  const size_t victim = nodes - 1;
  Clock::time_point event = Clock::now();
  if (Status status = cluster->Kill(victim); !status.ok()) Die("kill", status);
  const double dead_ms = UntilAllSee(*cluster, victim + 1, MemberState::kDead, victim, event);
  event = Clock::now();
  if (Status status = cluster->Restart(victim); !status.ok()) Die("restart", status);
  const double rejoin_ms = UntilAllSee(*cluster, victim + 1, MemberState::kAlive, nodes, event);
  event = Clock::now();
  if (Status status = cluster->Stop(victim); !status.ok()) Die("stop", status);
  const double left_ms = UntilAllSee(*cluster, victim + 1, MemberState::kLeft, victim, event);

  const double cpu_mean = cpu_sum / static_cast<double>(nodes);
  const double rss_mean = rss_sum / static_cast<double>(nodes);
  std::printf("%6zu %13.0f %13.2f %12.2f %12.1f %17zu %10.0f %10.0f %10.0f\n", nodes, formation_ms,
              cpu_mean, cpu_max, rss_mean, false_suspicions, dead_ms, rejoin_ms, left_ms);
  std::fflush(stdout);
  Json("{\"scenario\": \"scale\", \"nodes\": " + std::to_string(nodes) + ", \"keys\": " +
       std::to_string(settings.scale_keys) + ", \"formation_ms\": " + std::to_string(formation_ms) +
       ", \"idle_cpu_percent_mean\": " + std::to_string(cpu_mean) + ", \"idle_cpu_percent_max\": " +
       std::to_string(cpu_max) + ", \"rss_mb_mean\": " + std::to_string(rss_mean) +
       ", \"quiet_s\": " + std::to_string(quiet_s) + ", \"false_suspicions\": " +
       std::to_string(false_suspicions) + ", \"dead_after_kill_ms\": " + std::to_string(dead_ms) +
       ", \"alive_after_restart_ms\": " + std::to_string(rejoin_ms) +
       ", \"left_after_term_ms\": " + std::to_string(left_ms) + "}");
}

}  // namespace

void Scale(const Settings& settings) {
  std::printf(
      "\n== scale: memory-only nodes, one seed, %llu keys; at rest for %d s (every node polled "
      "every %d ms)\n%6s %13s %13s %12s %12s %17s %10s %10s %10s\n",
      static_cast<unsigned long long>(settings.scale_keys), settings.scale_quiet_s, kPollMs,
      "nodes", "formation_ms", "idle_cpu_%", "max_cpu_%", "rss_mb", "false_suspicions", "dead_ms",
      "rejoin_ms", "left_ms");
  for (const size_t nodes : settings.scale_nodes) ScaleOne(settings, nodes);
}

}  // namespace tally::bench
