#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "cluster/cpu_usage.h"
#include "cluster/node_process.h"
#include "tests/bench/cluster_bench.h"

namespace tally::bench {
namespace {

std::vector<std::string> json_rows;

}  // namespace

void Json(const std::string& row) { json_rows.push_back(row); }

void WriteJson(const std::string& path) {
  std::ofstream out(path);
  out << "[\n";
  for (size_t i = 0; i < json_rows.size(); ++i)
    out << json_rows[i] << (i + 1 < json_rows.size() ? ",\n" : "\n");
  out << "]\n";
  std::printf("\nresults: %s\n", path.c_str());
}

void Die(const std::string& what, const Status& status) {
  std::fprintf(stderr, "cluster_bench: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::exit(1);
}

std::unique_ptr<cluster::LocalCluster> Start(const Settings& settings, size_t nodes, bool gossip,
                                             std::vector<std::string> flags) {
  cluster::LocalCluster::Options options;
  options.tallyd_path = settings.tallyd;
  options.nodes = nodes;
  options.gossip = gossip;
  options.node_args = {"--memory-only"};  // persistence has its own benchmark
  options.node_args.insert(options.node_args.end(), flags.begin(), flags.end());
  std::unique_ptr<cluster::LocalCluster> cluster;
  if (Status status = cluster::LocalCluster::Start(options, &cluster); !status.ok()) {
    Die("start", status);
  }
  return cluster;
}

std::vector<double> NodeCpuSeconds(cluster::LocalCluster& cluster) {
  std::vector<double> seconds(cluster.size());
  for (size_t node = 0; node < cluster.size(); ++node) {
    if (Status status = cluster::ProcessCpuSeconds(cluster.process(node).pid(), &seconds[node]);
        !status.ok()) {
      Die("cpu time", status);
    }
  }
  return seconds;
}

double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

double UntilAllSee(cluster::LocalCluster& cluster, uint64_t node_id, protocol::MemberState state,
                   size_t except, std::chrono::steady_clock::time_point start) {
  while (MsSince(start) < 30'000) {
    bool all = true;
    for (size_t node = 0; node < cluster.size() && all; ++node) {
      if (node == except || !cluster.running(node)) continue;
      protocol::StatsReply stats;
      all = cluster.Stats(node, &stats).ok() &&
            std::any_of(stats.members.begin(), stats.members.end(), [&](const auto& member) {
              return member.node_id == node_id && member.state == state;
            });
    }
    if (all) return MsSince(start);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Die("membership", Status::Unavailable("no agreement within 30 s"));
}

nlohmann::json RunLoadgen(const Settings& settings, cluster::LocalCluster& cluster,
                          const std::string& label, const std::vector<std::string>& load_args,
                          int timeout_ms) {
  std::vector<std::string> argv;
  if (settings.loadgen_cpu >= 0)
    argv = {"/usr/bin/taskset", "-c", std::to_string(settings.loadgen_cpu)};
  argv.insert(argv.end(), {settings.loadgen, "--target", "tally", "--connections",
                           std::to_string(settings.connections), "--depth", "16", "--label", label,
                           "--no-header"});
  argv.insert(argv.end(), load_args.begin(), load_args.end());
  for (size_t node = 0; node < cluster.size(); ++node) {
    argv.insert(argv.end(),
                {"--address", "127.0.0.1:" + std::to_string(cluster.client_port(node))});
  }
  const std::string json_path = cluster.root() + "/" + label + ".json";
  argv.insert(argv.end(), {"--json", json_path});
  std::string out;
  if (cluster::RunCommand(argv, &out, timeout_ms) != 0) {
    Die("tally-loadgen", Status::IOError(out));
  }
  std::ifstream in(json_path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json result = nlohmann::json::parse(text, nullptr, false);
  if (result.is_discarded() || !result.contains("decisions_per_s")) {
    Die("tally-loadgen", Status::IOError("no decisions_per_s in " + text));
  }
  return result;
}

}  // namespace tally::bench
