#include "cluster/demand.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>
#include <thread>

namespace tally::cluster {
namespace {

using std::chrono::steady_clock;

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The window a check counted in. A fixed window's decision says when the
// node's window ends (reset_after_ms after the decision, which came after
// sent_ms and within far less than a window): the first window end at or
// after sent_ms + reset_after_ms. Otherwise the window of the time the check
// was due: a client that lags sends late, but its check stays in the window
// the schedule meant it for, so two runs of one schedule compare window by
// window.
int64_t CountedWindow(const LimitSpec& spec, int64_t due_ms, int64_t sent_ms,
                      const Decision& decision) {
  const auto window_ms = static_cast<int64_t>(spec.window_ms);
  if (spec.algorithm != Algorithm::kFixedWindow || decision.reset_after_ms == 0) {
    return due_ms / window_ms;
  }
  const int64_t end_at_least_ms = sent_ms + static_cast<int64_t>(decision.reset_after_ms);
  return (end_at_least_ms + window_ms - 1) / window_ms - 1;
}

// The paced demand: one stream per node with its share, at evenly spaced
// times, staggered so that nodes do not send in lockstep.
std::vector<Arrival> PacedArrivals(const DemandOptions& options, size_t nodes) {
  std::vector<Arrival> arrivals;
  const auto window_ns = static_cast<double>(options.spec.window_ms) * 1e6;
  const double end_ns = window_ns * options.windows;
  for (size_t node = 0; node < nodes; ++node) {
    const double share =
        options.shares.empty() ? 1.0 / static_cast<double>(nodes) : options.shares[node];
    const double per_window = share * static_cast<double>(options.demand_per_window);
    if (per_window <= 0) continue;
    const double period_ns = window_ns / per_window;
    for (double at_ns = period_ns * static_cast<double>(node) / static_cast<double>(nodes);
         at_ns < end_ns; at_ns += period_ns) {
      arrivals.push_back({static_cast<int64_t>(at_ns), node});
    }
  }
  return arrivals;
}

}  // namespace

uint64_t WindowTally::total_admitted() const {
  return std::accumulate(admitted.begin(), admitted.end(), uint64_t{0});
}

std::vector<Arrival> PoissonArrivals(double rate_per_s, int64_t duration_ms, size_t streams,
                                     uint64_t seed) {
  std::mt19937_64 random(seed);
  std::exponential_distribution<double> gap_s(rate_per_s);
  std::uniform_int_distribution<size_t> stream(0, streams - 1);
  std::vector<Arrival> arrivals;
  for (double at_s = gap_s(random); at_s * 1e3 < static_cast<double>(duration_ms);
       at_s += gap_s(random)) {
    arrivals.push_back({static_cast<int64_t>(at_s * 1e9), stream(random)});
  }
  return arrivals;
}

std::vector<Arrival> BurstArrivals(uint64_t count, int64_t span_ms, size_t streams) {
  std::vector<Arrival> arrivals;
  for (uint64_t i = 0; i < count; ++i) {
    arrivals.push_back({static_cast<int64_t>(i) * span_ms * 1'000'000 / static_cast<int64_t>(count),
                        static_cast<size_t>(i % streams)});
  }
  return arrivals;
}

Status DriveDemand(LocalCluster& cluster, const DemandOptions& options,
                   std::vector<WindowTally>* windows) {
  const size_t nodes = cluster.size();
  const auto window_ms = static_cast<int64_t>(options.spec.window_ms);
  std::vector<Arrival> arrivals = options.arrivals;
  if (arrivals.empty()) {
    if (!options.shares.empty() && options.shares.size() != nodes) {
      return Status::InvalidArgument("one share per node");
    }
    arrivals = PacedArrivals(options, nodes);
  }
  // The arrivals' offsets by stream, in time order.
  std::vector<std::vector<int64_t>> schedules;
  for (const Arrival& arrival : arrivals) {
    if (arrival.stream >= schedules.size()) schedules.resize(arrival.stream + 1);
    schedules[arrival.stream].push_back(arrival.offset_ns);
  }
  for (std::vector<int64_t>& schedule : schedules) std::sort(schedule.begin(), schedule.end());
  const int64_t first = WallMs() / window_ms + 1;
  const int64_t end_ms = (first + options.windows) * window_ms;
  const steady_clock::time_point start =
      steady_clock::now() + std::chrono::milliseconds(first * window_ms - WallMs());
  // counts[stream][window - first]; each written by its stream's thread.
  struct Counts {
    uint64_t sent = 0;
    uint64_t admitted = 0;
    uint64_t failed = 0;
  };
  std::vector<std::vector<Counts>> counts(
      schedules.size(), std::vector<Counts>(static_cast<size_t>(options.windows)));
  std::atomic<bool> failed{false};
  std::vector<std::thread> clients;
  for (size_t stream = 0; stream < schedules.size(); ++stream) {
    if (schedules[stream].empty()) continue;
    clients.emplace_back([&, stream] {
      const size_t node = stream % nodes;
      std::unique_ptr<protocol::Client> client;
      if (!cluster.Connect(node, &client).ok() && !options.survive_node_loss) {
        failed = true;
        return;
      }
      const std::vector<int64_t>& schedule = schedules[stream];
      for (size_t next = 0; next < schedule.size(); ++next) {
        std::this_thread::sleep_until(start + std::chrono::nanoseconds(schedule[next]));
        const int64_t due_ms = first * window_ms + schedule[next] / 1'000'000;
        if (due_ms >= end_ms) return;
        const int64_t sent_ms = WallMs();
        protocol::CheckOutcome outcome;
        if (client == nullptr || !client->Check({options.key, options.spec, 1}, &outcome).ok() ||
            outcome.error != protocol::ErrorCode::kOk) {
          if (!options.survive_node_loss) {
            failed = true;
            return;
          }
          const int64_t window = due_ms / window_ms - first;
          if (window >= 0 && window < options.windows) {
            ++counts[stream][static_cast<size_t>(window)].failed;
          }
          client.reset();
          while (client == nullptr && WallMs() < end_ms) {
            if (!cluster.Connect(node, &client).ok()) {
              client.reset();
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
          }
          const steady_clock::time_point now = steady_clock::now();
          while (next + 1 < schedule.size() &&
                 start + std::chrono::nanoseconds(schedule[next + 1]) < now) {
            ++next;
          }
          continue;
        }
        const int64_t counted = CountedWindow(options.spec, due_ms, sent_ms, outcome.decision);
        const int64_t window = counted - first;
        if (window < 0 || window >= options.windows) continue;
        if (options.history != nullptr) {
          options.history->Record(
              {node, options.key, sent_ms, WallMs(), counted, outcome.decision.allowed});
        }
        Counts& counted_in = counts[stream][static_cast<size_t>(window)];
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
    tally.sent.assign(nodes, 0);
    tally.admitted.assign(nodes, 0);
    tally.failed.assign(nodes, 0);
    for (size_t stream = 0; stream < schedules.size(); ++stream) {
      const Counts& counted = counts[stream][static_cast<size_t>(w)];
      tally.sent[stream % nodes] += counted.sent;
      tally.admitted[stream % nodes] += counted.admitted;
      tally.failed[stream % nodes] += counted.failed;
    }
  }
  return Status::OK();
}

}  // namespace tally::cluster
