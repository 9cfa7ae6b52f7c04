#include "node/sim/simulation.h"

#include <malloc.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include <sys/resource.h>

#include "node/sim/world.h"
#include "protocol/peer_codec.h"

namespace tally::sim {
namespace {

constexpr int64_t kFlushIntervalMs = 1'000;  // tallyd's --flush-interval-ms
constexpr int64_t kClientTickMs = 100;       // requests are drawn this far ahead
constexpr uint64_t kBugDropPermille = 50;    // break_repair: deltas dropped

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

}  // namespace

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
  running_.insert(std::upper_bound(running_.begin(), running_.end(), id), id);
  Touch(id);
}

void World::Retire(NodeId id) {
  Slot& slot = slots_.at(id);
  std::erase(running_, id);
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
  const std::vector<NodeId>& running = RunningIds();
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
  if (options_.trace != nullptr) {
    options_.trace->served.push_back({events_.now_ms(), node->id(), request.key});
  }
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

SimReport World::Run() {
  const double cpu_start = CpuSeconds();
  end_ms_ = options_.seconds * 1000;
  load_end_ms_ = std::max<int64_t>(0, end_ms_ - SettleMs(options_));
  const Faults& faults = options_.faults;
  NetworkFaults network = network_.faults();
  network.delay_min_ms = options_.delay_min_ms;
  network.delay_max_ms = options_.delay_max_ms;
  network.link_extra_max_ms = options_.link_extra_max_ms;
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
                               network.delay_max_ms * (faults.reorder ? 11 : 1) +
                               network.link_extra_max_ms + 2 * max_offset_ms;
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
  if (options_.trace != nullptr) options_.trace->keys = workload_.keys();
  return report_;
}

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
