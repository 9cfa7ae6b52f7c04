// The peer (gossip) messages of tally's protocol (schema: protocol/tally.capnp,
// PeerMessage), and the packed encoding of replicated state inside them.
//
// PeerClass.keys packs the state of many keys of one (algorithm, window_ms),
// every integer a LEB128 varint, every node id written as 0 when it is the
// message's sender (the common case, and an id costs up to 10 bytes):
//   counting classes, per key: key size, key bytes, window index as the
//     zigzag difference from the previous key's (the first from 0), then for
//     the current and the previous window: slot count, then (node, count)
//   sliding log, per key: key size, key bytes, node count, then per node:
//     node, stamp count, then per stamp: its time as the difference from the
//     previous stamp's (the first: absolute; the others at least 1), cost
//   token bucket, per key: key size, key bytes, capacity, base slice as the
//     zigzag difference from the previous key's, base debt, node count, then
//     per node: node, slice count (at most kBucketMaxSlices), the counts
//     (node/common/bucket_slices.h)
// PeerClass.denied (deltas of counting and token bucket classes) lists the
// sender's denied cost (KeySnapshot::denied) on the entries that have any:
// per such entry, its index among the class's entries as the difference from
// the previous listed one's (the first: the index itself; the others at
// least 1), then the cost denied in the current and in the previous window
// (a bucket's: period of its slices, a quarter window). Keys far from their
// limits have none, and cost nothing here. A log's class may carry the field
// too (a later version may weigh its denials): this one ignores it there,
// as builds before the bucket's did for a bucket's.
// A delta costs a counting key about its key size plus 8 bytes. A log with
// more than kStampsPerEntry stamps of one node is sent as several entries of
// the same key: merging part of a log is a correct merge of that part.
//
// Hostile input is expected: decoding never reads past the bytes received,
// and every count is checked against the bytes left before anything is
// allocated for it. Semantic checks (key, window, stamp order) are the
// engine's (Limiter::Merge).
//
// Thread safety: stateless functions; PeerStateEncoder is a value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "node/common/crash_loss.h"
#include "node/common/key_snapshot.h"
#include "node/common/status.h"
#include "protocol/codec.h"
#include "protocol/messages.h"

namespace tally::protocol {

enum class PeerMessageKind : uint8_t {
  kHello,
  kState,
  kSyncDone,
  kHeartbeat,
  kSeal,
  kMembers,
  kResync,
  kDigests,
  kRanges,
  kUnknown
};

// The longest member address a members message may carry.
inline constexpr size_t kMaxMemberAddressBytes = 255;

struct PeerClassView {
  Algorithm algorithm = Algorithm::kSlidingWindowCounter;  // may be a number no engine knows
  uint64_t window_ms = 0;
  std::string_view keys;    // packed; points into the decoded frame
  std::string_view denied;  // packed; points into the decoded frame
};

// The peer protocol version this build speaks (tally.capnp peerProtocolVersion):
// 2 replicates token buckets; 3 keeps membership by SWIM probes. A hello of
// another version is refused.
inline constexpr uint32_t kPeerProtocolVersion = 3;

// A SWIM probe (node/gossip/prober.h): a ping, or the ack to one.
struct Probe {
  uint64_t seq = 0;  // the origin's
  NodeId origin = 0;
  NodeId target = 0;
  bool ack = false;
  int64_t wall_ms = 0;  // the sender's wall clock when it sent the message
};
// A key range's digest (node/engine/range_digest.h), for anti-entropy.
struct RangeDigest {
  uint32_t range = 0;
  uint64_t digest = 0;
  bool operator==(const RangeDigest&) const = default;
};
// The most ranges a digests or ranges message may name.
inline constexpr size_t kMaxRangesPerMessage = 1 << 16;

// What a node says when it refuses a peer of another version.
std::string PeerVersionMismatch(uint32_t peer_version);

struct PeerMessage {
  PeerMessageKind kind = PeerMessageKind::kHeartbeat;
  NodeId node_id = 0;                  // kHello: the sender
  uint32_t peer_version = 0;           // kHello: 1 when the sender did not say
  std::string_view nonce;              // kHello; points into the frame
  uint64_t seq = 0;                    // kSeal
  std::string_view mac;                // kSeal; points into the frame
  bool relays = false;                 // kHello: the sender relays (PeerStateEncoder)
  uint64_t incarnation = 0;            // kHello: the sender's run (0: not said)
  bool full = false;                   // kState: part of a full sync
  bool relay = false;                  // kState: a delta for this node to relay
  std::vector<PeerClassView> classes;  // kState
  std::vector<MemberRecord> members;   // kMembers
  std::vector<CrashLoss> losses;       // kMembers
  std::optional<Probe> probe;          // kMembers: absent in a table after a hello or a leave
  int64_t ref_ms = 0;                  // kDigests
  std::vector<RangeDigest> digests;    // kDigests
  std::vector<uint32_t> want;          // kRanges
  std::vector<uint32_t> later;         // kRanges
};

// Corruption for bytes that are not a PeerMessage (a hello with node id 0
// or a nonce not of kNonceBytes, a member with node id 0 or an address
// longer than kMaxMemberAddressBytes, more than kMaxCrashLosses losses or one
// of node id 0 or a negative time included, digests whose two lists differ
// in length, more than kMaxRangesPerMessage ranges). A union member this version does
// not know is kUnknown.
Status DecodePeerMessage(std::span<const std::byte> frame, const FrameLimits& limits,
                         PeerMessage* message);

// Hands each key entry of a class to the sink, with node 0 read as `sender`;
// *keys counts them. Corruption on bytes that do not decode (the entries
// before them have been handed over).
Status DecodePeerClass(const PeerClassView& view, NodeId sender, const SnapshotSink& sink,
                       uint64_t* keys);

// The same, one entry at a time into snapshots the caller owns and reuses (a
// batch of them keeps its strings' and vectors' memory), so that decoding
// allocates nothing once they have grown. The view's bytes must outlive it.
class PeerClassDecoder {
 public:
  PeerClassDecoder(const PeerClassView& view, NodeId sender);
  // Decodes the next entry into *snapshot: its key, algorithm, window_ms,
  // the member of its algorithm (the others keep what they held) and the
  // denied cost (none, where the class lists none for it). False at
  // the end of the class or on bytes that do not decode; status() says which.
  bool Next(KeySnapshot* snapshot);
  // OK, or Corruption (an unknown algorithm, or bytes that do not decode).
  const Status& status() const { return status_; }

 private:
  const Algorithm algorithm_;
  const uint64_t window_ms_;
  const NodeId sender_;
  // Reads the next listed entry's denied cost; none left: denied_index_ UINT64_MAX.
  void NextDenied(bool first);

  std::string_view in_;
  int64_t window_index_ = 0;  // the previous entry's, or the base slice of a bucket
  std::string_view denied_;
  uint64_t entry_index_ = 0;   // of the entry Next decodes
  uint64_t denied_index_ = 0;  // the next entry with a denied cost
  uint64_t denied_current_ = 0;
  uint64_t denied_previous_ = 0;
  Status status_;
};

// Append one frame to *out.
// A hello says peer_version; 0 writes what builds before version 2 wrote (no
// version at all), for tests of the refusal. `relays`: the sender relays
// deltas sent to it with relay = true. `incarnation`: the sender's run, so
// that a link that drops knows which run it reached (0: not said).
void EncodeHello(NodeId node_id, std::string_view nonce, bool relays, uint64_t incarnation,
                 std::string* out, uint32_t peer_version = kPeerProtocolVersion);
void EncodeSeal(uint64_t seq, std::string_view mac, std::string* out);
void EncodeSyncDone(std::string* out);
void EncodeResync(std::string* out);
void EncodeHeartbeat(std::string* out);
// Digests of key ranges at ref_ms (at most kMaxRangesPerMessage).
void EncodeDigests(int64_t ref_ms, std::span<const RangeDigest> digests, std::string* out);
// The ranges a node wants sent whole, and those whose digests it wants again later.
void EncodeRanges(std::span<const uint32_t> want, std::span<const uint32_t> later,
                  std::string* out);
// Membership records (the whole table, or the changes a probe carries), the
// crash losses the sender knows (at most kMaxCrashLosses) and a probe (null: none).
void EncodeMembers(std::span<const MemberRecord> members, std::span<const CrashLoss> losses,
                   const Probe* probe, std::string* out);

// Packs key snapshots (every algorithm) into PeerState frames.
// A frame is cut once it reaches max_frame_bytes, so it exceeds that by at
// most one key entry (a counting key: its key, 20 bytes per slot and a few
// more; a log entry: under 21 KiB; a bucket: its key, 10 bytes plus 5 per
// slice for each node).
class PeerStateEncoder {
 public:
  static constexpr size_t kStampsPerEntry = 1'024;

  // relay: a delta for its receiver to relay (PeerMessage::relay).
  PeerStateEncoder(NodeId sender, bool full, size_t max_frame_bytes, bool relay = false);
  // Adds a key's state; appends a frame to *frames whenever one fills up.
  void Add(const KeySnapshot& snapshot, std::vector<std::string>* frames);
  // Appends the last frame, if anything is left.
  void Finish(std::vector<std::string>* frames);
  uint64_t entries() const { return entries_; }  // key entries added

 private:
  struct OpenClass {
    Algorithm algorithm;
    uint64_t window_ms;
    std::string keys;
    int64_t last_window_index = 0;
    std::string denied;              // PeerClass.denied
    uint64_t entries = 0;            // key entries in `keys`
    uint64_t last_denied_entry = 0;  // the last one listed in `denied`
  };
  OpenClass& ClassFor(const KeySnapshot& snapshot);
  // Lists the entry being added in open.denied, if its sender denied any
  // cost (a delta's), and counts it among the class's entries.
  void ListDenied(OpenClass& open, const DeniedCost& denied);
  void AddBucketEntry(OpenClass& open, const KeySnapshot& snapshot);
  void AddLogEntry(OpenClass& open, std::string_view key, NodeId node,
                   std::span<const LogStamp> stamps);
  void MaybeFinish(std::vector<std::string>* frames);

  const NodeId sender_;
  const bool full_;
  const size_t max_frame_bytes_;
  const bool relay_;
  std::vector<OpenClass> classes_;
  size_t pending_bytes_ = 0;
  uint64_t entries_ = 0;
};

}  // namespace tally::protocol
