// The messages of tally's wire protocol as plain C++ values. protocol/codec.h
// turns them into Cap'n Proto frames (schema: protocol/tally.capnp) and back;
// nothing outside protocol/ sees a Cap'n Proto type.
//
// A connection carries a stream of frames. A client sends Requests and may
// pipeline them (send many before reading); the server answers each with one
// Response carrying the same id, in the order the requests arrived.
//
// Evolution: the schema grows by Cap'n Proto's rules (new fields and union
// members get new ordinals; nothing is renumbered or removed). A request kind
// this server does not know is answered with ErrorCode::kUnsupported.
//
// Ownership: string_views in a decoded message point into the frame buffer
// that was decoded and are valid only while it lives.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "node/common/descriptor.h"
#include "node/common/limit.h"

namespace tally::protocol {

// Errors, for a whole request (Response::error) or one check (CheckOutcome).
// Wire values are stable.
enum class ErrorCode : uint16_t {
  kOk = 0,
  kInvalidArgument = 1,    // bad key, spec or cost: Status::Code::kInvalidArgument
  kResourceExhausted = 2,  // a cap was hit (keys, connections)
  kMalformedFrame = 3,     // bytes that are not a valid frame or message
  kFrameTooLarge = 4,      // the frame exceeds the server's max_frame_bytes
  kUnsupported = 5,        // a request kind this server does not know
  kUnavailable = 6,        // the server is shutting down
  kInternal = 7,
};
std::string_view ErrorCodeName(ErrorCode code);

struct Check {
  std::string_view key;
  LimitSpec spec;     // an unknown algorithm number is carried as is; the engine rejects it
  uint64_t cost = 1;  // the wire default is 1
};

// A check by policy: a domain and descriptors, decided under the node's
// policies (node/policy/policy_checker.h).
struct PolicyCheck {
  std::string_view domain;
  std::vector<DescriptorEntry> entries;    // every descriptor's entries, one after another
  std::vector<uint32_t> descriptor_sizes;  // how many entries each descriptor has, in order
  uint64_t hits = 0;                       // the cost; 0 means 1, as Envoy's hits_addend
};

// One limit of a key, as inspect and reset name it: (key, algorithm,
// window_ms); spec.limit is not used.
struct KeyLimit {
  std::string_view key;
  LimitSpec spec;
  bool local = false;  // reset: a clustered node refuses a reset without it
};

enum class RequestKind : uint8_t {
  kCheck = 0,
  kStats = 1,
  kPolicyCheck = 2,
  kInspect = 3,
  kReset = 4,
  kForgetMember = 5,
  kUnknown = 255,  // decoded from a newer client's request kind
};

struct Request {
  uint64_t id = 0;
  RequestKind kind = RequestKind::kCheck;
  std::vector<Check> checks;  // kCheck only
  PolicyCheck policy_check;   // kPolicyCheck only
  KeyLimit key_limit;         // kInspect, kReset
  uint64_t member_id = 0;     // kForgetMember
};

// The result of one check: a decision, or an error for that check alone.
struct CheckOutcome {
  ErrorCode error = ErrorCode::kOk;
  std::string error_message;  // empty when error == kOk
  Decision decision;          // meaningful when error == kOk
};

// An outgoing gossip link, as its node sees it.
struct PeerLinkStatus {
  std::string address;   // as dialled: a seed, or the member's advertised address
  bool up = false;       // connected, and the peer answered hello
  uint64_t node_id = 0;  // the peer's, from its hello (0: never heard)
  uint64_t bytes_sent = 0;
  uint64_t queued_bytes = 0;
  uint64_t full_syncs_sent = 0;
  uint64_t connects = 0;
  // How long the peer has lacked some of what this node sent it: since the
  // link's queue was last empty (0 when nothing is queued, or the link is down).
  uint64_t lag_ms = 0;
};

// A peer whose state this node receives.
struct PeerNodeStatus {
  uint64_t node_id = 0;
  bool connected = false;
  uint64_t last_heard_ms_ago = 0;
  uint64_t full_syncs = 0;  // completed full syncs received
  uint64_t entries_merged = 0;
};

// Wire values are stable.
enum class MemberState : uint8_t { kAlive = 0, kSuspect = 1, kDead = 2, kLeft = 3 };
std::string_view MemberStateName(MemberState state);

// What the cluster knows of a member: what it says about itself, and
// whether some node suspects it or judged it dead. Gossiped from node to
// node in members messages (node/gossip/membership.h).
struct MemberRecord {
  uint64_t node_id = 0;
  std::string address;       // where its gossip port is reached (host:port)
  uint64_t incarnation = 0;  // its wall-clock ms at start: a restart is newer
  // The record's version within the run: +1 when the member refutes a
  // suspicion of itself or leaves (SWIM's incarnation number).
  uint64_t heartbeat = 0;
  int64_t heartbeat_wall_ms = 0;  // its wall clock when it set that version
  bool left = false;              // it left the cluster gracefully
  // With left: it did not leave, an operator forgot it (gone for good:
  // tallyctl members forget), and what it kept back is lost.
  bool forgotten = false;
  // Alive, suspect or dead, as some node judged this version (kLeft is the
  // flag above, not a state here).
  MemberState state = MemberState::kAlive;
};

// One member as a node sees it (this node included).
struct MemberStatus {
  uint64_t node_id = 0;
  std::string address;
  MemberState state = MemberState::kAlive;
  uint64_t incarnation = 0;
  uint64_t heartbeat = 0;
  uint64_t last_heard_ms_ago = 0;  // since a message from it, or an ack through others, arrived
  int64_t lag_ms = 0;  // age of its last probe or ack when it arrived (wall clocks: skew included)
  // Its wall clock minus this node's (membership.h), once heard from it directly.
  bool clock_offset_known = false;
  int64_t clock_offset_ms = 0;
};

struct StatsReply {
  uint64_t uptime_ms = 0;
  uint64_t keys = 0;
  uint64_t checks = 0;
  uint64_t allowed = 0;
  uint64_t denied = 0;
  uint64_t errors = 0;  // checks answered with an error
  uint64_t connections_open = 0;
  uint64_t connections_total = 0;
  // Persistence; all 0 when the node runs memory-only.
  uint64_t restore_ms = 0;
  uint64_t keys_restored = 0;
  uint64_t storage_flushes = 0;
  uint64_t storage_keys_written = 0;
  uint64_t storage_write_errors = 0;
  uint64_t storage_disk_bytes = 0;
  uint64_t storage_checkpoints = 0;
  bool storage_degraded = false;  // the last write failed: serving from memory
  // Policies and the fronts that check by them; all 0 without --policy-dir / --grpc-port.
  uint64_t shadow_denied = 0;   // policy checks denied but allowed by shadow mode (all fronts)
  uint64_t policy_domains = 0;  // domains in the policies in force (--policy-dir)
  uint64_t policy_rules = 0;    // limits in them
  uint64_t policy_reloads = 0;  // policy sets that took effect, the first included
  uint64_t policy_reload_failures = 0;  // reloads refused: the previous set stayed
  uint64_t grpc_requests = 0;           // ShouldRateLimit calls answered (--grpc-port)
  uint64_t grpc_over_limit = 0;         // of those, OVER_LIMIT
  uint64_t grpc_refused = 0;            // calls answered with an error status
  uint64_t resp_commands = 0;           // commands answered on the RESP port (--resp-port)
  uint64_t resp_throttled = 0;          // of those, limit checks that denied
  uint64_t resp_errors = 0;             // error replies there, protocol errors included
  uint64_t http_requests = 0;           // requests answered on --http-port, refusals included
  uint64_t http_allowed = 0;            // of those, allowed (200)
  uint64_t http_denied = 0;             // of those, denied (429, or 403)
  uint64_t http_refused = 0;            // of those, errors (malformed, invalid, key cap)
  // Gossip; all 0 (and no peers) when the node has no peers.
  uint64_t recovery_ms = 0;            // waiting for peers' full syncs before serving
  uint64_t recovery_peers_synced = 0;  // peers whose full sync arrived in that time
  uint64_t gossip_rounds = 0;
  uint64_t gossip_bytes_sent = 0;  // on every link, all frames
  uint64_t gossip_bytes_received = 0;
  uint64_t gossip_delta_bytes_sent = 0;    // delta frames, summed over the links
  uint64_t gossip_delta_entries_sent = 0;  // key entries in those (a key-slot per link)
  uint64_t gossip_full_syncs_sent = 0;
  uint64_t gossip_full_syncs_received = 0;
  uint64_t gossip_entries_merged = 0;
  uint64_t gossip_entries_rejected = 0;  // refused by the engine (bad key, order, skew, cap)
  uint64_t gossip_sessions_refused = 0;  // peers closed for garbage, a bad hello or silence
  uint64_t gossip_digests_sent = 0;      // anti-entropy: range digests, summed over the links
  uint64_t gossip_ranges_sent = 0;       // ranges sent whole because a peer's digest differed
  std::vector<PeerLinkStatus> peer_links;
  std::vector<PeerNodeStatus> peer_nodes;
  std::vector<MemberStatus> members;  // this node's view of the cluster, by node id
};

// The result of one descriptor of a policy check.
struct PolicyOutcome {
  enum class Kind : uint8_t {
    kNoLimit = 0,    // no policy limits it (or another matched limit replaces it)
    kUnlimited = 1,  // its policy says unlimited
    kLimited = 2,    // decided: decision, or error for this descriptor alone
  };
  Kind kind = Kind::kNoLimit;
  ErrorCode error = ErrorCode::kOk;
  std::string error_message;
  Decision decision;           // kLimited without error
  bool shadow_denied = false;  // denied, but allowed: the limit is in shadow mode
  // Over its quota-mode limit, but allowed: another quota-mode descriptor of
  // the request is within its own (node/policy/policy_checker.h).
  bool quota_exceeded = false;
  std::string rule;  // kUnlimited, kLimited: the limit's name, or its full key
  LimitSpec spec;    // kLimited: the limit applied
};

// One node's part of a limit's state, as inspect shows it.
struct NodeCounts {
  uint64_t node_id = 0;
  uint64_t current = 0;   // counting: its count in the current window; log: its cost in the window
  uint64_t previous = 0;  // counting: in the previous window
  uint64_t stamps = 0;    // log: its milliseconds with admissions in the window
};

// One limit's state as the answering node holds it (Limiter::Read).
struct InspectReply {
  uint64_t node_id = 0;           // the node that answered
  bool found = false;             // false: it holds nothing live for the limit
  int64_t window_index = 0;       // counting: floor(wall_ms / window_ms) of `current`
  std::vector<NodeCounts> nodes;  // counting and log, by node id
  uint64_t bucket_level = 0;      // token bucket: token-ms held at refilled_at, as the node decides
  int64_t bucket_refilled_at_ms = 0;
};

enum class ResponseKind : uint8_t {
  kCheck = 0,
  kStats = 1,
  kError = 2,
  kPolicyCheck = 3,
  kInspect = 4,
  kReset = 5,
  kForgetMember = 6,
};

struct Response {
  uint64_t id = 0;  // the request's id; 0 when the request could not be decoded
  ResponseKind kind = ResponseKind::kCheck;
  std::vector<CheckOutcome> outcomes;          // kCheck: one per check, in order
  std::vector<PolicyOutcome> policy_outcomes;  // kPolicyCheck: one per descriptor, in order
  StatsReply stats;                            // kStats
  InspectReply inspect;                        // kInspect
  bool reset_erased = false;                   // kReset: the node held state and forgot it
  bool member_forgotten = false;     // kForgetMember: the member counted, and is forgotten now
  ErrorCode error = ErrorCode::kOk;  // kError: the whole request failed
  std::string error_message;         // kError
};

}  // namespace tally::protocol
