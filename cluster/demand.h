// DriveDemand: clients at a steady, paced demand against the nodes of a
// LocalCluster, counting what each node admits in each window. For the
// demo, the benchmark and the global-limit test.
//
// One client thread per node with a share of the demand sends single checks
// on one key at evenly spaced times. A fixed-window check counts in the
// window the node counted it in (its decision says when that window ends);
// any other in the window of the wall-clock time it was sent (windows aligned
// as tallyd aligns them, so a check sent in the last millisecond of a window
// may be decided in the next). Only whole windows are reported: the run
// starts at the next window boundary and ends after `windows` windows.
//
// Thread safety: runs its own threads; returns when they are done.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cluster/history.h"
#include "cluster/local_cluster.h"
#include "node/common/limit.h"
#include "node/common/status.h"

namespace tally::cluster {

struct DemandOptions {
  LimitSpec spec{Algorithm::kSlidingWindowCounter, 100, 1'000};
  std::string key = "demand";
  uint64_t demand_per_window = 400;  // checks per window, all nodes together
  std::vector<double> shares;        // per node, summing to 1; empty: even
  int windows = 3;
  History* history = nullptr;  // not owned; when set, every decision of the run is recorded
  // Nodes may go away during the run (restarts, crashes): a client whose
  // check fails counts it in `failed` and reconnects, every 10 ms, until it
  // can go on. Off: the first failure ends the run with Unavailable.
  bool survive_node_loss = false;
};

struct WindowTally {
  int64_t window_index = 0;
  std::vector<uint64_t> sent;      // per node
  std::vector<uint64_t> admitted;  // per node
  std::vector<uint64_t> failed;    // per node: checks that got no answer (survive_node_loss)
  uint64_t total_admitted() const;
};

// Unavailable when a client cannot connect or a check fails.
Status DriveDemand(LocalCluster& cluster, const DemandOptions& options,
                   std::vector<WindowTally>* windows);

}  // namespace tally::cluster
