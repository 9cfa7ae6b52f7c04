// Network: the simulated network between nodes. Every message is a frame
// (encoded as the daemon encodes it) that arrives after a delay (its link's
// own, drawn once, plus one drawn per message), or not at all: loss,
// duplication and reordering (a message held back longer than those sent
// after it) by probability, and cuts, one way or both, between any two
// nodes. Frames are datagrams here: the simulation is harsher than TCP,
// which never loses, duplicates or reorders within a connection (a daemon's
// session would close on a reordered seal instead).
//
// Thread safety: none (the simulation is single-threaded).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "node/common/node_id.h"
#include "node/sim/event_queue.h"
#include "node/sim/random.h"

namespace tally::sim {

using Frame = std::shared_ptr<const std::string>;

struct NetworkFaults {
  int64_t delay_min_ms = 1;  // one way, per message, uniform in [min, max]
  int64_t delay_max_ms = 3;
  // Each link's (one direction's) own delay on top, drawn once in
  // [0, link_extra_max_ms]: near and far peers, as across zones.
  int64_t link_extra_max_ms = 0;
  double loss = 0;       // probability a message is lost
  double duplicate = 0;  // probability it arrives twice
  double reorder = 0;    // probability it is held back up to 10x delay_max_ms more
};

class Network {
 public:
  // Called at arrival with the time the frame was sent.
  using Deliver =
      std::function<void(NodeId from, NodeId to, const Frame& frame, int64_t sent_at_ms)>;

  Network(EventQueue* events, Random* random, const NetworkFaults& faults, Deliver deliver)
      : events_(events), random_(random), faults_(faults), deliver_(std::move(deliver)) {}

  void Send(NodeId from, NodeId to, const Frame& frame);
  // Messages from `from` to `to` wait until Heal (one way), as TCP
  // retransmits across a cut, unless DropHeld discards them first (the
  // connection was reset).
  void Cut(NodeId from, NodeId to) { cuts_.insert({from, to}); }
  void Heal(NodeId from, NodeId to);
  void HealAll();
  void DropHeld(NodeId from, NodeId to) { held_.erase({from, to}); }
  bool Reaches(NodeId from, NodeId to) const { return !cuts_.contains({from, to}); }
  bool any_cut() const { return !cuts_.empty(); }
  const NetworkFaults& faults() const { return faults_; }
  // The faults from now on (a run's quiet end clears them).
  void SetFaults(const NetworkFaults& faults) { faults_ = faults; }

  uint64_t messages() const { return messages_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t lost() const { return lost_; }

 private:
  EventQueue* const events_;
  Random* const random_;
  NetworkFaults faults_;
  const Deliver deliver_;
  // Schedules a message's arrival (or two, or none) after a drawn delay.
  void Schedule(NodeId from, NodeId to, const Frame& frame, int64_t sent_at_ms);

  // Link (from, to)'s own extra delay, drawn at its first message.
  int64_t LinkExtraMs(NodeId from, NodeId to);

  std::set<std::pair<NodeId, NodeId>> cuts_;
  std::map<std::pair<NodeId, NodeId>, int64_t> link_extra_ms_;
  std::map<std::pair<NodeId, NodeId>, std::vector<std::pair<Frame, int64_t>>> held_;
  uint64_t messages_ = 0, bytes_ = 0, lost_ = 0;
};

}  // namespace tally::sim
