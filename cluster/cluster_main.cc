// tally-cluster: a local tally cluster on 127.0.0.1 (cluster/local_cluster.h).
//
//   tally-cluster demo [--nodes 3] [--limit 100] [--window-ms 1000] [--windows 4] [--demand 4]
//       Runs the same clients, spread round-robin over the nodes at --demand
//       times the limit, against local-only nodes and against a tally
//       cluster, and prints what each node and all together admitted per
//       window against the limit.
//   tally-cluster up [--nodes 3] [--root DIR] [-- tallyd flags...]
//       Starts the nodes, prints their ports, then takes commands on stdin
//       (help lists them) until quit, end of input, or Ctrl-C.
//
// Every node is torn down at the end, also on Ctrl-C, SIGTERM or a crash of
// tally-cluster (the nodes die with it).
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cluster/demand.h"
#include "cluster/local_cluster.h"
#include "node/common/version.h"

namespace {

using tally::cluster::LocalCluster;

volatile std::sig_atomic_t g_interrupted = 0;

void OnSignal(int) { g_interrupted = 1; }

// tallyd beside this binary: build/bin/tally-cluster -> build/bin/tallyd.
std::string DefaultTallyd() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "tallyd").string();
}

int Fail(const tally::Status& status) {
  std::fprintf(stderr, "tally-cluster: %s\n", status.ToString().c_str());
  return 1;
}

// One side of the demo: start, drive, print, stop.
tally::Status DemoRun(const LocalCluster::Options& options,
                      const tally::cluster::DemandOptions& demand,
                      std::vector<tally::cluster::WindowTally>* tallies) {
  std::unique_ptr<LocalCluster> cluster;
  if (tally::Status status = LocalCluster::Start(options, &cluster); !status.ok()) return status;
  return tally::cluster::DriveDemand(*cluster, demand, tallies);
}

int Demo(LocalCluster::Options options, tally::cluster::DemandOptions demand, double factor) {
  demand.demand_per_window = static_cast<uint64_t>(factor * static_cast<double>(demand.spec.limit));
  std::printf(
      "tally demo: %zu nodes on 127.0.0.1, sliding_counter limit %llu per %llu ms, clients\n"
      "round-robin over the nodes at %.1fx the limit (%llu checks a window)\n\n",
      options.nodes, static_cast<unsigned long long>(demand.spec.limit),
      static_cast<unsigned long long>(demand.spec.window_ms), factor,
      static_cast<unsigned long long>(demand.demand_per_window));
  std::vector<tally::cluster::WindowTally> local_only, tally_cluster;
  options.gossip = false;
  std::printf("running local-only nodes (each limits alone, as without a shared store)...\n");
  if (tally::Status status = DemoRun(options, demand, &local_only); !status.ok())
    return Fail(status);
  options.gossip = true;
  std::printf("running a tally cluster (gossip every 50 ms)...\n\n");
  if (tally::Status status = DemoRun(options, demand, &tally_cluster); !status.ok())
    return Fail(status);

  std::string nodes_header;
  for (size_t node = 0; node < options.nodes; ++node)
    nodes_header += " node" + std::to_string(node);
  std::printf("admitted per window   | local-only:%s   total/limit | tally:%s   total/limit\n",
              nodes_header.c_str(), nodes_header.c_str());
  const auto row = [&](const tally::cluster::WindowTally& tally) {
    std::string text;
    for (uint64_t admitted : tally.admitted) {
      char cell[16];
      std::snprintf(cell, sizeof(cell), " %5llu", static_cast<unsigned long long>(admitted));
      text += cell;
    }
    char total[48];
    std::snprintf(
        total, sizeof(total), "  %5llu (%.2fx)",
        static_cast<unsigned long long>(tally.total_admitted()),
        static_cast<double>(tally.total_admitted()) / static_cast<double>(demand.spec.limit));
    return text + total;
  };
  for (size_t w = 0; w < local_only.size() && w < tally_cluster.size(); ++w) {
    std::printf("window %-14zu |%s |%s\n", w + 1, row(local_only[w]).c_str(),
                row(tally_cluster[w]).c_str());
  }
  std::printf(
      "\nLocal-only nodes each admit the whole limit: %zux it in all. The tally cluster admits\n"
      "about the limit: each node decides locally and learns the others' counts by gossip.\n",
      options.nodes);
  return 0;
}

// Every node's ports, log, and its view of the members (node id: state).
void PrintPorts(const LocalCluster& cluster) {
  for (size_t node = 0; node < cluster.size(); ++node) {
    std::string view;
    tally::protocol::StatsReply stats;
    if (cluster.running(node) && cluster.Stats(node, &stats).ok()) {
      for (const tally::protocol::MemberStatus& member : stats.members) {
        view += (view.empty() ? ", sees " : " ") + std::to_string(member.node_id) + ":" +
                std::string(tally::protocol::MemberStateName(member.state));
      }
    }
    std::printf("node %zu (id %zu): %s, client port %u, log %s/node%zu/stderr.log%s\n", node,
                node + 1, cluster.running(node) ? "running" : "stopped", cluster.client_port(node),
                cluster.root().c_str(), node, view.c_str());
  }
}

std::vector<size_t> ParseGroup(const std::string& text) {
  std::vector<size_t> group;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) group.push_back(std::stoul(item));
  return group;
}

// One command of `up`; false to quit.
bool Command(LocalCluster& cluster, const std::string& line) {
  std::stringstream in(line);
  std::string verb, a, b;
  in >> verb >> a >> b;
  tally::Status status;
  try {
    if (verb == "quit" || verb == "exit") return false;
    if (verb == "status") {
      PrintPorts(cluster);
    } else if (verb == "kill") {
      status = cluster.Kill(std::stoul(a));
    } else if (verb == "stop") {
      status = cluster.Stop(std::stoul(a));
    } else if (verb == "restart") {
      status = cluster.Restart(std::stoul(a));
      if (status.ok()) PrintPorts(cluster);
    } else if (verb == "cut") {
      cluster.Cut(ParseGroup(a), ParseGroup(b));
    } else if (verb == "heal") {
      cluster.Heal();
    } else if (!verb.empty()) {
      std::printf(
          "commands: status | kill N | stop N | restart N | cut A[,A...] B[,B...] | heal | quit\n");
    }
  } catch (const std::exception&) {
    std::printf("bad node number in '%s'\n", line.c_str());
  }
  if (!status.ok()) std::printf("%s\n", status.ToString().c_str());
  return true;
}

int Up(const LocalCluster::Options& options) {
  std::unique_ptr<LocalCluster> cluster;
  if (tally::Status status = LocalCluster::Start(options, &cluster); !status.ok())
    return Fail(status);
  std::printf("tally cluster of %zu nodes up; data under %s\n", cluster->size(),
              cluster->root().c_str());
  PrintPorts(*cluster);
  std::printf(
      "try: tallyctl --port %u check user:42 --limit 100 --window-ms 60000; commands: help\n",
      cluster->client_port(0));
  std::fflush(stdout);
  std::string pending;
  while (!g_interrupted) {
    pollfd input{STDIN_FILENO, POLLIN, 0};
    if (poll(&input, 1, 200) <= 0) continue;
    char bytes[512];
    const ssize_t read_bytes = read(STDIN_FILENO, bytes, sizeof(bytes));
    if (read_bytes <= 0) break;  // end of input
    pending.append(bytes, static_cast<size_t>(read_bytes));
    for (size_t newline; (newline = pending.find('\n')) != std::string::npos;) {
      const std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      if (!Command(*cluster, line)) return 0;
      std::fflush(stdout);
    }
  }
  std::printf("stopping the cluster\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  LocalCluster::Options options;
  options.tallyd_path = DefaultTallyd();
  tally::cluster::DemandOptions demand;
  double factor = 4;
  CLI::App app("tally-cluster: a local tally cluster on 127.0.0.1");
  app.set_version_flag("--version", tally::VersionLine("tally-cluster"));
  app.require_subcommand(1);
  app.fallthrough();  // --nodes and --tallyd also after the subcommand
  app.add_option("--tallyd", options.tallyd_path, "The tallyd binary")->capture_default_str();
  app.add_option("--nodes", options.nodes, "Nodes in the cluster")
      ->check(CLI::Range(size_t{1}, size_t{64}))
      ->capture_default_str();
  CLI::App* demo =
      app.add_subcommand("demo", "Local-only nodes against a tally cluster, side by side");
  demo->add_option("--limit", demand.spec.limit, "The limit per window")->capture_default_str();
  demo->add_option("--window-ms", demand.spec.window_ms, "The window")->capture_default_str();
  demo->add_option("--windows", demand.windows, "Windows to run")->capture_default_str();
  demo->add_option("--demand", factor, "Demand, in multiples of the limit")->capture_default_str();
  CLI::App* up = app.add_subcommand("up", "Start a cluster and take commands on stdin");
  up->add_option("--root", options.root,
                 "Directory for the nodes' data (default: a temporary one)");
  up->add_option("tallyd_flags", options.node_args, "Flags for every tallyd (after --)");
  CLI11_PARSE(app, argc, argv);

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  if (demo->parsed()) {
    options.node_args = {"--memory-only"};
    return Demo(options, demand, factor);
  }
  return Up(options);
}
