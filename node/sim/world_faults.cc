// World's faults: cuts, crashes and restarts, clock steps, a join and a leave.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "node/sim/world.h"

namespace tally::sim {

void World::ScheduleFaults() {
  const Faults& faults = options_.faults;
  const int64_t from_ms = options_.node.recovery_timeout_ms + 500;  // once formed
  if (load_end_ms_ <= from_ms) return;
  const auto every = [&](int64_t mean_ms, void (World::*fault)()) {
    for (int64_t at_ms = from_ms + random_.Between(0, mean_ms); at_ms < load_end_ms_;
         at_ms += random_.Between(mean_ms / 2, 3 * mean_ms / 2)) {
      events_.At(at_ms, [this, fault] { (this->*fault)(); });
    }
  };
  if (faults.partition) every(6'000, &World::Partition);
  if (faults.crash) every(5'000, &World::Crash);
  if (faults.clock) every(8'000, &World::StepClock);
  if (faults.churn) {
    events_.At(from_ms + (load_end_ms_ - from_ms) / 3, [this] { Join(); });
    events_.At(from_ms + 2 * (load_end_ms_ - from_ms) / 3, [this] { LeaveOne(); });
  }
}

void World::Partition() {
  const std::vector<NodeId> running = RunningIds();
  if (running.size() < 2) return;
  std::vector<std::pair<NodeId, NodeId>> cuts;
  const uint64_t kind = random_.Below(3);
  if (kind == 2) {  // the cluster split in two halves, both ways
    std::vector<NodeId> order = running;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[random_.Below(i)]);
    const size_t half = order.size() / 2;
    for (size_t i = 0; i < half; ++i) {
      for (size_t j = half; j < order.size(); ++j) {
        cuts.emplace_back(order[i], order[j]);
        cuts.emplace_back(order[j], order[i]);
      }
    }
  } else {  // one node cut off: both ways, or only what it sends
    const NodeId isolated = running[random_.Below(running.size())];
    for (const NodeId other : running) {
      if (other == isolated) continue;
      cuts.emplace_back(isolated, other);
      if (kind == 0) cuts.emplace_back(other, isolated);
    }
  }
  const int64_t duration_ms = random_.Between(1'000, 8'000);
  ++report_.partitions;
  checker_->Degrade(events_.now_ms(), events_.now_ms() + duration_ms + kReconnectMaxMs +
                                          options_.node.recovery_timeout_ms);
  for (const auto& [from, to] : cuts) network_.Cut(from, to);
  // A connection whose writes stall this long is reset, what it held lost.
  events_.After(kWriteTimeoutMs, [this, cuts] {
    for (const auto& [from, to] : cuts) {
      if (network_.Reaches(from, to)) continue;
      network_.DropHeld(from, to);
      network_.DropHeld(to, from);
      for (const auto& [a, b] : {std::pair{from, to}, std::pair{to, from}}) {
        if (SimNode* const node = Running(a)) {
          node->LinkDown(b);
          Touch(a);
        }
      }
    }
  });
  events_.After(duration_ms, [this, cuts] {
    for (const auto& [from, to] : cuts) network_.Heal(from, to);
  });
}

void World::Crash() {
  const std::vector<NodeId> running = RunningIds();
  if (running.size() < 2) return;
  const NodeId id = running[random_.Below(running.size())];
  Slot& slot = slots_.at(id);
  if (slot.leaving) return;
  // A crash in the middle of a flush: some of what changed was written.
  if (random_.Chance(0.3)) slot.node->Flush(random_.Below(8));
  checker_->Crashed(id, events_.now_ms(),
                    options_.node.interval_ms + network_.faults().delay_max_ms +
                        network_.faults().link_extra_max_ms);
  Retire(id);
  ++report_.crashes;
  if (random_.Chance(0.3)) slot.store = SimStore{};  // the data directory wiped
  for (const NodeId other : running) {
    if (other == id) continue;
    network_.DropHeld(id, other);
    network_.DropHeld(other, id);
    Running(other)->LinkDown(id);  // the kernel resets its connections
    Touch(other);
  }
  const int64_t down_ms = random_.Between(200, 3'000);
  checker_->Degrade(events_.now_ms(),
                    events_.now_ms() + down_ms + options_.node.recovery_timeout_ms + 1'000);
  events_.After(down_ms, [this, id] { Restart(id); });
}

void World::Restart(NodeId id) {
  Start(id, seeds_);
  Slot& slot = slots_.at(id);
  slot.restarts.push_back(slot.node->incarnation());
}

void World::StepClock() {
  const std::vector<NodeId> running = RunningIds();
  if (running.empty()) return;
  const NodeId id = running[random_.Below(running.size())];
  const int64_t step_ms = random_.Between(50, 300) * (random_.Chance(0.5) ? -1 : 1);
  const int64_t back_in_ms = random_.Between(1'000, 3'000);  // NTP puts it right
  Slot& slot = slots_.at(id);
  slot.offset_ms += step_ms;
  slot.node->clock().SetOffsetMs(slot.offset_ms);
  ++report_.clock_steps;
  checker_->Degrade(events_.now_ms() - options_.workload.window_ms,
                    events_.now_ms() + back_in_ms + 2 * options_.workload.window_ms);
  events_.After(back_in_ms, [this, id, step_ms] {
    Slot& stepped = slots_.at(id);
    stepped.offset_ms -= step_ms;
    if (stepped.node) stepped.node->clock().SetOffsetMs(stepped.offset_ms);
  });
}

void World::Join() {
  const NodeId id = next_id_++;
  slots_[id].offset_ms = 0;
  ++report_.joins;
  checker_->Degrade(events_.now_ms(), events_.now_ms() + 5'000);
  Start(id, seeds_);
}

void World::LeaveOne() {
  std::vector<NodeId> candidates;
  for (const NodeId id : RunningIds()) {
    if (std::find(seeds_.begin(), seeds_.end(), id) == seeds_.end()) candidates.push_back(id);
  }
  if (candidates.empty()) return;
  const NodeId id = candidates[random_.Below(candidates.size())];
  slots_.at(id).leaving = true;
  slots_.at(id).node->Leave();
  ++report_.leaves;
  checker_->Degrade(events_.now_ms(), events_.now_ms() + 5'000);
  // Its process ends once what it said is on its way.
  events_.After(200, [this, id] {
    Slot& slot = slots_.at(id);
    if (!slot.node) return;
    Retire(id);
    slot.left = true;
    for (const NodeId other : RunningIds()) {
      Running(other)->LinkDown(id);
      Touch(other);
    }
  });
}

}  // namespace tally::sim
