// ProxyHub: TCP forwarders on 127.0.0.1 between cluster nodes, so that the
// harness can cut a network path for real. A node dials a proxy instead of
// its peer; the proxy forwards bytes both ways to the peer's gossip port.
// Cut closes every connection through a proxy and, until Heal, accepts new
// ones only to close them at once (the dialling node sees its peer vanish,
// as in a partition that resets connections).
//
// Thread safety: every method may be called from any thread; the proxies run
// on the hub's own thread, and each method returns once it has taken effect
// there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "node/status.h"

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
  void Cut(size_t proxy);
  void Heal(size_t proxy);
  uint64_t bytes_forwarded() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally::cluster
