// World's quiet end and the invariants checked there: convergence,
// membership, crash accounting.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "node/sim/world.h"

namespace tally::sim {
namespace {

// A node's state of a key, for a violation's message.
std::string Describe(bool found, const KeySnapshot& snapshot) {
  if (!found) return "nothing";
  std::ostringstream text;
  if (snapshot.algorithm == Algorithm::kSlidingWindowLog) {
    for (const NodeStamps& stamps : snapshot.log) {
      text << "node " << stamps.node << ": " << stamps.stamps.size() << " entries; ";
    }
    return text.str();
  }
  text << "window " << snapshot.counts.window_index << ":";
  for (const GCounter::Slot& slot : snapshot.counts.current.slots()) {
    text << " " << slot.node << "=" << slot.count;
  }
  text << ", previous:";
  for (const GCounter::Slot& slot : snapshot.counts.previous.slots()) {
    text << " " << slot.node << "=" << slot.count;
  }
  return text.str();
}

}  // namespace

void World::Settle() {
  NetworkFaults network = network_.faults();
  network.loss = network.duplicate = network.reorder = 0;
  network_.SetFaults(network);
  network_.HealAll();
  const auto poll = [this](auto& self) -> void {
    if (report_.convergence_ms >= 0 || failed_) return;
    if (!Divergence()) {
      report_.convergence_ms = events_.now_ms() - load_end_ms_;
      return;
    }
    if (events_.now_ms() + kConvergencePollMs < end_ms_) {
      events_.After(kConvergencePollMs, [this, self] { self(self); });
    }
  };
  poll(poll);
}

std::optional<std::string> World::Divergence() {
  const std::vector<NodeId> running = RunningIds();
  if (running.size() < 2) return std::nullopt;
  for (const SimKey& key : workload_.keys()) {
    const Algorithm algorithm = key.spec.algorithm;
    const bool counting =
        algorithm == Algorithm::kFixedWindow || algorithm == Algorithm::kSlidingWindowCounter;
    // Near keys' log entries expire by each node's clock; far keys outlive the run.
    if (algorithm == Algorithm::kTokenBucket || (!counting && key.kind != LoadKind::kFar)) continue;
    // An empty state is no state: nothing counted, or every entry expired.
    const auto read = [&](NodeId id, KeySnapshot* snapshot) {
      if (!Running(id)->limiter().Read(key.key, key.spec, snapshot).ok()) return false;
      return counting ? !snapshot->counts.current.empty() || !snapshot->counts.previous.empty()
                      : !snapshot->log.empty();
    };
    KeySnapshot first;
    const bool first_found = read(running[0], &first);
    for (size_t i = 1; i < running.size(); ++i) {
      KeySnapshot other;
      const bool found = read(running[i], &other);
      if (found && first_found && counting &&
          other.counts.window_index != first.counts.window_index) {
        continue;  // a window ended at one and not yet at the other
      }
      const bool same =
          found == first_found &&
          (!found || (counting ? other.counts == first.counts : other.log == first.log));
      if (same) continue;
      std::string what = "key '" + key.key + "' differs:";
      for (size_t j = 0; j < running.size() && j < 8; ++j) {
        KeySnapshot held;
        const bool held_found = read(running[j], &held);
        what +=
            " node " + std::to_string(running[j]) + " holds " + Describe(held_found, held) + ";";
      }
      return what;
    }
  }
  return std::nullopt;
}

void World::CheckEnd() {
  if (report_.convergence_ms < 0) {
    if (const auto what = Divergence()) {
      return Fail("no convergence " + std::to_string(end_ms_ - load_end_ms_) +
                  " ms after the last admission: " + *what);
    }
    report_.convergence_ms = end_ms_ - load_end_ms_;
  }
  const std::vector<NodeId> running = RunningIds();
  for (const NodeId id : running) {
    SimNode* const node = Running(id);
    std::map<NodeId, protocol::MemberState> view;
    for (const protocol::MemberStatus& member : node->membership().View(events_.now_ms())) {
      view[member.node_id] = member.state;
    }
    for (const auto& [other, slot] : slots_) {
      const auto state = view.find(other);
      if (slot.node && (state == view.end() || state->second != protocol::MemberState::kAlive)) {
        return Fail("node " + std::to_string(id) + " does not see running node " +
                    std::to_string(other) + " alive: " +
                    (state == view.end() ? std::string("unknown")
                                         : std::string(protocol::MemberStateName(state->second))));
      }
      // A member that left is gone: left, or dead where its leave was cut off.
      if (slot.left && state != view.end() && state->second != protocol::MemberState::kLeft &&
          state->second != protocol::MemberState::kDead) {
        return Fail("node " + std::to_string(id) + " does not see node " + std::to_string(other) +
                    " gone: " + std::string(protocol::MemberStateName(state->second)));
      }
      if (!slot.node || slot.restarts.empty()) continue;
      const uint64_t run = slot.restarts.back();
      const auto& losses = node->losses().crash_losses();
      if (std::none_of(losses.begin(), losses.end(), [&](const CrashLoss& loss) {
            return loss.node_id == other && loss.incarnation >= run;
          })) {
        return Fail("node " + std::to_string(id) + " counts no crash loss for node " +
                    std::to_string(other) + "'s crash before run " + std::to_string(run));
      }
    }
  }
}

}  // namespace tally::sim
