// The simulation's own parts (node/sim/): its event order, its network, and
// whole runs: one seed gives one run, a run without faults agrees with a
// central limiter, and a run whose deltas are dropped without repair fails
// and fails again, at the same step, when replayed.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "node/sim/event_queue.h"
#include "node/sim/network.h"
#include "node/sim/random.h"
#include "node/sim/simulation.h"

namespace tally::sim {
namespace {

// A short run with the suite's settings: waits of 1 s, anti-entropy every 5 s.
SimOptions ShortRun(size_t nodes, uint64_t seed) {
  SimOptions options;
  options.nodes = nodes;
  options.seed = seed;
  options.seconds = 20;
  options.node.gossip_max_delay_ms = 1'000;
  options.node.anti_entropy_interval_ms = 5'000;
  options.workload.far_keys = 100;
  return options;
}

}  // namespace

// Events run in order of time, and at one time in the order they were scheduled.
TEST_CASE("sim: events run by time, then by scheduling") {
  EventQueue events;
  std::vector<int> order;
  events.At(20, [&] { order.push_back(3); });
  events.At(10, [&] { order.push_back(1); });
  events.At(10, [&] { order.push_back(2); });
  events.At(5, [&] { events.After(5, [&] { order.push_back(4); }); });
  while (events.RunNext(100)) {
  }
  CHECK(order == std::vector{1, 2, 4, 3});
  CHECK(events.now_ms() == 100);
  CHECK(events.steps() == 5);
}

// A cut holds messages back until it heals (as TCP retransmits); a reset
// connection loses what was held; the other way is not cut.
TEST_CASE("sim: a cut holds messages until it heals, a reset drops them") {
  EventQueue events;
  Random random(1);
  std::vector<std::string> arrived;
  Network network(
      &events, &random, NetworkFaults{}, [&](NodeId from, NodeId to, const Frame& frame, int64_t) {
        arrived.push_back(std::to_string(from) + ">" + std::to_string(to) + ":" + *frame);
      });
  network.Cut(1, 2);
  network.Send(1, 2, std::make_shared<const std::string>("a"));
  network.Send(2, 1, std::make_shared<const std::string>("b"));
  while (events.RunNext(1'000)) {
  }
  CHECK(arrived == std::vector<std::string>{"2>1:b"});
  network.Heal(1, 2);
  while (events.RunNext(2'000)) {
  }
  CHECK(arrived == std::vector<std::string>{"2>1:b", "1>2:a"});
  network.Cut(1, 2);
  network.Send(1, 2, std::make_shared<const std::string>("c"));
  network.DropHeld(1, 2);
  network.Heal(1, 2);
  while (events.RunNext(3'000)) {
  }
  CHECK(arrived.size() == 2);
}

// Each link (one direction) keeps the extra delay it drew: its messages
// arrive within the per-message range of it, and links differ.
TEST_CASE("sim: each link has its own delay") {
  EventQueue events;
  Random random(3);
  NetworkFaults faults;
  faults.delay_min_ms = 1;
  faults.delay_max_ms = 2;
  faults.link_extra_max_ms = 1'000;
  std::map<std::pair<NodeId, NodeId>, std::vector<int64_t>> delays;
  Network network(&events, &random, faults,
                  [&](NodeId from, NodeId to, const Frame&, int64_t sent_at_ms) {
                    delays[{from, to}].push_back(events.now_ms() - sent_at_ms);
                  });
  for (int i = 0; i < 20; ++i) {
    for (const auto& [from, to] : {std::pair<NodeId, NodeId>{1, 2}, {2, 1}, {1, 3}}) {
      network.Send(from, to, std::make_shared<const std::string>("m"));
    }
  }
  while (events.RunNext(10'000)) {
  }
  std::set<int64_t> fastest;
  for (const auto& [link, seen] : delays) {
    REQUIRE(seen.size() == 20);
    const auto [low, high] = std::minmax_element(seen.begin(), seen.end());
    CHECK(*high - *low <= 1);
    fastest.insert(*low);
  }
  CHECK(fastest.size() == 3);
}

// The same seed gives the same run, decision for decision; another seed another.
TEST_CASE("sim: one seed, one run") {
  SimOptions options = ShortRun(5, 7);
  options.seconds = 45;  // losses need a long quiet end (a table every 20 pings)
  options.faults = Faults{true, true, true, true, true, true, true};
  const SimReport first = RunSimulation(options);
  CHECK(first.decisions > 0);
  const SimReport second = RunSimulation(options);
  CHECK(first.steps == second.steps);
  CHECK(first.fingerprint == second.fingerprint);
  CHECK(first.bytes == second.bytes);
  options.seed = 8;
  CHECK(RunSimulation(options).fingerprint != first.fingerprint);
}

// Three nodes without faults: every invariant holds, every node converges,
// and below a limit the cluster admits what a central limiter admits.
TEST_CASE("sim: three nodes without faults agree with a central limiter below limits") {
  const SimReport report = RunSimulation(ShortRun(3, 1));
  INFO(report.violation);
  REQUIRE(report.ok);
  CHECK(report.decisions > 10'000);
  CHECK(report.convergence_ms >= 0);
  const Checker::Totals& below = report.totals[static_cast<int>(LoadKind::kBelow)];
  CHECK(below.admitted == below.central);
  const Checker::Totals& far = report.totals[static_cast<int>(LoadKind::kFar)];
  CHECK(far.admitted == far.central);
}

// Deltas dropped and never repaired: the run fails (the nodes do not
// converge), and replaying its options fails the same way at the same step.
TEST_CASE("sim: a run whose deltas are lost without repair fails, and replays exactly") {
  SimOptions options = ShortRun(4, 2);
  options.seconds = 30;
  options.break_repair = true;
  const SimReport report = RunSimulation(options);
  REQUIRE_FALSE(report.ok);
  CHECK(report.violation.find("no convergence") != std::string::npos);
  const SimReport replay = RunSimulation(options);
  CHECK(replay.violation == report.violation);
  CHECK(replay.violation_step == report.violation_step);
}

}  // namespace tally::sim
