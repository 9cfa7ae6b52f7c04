// How long Metrics::Render takes and how large its output is, with the
// numbers tallyd serves: the Server's stats (keys, connections, the
// protocol front's counters) and a Gossip with live peers, in one process
// on loopback. Measured with no keys, then with --keys keys held, each time
// with --peers peers: nothing in the output is per key, and this shows it.
//
// Not a test: prints one JSON object per case, then a table.
//   metrics_bench [--keys 1000000] [--peers 5] [--renders 200]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "node/common/front_counters.h"
#include "node/engine/limiter.h"
#include "node/gossip/gossip.h"
#include "node/metrics/metrics.h"
#include "node/server/server.h"

namespace {

using Clock = std::chrono::steady_clock;

// This thread's CPU time in ns: on a machine shared with other work, wall
// time includes the time the thread waited for a core.
double ThreadCpuNs() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e9 + static_cast<double>(now.tv_nsec);
}

struct Node {
  explicit Node(tally::NodeId id)
      : limiter(
            tally::Limiter::Options{.node_id = id, .max_keys = 100'000'000, .replicate = true}) {}
  tally::Limiter limiter;
  std::optional<tally::Gossip> gossip;
};

struct Figures {
  uint64_t keys = 0;
  size_t peers = 0;
  size_t bytes = 0;
  size_t lines = 0;
  double mean_us = 0, p50_us = 0, p99_us = 0, max_us = 0;
  double cpu_us = 0;  // mean CPU time per render
};

Figures Measure(const tally::Metrics& metrics, uint64_t keys, size_t peers, int renders) {
  std::vector<double> us;
  std::string text;
  const double cpu_started_ns = ThreadCpuNs();
  for (int i = 0; i < renders; ++i) {
    const auto started = Clock::now();
    text = metrics.Render();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - started).count());
  }
  const double cpu_us = (ThreadCpuNs() - cpu_started_ns) / 1e3 / renders;
  std::sort(us.begin(), us.end());
  Figures figures{keys, peers, text.size(),
                  static_cast<size_t>(std::count(text.begin(), text.end(), '\n'))};
  double sum = 0;
  for (const double one : us) sum += one;
  figures.mean_us = sum / static_cast<double>(us.size());
  figures.p50_us = us[us.size() / 2];
  figures.p99_us = us[us.size() * 99 / 100];
  figures.max_us = us.back();
  figures.cpu_us = cpu_us;
  std::printf(
      "{\"keys\": %llu, \"peers\": %zu, \"bytes\": %zu, \"lines\": %zu, \"renders\": %d, "
      "\"mean_us\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f, \"max_us\": %.1f, \"cpu_us\": "
      "%.1f}\n",
      static_cast<unsigned long long>(keys), peers, figures.bytes, figures.lines, renders,
      figures.mean_us, figures.p50_us, figures.p99_us, figures.max_us, figures.cpu_us);
  return figures;
}

// What the hot path pays per request: two clock readings, a Count and a
// RecordLatency, on one stripe, in ns of CPU time.
double HotPathNs(tally::FrontCounters::Writers writers) {
  tally::FrontCounters counters(1, writers);
  constexpr int kRequests = 5'000'000;
  const double started_ns = ThreadCpuNs();
  for (int i = 0; i < kRequests; ++i) {
    const auto begun = Clock::now();
    counters.Count(0, static_cast<size_t>(i) % 3, {.allowed = 1});
    counters.RecordLatency(0, std::chrono::nanoseconds(Clock::now() - begun).count());
  }
  return (ThreadCpuNs() - started_ns) / kRequests;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t keys = 1'000'000;
  size_t peers = 5;
  int renders = 200;
  CLI::App app("metrics_bench: Metrics::Render time and size");
  app.add_option("--keys", keys)->capture_default_str();
  app.add_option("--peers", peers)->capture_default_str();
  app.add_option("--renders", renders)->check(CLI::PositiveNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::err);  // the peers' comings and goings are not the figures

  // This node and its peers, all on loopback; the peers join through it.
  std::vector<std::unique_ptr<Node>> nodes;
  tally::Gossip::Options options;
  options.cluster_secret = std::string(32, 's');
  options.listen_port = 0;
  for (size_t i = 0; i <= peers; ++i) {
    nodes.push_back(std::make_unique<Node>(static_cast<tally::NodeId>(i + 1)));
    tally::Gossip::Options node_options = options;
    if (i > 0) node_options.seeds = {"127.0.0.1:" + std::to_string(nodes[0]->gossip->port())};
    nodes[i]->gossip.emplace(node_options, &nodes[i]->limiter);
    if (!nodes[i]->gossip->Listen().ok()) return 1;
    nodes[i]->gossip->Start();
  }
  Node& node = *nodes[0];
  // Every link up and every peer heard from, so that both measurements see the whole cluster.
  const auto joined_deadline = Clock::now() + std::chrono::seconds(30);
  for (tally::protocol::StatsReply stats; Clock::now() < joined_deadline;) {
    stats = tally::protocol::StatsReply();
    node.gossip->AddStats(&stats);
    const bool all_up = std::all_of(stats.peer_links.begin(), stats.peer_links.end(),
                                    [](const auto& link) { return link.up; });
    if (stats.peer_links.size() >= peers && stats.peer_nodes.size() >= peers && all_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  // As tallyd wires them: the server's stats with the gossip's added.
  tally::Server::Options server_options;
  server_options.port = 0;
  server_options.add_stats = [&](tally::protocol::StatsReply* stats) {
    node.gossip->AddStats(stats);
  };
  tally::Server server(server_options, &node.limiter, tally::SystemClock::Default());
  tally::FrontCounters grpc(tally::FrontCounters::kThreadStripes,
                            tally::FrontCounters::Writers::kAny);
  tally::Metrics::Sources sources;
  sources.stats = [&server] { return server.Stats(); };
  tally::Metrics metrics(sources);
  metrics.AddFront("protocol", &server.protocol_counters());
  metrics.AddFront("grpc", &grpc);

  std::vector<Figures> figures;
  figures.push_back(Measure(metrics, node.limiter.key_count(), peers, renders));
  // Fill the keys (a one-hour sliding counter each), in batches as clients send them.
  std::vector<std::string> names(1'000);
  std::vector<tally::Limiter::CheckRequest> batch(names.size());
  std::vector<tally::Limiter::CheckResult> results(names.size());
  const tally::LimitSpec spec{tally::Algorithm::kSlidingWindowCounter, 100, 3'600'000};
  for (uint64_t next = 0; next < keys;) {
    const size_t count = static_cast<size_t>(std::min<uint64_t>(names.size(), keys - next));
    for (size_t i = 0; i < count; ++i) {
      names[i] = "user:" + std::to_string(next + i);
      batch[i] = {names[i], spec, 1};
    }
    node.limiter.CheckBatch(std::span(batch).first(count), std::span(results).first(count));
    next += count;
  }
  // Measure once the peers hold the keys too: replication done, the node quiet again.
  const auto settle_deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < settle_deadline &&
         std::any_of(nodes.begin() + 1, nodes.end(),
                     [&](const auto& peer) { return peer->limiter.key_count() < keys; })) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  figures.push_back(Measure(metrics, node.limiter.key_count(), peers, renders));

  std::printf("\n%10s %6s %8s %6s %9s %9s %9s %9s %9s\n", "keys", "peers", "bytes", "lines",
              "mean_us", "p50_us", "p99_us", "max_us", "cpu_us");
  for (const Figures& f : figures) {
    std::printf("%10llu %6zu %8zu %6zu %9.1f %9.1f %9.1f %9.1f %9.1f\n",
                static_cast<unsigned long long>(f.keys), f.peers, f.bytes, f.lines, f.mean_us,
                f.p50_us, f.p99_us, f.max_us, f.cpu_us);
  }
  std::printf("ratio of p50 (keys / none): %.2f\n", figures[1].p50_us / figures[0].p50_us);
  std::printf(
      "hot path per request (2 clock readings, Count, RecordLatency): %.1f ns CPU one writer "
      "per stripe, %.1f ns shared stripes\n",
      HotPathNs(tally::FrontCounters::Writers::kOnePerStripe),
      HotPathNs(tally::FrontCounters::Writers::kAny));
  for (auto& peer : nodes) peer->gossip->Stop();
  return 0;
}
