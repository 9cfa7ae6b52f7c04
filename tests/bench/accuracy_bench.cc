// Accuracy against one central node (cluster_bench.cc, part 7): the same
// arrivals, replayed against a cluster in each replication mode and against
// one local-only node, and what each admits.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cluster/demand.h"
#include "tests/bench/cluster_bench.h"

namespace tally::bench {
namespace {

using cluster::Arrival;
using cluster::LocalCluster;

// The replication modes the daemon offers, by the flags that choose them:
// a mode added here gets its rows in every table of this part.
struct ReplicationMode {
  const char* name;
  std::vector<std::string> flags;
};
const std::vector<ReplicationMode> kReplicationModes = {
    {"tally", {}}, {"tally+plain", {"--plain-gossip"}}, {"tally+escrow", {"--escrow"}}};

constexpr uint64_t kLimit = 100;
constexpr uint64_t kWindowMs = 1'000;
constexpr double kPoissonDemands[] = {0.5, 0.8};  // x the limit
constexpr uint64_t kBurstFactor = 5;              // x the limit
constexpr int64_t kBurstSpanMs = 20;
constexpr size_t kBurstStreamsPerNode = 4;  // so that the clients keep up with the burst

// One run of a schedule on one key: its name, arrivals and length.
struct Scenario {
  std::string key;
  std::vector<Arrival> arrivals;
  int windows = 1;
};

// What a run admitted per window, and the span of its sends (first to last).
struct Admitted {
  std::vector<uint64_t> per_window;
  double span_ms = 0;
};

Admitted Drive(const Settings& settings, LocalCluster& cluster, const LimitSpec& spec,
               const Scenario& scenario) {
  cluster::DemandOptions demand;
  demand.spec = spec;
  demand.key = scenario.key;
  demand.arrivals = scenario.arrivals;
  demand.windows = scenario.windows;
  cluster::History history;
  demand.history = &history;
  std::vector<cluster::WindowTally> tallies;
  {
    PinnedTo pinned(settings.loadgen_cpu);
    if (Status status = cluster::DriveDemand(cluster, demand, &tallies); !status.ok()) {
      Die("demand", status);
    }
  }
  Admitted admitted;
  for (const auto& tally : tallies) admitted.per_window.push_back(tally.total_admitted());
  const std::vector<cluster::Observed> sorted = history.Sorted();
  int64_t first_ms = INT64_MAX, last_ms = INT64_MIN;
  for (const cluster::Observed& observed : sorted) {
    first_ms = std::min(first_ms, observed.sent_ms);
    last_ms = std::max(last_ms, observed.sent_ms);
  }
  admitted.span_ms = sorted.empty() ? 0 : static_cast<double>(last_ms - first_ms);
  return admitted;
}

// Admitted over the central node's: over the run, and the lowest and highest
// window (windows in which central admitted nothing are left out).
struct Ratio {
  double run = 0, lowest = 1e9, highest = 0;
};

Ratio RatioOf(const Admitted& mine, const Admitted& central) {
  Ratio ratio;
  double sum = 0, central_sum = 0;
  for (size_t w = 0; w < mine.per_window.size() && w < central.per_window.size(); ++w) {
    const auto admitted = static_cast<double>(mine.per_window[w]);
    const auto theirs = static_cast<double>(central.per_window[w]);
    sum += admitted;
    central_sum += theirs;
    if (theirs == 0) continue;
    ratio.lowest = std::min(ratio.lowest, admitted / theirs);
    ratio.highest = std::max(ratio.highest, admitted / theirs);
  }
  ratio.run = central_sum > 0 ? sum / central_sum : 0;
  return ratio;
}

}  // namespace

void Accuracy(const Settings& settings, size_t nodes, Algorithm algorithm) {
  const LimitSpec spec{algorithm, kLimit, kWindowMs};
  const std::string algorithm_name(AlgorithmName(algorithm));
  // The schedules: Poisson arrivals below the limit, over the nodes (one
  // stream each), and coordinated bursts on fresh keys, dealt to every node
  // in turn. The central node gets the same streams.
  std::vector<Scenario> scenarios;
  for (const double factor : kPoissonDemands) {
    const double rate_per_s =
        factor * static_cast<double>(kLimit) * 1'000.0 / static_cast<double>(kWindowMs);
    const auto windows = static_cast<int64_t>(settings.accuracy_windows);
    scenarios.push_back(
        {"poisson-" + std::to_string(static_cast<int>(factor * 100)),
         cluster::PoissonArrivals(rate_per_s, windows * static_cast<int64_t>(kWindowMs), nodes,
                                  1'000 * nodes + static_cast<uint64_t>(factor * 10)),
         settings.accuracy_windows});
  }
  const size_t poisson_scenarios = scenarios.size();
  for (int trial = 0; trial < settings.burst_trials; ++trial) {
    scenarios.push_back(
        {"burst-" + std::to_string(trial),
         cluster::BurstArrivals(kBurstFactor * kLimit, kBurstSpanMs, nodes * kBurstStreamsPerNode),
         1});
  }
  std::vector<Admitted> central;
  {
    auto one = Start(settings, 1, false);
    for (const Scenario& scenario : scenarios)
      central.push_back(Drive(settings, *one, spec, scenario));
  }

  std::printf(
      "\n== %zu nodes: accuracy against one central node for the same arrivals (%s, "
      "limit 100 per 1000 ms): admitted / central's admissions\n"
      "Poisson arrivals over the nodes, %d windows:\n%-14s %-7s %8s %10s %10s %10s %10s\n",
      nodes, algorithm_name.c_str(), settings.accuracy_windows, "mode", "demand", "arrivals",
      "central", "run", "min_window", "max_window");
  std::vector<std::vector<Admitted>> by_mode;
  for (const ReplicationMode& mode : kReplicationModes) {
    auto cluster = Start(settings, nodes, true, mode.flags);
    std::vector<Admitted>& runs = by_mode.emplace_back();
    for (const Scenario& scenario : scenarios)
      runs.push_back(Drive(settings, *cluster, spec, scenario));
  }
  for (size_t m = 0; m < kReplicationModes.size(); ++m) {
    for (size_t s = 0; s < poisson_scenarios; ++s) {
      const Ratio ratio = RatioOf(by_mode[m][s], central[s]);
      uint64_t central_admitted = 0;
      for (const uint64_t admitted : central[s].per_window) central_admitted += admitted;
      std::printf("%-14s %-7s %8zu %10llu %10.3f %10.3f %10.3f\n", kReplicationModes[m].name,
                  (std::to_string(kPoissonDemands[s]).substr(0, 3) + "x").c_str(),
                  scenarios[s].arrivals.size(), static_cast<unsigned long long>(central_admitted),
                  ratio.run, ratio.lowest, ratio.highest);
      Json("{\"scenario\": \"accuracy_poisson\", \"nodes\": " + std::to_string(nodes) +
           ", \"algorithm\": \"" + algorithm_name + "\", \"mode\": \"" + kReplicationModes[m].name +
           "\", \"demand_x_limit\": " + std::to_string(kPoissonDemands[s]) +
           ", \"windows\": " + std::to_string(settings.accuracy_windows) +
           ", \"arrivals\": " + std::to_string(scenarios[s].arrivals.size()) +
           ", \"central_admitted\": " + std::to_string(central_admitted) +
           ", \"admitted_over_central_run\": " + std::to_string(ratio.run) +
           ", \"admitted_over_central_min_window\": " + std::to_string(ratio.lowest) +
           ", \"admitted_over_central_max_window\": " + std::to_string(ratio.highest) + "}");
    }
  }

  std::printf(
      "A coordinated burst on a fresh key, %llux the limit within %lld ms over every node "
      "(%zu clients), %d trials:\n%-14s %10s %10s %10s %14s\n",
      static_cast<unsigned long long>(kBurstFactor), static_cast<long long>(kBurstSpanMs),
      nodes * kBurstStreamsPerNode, settings.burst_trials, "mode", "central", "mean", "max",
      "max_span_ms");
  for (size_t m = 0; m < kReplicationModes.size(); ++m) {
    double sum = 0, largest = 0, span_ms = 0, central_sum = 0;
    for (size_t s = poisson_scenarios; s < scenarios.size(); ++s) {
      const double ratio = RatioOf(by_mode[m][s], central[s]).run;
      sum += ratio;
      largest = std::max(largest, ratio);
      span_ms = std::max({span_ms, by_mode[m][s].span_ms, central[s].span_ms});
      central_sum += static_cast<double>(central[s].per_window[0]);
    }
    const auto trials = static_cast<double>(scenarios.size() - poisson_scenarios);
    std::printf("%-14s %10.1f %10.3f %10.3f %14.1f\n", kReplicationModes[m].name,
                central_sum / trials, sum / trials, largest, span_ms);
    Json("{\"scenario\": \"accuracy_burst\", \"nodes\": " + std::to_string(nodes) +
         ", \"algorithm\": \"" + algorithm_name + "\", \"mode\": \"" + kReplicationModes[m].name +
         "\", \"burst_x_limit\": " + std::to_string(kBurstFactor) + ", \"burst_span_ms\": " +
         std::to_string(kBurstSpanMs) + ", \"trials\": " + std::to_string(settings.burst_trials) +
         ", \"central_admitted_mean\": " + std::to_string(central_sum / trials) +
         ", \"admitted_over_central_mean\": " + std::to_string(sum / trials) +
         ", \"admitted_over_central_max\": " + std::to_string(largest) +
         ", \"measured_span_ms_max\": " + std::to_string(span_ms) + "}");
  }
}

}  // namespace tally::bench
