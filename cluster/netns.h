// NetnsLab: nodes with real addresses, each in a network namespace of its
// own on a private test subnet, and partitions made by the kernel's packet
// filter (nftables), for tests that need more than loopback and proxies.
//
// Create makes a bridge in the harness's namespace with the subnet's first
// address, and for each node a namespace (loopback up) joined to the bridge
// by a veth pair, the node's end named eth0 with address Address(node). The
// harness reaches every node through the bridge; nodes reach each other
// through it. Nothing is routed beyond the subnet. Block(from, to) drops
// every packet `from` sends to `to` (an nftables rule in `from`'s
// namespace): a one-way partition at the IP level (TCP connections between
// the two stall in both directions, since one side's acknowledgements are
// lost; new ones from `to` get no answer). Heal removes every rule. The
// destructor removes the namespaces (their veth pairs go with them) and the
// bridge. Names carry the harness's pid, so concurrent runs do not collide.
//
// Needs root (CAP_NET_ADMIN), iproute2 (ip) and nftables (nft); Available
// says whether this machine can, and if not why.
//
// Thread safety: none; the thread that drives the cluster uses it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "node/common/status.h"

namespace tally::cluster {

class NetnsLab {
 public:
  // OK when namespaces, veth pairs, a bridge and nftables rules can be made;
  // otherwise what is missing, for a test's skip message.
  static Status Available();
  static Status Create(size_t nodes, std::unique_ptr<NetnsLab>* lab);
  ~NetnsLab();
  NetnsLab(const NetnsLab&) = delete;
  NetnsLab& operator=(const NetnsLab&) = delete;

  const std::string& Namespace(size_t node) const { return namespaces_[node]; }
  const std::string& Address(size_t node) const { return addresses_[node]; }
  // The command prefix that runs a program in the node's namespace.
  std::vector<std::string> Exec(size_t node) const;

  Status Block(size_t from, size_t to);
  Status Heal();

 private:
  NetnsLab() = default;
  // Runs an ip or nft command; the error names it and quotes its output.
  static Status Run(const std::vector<std::string>& argv);

  std::string bridge_;
  std::string subnet_prefix_;  // "10.77.N." : the nodes are .2, .3, ...
  std::vector<std::string> namespaces_;
  std::vector<std::string> veths_;  // the harness's ends
  std::vector<std::string> addresses_;
};

}  // namespace tally::cluster
