// Faults as production meets them, on real tallyd processes: slow and lossy
// links, a one-way partition, a flapping link. Clients drive 10x the limit
// spread over the nodes; every decision goes into a History, and the checker
// (cluster/history.h) holds every window to the bound for the conditions at
// the time, then the nodes must converge to one view once the faults end.
// Each scenario runs a few 1 s windows and is bounded in time.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "cluster/demand.h"
#include "cluster/history.h"
#include "cluster/local_cluster.h"
#include "tests/support/must_check.h"
#include "tests/support/poll.h"

namespace tally {
namespace {

using cluster::HistoryBound;
using cluster::HistoryVerdict;
using cluster::LinkFaults;
using cluster::LocalCluster;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr uint64_t kLimit = 100;
constexpr int64_t kWindowMs = 1'000;
constexpr uint64_t kDemand = 10 * kLimit;  // per window, all nodes
// Gossip interval (50 ms), scheduling and delivery on a loaded 2-core machine.
constexpr int64_t kHealthyStalenessMs = 150;

std::unique_ptr<LocalCluster> StartCluster(size_t nodes) {
  LocalCluster::Options options;
  options.tallyd_path = TALLYD_PATH;
  options.nodes = nodes;
  std::unique_ptr<LocalCluster> cluster;
  const Status status = LocalCluster::Start(options, &cluster);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return cluster;
}

// Drives kDemand per window on `key` for `windows` windows and checks the
// history against `bound`.
HistoryVerdict DriveAndCheck(LocalCluster& cluster, const std::string& key, int windows,
                             HistoryBound bound) {
  cluster::History history;
  cluster::DemandOptions options;
  options.spec = LimitSpec{Algorithm::kFixedWindow, kLimit, kWindowMs};
  options.key = key;
  options.demand_per_window = kDemand;
  options.windows = windows;
  options.history = &history;
  std::vector<cluster::WindowTally> tallies;
  const Status status = cluster::DriveDemand(cluster, options, &tallies);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  bound.limit = kLimit;
  bound.window_ms = kWindowMs;
  // Most windows get ~kDemand checks; fewer means a window the run only grazed.
  const HistoryVerdict verdict = CheckFixedWindow(history.Sorted(), bound, kDemand / 2);
  MESSAGE(verdict.Table());
  for (const std::string& violation : verdict.violations) FAIL_CHECK(violation);
  return verdict;
}

// Once faults end, every node must see every admission of the key Mark made
// (a peek at each gives the same remaining, kLimit - nodes x kMarks) within a
// bound; returns how long that took.
constexpr uint64_t kMarks = 5;
int64_t MsToOneView(const LocalCluster& cluster, const std::string& key) {
  const uint64_t expected = kLimit - cluster.size() * kMarks;
  const LimitSpec spec{Algorithm::kFixedWindow, kLimit, 86'400'000};
  const auto start = steady_clock::now();
  const bool converged = testing::PollUntil(
      [&] {
        for (size_t node = 0; node < cluster.size(); ++node) {
          std::unique_ptr<protocol::Client> client;
          if (!cluster.Connect(node, &client).ok()) return false;
          if (testing::MustCheck(*client, {key, spec, 0}).remaining != expected) return false;
        }
        return true;
      },
      10'000);
  CHECK_MESSAGE(converged, "the nodes did not converge to one view of " << key);

  return std::chrono::duration_cast<milliseconds>(steady_clock::now() - start).count();
}

// Admits kMarks checks of `key` (a day's window) at each node, so that a
// view that misses some shows in MsToOneView.
void Mark(const LocalCluster& cluster, const std::string& key) {
  const LimitSpec spec{Algorithm::kFixedWindow, kLimit, 86'400'000};
  for (size_t node = 0; node < cluster.size(); ++node) {
    std::unique_ptr<protocol::Client> client;
    REQUIRE(cluster.Connect(node, &client).ok());
    for (uint64_t i = 0; i < kMarks; ++i) testing::MustCheck(*client, {key, spec, 1});
  }
}

// 50 ms +- 20 ms on every link and 2% of chunks held a retransmission
// timeout (200 ms): views are up to ~70 + 200 ms staler, and the bound
// grows by what arrives meanwhile; no window denies under the limit.
TEST_CASE("faults: 50 +- 20 ms delay and 2% loss on every link at 10x demand") {
  auto cluster = StartCluster(3);
  const LinkFaults faults{.delay_ms = 50, .jitter_ms = 20, .loss = 0.02};
  for (size_t from = 0; from < 3; ++from) {
    for (size_t to = 0; to < 3; ++to) {
      if (from != to) cluster->SetLinkFaults(from, to, faults);
    }
  }
  const HistoryVerdict verdict =
      DriveAndCheck(*cluster, "slow", 4,
                    HistoryBound{.staleness_ms = kHealthyStalenessMs + faults.delay_ms +
                                                 faults.jitter_ms + LinkFaults::kRetransmitMs,
                                 .deciders = 3});
  CHECK(verdict.worst_ratio < 3.0);
  Mark(*cluster, "slow-view");
  MESSAGE("one view after " << MsToOneView(*cluster, "slow-view") << " ms of delayed links");
}

// Node 0's pushes do not reach node 1 (node 1's reach node 0): node 1
// decides without node 0's admissions, so two views can each fill the limit;
// once healed, all three converge.
TEST_CASE("faults: a one-way partition, then healed") {
  auto cluster = StartCluster(3);
  cluster->CutOneWay(0, 1);
  DriveAndCheck(*cluster, "one-way", 3, HistoryBound{.staleness_ms = kWindowMs, .deciders = 2});
  Mark(*cluster, "one-way-view");
  cluster->Heal();
  MESSAGE("one view " << MsToOneView(*cluster, "one-way-view") << " ms after the heal");
}

// The link between nodes 0 and 1 is cut and healed every 300 ms throughout
// the run: never worse than two views, and one view once it stays up.
TEST_CASE("faults: a link that flaps every 300 ms") {
  auto cluster = StartCluster(3);
  std::atomic<bool> done{false};
  std::thread flapper([&] {
    bool cut = false;
    while (!done) {
      if (cut) {
        cluster->Heal();
      } else {
        cluster->Cut({0}, {1});
      }
      cut = !cut;
      std::this_thread::sleep_for(milliseconds(300));
    }
    cluster->Heal();
  });
  DriveAndCheck(*cluster, "flap", 4, HistoryBound{.staleness_ms = kWindowMs, .deciders = 2});
  Mark(*cluster, "flap-view");
  done = true;
  flapper.join();
  MESSAGE("one view " << MsToOneView(*cluster, "flap-view") << " ms after the flapping ended");
}

}  // namespace
}  // namespace tally
