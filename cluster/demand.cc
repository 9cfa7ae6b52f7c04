#include "cluster/demand.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <thread>

namespace tally::cluster {
namespace {

using std::chrono::steady_clock;

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The window a check counted in at the node. A fixed window's decision says
// when its window ends (reset_after_ms after the decision, which came after
// sent_ms and within far less than a window): the first window end at or
// after sent_ms + reset_after_ms. Otherwise the window of the send time.
int64_t CountedWindow(const LimitSpec& spec, int64_t sent_ms, const Decision& decision) {
  const auto window_ms = static_cast<int64_t>(spec.window_ms);
  if (spec.algorithm != Algorithm::kFixedWindow || decision.reset_after_ms == 0) {
    return sent_ms / window_ms;
  }
  const int64_t end_at_least_ms = sent_ms + static_cast<int64_t>(decision.reset_after_ms);
  return (end_at_least_ms + window_ms - 1) / window_ms - 1;
}

}  // namespace

uint64_t WindowTally::total_admitted() const {
  return std::accumulate(admitted.begin(), admitted.end(), uint64_t{0});
}

Status DriveDemand(LocalCluster& cluster, const DemandOptions& options,
                   std::vector<WindowTally>* windows) {
  const size_t nodes = cluster.size();
  std::vector<double> shares = options.shares;
  if (shares.empty()) shares.assign(nodes, 1.0 / static_cast<double>(nodes));
  if (shares.size() != nodes) return Status::InvalidArgument("one share per node");
  const auto window_ms = static_cast<int64_t>(options.spec.window_ms);
  const int64_t first = WallMs() / window_ms + 1;
  const int64_t end_ms = (first + options.windows) * window_ms;
  // counts[node][window - first]; each written by its node's thread.
  struct Counts {
    uint64_t sent = 0;
    uint64_t admitted = 0;
    uint64_t failed = 0;
  };
  std::vector<std::vector<Counts>> counts(
      nodes, std::vector<Counts>(static_cast<size_t>(options.windows)));
  std::atomic<bool> failed{false};
  std::vector<std::thread> clients;
  for (size_t node = 0; node < nodes; ++node) {
    const double per_window = shares[node] * static_cast<double>(options.demand_per_window);
    if (per_window <= 0) continue;
    const auto period = std::chrono::nanoseconds(
        static_cast<int64_t>(1e6 * static_cast<double>(window_ms) / per_window));
    clients.emplace_back([&, node, period] {
      std::unique_ptr<protocol::Client> client;
      if (!cluster.Connect(node, &client).ok() && !options.survive_node_loss) {
        failed = true;
        return;
      }
      // From the first window's start, staggered so that nodes do not send in lockstep.
      auto next = steady_clock::now() + std::chrono::milliseconds(first * window_ms - WallMs()) +
                  period * static_cast<int64_t>(node) / static_cast<int64_t>(nodes);
      for (;;) {
        std::this_thread::sleep_until(next);
        next += period;
        const int64_t sent_ms = WallMs();
        if (sent_ms >= end_ms) return;
        protocol::CheckOutcome outcome;
        if (client == nullptr || !client->Check({options.key, options.spec, 1}, &outcome).ok() ||
            outcome.error != protocol::ErrorCode::kOk) {
          if (!options.survive_node_loss) {
            failed = true;
            return;
          }
          const int64_t window = sent_ms / window_ms - first;
          if (window >= 0 && window < options.windows) {
            ++counts[node][static_cast<size_t>(window)].failed;
          }
          client.reset();
          while (client == nullptr && WallMs() < end_ms) {
            if (!cluster.Connect(node, &client).ok()) {
              client.reset();
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
          }
          next = steady_clock::now();
          continue;
        }
        const int64_t counted = CountedWindow(options.spec, sent_ms, outcome.decision);
        const int64_t window = counted - first;
        if (window < 0 || window >= options.windows) continue;
        if (options.history != nullptr) {
          options.history->Record(
              {node, options.key, sent_ms, WallMs(), counted, outcome.decision.allowed});
        }
        Counts& counted_in = counts[node][static_cast<size_t>(window)];
        ++counted_in.sent;
        counted_in.admitted += outcome.decision.allowed ? 1 : 0;
      }
    });
  }
  for (std::thread& client : clients) client.join();
  if (failed) return Status::Unavailable("a client could not connect or a check failed");
  windows->clear();
  for (int w = 0; w < options.windows; ++w) {
    WindowTally& tally = windows->emplace_back();
    tally.window_index = first + w;
    for (size_t node = 0; node < nodes; ++node) {
      const Counts& counted = counts[node][static_cast<size_t>(w)];
      tally.sent.push_back(counted.sent);
      tally.admitted.push_back(counted.admitted);
      tally.failed.push_back(counted.failed);
    }
  }
  return Status::OK();
}

}  // namespace tally::cluster
