#include "cluster/local_cluster.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "protocol/peer_auth.h"

namespace tally::cluster {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// The gossip port of every node in netns mode: each has a namespace, so
// all can use the same one.
constexpr uint16_t kNetnsGossipPort = 7421;

// A partition that could not be made or mended breaks the test's premise:
// say so where the test's output shows it.
void Report(const Status& status) {
  if (!status.ok()) std::fprintf(stderr, "harness: %s\n", status.ToString().c_str());
}

}  // namespace

Status LocalCluster::Start(const Options& options, std::unique_ptr<LocalCluster>* cluster) {
  std::string root = options.root;
  const bool owns_root = root.empty();
  if (owns_root) {
    char root_template[] = "/tmp/tally-cluster-XXXXXX";
    if (mkdtemp(root_template) == nullptr) return Status::IOError("mkdtemp failed");
    root = root_template;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(root, ec);
    if (ec) return Status::IOError("cannot create " + root + ": " + ec.message());
  }
  cluster->reset(new LocalCluster(options, root, owns_root));
  LocalCluster& c = **cluster;
  const size_t n = options.nodes;
  if (options.netns) {
    if (Status status = NetnsLab::Available(); !status.ok()) return status;
    if (Status status = NetnsLab::Create(n, &c.lab_); !status.ok()) return status;
    if (Status status = c.WriteSecret(); !status.ok()) return status;
  } else if (options.gossip && n > 1) {
    if (Status status = c.WriteSecret(); !status.ok()) return status;
    c.hub_ = std::make_unique<ProxyHub>();
    c.proxy_ports_.assign(n, 0);
    c.proxy_ids_.assign(n, 0);
    for (size_t node = 0; node < n; ++node) {
      if (Status status = c.hub_->Add(&c.proxy_ids_[node], &c.proxy_ports_[node]); !status.ok()) {
        return status;
      }
    }
  }
  c.nodes_.resize(n);
  for (size_t node = 0; node < n; ++node) {
    if (Status status = c.SpawnNode(node); !status.ok()) return status;
  }
  for (size_t node = 0; node < n; ++node) {
    if (Status status = c.nodes_[node]->WaitForPort(options.start_timeout_ms); !status.ok()) {
      return Status::Unavailable("node " + std::to_string(node) + ": " + status.ToString());
    }
  }
  return c.WaitConnected(options.start_timeout_ms);
}

LocalCluster::~LocalCluster() {
  nodes_.clear();  // SIGKILL and reap
  hub_.reset();
  lab_.reset();  // after the nodes: they run in its namespaces
  std::error_code ignored;
  if (owns_root_) std::filesystem::remove_all(root_, ignored);
}

NodeProcess::Options LocalCluster::NodeOptions(size_t node) const {
  NodeProcess::Options options;
  options.tallyd_path = options_.tallyd_path;
  options.directory = root_ + "/node" + std::to_string(node);
  options.gossip_port = hub_ != nullptr;
  options.fronts = options_.fronts;
  if (const auto env = options_.node_env.find(node); env != options_.node_env.end()) {
    options.env = env->second;
  }
  options.args = {"--node-id", std::to_string(NodeIdOf(node))};
  if (lab_) {
    options.exec_prefix = lab_->Exec(node);
    options.address = lab_->Address(node);
    options.gossip_port = true;
    options.gossip_port_number = kNetnsGossipPort;
    options.args.insert(options.args.end(), {"--cluster-secret-file", secret_path()});
    for (size_t seed = 0; seed < options_.nodes; ++seed) {
      if (!options_.seeds.empty() &&
          std::find(options_.seeds.begin(), options_.seeds.end(), seed) == options_.seeds.end()) {
        continue;
      }
      options.args.push_back("--seed");
      options.args.push_back(lab_->Address(seed) + ":" + std::to_string(kNetnsGossipPort));
    }
  } else if (hub_) {
    options.args.insert(options.args.end(),
                        {"--cluster-secret-file", secret_path(), "--gossip-advertise",
                         "127.0.0.1:" + std::to_string(proxy_ports_[node])});
    for (size_t seed = 0; seed < options_.nodes; ++seed) {
      const bool listed =
          options_.seeds.empty() ||
          std::find(options_.seeds.begin(), options_.seeds.end(), seed) != options_.seeds.end();
      if (!listed) continue;
      options.args.push_back("--seed");
      options.args.push_back(options_.seed_host + ":" + std::to_string(proxy_ports_[seed]));
    }
  }
  if (options_.gossip_max_delay_ms >= 0) {
    options.args.insert(options.args.end(),
                        {"--gossip-max-delay-ms", std::to_string(options_.gossip_max_delay_ms)});
  }
  options.args.insert(options.args.end(), options_.node_args.begin(), options_.node_args.end());
  return options;
}

// Spawns the node and, with gossip, points the proxies towards it at its
// gossip port once it has bound it (before its recovery ends: peers must be
// able to reach it for it to recover).
Status LocalCluster::SpawnNode(size_t node) {
  std::unique_ptr<NodeProcess> spawned;
  if (Status status = NodeProcess::Spawn(NodeOptions(node), &spawned); !status.ok()) {
    return status;
  }
  {
    std::lock_guard lock(nodes_mutex_);
    nodes_[node] = std::move(spawned);
  }
  if (!hub_) return Status::OK();
  if (Status status = nodes_[node]->WaitForGossipPort(options_.start_timeout_ms); !status.ok()) {
    return Status::Unavailable("node " + std::to_string(node) + ": " + status.ToString());
  }
  WireUpstreams(node);
  return Status::OK();
}

void LocalCluster::WireUpstreams(size_t node) {
  hub_->SetUpstream(proxy_ids_[node], nodes_[node]->gossip_port());
}

Status LocalCluster::WriteSecret() const {
  const std::string secret = protocol::RandomNonce() + protocol::RandomNonce();
  std::string hex;
  for (const char byte : secret) {
    const char* digits = "0123456789abcdef";
    hex += digits[static_cast<unsigned char>(byte) >> 4];
    hex += digits[static_cast<unsigned char>(byte) & 15];
  }
  std::ofstream out(secret_path());
  out << hex << "\n";
  if (!out) return Status::IOError("cannot write " + secret_path());
  std::error_code ec;
  std::filesystem::permissions(
      secret_path(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_write, ec);
  return Status::OK();
}

Status LocalCluster::Connect(size_t node, std::unique_ptr<protocol::Client>* client) const {
  protocol::Client::Options options;
  {
    std::lock_guard lock(nodes_mutex_);
    options = nodes_[node]->client_options();
  }
  return protocol::Client::Connect(options, client);
}

Status LocalCluster::Stats(size_t node, protocol::StatsReply* stats) const {
  std::unique_ptr<protocol::Client> client;
  if (Status status = Connect(node, &client); !status.ok()) return status;
  return client->Stats(stats);
}

Status LocalCluster::Kill(size_t node) {
  if (nodes_[node]->SignalAndWait(SIGKILL, 5'000) < 0) {
    return Status::Unavailable("node " + std::to_string(node) + " did not die");
  }
  return Status::OK();
}

Status LocalCluster::Stop(size_t node) {
  const int code = nodes_[node]->SignalAndWait(SIGTERM, 20'000);
  if (code != 0) {
    return Status::Unavailable("node " + std::to_string(node) + " stopped with " +
                               std::to_string(code) + ": " + nodes_[node]->Log());
  }
  return Status::OK();
}

Status LocalCluster::Restart(size_t node, int timeout_ms) {
  if (nodes_[node]->running()) return Status::InvalidArgument("node is still running");
  if (Status status = SpawnNode(node); !status.ok()) return status;
  return nodes_[node]->WaitForPort(timeout_ms);
}

void LocalCluster::Cut(const std::vector<size_t>& group_a, const std::vector<size_t>& group_b) {
  for (size_t a : group_a) {
    for (size_t b : group_b) {
      if (a == b) continue;
      CutOneWay(a, b);
      CutOneWay(b, a);
    }
  }
}

void LocalCluster::CutOneWay(size_t from, size_t to) {
  if (lab_ != nullptr) {
    Report(lab_->Block(from, to));
  } else if (hub_ != nullptr) {
    hub_->Cut(proxy_ids_[to], NodeIdOf(from));
  }
}

void LocalCluster::SetLinkFaults(size_t from, size_t to, const LinkFaults& faults) {
  if (hub_ != nullptr) hub_->SetFaults(proxy_ids_[to], NodeIdOf(from), faults);
}

void LocalCluster::Heal() {
  if (lab_ != nullptr) Report(lab_->Heal());
  if (!hub_) return;
  for (size_t node = 0; node < options_.nodes; ++node) hub_->Heal(proxy_ids_[node]);
}

Status LocalCluster::WaitConnected(int timeout_ms) const {
  if (!hub_ && !lab_) return Status::OK();
  const auto deadline = steady_clock::now() + milliseconds(timeout_ms);
  std::string missing;
  while (steady_clock::now() < deadline) {
    missing.clear();
    size_t running_nodes = 0;
    for (size_t node = 0; node < nodes_.size(); ++node) running_nodes += running(node) ? 1 : 0;
    for (size_t node = 0; node < nodes_.size(); ++node) {
      if (!running(node)) continue;
      protocol::StatsReply stats;
      if (!Stats(node, &stats).ok()) {
        missing += " node " + std::to_string(node) + " answers no stats;";
        continue;
      }
      size_t links_up = 0, peers_connected = 0, alive = 0;
      for (const auto& link : stats.peer_links) links_up += link.up ? 1 : 0;
      for (const auto& peer : stats.peer_nodes) peers_connected += peer.connected ? 1 : 0;
      for (const auto& member : stats.members) {
        alive += member.state == protocol::MemberState::kAlive ? 1 : 0;
      }
      if (links_up < running_nodes - 1 || peers_connected < running_nodes - 1 ||
          alive < running_nodes) {
        missing += " node " + std::to_string(node) + ": " + std::to_string(links_up) +
                   " links up, " + std::to_string(peers_connected) + " peers connected, " +
                   std::to_string(alive) + " members alive;";
      }
    }
    if (missing.empty()) return Status::OK();
    std::this_thread::sleep_for(milliseconds(20));
  }
  return Status::Unavailable("cluster not connected within " + std::to_string(timeout_ms) +
                             " ms:" + missing);
}

}  // namespace tally::cluster
