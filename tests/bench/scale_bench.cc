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
// keys through every node (far from their limits; through node 0 only with
// --scale-fill-one: every node holds every key, one admits on it, so 32
// nodes fit in memory), and the quiet window
// starts once their deferrals, their deltas and anti-entropy after them
// are over (SettleAfterFill): the nodes hold the keys at rest.
//
// Then, with --scale-load-s > 0, the replication overhead of a sustained
// load at every size (ScaleLoad): on a new cluster of the same shape, with
// the nodes' default gossip (anti-entropy every 30 s), tally-loadgen sends a
// fixed --scale-load-rate checks per second, spread evenly over the nodes,
// for --scale-load-s seconds (60 or more for the documented figure) over
// --scale-load-keys uniform keys far from their limits (overhead_bench.cc's
// "far": sliding_counter, 10^9 per 60 s). The nodes' CPU time (every tallyd,
// user + system) is read before the load and once the cluster's gossip is
// quiet after it (Settle: the deferred admissions the load left are sent
// and merged) and the digests of the ranges it changed have been sent and
// answered (WaitForAntiEntropy), so the window holds the whole load and
// what it made the nodes do. The same load then runs on as many local-only nodes, read after
// the same wait; the overhead is the cluster's CPU time per decision over
// theirs. The goals: at most 1.5x at 8 nodes and 2x at 32.
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
constexpr size_t kSeed = 0;  // every node's only seed: the cluster forms through it

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
  const std::unique_ptr<LocalCluster> cluster = Start(settings, nodes, true, {}, {kSeed});
  for (size_t member = 0; member < nodes; ++member) {
    UntilAllSee(*cluster, member + 1, MemberState::kAlive, nodes, start);
  }
  const double formation_ms = MsSince(start);
  if (settings.scale_keys > 0) {
    const std::string keys = std::to_string(settings.scale_keys);
    RunLoadgen(settings, *cluster, "fill-" + std::to_string(nodes),
               {"--keys", keys, "--requests", std::to_string(3 * settings.scale_keys),
                "--duration-ms", "0"},
               30 * 60'000, settings.scale_fill_one ? std::optional<size_t>(0) : std::nullopt);
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

// The sustained load's row for `nodes` nodes: the cluster's run, then the
// local-only nodes' (each gone before the next starts: at 64 nodes the
// cluster holds the keys 64 times over).
void ScaleLoadOne(const Settings& settings, size_t nodes) {
  // As many connections to every node: settings.connections rounded up to a
  // multiple of the size, so that each node gets the same share of the rate.
  Settings spread = settings;
  spread.connections =
      static_cast<int>(nodes * ((static_cast<size_t>(settings.connections) + nodes - 1) / nodes));
  const Workload far = FarWorkload(settings.scale_load_keys);
  const std::vector<std::string> load_args = {"--rate", std::to_string(settings.scale_load_rate),
                                              "--duration-ms",
                                              std::to_string(settings.scale_load_s * 1'000)};
  // Connecting and the last replies, beyond the load itself.
  const int timeout_ms = settings.scale_load_s * 1'000 + 120'000;
  const std::string size = std::to_string(nodes);
  CpuRun gossiping;
  {
    const std::unique_ptr<LocalCluster> cluster = Start(settings, nodes, true, {}, {kSeed});
    gossiping = MeasureCpu(spread, *cluster, "scale-load-" + size, far, load_args, -1, timeout_ms,
                           /*anti_entropy=*/true);
  }
  CpuRun local;
  {
    const std::unique_ptr<LocalCluster> cluster = Start(settings, nodes, false);
    local = MeasureCpu(spread, *cluster, "scale-load-local-" + size, far, load_args,
                       gossiping.settled.ms, timeout_ms);
  }
  const double overhead = gossiping.per_decision_us() / local.per_decision_us();
  const size_t links = nodes * (nodes - 1);
  const double digests_per_link =
      links > 0 ? static_cast<double>(gossiping.digests_sent) / static_cast<double>(links) : 0;
  const double decisions_per_s =
      static_cast<double>(gossiping.decisions) / static_cast<double>(settings.scale_load_s);
  const double entries_per_decision =
      static_cast<double>(gossiping.entries_sent) / static_cast<double>(gossiping.decisions);
  std::printf(
      "%6zu %11.0f %8.1f %8.1f %8.1f %12.2f %12.2f %9.2f %9.2f %16.0f %7llu %10.0f%s %11llu\n",
      nodes, decisions_per_s, gossiping.cpu_s, gossiping.cpu_after_load_s, local.cpu_s,
      gossiping.per_decision_us(), local.per_decision_us(), overhead, entries_per_decision,
      digests_per_link, static_cast<unsigned long long>(gossiping.ranges_sent),
      gossiping.settled.ms, gossiping.settled.converged ? " " : "!",
      static_cast<unsigned long long>(gossiping.keys_denied));
  std::fflush(stdout);
  Json("{\"scenario\": \"scale_load\", \"nodes\": " + size +
       ", \"rate_per_s\": " + std::to_string(settings.scale_load_rate) +
       ", \"seconds\": " + std::to_string(settings.scale_load_s) +
       ", \"keys\": " + std::to_string(settings.scale_load_keys) +
       ", \"connections\": " + std::to_string(spread.connections) +
       ", \"decisions\": " + std::to_string(gossiping.decisions) + ", \"local_decisions\": " +
       std::to_string(local.decisions) + ", \"cluster_cpu_s\": " + std::to_string(gossiping.cpu_s) +
       ", \"local_cpu_s\": " + std::to_string(local.cpu_s) +
       ", \"cluster_cpu_after_load_s\": " + std::to_string(gossiping.cpu_after_load_s) +
       ", \"cluster_us_per_decision\": " + std::to_string(gossiping.per_decision_us()) +
       ", \"local_us_per_decision\": " + std::to_string(local.per_decision_us()) +
       ", \"overhead\": " + std::to_string(overhead) +
       ", \"full_syncs\": " + std::to_string(gossiping.full_syncs_sent) +
       ", \"digests\": " + std::to_string(gossiping.digests_sent) +
       ", \"digests_per_link\": " + std::to_string(digests_per_link) +
       ", \"ranges_sent\": " + std::to_string(gossiping.ranges_sent) +
       ", \"gossip_entries_per_decision\": " + std::to_string(entries_per_decision) +
       ", \"settle_ms\": " + std::to_string(gossiping.settled.ms) +
       ", \"converged\": " + (gossiping.settled.converged ? "true" : "false") +
       ", \"keys_denied\": " + std::to_string(gossiping.keys_denied) +
       ", \"local_keys_denied\": " + std::to_string(local.keys_denied) + "}");
}

void ScaleLoad(const Settings& settings) {
  std::printf(
      "\n== scale, sustained load: tally-loadgen at %llu checks/s in all, spread evenly over "
      "the nodes, for %d s over %llu uniform keys far from their limits (sliding_counter, 10^9 "
      "per 60 s), on a cluster (default gossip: anti-entropy every 30 s) and on as many "
      "local-only nodes; CPU seconds of every tallyd (/proc, user + system) from before the load "
      "until the cluster's gossip is quiet (at most %d ms after it, else settle_ms is marked !) "
      "and its digests of what the load changed have been sent and answered, the local-only "
      "nodes after the same wait; overhead = cluster us/decision / local-only (goals: at most "
      "1.5 at 8 nodes, 2 at 32); entries/d: delta entries sent per decision; ranges: sent whole "
      "because a digest differed; after_s: of cpu_s, after the load ended\n%6s %11s %8s %8s %8s "
      "%12s %12s %9s %9s %16s %7s %11s %11s\n",
      static_cast<unsigned long long>(settings.scale_load_rate), settings.scale_load_s,
      static_cast<unsigned long long>(settings.scale_load_keys), kMostSettleMs, "nodes",
      "decisions/s", "cpu_s", "after_s", "local_s", "cluster_us/d", "local_us/d", "overhead",
      "entries/d", "digests_per_link", "ranges", "settle_ms", "denied_keys");
  for (const size_t nodes : settings.scale_nodes) ScaleLoadOne(settings, nodes);
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
  if (settings.scale_load_s > 0) ScaleLoad(settings);
}

}  // namespace tally::bench
