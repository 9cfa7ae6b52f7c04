// Agreement between the simulation and real processes (cluster_bench.cc,
// part 9). tally-sim runs one seed at N nodes without faults; the requests
// its clients sent, as the simulation served them, are then replayed at the
// same times (from a whole second of the wall clock, so that windows line
// up) to the same nodes of a local cluster of N tallyd processes, and each
// also to one local-only node, the central limiter. Both sides use the same
// gossip parameters. Printed side by side: delta entries sent per decision,
// and admitted / central by kind of load.
//
// The simulation delivers a message in 1 to 5 ms and decides in no time;
// the real cluster's clients send a little late in a burst (the lateness is
// reported), and loopback is faster than the simulated network.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "node/common/clock.h"
#include "node/sim/simulation.h"
#include "tests/bench/cluster_bench.h"

namespace tally::bench {
namespace {

using sim::kLoadKinds;
using sim::LoadKind;
using std::chrono::steady_clock;

// Both sides wait at most this long to send admissions far from their
// limits, so that the run's settle (three waits, then quiet) is short.
constexpr int64_t kMaxDelayMs = 2'000;
constexpr int64_t kSettleMs = 12'000;
// Clients per node: a burst of 5x the limit within 20 ms needs several.
constexpr size_t kClientsPerNode = 4;
// The agreement asked for: the cluster's figure within 20% of the simulation's.
constexpr double kAgreeWithin = 0.2;
constexpr int64_t kLateMs = 5;

// What one side measured over a run.
struct Figures {
  uint64_t decisions = 0;
  uint64_t delta_entries = 0;
  uint64_t admitted[kLoadKinds] = {};
  uint64_t central[kLoadKinds] = {};
  // The replay only: sends later than kLateMs after they were due, and the latest.
  uint64_t late = 0;
  int64_t latest_ms = 0;

  double EntriesPerDecision() const {
    return decisions == 0 ? 0 : static_cast<double>(delta_entries) / static_cast<double>(decisions);
  }
  double OverCentral(int kind) const {
    return central[kind] == 0
               ? 0
               : static_cast<double>(admitted[kind]) / static_cast<double>(central[kind]);
  }
  void Add(const Figures& other) {
    decisions += other.decisions;
    for (int kind = 0; kind < kLoadKinds; ++kind) {
      admitted[kind] += other.admitted[kind];
      central[kind] += other.central[kind];
    }
    late += other.late;
    latest_ms = std::max(latest_ms, other.latest_ms);
  }
};

Figures Simulate(const Settings& settings, size_t nodes, sim::SimTrace* trace) {
  sim::SimOptions options;
  options.nodes = nodes;
  options.seed = settings.agreement_seed;
  options.seconds = settings.agreement_load_s + kSettleMs / 1'000;
  options.settle_ms = kSettleMs;
  options.node.gossip_max_delay_ms = kMaxDelayMs;
  options.trace = trace;
  const sim::SimReport report = sim::RunSimulation(options);
  if (!report.ok) {
    std::fprintf(stderr, "cluster_bench: the simulation failed: %s\n", report.violation.c_str());
    std::exit(1);
  }
  Figures figures;
  figures.decisions = report.decisions;
  figures.delta_entries = report.delta_entries;
  for (int kind = 0; kind < kLoadKinds; ++kind) {
    figures.admitted[kind] = report.totals[kind].admitted;
    figures.central[kind] = report.totals[kind].central;
  }
  return figures;
}

int64_t WallMs() { return SystemClock::Default()->WallMs(); }

// Sends one client's share of the trace (`mine`, indexes into trace.served)
// to `node` and to the central node, each at its time after `start`.
Figures Client(cluster::LocalCluster& cluster, cluster::LocalCluster& central, size_t node,
               const sim::SimTrace& trace, const std::vector<size_t>& mine,
               steady_clock::time_point start) {
  std::unique_ptr<protocol::Client> to_node, to_central;
  if (Status status = cluster.Connect(node, &to_node); !status.ok()) Die("connect", status);
  if (Status status = central.Connect(0, &to_central); !status.ok()) Die("connect", status);
  Figures figures;
  for (const size_t index : mine) {
    const sim::SimTrace::Served& served = trace.served[index];
    const steady_clock::time_point due = start + std::chrono::milliseconds(served.at_ms);
    std::this_thread::sleep_until(due);
    const int64_t late_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - due).count();
    figures.late += late_ms > kLateMs ? 1 : 0;
    figures.latest_ms = std::max(figures.latest_ms, late_ms);
    const sim::SimKey& key = trace.keys[served.key];
    const protocol::Check check{key.key, key.spec, 1};
    protocol::CheckOutcome at_node, at_central;
    for (auto [client, outcome] :
         {std::pair{to_node.get(), &at_node}, std::pair{to_central.get(), &at_central}}) {
      if (Status status = client->Check(check, outcome); !status.ok()) Die("check", status);
      if (outcome->error != protocol::ErrorCode::kOk) {
        Die("check", Status::Unavailable(outcome->error_message + " (" + key.key + ")"));
      }
    }
    const auto kind = static_cast<int>(key.kind);
    ++figures.decisions;
    figures.admitted[kind] += at_node.decision.allowed ? 1 : 0;
    figures.central[kind] += at_central.decision.allowed ? 1 : 0;
  }
  return figures;
}

Figures Replay(const Settings& settings, size_t nodes, const sim::SimTrace& trace) {
  auto cluster =
      Start(settings, nodes, true, {"--gossip-max-delay-ms", std::to_string(kMaxDelayMs)});
  auto central = Start(settings, 1, false);
  // Each node's requests dealt to its clients in turn.
  std::vector<std::vector<size_t>> by_client(nodes * kClientsPerNode);
  std::vector<size_t> dealt(nodes, 0);
  for (size_t i = 0; i < trace.served.size(); ++i) {
    const size_t node = trace.served[i].node - 1;  // ids 1..N: no node joins without churn
    by_client[node * kClientsPerNode + dealt[node]++ % kClientsPerNode].push_back(i);
  }
  const uint64_t entries_before =
      SumOfStats(*cluster, &protocol::StatsReply::gossip_delta_entries_sent);
  // Simulated time 0 at a whole second, at least 500 ms away (the clients connect first).
  const int64_t start_wall_ms = (WallMs() + 1'500) / 1'000 * 1'000;
  const steady_clock::time_point start =
      steady_clock::now() + std::chrono::milliseconds(start_wall_ms - WallMs());
  std::vector<Figures> per_client(by_client.size());
  {
    PinnedTo pinned(settings.loadgen_cpu);
    std::vector<std::thread> clients;
    for (size_t c = 0; c < by_client.size(); ++c) {
      clients.emplace_back([&, c] {
        per_client[c] = Client(*cluster, *central, c / kClientsPerNode, trace, by_client[c], start);
      });
    }
    for (std::thread& client : clients) client.join();
  }
  // As long as the simulation ran after its clients stopped.
  std::this_thread::sleep_until(
      start + std::chrono::milliseconds(settings.agreement_load_s * 1'000 + kSettleMs));
  Figures figures;
  for (const Figures& client : per_client) figures.Add(client);
  figures.delta_entries =
      SumOfStats(*cluster, &protocol::StatsReply::gossip_delta_entries_sent) - entries_before;
  return figures;
}

bool Agrees(double simulated, double measured) {
  return simulated > 0 && std::abs(measured / simulated - 1) <= kAgreeWithin;
}

// Prints one measure of both sides; whether they agree.
bool Row(size_t nodes, const std::string& what, double simulated, double measured) {
  const bool agrees = Agrees(simulated, measured);
  std::printf("%-38s %10.3f %10.3f %8.3f %s\n", what.c_str(), simulated, measured,
              simulated > 0 ? measured / simulated : 0.0, agrees ? "yes" : "NO");
  Json("{\"scenario\": \"agreement\", \"nodes\": " + std::to_string(nodes) + ", \"measure\": \"" +
       what + "\", \"simulated\": " + std::to_string(simulated) + ", \"real\": " +
       std::to_string(measured) + ", \"within_20_percent\": " + (agrees ? "true" : "false") + "}");
  return agrees;
}

}  // namespace

bool Agreement(const Settings& settings, size_t nodes) {
  sim::SimTrace trace;
  const Figures simulated = Simulate(settings, nodes, &trace);
  const Figures real = Replay(settings, nodes, trace);
  std::printf(
      "\n== %zu nodes: tally-sim seed %llu (%d s of load, then %lld s) against its requests "
      "replayed on %zu tallyd processes (--gossip-max-delay-ms %lld)\n"
      "decisions: %llu simulated, %llu replayed; %llu replayed sends more than %lld ms late, "
      "the latest %lld ms\n%-38s %10s %10s %8s %s\n",
      nodes, static_cast<unsigned long long>(settings.agreement_seed), settings.agreement_load_s,
      static_cast<long long>(kSettleMs / 1'000), nodes, static_cast<long long>(kMaxDelayMs),
      static_cast<unsigned long long>(simulated.decisions),
      static_cast<unsigned long long>(real.decisions), static_cast<unsigned long long>(real.late),
      static_cast<long long>(kLateMs), static_cast<long long>(real.latest_ms), "measure",
      "simulated", "real", "real/sim", "within 20%");
  bool agrees = Row(nodes, "delta entries / decision", simulated.EntriesPerDecision(),
                    real.EntriesPerDecision());
  for (int kind = 0; kind < kLoadKinds; ++kind) {
    agrees = Row(nodes,
                 std::string("admitted/central ") + sim::LoadKindName(static_cast<LoadKind>(kind)),
                 simulated.OverCentral(kind), real.OverCentral(kind)) &&
             agrees;
  }
  return agrees;
}

}  // namespace tally::bench
