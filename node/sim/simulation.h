// Simulation: N tallyd nodes (SimNode) on a simulated network and clock,
// their clients (Workload) and a central limiter fed the same requests,
// under faults drawn from one seed; invariants checked as it runs
// (Checker) and at its end. One seed, one run, bit for bit: every choice
// comes from the seed's Random, and events run in order of time and of
// scheduling (EventQueue).
//
// A run has two phases. For its first seconds - settle_ms the clients send
// and the faults asked for strike. Then the clients stop, every cut heals,
// losses stop, crashed nodes restart, and the cluster has settle_ms to
// converge. At the end, every node that runs must hold the same counts and
// log entries of every key (convergence), see every running member alive
// and every stopped one dead or left (membership), and know a crash loss
// for every member that crashed and restarted (crash accounting).
//
// Thread safety: none (single-threaded by design).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "node/engine/limiter.h"
#include "node/sim/checker.h"
#include "node/sim/event_queue.h"
#include "node/sim/network.h"
#include "node/sim/random.h"
#include "node/sim/sim_node.h"
#include "node/sim/workload.h"

namespace tally::sim {

struct Faults {
  bool loss = false;       // 1% of messages lost
  bool duplicate = false;  // 1% arrive twice
  bool reorder = false;    // 5% held back
  bool partition = false;  // cuts, one way or both, of one node or half the cluster
  bool crash = false;      // SIGKILLs, restarts on the kept or a wiped store
  bool clock = false;      // clock offsets from the start, and steps
  bool churn = false;      // a member joins, one leaves
  // The names, comma-separated ("none" when none).
  std::string ToString() const;
};
// "none", "all", or a comma-separated list of the names above; nullopt for an unknown name.
std::optional<Faults> ParseFaults(const std::string& text);

// What the clients asked of which node, in order: for replaying a run's
// requests against real processes (the cluster benchmark's agreement part).
struct SimTrace {
  struct Served {
    int64_t at_ms = 0;  // simulated time from the run's start
    NodeId node = 0;    // the node that answered
    size_t key = 0;     // index into keys
  };
  std::vector<SimKey> keys;
  std::vector<Served> served;
};

struct SimOptions {
  size_t nodes = 3;
  uint64_t seed = 1;
  int64_t seconds = 20;
  Faults faults;
  // One-way delays (NetworkFaults): per message in [min, max], plus each
  // link's own extra in [0, link_extra_max_ms].
  int64_t delay_min_ms = 1, delay_max_ms = 3, link_extra_max_ms = 0;
  WorkloadOptions workload;
  SimNode::Config node;   // id and seeds are set per node
  int64_t settle_ms = 0;  // 0: enough for a deferral through a relayer and for anti-entropy
  // A test of the simulation: deltas are dropped and never repaired.
  bool break_repair = false;
  // Checks that views never go back after each merge (costs a read per entry).
  bool check_views = true;
  SimTrace* trace = nullptr;  // not owned; when set, filled as the run goes
};

struct SimReport {
  bool ok = true;
  std::string violation;  // the first; empty when ok
  uint64_t violation_step = 0;
  int64_t violation_at_ms = 0;
  uint64_t steps = 0;
  uint64_t decisions = 0;  // checks the nodes answered
  uint64_t delta_entries = 0, messages = 0, bytes = 0;
  int64_t convergence_ms = -1;  // after the clients stopped; -1: not within settle_ms
  size_t keys_held = 0;         // keys held, summed over nodes, when the clients stopped
  int64_t heap_bytes = 0;       // heap in use then, less before the nodes started
  double cpu_s = 0;             // process CPU time of the run
  uint64_t crashes = 0, partitions = 0, clock_steps = 0, joins = 0, leaves = 0;
  Checker::Totals totals[kLoadKinds];
  uint64_t fingerprint = 0;  // a hash of every decision: equal runs, equal fingerprints
};

SimReport RunSimulation(const SimOptions& options);

}  // namespace tally::sim
