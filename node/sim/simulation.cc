#include "node/sim/simulation.h"

#include <malloc.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include <sys/resource.h>

#include "protocol/peer_codec.h"

namespace tally::sim {
namespace {

constexpr int64_t kFlushIntervalMs = 1'000;  // tallyd's --flush-interval-ms
constexpr int64_t kWriteTimeoutMs = 5'000;   // a cut link goes down after this
constexpr int64_t kReconnectMinMs = 50, kReconnectMaxMs = 1'000;
constexpr int64_t kClientTickMs = 100;  // requests are drawn this far ahead
constexpr int64_t kConvergencePollMs = 100;
constexpr uint64_t kBugDropPermille = 50;  // break_repair: deltas dropped

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccd;
}

bool IsDelta(const Frame& frame) {
  protocol::PeerMessage message;
  protocol::FrameLimits limits;
  limits.max_frame_bytes = 4 << 20;
  return protocol::DecodePeerMessage(std::as_bytes(std::span(frame->data(), frame->size())), limits,
                                     &message)
             .ok() &&
         message.kind == protocol::PeerMessageKind::kState && !message.full;
}

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
  std::vector<NodeId> RunningIds() const;
  void Restart(NodeId id);
  void Flush(NodeId id);
  // Takes a node out of the run (crashed or left): its counters stay counted.
  void Retire(Slot& slot);
  std::optional<std::string> Divergence();
  std::vector<NodeId> seeds_;
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

int64_t SettleMs(const SimOptions& options) {
  if (options.settle_ms > 0) return options.settle_ms;
  const SimNode::Config& node = options.node;
  const Faults& f = options.faults;
  const bool repair = f.loss || f.duplicate || f.reorder || f.partition || f.crash || f.churn ||
                      options.break_repair;
  // Three waits (docs/design-coordination.md: an admission made while its
  // node waits for the relayer's delta of an earlier one); quiet; then
  // anti-entropy's interval and recheck.
  return 3 * node.gossip_max_delay_ms + QuietMs(node.interval_ms) + 3'000 +
         (repair ? node.anti_entropy_interval_ms + RecheckMs(node.interval_ms) : 0) +
         // A member's records lost on their way (tables included) come again
         // with a whole table, which every kTableEvery-th ping carries.
         (f.loss ? 2 * static_cast<int64_t>(MemberAgent::kTableEvery) * node.membership_interval_ms
                 : 0);
}

World::World(const SimOptions& options)
    : options_(options),
      random_(options.seed),
      network_(&events_, &random_, NetworkFaults{},
               [this](NodeId from, NodeId to, const Frame& frame, int64_t sent_at_ms) {
                 Deliver(from, to, frame, sent_at_ms);
               }),
      workload_(options.workload, &random_),
      central_clock_(&events_, 0),
      central_(Limiter::Options{.node_id = 1, .clock = &central_clock_}) {}

std::vector<NodeId> World::RunningIds() const {
  std::vector<NodeId> ids;
  for (const auto& [id, slot] : slots_) {
    if (slot.node) ids.push_back(id);
  }
  return ids;
}

void World::Start(NodeId id, std::vector<NodeId> seeds) {
  Slot& slot = slots_[id];
  SimNode::Config config = options_.node;
  config.id = id;
  config.seeds = std::move(seeds);
  config.break_repair = options_.break_repair;
  slot.started_ms = events_.now_ms();
  slot.round_at_ms = INT64_MAX;
  slot.followed_events = UINT64_MAX;
  ++slot.run;
  slot.dialing.clear();
  slot.backoff_ms.clear();
  // Memory-only nodes unless crashes may strike: a store costs a copy of every key.
  slot.node = std::make_unique<SimNode>(
      config, &events_, options_.faults.crash ? &slot.store : nullptr, slot.offset_ms,
      [this, id](NodeId to, const Frame& frame) {
        if (options_.break_repair && random_.Below(1000) < kBugDropPermille && IsDelta(frame)) {
          return;
        }
        network_.Send(id, to, frame);
      },
      [this, id](NodeId from, std::span<const KeySnapshot> entries) {
        if (!options_.check_views || failed_) return;
        if (const auto what = Checker::CheckViewHolds(id, Running(id)->limiter(), from, entries)) {
          Fail(*what);
        }
      });
  Touch(id);
}

void World::Retire(Slot& slot) {
  retired_delta_entries_ += slot.node->counters().delta_entries_sent;
  slot.node.reset();
  ++slot.round_generation;  // its pending round is void
}

void World::Touch(NodeId id) {
  Slot& slot = slots_.at(id);
  SimNode* const node = slot.node.get();
  if (node == nullptr) return;
  if (node->next_round_at_ms() != slot.round_at_ms) {
    slot.round_at_ms = node->next_round_at_ms();
    const uint64_t generation = ++slot.round_generation;
    events_.At(slot.round_at_ms, [this, id, generation] {
      Slot& due = slots_.at(id);
      if (due.node == nullptr || due.round_generation != generation) return;
      due.round_at_ms = INT64_MAX;
      due.node->Round();
      Touch(id);
    });
  }
  if (node->link_events() != slot.followed_events) {
    slot.followed_events = node->link_events();
    for (const NodeId peer : node->WantedLinks()) {
      if (!node->link_up(peer) && !slot.dialing.contains(peer)) Dial(id, peer, 0);
    }
  }
}

void World::Dial(NodeId from, NodeId to, int64_t delay_ms) {
  Slot& slot = slots_.at(from);
  slot.dialing.insert(to);
  // A connection takes a round trip.
  const int64_t connect_ms = delay_ms + 2 * network_.faults().delay_min_ms;
  events_.After(connect_ms, [this, from, to, run = slot.run] {
    Slot& dialling = slots_.at(from);
    SimNode* const node = dialling.node.get();
    if (dialling.run != run || node == nullptr) return;  // that run is gone
    dialling.dialing.erase(to);
    if (!node->wants_link(to) || node->link_up(to)) return;
    SimNode* const peer = Running(to);
    if (peer != nullptr && network_.Reaches(from, to) && network_.Reaches(to, from)) {
      dialling.backoff_ms.erase(to);
      node->LinkUp(to, peer->incarnation());
      peer->SessionUp(from, node->incarnation());
      Touch(from);
      Touch(to);
      return;
    }
    int64_t& backoff = dialling.backoff_ms[to];
    backoff = std::clamp<int64_t>(2 * backoff, kReconnectMinMs, kReconnectMaxMs);
    Dial(from, to, backoff);
  });
}

void World::Deliver(NodeId from, NodeId to, const Frame& frame, int64_t sent_at_ms) {
  const auto slot = slots_.find(to);
  if (failed_ || slot == slots_.end() || slot->second.node == nullptr) return;
  if (slot->second.started_ms > sent_at_ms) return;  // sent to a run since gone
  slot->second.node->Receive(from, *frame);
  Touch(to);
}

void World::Flush(NodeId id) {
  if (SimNode* const node = Running(id)) node->Flush();
  if (events_.now_ms() + kFlushIntervalMs < end_ms_) {
    events_.After(kFlushIntervalMs, [this, id] { Flush(id); });
  }
}

void World::ScheduleClients(int64_t from_ms) {
  if (from_ms >= load_end_ms_ || failed_) return;
  const int64_t to_ms = std::min(from_ms + kClientTickMs, load_end_ms_);
  for (const Request& request : workload_.Requests(from_ms, to_ms)) {
    events_.At(request.at_ms, [this, request] { Serve(request); });
  }
  events_.At(to_ms, [this, to_ms] { ScheduleClients(to_ms); });
}

void World::Serve(const Request& request) {
  if (failed_) return;
  const std::vector<NodeId> running = RunningIds();
  if (running.empty()) return;
  const SimKey& key = workload_.keys()[request.key];
  SimNode* node = nullptr;
  // A far key's client mostly reaches its own node (a sticky balancer); the rest go anywhere.
  if (key.kind == LoadKind::kFar && random_.Chance(options_.workload.far_affinity)) {
    SimNode* const home = Running(running[request.key % running.size()]);
    if (home->serving()) node = home;
  }
  for (int attempt = 0; attempt < 3 && node == nullptr; ++attempt) {
    SimNode* const candidate = Running(running[random_.Below(running.size())]);
    if (candidate->serving()) node = candidate;
  }
  if (node == nullptr) return;  // the client's retries found none serving
  Decision decision;
  if (!node->Check(key.key, key.spec, 1, &decision).ok()) return;
  ++report_.decisions;
  report_.fingerprint = Mix(Mix(Mix(report_.fingerprint, static_cast<uint64_t>(events_.now_ms())),
                                node->id() * 1'000'003 + request.key),
                            decision.allowed ? 1 : 0);
  Decision central;
  if (central_.Check(key.key, key.spec, 1, &central).ok() && central.allowed) {
    checker_->CentralAdmitted(request.key, events_.now_ms());
  }
  if (decision.allowed) {
    if (const auto what = checker_->NodeAdmitted(request.key, node->id(), events_.now_ms())) {
      Fail(*what);
    }
  }
  Touch(node->id());
}

void World::Fail(const std::string& what) {
  if (failed_) return;
  failed_ = true;
  report_.ok = false;
  report_.violation = what;
  report_.violation_step = events_.steps();
  report_.violation_at_ms = events_.now_ms();
}

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
                    options_.node.interval_ms + network_.faults().delay_max_ms);
  Retire(slot);
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
    Retire(slot);
    slot.left = true;
    for (const NodeId other : RunningIds()) {
      Running(other)->LinkDown(id);
      Touch(other);
    }
  });
}

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

SimReport World::Run() {
  const double cpu_start = CpuSeconds();
  end_ms_ = options_.seconds * 1000;
  load_end_ms_ = std::max<int64_t>(0, end_ms_ - SettleMs(options_));
  const Faults& faults = options_.faults;
  NetworkFaults network = network_.faults();
  network.loss = faults.loss ? 0.01 : 0;
  network.duplicate = faults.duplicate ? 0.01 : 0;
  network.reorder = faults.reorder ? 0.05 : 0;
  network_.SetFaults(network);
  int64_t max_offset_ms = 0;
  for (size_t i = 0; i < options_.nodes; ++i) {
    Slot& slot = slots_[next_id_++];
    slot.offset_ms = faults.clock ? random_.Between(-10, 10) : 0;
    max_offset_ms = std::max(max_offset_ms, std::abs(slot.offset_ms));
  }
  const int64_t staleness_ms = options_.node.interval_ms +
                               network.delay_max_ms * (faults.reorder ? 11 : 1) + 2 * max_offset_ms;
  checker_.emplace(Checker::Options{options_.nodes + (faults.churn ? 1 : 0), staleness_ms,
                                    options_.workload.window_ms},
                   &workload_.keys());
  if (faults.loss || faults.duplicate) checker_->Degrade(0, load_end_ms_);
  checker_->Degrade(0, options_.node.recovery_timeout_ms);  // forming
  const size_t heap_before = mallinfo2().uordblks;
  // Every node has the first three as seeds, as a deployment's DNS name lists them.
  for (NodeId id = 1; id <= std::min<NodeId>(3, options_.nodes); ++id) seeds_.push_back(id);
  for (NodeId id = 1; id <= options_.nodes; ++id) {
    Start(id, seeds_);
    events_.At(kFlushIntervalMs, [this, id] { Flush(id); });
  }
  ScheduleClients(0);
  ScheduleFaults();
  events_.At(load_end_ms_, [this, heap_before] {
    for (const NodeId id : RunningIds()) report_.keys_held += Running(id)->limiter().key_count();
    report_.heap_bytes =
        static_cast<int64_t>(mallinfo2().uordblks) - static_cast<int64_t>(heap_before);
    Settle();
  });
  while (!failed_ && events_.RunNext(end_ms_)) {
  }
  if (!failed_) CheckEnd();
  report_.steps = events_.steps();
  report_.messages = network_.messages();
  report_.bytes = network_.bytes();
  report_.delta_entries = retired_delta_entries_;
  for (const auto& [id, slot] : slots_) {
    if (slot.node) report_.delta_entries += slot.node->counters().delta_entries_sent;
  }
  for (int kind = 0; kind < kLoadKinds; ++kind) {
    report_.totals[kind] = checker_->totals(static_cast<LoadKind>(kind));
  }
  report_.cpu_s = CpuSeconds() - cpu_start;
  return report_;
}

}  // namespace

std::string Faults::ToString() const {
  std::string names;
  const std::pair<bool, const char*> all[] = {
      {loss, "loss"},   {duplicate, "duplicate"}, {reorder, "reorder"}, {partition, "partition"},
      {crash, "crash"}, {clock, "clock"},         {churn, "churn"}};
  for (const auto& [on, name] : all) {
    if (!on) continue;
    if (!names.empty()) names += ',';
    names += name;
  }
  return names.empty() ? "none" : names;
}

std::optional<Faults> ParseFaults(const std::string& text) {
  Faults faults;
  if (text == "none" || text.empty()) return faults;
  if (text == "all") return Faults{true, true, true, true, true, true, true};
  std::stringstream in(text);
  std::string name;
  while (std::getline(in, name, ',')) {
    if (name == "loss")
      faults.loss = true;
    else if (name == "duplicate")
      faults.duplicate = true;
    else if (name == "reorder")
      faults.reorder = true;
    else if (name == "partition")
      faults.partition = true;
    else if (name == "crash")
      faults.crash = true;
    else if (name == "clock")
      faults.clock = true;
    else if (name == "churn")
      faults.churn = true;
    else
      return std::nullopt;
  }
  return faults;
}

SimReport RunSimulation(const SimOptions& options) { return World(options).Run(); }

}  // namespace tally::sim
