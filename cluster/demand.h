// DriveDemand: clients on one key against the nodes of a LocalCluster,
// counting what each node admits in each window. For the demo, the benchmark
// and the global-limit test.
//
// The demand is a schedule of arrivals, each a single check sent by one
// client (a stream: its own thread and connection, to node stream % the
// cluster's size) at its time. By default it is paced: one stream per node
// with a share of the demand, at evenly spaced times; PoissonArrivals and
// BurstArrivals make other schedules, the same for the same arguments, so one
// schedule can be replayed against a cluster and against one central node
// (which then gets every stream). A client that falls behind its schedule
// sends at once what is due. A fixed-window check counts in the
// window the node counted it in (its decision says when that window ends);
// any other in the window of the wall-clock time it was due (windows aligned
// as tallyd aligns them; a check due in the last millisecond of a window, or
// sent late, may be decided in the next), so that two runs of one schedule
// compare window by window. Only whole windows are reported: the run starts
// at the next window boundary and ends after `windows` windows.
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

// One check of a schedule: sent `offset_ns` after the run's first window
// starts, by client `stream`.
struct Arrival {
  int64_t offset_ns = 0;
  size_t stream = 0;
};

// Poisson arrivals at rate_per_s over duration_ms, each from one of `streams`
// streams chosen at random; reproducible from `seed`. Sorted by time.
std::vector<Arrival> PoissonArrivals(double rate_per_s, int64_t duration_ms, size_t streams,
                                     uint64_t seed);
// `count` arrivals at even intervals over span_ms from offset 0, dealt to
// the streams in turn.
std::vector<Arrival> BurstArrivals(uint64_t count, int64_t span_ms, size_t streams);

struct DemandOptions {
  LimitSpec spec{Algorithm::kSlidingWindowCounter, 100, 1'000};
  std::string key = "demand";
  uint64_t demand_per_window = 400;  // checks per window, all nodes together
  std::vector<double> shares;        // per node, summing to 1; empty: even
  // A schedule instead of the paced demand above (demand_per_window and
  // shares are then unused); arrivals after `windows` windows are not sent.
  std::vector<Arrival> arrivals;
  int windows = 3;
  History* history = nullptr;  // not owned; when set, every decision of the run is recorded
  // Nodes may go away during the run (restarts, crashes): a client whose
  // check fails counts it in `failed` and reconnects, every 10 ms, until it
  // can go on; arrivals that fell due meanwhile are dropped. Off: the first
  // failure ends the run with Unavailable.
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
