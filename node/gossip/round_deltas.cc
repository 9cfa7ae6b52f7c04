#include "node/gossip/round_deltas.h"

#include "protocol/peer_codec.h"

namespace tally {
namespace {

// A PeerState encoder and the frames it has written.
struct Encoding {
  Encoding(NodeId self, size_t max_frame_bytes, bool relay)
      : encoder(self, /*full=*/false, max_frame_bytes, relay) {}
  void Finish(RoundDeltas::Frames* out) {
    encoder.Finish(&out->frames);
    out->entries = encoder.entries();
  }
  protocol::PeerStateEncoder encoder;
};

}  // namespace

RoundDeltas CollectRoundDeltas(Limiter& limiter, std::span<const NodeId> relayers,
                               size_t max_frame_bytes, bool flush_deferred) {
  RoundDeltas deltas;
  const NodeId self = limiter.node_id();
  Encoding everyone(self, max_frame_bytes, /*relay=*/false);
  std::map<NodeId, Encoding> by_relayer;
  const GossipRelay relay{
      relayers, [&](NodeId relayer, const KeySnapshot& snapshot) {
        Encoding& encoding =
            by_relayer.try_emplace(relayer, self, max_frame_bytes, true).first->second;
        encoding.encoder.Add(snapshot, &deltas.to_relayer[relayer].frames);
      }};
  deltas.next_due_in_ms = limiter.CollectGossip(
      [&](const KeySnapshot& snapshot) {
        everyone.encoder.Add(snapshot, &deltas.to_every_peer.frames);
      },
      flush_deferred, &relay);
  everyone.Finish(&deltas.to_every_peer);
  for (auto& [relayer, encoding] : by_relayer) encoding.Finish(&deltas.to_relayer[relayer]);
  return deltas;
}

}  // namespace tally
