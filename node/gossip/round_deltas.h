// One gossip round's deltas, encoded, with no I/O: what this node's engine
// has for its peers now (Limiter::CollectGossip), as frames for every peer
// and, with relay (node/engine/headroom.h "Relay"), frames for each relayer.
// The daemon's rounds (node/gossip/gossip.cc) send them on the links; a
// simulation can deliver them as it likes.
//
// Thread safety: a function of the Limiter's state, which is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "node/engine/limiter.h"

namespace tally {

struct RoundDeltas {
  struct Frames {
    std::vector<std::string> frames;  // PeerState frames (protocol/peer_codec.h)
    uint64_t entries = 0;             // key entries in them
  };
  Frames to_every_peer;
  std::map<NodeId, Frames> to_relayer;  // by relayer, this node's own id never among them
  // How long from now (ms) until the earliest of what still waits is due;
  // INT64_MAX when nothing waits.
  int64_t next_due_in_ms = INT64_MAX;
};

// relayers: the members that may relay a key now, this node among them
// (empty without relay: every delta goes to every peer). flush_deferred:
// what waits goes too (the node leaves).
RoundDeltas CollectRoundDeltas(Limiter& limiter, std::span<const NodeId> relayers,
                               size_t max_frame_bytes, bool flush_deferred);

}  // namespace tally
