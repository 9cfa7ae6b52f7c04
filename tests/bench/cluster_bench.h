// What the parts of the cluster benchmark (cluster_bench.cc, overhead_bench.cc,
// accuracy_bench.cc) share: the settings, the JSON rows, local clusters and
// tally-loadgen runs. cluster_bench.cc says what each part measures.
//
// Thread safety: none; the benchmark's main thread calls all of it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
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
};

// Adds one row (a JSON object) to the results; WriteJson writes them all as
// an array.
void Json(const std::string& row);
void WriteJson(const std::string& path);

[[noreturn]] void Die(const std::string& what, const Status& status);

// A cluster of `nodes` memory-only nodes, gossiping or local-only, each given
// `flags` too; dies when it does not start.
std::unique_ptr<cluster::LocalCluster> Start(const Settings& settings, size_t nodes, bool gossip,
                                             std::vector<std::string> flags = {});

// Each node's CPU time so far (user + system, /proc), in seconds, by node.
// Dies when a node's cannot be read.
std::vector<double> NodeCpuSeconds(cluster::LocalCluster& cluster);

// Milliseconds since `start`.
double MsSince(std::chrono::steady_clock::time_point start);

// Polls every 10 ms (at most 30 s): until every running node but `except`
// shows member `node_id` in `state`; returns the ms since `start`. Dies when
// they do not agree within 30 s.
double UntilAllSee(cluster::LocalCluster& cluster, uint64_t node_id, protocol::MemberState state,
                   size_t except, std::chrono::steady_clock::time_point start);

// Runs tally-loadgen (settings.connections connections, depth 16, pinned to
// settings.loadgen_cpu) against every node of `cluster`, with `load_args`
// saying what to send (--keys, --duration-ms or --requests, --algorithm...);
// returns the JSON object it wrote. Dies when it fails or takes timeout_ms.
nlohmann::json RunLoadgen(const Settings& settings, cluster::LocalCluster& cluster,
                          const std::string& label, const std::vector<std::string>& load_args,
                          int timeout_ms);

// The parts in files of their own.
void Overhead(const Settings& settings);                                     // overhead_bench.cc
void Accuracy(const Settings& settings, size_t nodes, Algorithm algorithm);  // accuracy_bench.cc
void Scale(const Settings& settings);                                        // scale_bench.cc

}  // namespace tally::bench
