// What the parts of the cluster benchmark (cluster_bench.cc, overhead_bench.cc,
// accuracy_bench.cc, scale_bench.cc) share: the settings, the JSON rows, local
// clusters, tally-loadgen runs and the nodes' CPU time per decision.
// cluster_bench.cc says what each part measures.
//
// Thread safety: none; the benchmark's main thread calls all of it.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/local_cluster.h"
#include "node/common/status.h"
#include "protocol/messages.h"

namespace tally::bench {

struct Settings {
  std::string tallyd;
  std::string loadgen;
  int loadgen_cpu = -1;
  int windows = 3;
  int samples = 200;
  int trials = 3;
  int duration_ms = 4'000;
  bool bucket_only = false;
  std::string only;                        // "overhead", "accuracy" or empty: the other parts
  double single_node_decisions_per_s = 0;  // measured once, before the 3-node runs
  int connections = 48;
  uint64_t keys = 100'000;
  uint64_t overhead_checks = 1'500'000;  // per run of the overhead part
  int overhead_runs = 3;                 // pairs of runs (cluster, local-only) per row
  int accuracy_windows = 10;             // per Poisson run of the accuracy part
  int burst_trials = 5;                  // coordinated bursts per mode of the accuracy part
  // The algorithms the admission and accuracy parts measure, each its own rows.
  std::vector<Algorithm> algorithms = {Algorithm::kSlidingWindowCounter};
  std::vector<size_t> scale_nodes = {3, 8, 16, 32, 64};  // the sizes of the scale part
  int scale_quiet_s = 60;                                // at rest per size, in the scale part
  uint64_t scale_keys = 0;                               // keys the scale part's nodes hold at rest
  bool scale_fill_one = false;  // those keys admitted through node 0 only, not every node
  // The scale part's sustained load, per size on a cluster and on local-only
  // nodes: checks per second over every node, for this long (0: no load),
  // over this many uniform keys far from their limits.
  uint64_t scale_load_rate = 20'000;
  int scale_load_s = 60;
  uint64_t scale_load_keys = 1'000'000;
  // The agreement part: the sizes, the seed and the seconds of load of the
  // simulated run whose requests are replayed.
  std::vector<size_t> agreement_nodes = {3, 5, 8};
  uint64_t agreement_seed = 1;
  int agreement_load_s = 20;
  // Where every cluster's data directories and node logs stay after its run
  // (cluster-1, cluster-2, ... in start order); empty: a temporary directory,
  // removed.
  std::string keep_dir;
};

// Adds one row (a JSON object) to the results; WriteJson writes them all as
// an array.
void Json(const std::string& row);
void WriteJson(const std::string& path);

[[noreturn]] void Die(const std::string& what, const Status& status);

// A cluster of `nodes` memory-only nodes, gossiping or local-only, each given
// `flags` too and listing the nodes `seeds` as seeds (empty: all); dies when
// it does not start within 60 s (64 nodes through one seed take a while).
std::unique_ptr<cluster::LocalCluster> Start(const Settings& settings, size_t nodes, bool gossip,
                                             std::vector<std::string> flags = {},
                                             std::vector<size_t> seeds = {});

// Each node's CPU time so far (user + system, /proc), in seconds, by node.
// Dies when a node's cannot be read.
std::vector<double> NodeCpuSeconds(cluster::LocalCluster& cluster);
// The same summed over the nodes.
double CpuSeconds(cluster::LocalCluster& cluster);

// One field of the nodes' stats summed over the nodes, e.g.
// &protocol::StatsReply::gossip_full_syncs_sent. Dies when a node's stats
// cannot be read.
uint64_t SumOfStats(cluster::LocalCluster& cluster, uint64_t protocol::StatsReply::*field);

// Milliseconds since `start`.
double MsSince(std::chrono::steady_clock::time_point start);

// Polls every 10 ms (at most 30 s): until every running node but `except`
// shows member `node_id` in `state`; returns the ms since `start`. Dies when
// they do not agree within 30 s.
double UntilAllSee(cluster::LocalCluster& cluster, uint64_t node_id, protocol::MemberState state,
                   size_t except, std::chrono::steady_clock::time_point start);

// Runs tally-loadgen (settings.connections connections, depth 16, pinned to
// settings.loadgen_cpu) against every node of `cluster` (or only node
// `only_node`), with `load_args` saying what to send (--keys, --duration-ms
// or --requests, --algorithm...); returns the JSON object it wrote. Dies
// when it fails or takes timeout_ms.
nlohmann::json RunLoadgen(const Settings& settings, cluster::LocalCluster& cluster,
                          const std::string& label, const std::vector<std::string>& load_args,
                          int timeout_ms, std::optional<size_t> only_node = std::nullopt);

// What tally-loadgen sends in a run whose CPU time is measured: its keys,
// how they are picked, their limit (sliding_counter).
struct Workload {
  std::string name;
  std::string distribution;  // tally-loadgen's --distribution
  uint64_t keys = 0;
  uint64_t limit = 0;
  uint64_t window_ms = 0;
};

// Every key far from its limit: `keys` uniform keys under the default limit
// (10^9 per 60 s).
Workload FarWorkload(uint64_t keys);

// Settle calls a cluster's gossip quiet once no node sent a delta entry for
// kQuietMs (by then every node has merged what it was sent) and every node
// holds the same counts of kSampledKeys keys; it gives up after
// kMostSettleMs.
constexpr int kQuietMs = 3'500;
constexpr int kMostSettleMs = 30'000;
constexpr size_t kSampledKeys = 16;

struct Settled {
  double ms = 0;          // how long Settle polled
  bool converged = true;  // the cluster's gossip went quiet and its nodes agreed
};

// Polls every node's stats every 100 ms: for settle_ms; or (settle_ms < 0)
// until no node's sent delta entries changed for kQuietMs and every node
// holds the same counts (Inspect) of kSampledKeys keys spread over the
// workload's key space (tally-loadgen names them k:0 .. k:<keys-1>), a sign
// that no node still holds admissions back from the others; at most
// kMostSettleMs.
Settled Settle(cluster::LocalCluster& cluster, const Workload& workload, double settle_ms);

// What one tally-loadgen run cost the nodes.
struct CpuRun {
  uint64_t decisions = 0;
  uint64_t keys_denied = 0;
  double cpu_s = 0;             // every node's, summed
  double cpu_after_load_s = 0;  // of cpu_s, spent after the load ended (deferrals, anti-entropy)
  uint64_t entries_sent = 0;
  uint64_t full_syncs_sent = 0;  // over every link
  uint64_t digests_sent = 0;     // anti-entropy's range digests, over every link
  uint64_t ranges_sent = 0;      // ranges sent whole because a digest differed
  Settled settled;
  double per_decision_us() const { return cpu_s * 1e6 / static_cast<double>(decisions); }
};

// One tally-loadgen run of `workload` over every node of `cluster`,
// `load_args` saying how many checks and how fast (--requests, --rate,
// --duration-ms); the nodes' CPU time and gossip counters read before the
// load and after Settle(settle_ms). Dies when the run takes timeout_ms.
// With anti_entropy (and settle_ms < 0), the read waits after Settle until
// the nodes have sent the digests of what the load changed and answered them
// (WaitForAntiEntropy), so that anti-entropy is charged; settled.ms includes
// that wait.
CpuRun MeasureCpu(const Settings& settings, cluster::LocalCluster& cluster,
                  const std::string& label, const Workload& workload,
                  const std::vector<std::string>& load_args, double settle_ms, int timeout_ms,
                  bool anti_entropy = false);

// Pins the threads the calling thread starts while it lives (clients) to
// one CPU, the load generator's, away from the nodes; restores the calling
// thread's CPUs at the end. cpu < 0: does nothing.
class PinnedTo {
 public:
  explicit PinnedTo(int cpu) : pinned_(cpu >= 0) {
    if (!pinned_) return;
    pthread_getaffinity_np(pthread_self(), sizeof(saved_), &saved_);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
  }
  ~PinnedTo() {
    if (pinned_) pthread_setaffinity_np(pthread_self(), sizeof(saved_), &saved_);
  }
  PinnedTo(const PinnedTo&) = delete;
  PinnedTo& operator=(const PinnedTo&) = delete;

 private:
  const bool pinned_;
  cpu_set_t saved_;
};

// The parts in files of their own.
void Overhead(const Settings& settings);                                     // overhead_bench.cc
void Accuracy(const Settings& settings, size_t nodes, Algorithm algorithm);  // accuracy_bench.cc
void Scale(const Settings& settings);                                        // scale_bench.cc
// Whether every measure agreed within 20%.
bool Agreement(const Settings& settings, size_t nodes);  // agreement_bench.cc

}  // namespace tally::bench
