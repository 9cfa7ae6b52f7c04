// StateMerger: merges a peer's state message into the Limiter, with no I/O:
// decoded and merged kBatchKeys entries at a time (Limiter::MergeBatch). The
// daemon's sessions and a simulation's nodes merge what arrives with it.
//
// Thread safety: none; one session's (or node's) owner. The Limiter is
// thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "node/common/key_snapshot.h"
#include "node/common/status.h"
#include "node/engine/limiter.h"
#include "protocol/peer_codec.h"

namespace tally {

class StateMerger {
 public:
  // Called for each entry the Limiter refused, with why.
  using Rejected = std::function<void(const Status&)>;
  // Called with each batch of entries from `from` once merged (a
  // simulation's checks); empty: none.
  using Merged = std::function<void(NodeId from, std::span<const KeySnapshot> entries)>;

  explicit StateMerger(Merged merged = {}) : merged_(std::move(merged)) {}

  // Merges a kState message from `from`: a full sync as kSync; a delta sent
  // to be relayed as kRelay when this node relays (`relays`), else as kDelta.
  // Adds the entries merged to *merged. Returns the decoder's error for bytes
  // that do not decode (the entries before them are merged).
  Status Merge(Limiter& limiter, NodeId from, const protocol::PeerMessage& message, bool relays,
               const Rejected& rejected, uint64_t* merged);

 private:
  static constexpr size_t kBatchKeys = 1'024;
  // Merges batch_[0, pending) as from `source`.
  void MergeDecoded(Limiter& limiter, NodeId from, size_t pending, MergeSource source,
                    const Rejected& rejected, uint64_t* merged);

  const Merged merged_;

  // Decoded entries, at most kBatchKeys, then reused with their memory (no
  // allocation per message once warm).
  std::vector<KeySnapshot> batch_;
  std::vector<Status> statuses_;
};

}  // namespace tally
