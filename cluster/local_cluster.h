// LocalCluster: N tallyd nodes on 127.0.0.1, for tests, benchmarks, demos
// and `tally-cluster`.
//
// Every node gets its own directory under the cluster's root (data, port
// files, log), a fixed node id (its index + 1), and ports chosen at run time;
// with gossip, all share a random cluster secret written under the root.
// With gossip, every node is reached through its own proxy of a ProxyHub,
// which it advertises (--gossip-advertise): the links between nodes are real
// TCP paths that Cut and Heal break and mend, per pair of nodes. Each node
// gets the proxies of Options::seeds as --seed. Without gossip, the nodes are
// local-only: the baseline a cluster is compared against.
//
// Start waits until every node serves and, with gossip, until every node's
// links are up, every peer's session is open and every node sees every
// other alive. The destructor SIGKILLs
// whatever still runs and removes a root it made; nodes also die with the
// thread that started them (see NodeProcess), so a crashed test leaves none.
//
// Thread safety: one thread drives the cluster (Start, Kill, Stop, Restart,
// Cut, ...); clients may run on others, and Connect may be called from any
// thread, also while the driving thread restarts the node (it then connects
// to the old or the new process).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/link_proxy.h"
#include "cluster/netns.h"
#include "cluster/node_process.h"
#include "node/common/status.h"
#include "protocol/client.h"
#include "protocol/messages.h"

namespace tally::cluster {

class LocalCluster {
 public:
  struct Options {
    std::string tallyd_path;
    size_t nodes = 3;
    bool gossip = true;
    std::vector<std::string> node_args;  // extra tallyd flags for every node
    // >= 0: --gossip-max-delay-ms for every node (how long admissions on keys
    // far from their limits may wait); -1: tallyd's default.
    int64_t gossip_max_delay_ms = -1;
    std::vector<std::string> fronts;  // fronts every node opens (NodeProcess::Options::fronts)
    std::vector<size_t> seeds;  // the nodes every node lists as --seed; empty: all (itself too)
    std::map<size_t, std::vector<std::string>> node_env;  // by node: NodeProcess::Options::env
    std::string seed_host = "127.0.0.1";  // how seeds are named: "localhost" tests resolving
    std::string root;                     // empty: a new temporary directory, removed at the end
    // Each node in a network namespace of its own with a real address
    // (cluster/netns.h; needs root), gossiping directly, no proxies: Cut,
    // CutOneWay and Heal are nftables rules; SetLinkFaults is not available.
    bool netns = false;
    int start_timeout_ms = 20'000;
  };

  static Status Start(const Options& options, std::unique_ptr<LocalCluster>* cluster);
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  size_t size() const { return nodes_.size(); }
  uint16_t client_port(size_t node) const { return nodes_[node]->port(); }
  protocol::Client::Options client_options(size_t node) const {
    return nodes_[node]->client_options();
  }
  Status Connect(size_t node, std::unique_ptr<protocol::Client>* client) const;
  Status Stats(size_t node, protocol::StatsReply* stats) const;
  NodeProcess& process(size_t node) { return *nodes_[node]; }
  bool running(size_t node) const { return nodes_[node]->running(); }
  const std::string& root() const { return root_; }
  // The file with the cluster secret every node is given (gossip only).
  std::string secret_path() const { return root_ + "/cluster.secret"; }

  // SIGKILL (a crash) or SIGTERM (a clean stop) one node, and reap it.
  Status Kill(size_t node);
  Status Stop(size_t node);
  // Starts a stopped node again on its data directory; returns once it serves.
  Status Restart(size_t node, int timeout_ms = 20'000);

  // Cuts every path between a node in `group_a` and one in `group_b`, both
  // directions. Heal mends every cut path.
  void Cut(const std::vector<size_t>& group_a, const std::vector<size_t>& group_b);
  // Cuts only the path on which `from` sends to `to` (a node pushes its state
  // and its probes on the connection it dials): a one-way partition, `to`
  // still reaches `from`. Heal mends it too.
  void CutOneWay(size_t from, size_t to);
  void Heal();
  // Delay and loss on the path on which `from` sends to `to` (ProxyHub::
  // SetFaults); a default LinkFaults mends it. (Not with netns: nothing.)
  void SetLinkFaults(size_t from, size_t to, const LinkFaults& faults);

  // Until every running node has all its links up, every running peer's
  // session open and every running node alive in its view (gossip), or
  // timeout_ms.
  Status WaitConnected(int timeout_ms) const;

 private:
  LocalCluster(const Options& options, std::string root, bool owns_root)
      : options_(options), root_(std::move(root)), owns_root_(owns_root) {}
  NodeProcess::Options NodeOptions(size_t node) const;
  static uint64_t NodeIdOf(size_t node) { return node + 1; }
  Status SpawnNode(size_t node);
  Status WriteSecret() const;
  void WireUpstreams(size_t node);

  const Options options_;
  const std::string root_;
  const bool owns_root_;
  std::unique_ptr<ProxyHub> hub_;      // gossip on loopback only
  std::unique_ptr<NetnsLab> lab_;      // netns only
  std::vector<uint16_t> proxy_ports_;  // by node: where the others reach it
  std::vector<size_t> proxy_ids_;
  // The pointers are replaced by the driving thread only (a restart), under
  // nodes_mutex_; other threads read them under it.
  mutable std::mutex nodes_mutex_;
  std::vector<std::unique_ptr<NodeProcess>> nodes_;
};

}  // namespace tally::cluster
