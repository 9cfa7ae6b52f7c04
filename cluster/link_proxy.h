// ProxyHub: TCP forwarders on 127.0.0.1 in front of cluster nodes, so that
// the harness can cut a network path for real. There is one proxy per
// destination node: every node dials the proxy instead of that node, and the
// proxy forwards bytes both ways to the node's gossip port.
//
// A proxy learns who dials it from the first frame of each connection: a
// gossip dialler starts with a PeerMessage hello holding its node id. The
// proxy reads up to that whole frame (at most 64 KiB) before connecting
// upstream, then forwards it and everything after it. A connection whose
// first frame is not a hello (or not a frame at all) has an unknown source:
// it is forwarded, and never cut by Cut.
//
// Cut(proxy, from_node_id) closes every connection through the proxy from
// that node and, until Heal, closes at once every new connection from it
// (the dialling node sees its peer vanish, as in a partition that resets
// connections). Connections from other nodes are not affected.
//
// Thread safety: every method may be called from any thread; the proxies run
// on the hub's own thread, and each method returns once it has taken effect
// there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "node/common/status.h"

namespace tally::cluster {

class ProxyHub {
 public:
  ProxyHub();
  ~ProxyHub();  // closes everything and joins the thread
  ProxyHub(const ProxyHub&) = delete;
  ProxyHub& operator=(const ProxyHub&) = delete;

  // A new proxy on an ephemeral port of 127.0.0.1; returns its index.
  Status Add(size_t* proxy, uint16_t* listen_port);
  // Where the proxy forwards to: 127.0.0.1:port (0: nowhere, every
  // connection is closed at once). Connections already open stay as they are.
  void SetUpstream(size_t proxy, uint16_t port);
  // Cuts the path from node `from_node_id` through the proxy (0, which is no
  // node's id, cuts nothing).
  void Cut(size_t proxy, uint64_t from_node_id);
  // Removes every cut of the proxy; connections closed by them stay closed.
  void Heal(size_t proxy);
  // Bytes forwarded, both ways, by every proxy since the hub was created.
  uint64_t bytes_forwarded() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally::cluster
