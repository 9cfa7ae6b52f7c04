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
// SetFaults(proxy, from_node_id, faults) makes the connections from that
// node through the proxy slow and lossy, both ways, as a bad network makes a
// TCP connection look to the programs at its ends: every read is held for
// delay_ms +- jitter_ms (uniform) before it is written on, and with
// probability loss kRetransmitMs longer, as TCP waits out a retransmission
// timeout for a lost segment. Bytes stay in order: what arrives while a read
// is held waits for it, so under a steady stream denser than the delay a
// byte may take up to about twice the delay (like a slow link that queues). (TCP
// hides duplication and reordering from the application: a proxy above TCP
// cannot show them to tallyd, and the merge-law tests of the engine cover
// them at the message level.)
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

// How a link misbehaves; the default is a perfect link.
struct LinkFaults {
  // Linux's minimum retransmission timeout: what one lost segment costs.
  static constexpr int64_t kRetransmitMs = 200;

  int64_t delay_ms = 0;
  int64_t jitter_ms = 0;  // each chunk's delay is delay_ms +- jitter_ms (at least 0)
  double loss = 0;        // the chance that a chunk is held kRetransmitMs longer
};

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
  // The faults of connections from `from_node_id` through the proxy, open
  // ones included, from now on (a default LinkFaults mends them).
  void SetFaults(size_t proxy, uint64_t from_node_id, const LinkFaults& faults);
  // Bytes forwarded, both ways, by every proxy since the hub was created.
  uint64_t bytes_forwarded() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally::cluster
