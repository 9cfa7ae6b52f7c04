// World: one simulation run (simulation.h), internal to node/sim:
// simulation.cc builds and runs it, world_faults.cc strikes its faults and
// world_checks.cc checks how it ends.
//
// Thread safety: none (the simulation is single-threaded).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "node/engine/limiter.h"
#include "node/sim/checker.h"
#include "node/sim/event_queue.h"
#include "node/sim/network.h"
#include "node/sim/random.h"
#include "node/sim/sim_node.h"
#include "node/sim/simulation.h"
#include "node/sim/workload.h"

namespace tally::sim {

inline constexpr int64_t kWriteTimeoutMs = 5'000;  // a cut link goes down after this
inline constexpr int64_t kReconnectMinMs = 50, kReconnectMaxMs = 1'000;
inline constexpr int64_t kConvergencePollMs = 100;

class World {
 public:
  explicit World(const SimOptions& options);
  SimReport Run();

 private:
  struct Slot {
    std::unique_ptr<SimNode> node;  // null while crashed, or after leaving
    SimStore store;
    int64_t offset_ms = 0;
    int64_t started_ms = 0;
    bool leaving = false;  // stopping cleanly: no crash strikes it now
    bool left = false;
    uint64_t round_generation = 0;
    int64_t round_at_ms = INT64_MAX;
    uint64_t followed_events = UINT64_MAX;  // the node's link_events() last followed
    uint64_t run = 0;                       // moves at every start: a dial of a gone run is void
    std::set<NodeId> dialing;
    std::map<NodeId, int64_t> backoff_ms;
    std::vector<uint64_t> restarts;  // incarnations after crashes
  };

  SimNode* Running(NodeId id) {
    const auto slot = slots_.find(id);
    return slot == slots_.end() ? nullptr : slot->second.node.get();
  }
  void Start(NodeId id, std::vector<NodeId> seeds);
  // After any call into the node: its next round, and links it wants.
  void Touch(NodeId id);
  void Dial(NodeId from, NodeId to, int64_t delay_ms);
  void Deliver(NodeId from, NodeId to, const Frame& frame, int64_t sent_at_ms);
  void ScheduleClients(int64_t from_ms);
  void Serve(const Request& request);
  void ScheduleFaults();
  void Partition();
  void Crash();
  void StepClock();
  void Join();
  void LeaveOne();
  void Settle();
  void CheckEnd();
  void Fail(const std::string& what);
  // The nodes that run now, in order of id.
  const std::vector<NodeId>& RunningIds() const { return running_; }
  void Restart(NodeId id);
  void Flush(NodeId id);
  // Takes a node out of the run (crashed or left): its counters stay counted.
  void Retire(NodeId id);
  std::optional<std::string> Divergence();
  std::vector<NodeId> seeds_;
  std::vector<NodeId> running_;  // RunningIds: kept by Start and Retire
  uint64_t retired_delta_entries_ = 0;

  const SimOptions options_;
  EventQueue events_;
  Random random_;
  Network network_;
  int64_t load_end_ms_ = 0;
  int64_t end_ms_ = 0;
  int64_t staleness_ms_ = 0;
  std::map<NodeId, Slot> slots_;
  NodeId next_id_ = 1;
  Workload workload_;
  std::optional<Checker> checker_;  // set by Run, which knows the staleness
  SimClock central_clock_;
  Limiter central_;
  SimReport report_;
  bool failed_ = false;
};

}  // namespace tally::sim
