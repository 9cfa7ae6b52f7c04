# tally's wire protocol. One Request or Response per frame; frames use Cap'n
# Proto's standard stream framing (see protocol/codec.h). The plain C++ mirror
# of these messages is protocol/messages.h.
#
# Evolution follows Cap'n Proto's rules: add fields and union members with new
# ordinals at the end; never renumber, retype or remove anything. A request
# whose union member this server does not know is answered with an Error of
# code kUnsupported (5).
#
# Units: counts and costs are whole requests (or tokens); times are ms.

@0xc1bdf66ebbcbeed9;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tally::protocol::wire");

struct Request {
  id @0 :UInt64;  # echoed in the Response; lets a client pipeline requests
  union {
    check @1 :List(Check);  # a batch of checks, answered in order
    stats @2 :Void;
    policyCheck @3 :PolicyCheck;  # by domain and descriptors, under the node's policies
    inspect @4 :KeyLimit;  # one limit's state on the node: every node's counts
    reset @5 :KeyLimit;    # forget one limit's state on the node (docs/clients.md: tallyctl reset)
    forgetMember @6 :UInt64;  # a member gone for good: every node drops it (tallyctl members forget)
    # New client request kinds get the next ordinals. Peers never use this
    # struct: they speak PeerMessage on the gossip port (below).
  }
}

# The numbers the fields below carry, readable by code generated in any
# language. The C++ enums (tally::Algorithm, tally::protocol::ErrorCode,
# tally::protocol::MemberState) are checked against these at compile time.

# Check.algorithm
const algorithmFixedWindow :UInt8 = 0;
const algorithmSlidingLog :UInt8 = 1;
const algorithmSlidingCounter :UInt8 = 2;
const algorithmTokenBucket :UInt8 = 3;

# Error.code
const errorOk :UInt16 = 0;
const errorInvalidArgument :UInt16 = 1;    # a bad key, spec or cost; nothing changed
const errorResourceExhausted :UInt16 = 2;  # a cap was hit (keys, connections)
const errorMalformedFrame :UInt16 = 3;     # bytes that are no valid frame or message; closed
const errorFrameTooLarge :UInt16 = 4;      # over the server's frame limit; closed
const errorUnsupported :UInt16 = 5;        # a request kind this server does not know
const errorUnavailable :UInt16 = 6;        # the server is shutting down
const errorInternal :UInt16 = 7;

# MemberStatus.state
const memberAlive :UInt8 = 0;
const memberSuspect :UInt8 = 1;
const memberDead :UInt8 = 2;
const memberLeft :UInt8 = 3;

struct Check {
  key @0 :Data;            # 1..256 bytes, binary allowed
  algorithm @1 :UInt8;     # one of the algorithm* constants above; an unknown one is rejected per check
  limit @2 :UInt64;        # requests per window (token bucket: capacity)
  windowMs @3 :UInt64;     # ms
  cost @4 :UInt64 = 1;     # requests this check consumes; 0 peeks
}

# One limit of a key, as (key, algorithm, windowMs) identify it.
struct KeyLimit {
  key @0 :Data;
  algorithm @1 :UInt8;
  windowMs @2 :UInt64;
  local @3 :Bool;  # reset: a clustered node refuses a reset without it
}

# A check by policy (tallyd --policy-dir): every descriptor is decided under
# the limit its policy gives it, as Envoy's rate limit service does.
struct PolicyCheck {
  domain @0 :Text;
  descriptors @1 :List(PolicyDescriptor);
  hitsAddend @2 :UInt64;  # the cost of each descriptor; 0 means 1
}

struct PolicyDescriptor {
  entries @0 :List(DescriptorEntry);
}

struct DescriptorEntry {
  key @0 :Text;
  value @1 :Text;
}

struct Response {
  id @0 :UInt64;  # the request's id; 0 when the request could not be decoded
  union {
    check @1 :List(CheckOutcome);  # one per check, in the request's order
    stats @2 :StatsReply;
    error @3 :Error;               # the whole request failed
    policyCheck @4 :List(PolicyOutcome);  # one per descriptor, in the request's order
    inspect @5 :InspectReply;
    reset @6 :Bool;  # true: the node held state of the limit and forgot it
    forgetMember @7 :Bool;  # true: the member was counted and is forgotten now
  }
}

# One limit's state as the answering node holds it (Limiter::Read).
struct InspectReply {
  nodeId @0 :UInt64;  # the node that answered
  found @1 :Bool;     # false: it holds nothing live for the limit
  windowIndex @2 :Int64;  # counting algorithms: floor(wall ms / windowMs) of `current`
  nodes @3 :List(NodeCounts);  # counting algorithms and the log, by node id
  bucketLevel @4 :UInt64;  # token bucket: token-ms it holds at bucketRefilledAtMs (the read), as this node decides
  bucketRefilledAtMs @5 :Int64;
}

struct NodeCounts {
  nodeId @0 :UInt64;
  current @1 :UInt64;   # counting: its count in the current window; log: its cost in the window
  previous @2 :UInt64;  # counting: in the previous window
  stamps @3 :UInt64;    # log: its milliseconds with admissions in the window
}

struct PolicyOutcome {
  union {
    noLimit @0 :Void;        # no policy limits this descriptor
    unlimited @1 :Void;      # its policy says unlimited
    decision @2 :Decision;   # decided under the limit below
    error @3 :Error;         # this descriptor alone failed
  }
  shadowDenied @4 :Bool;     # denied, but allowed: the limit is in shadow mode
  rule @5 :Text;             # the limit's name, or its full key
  algorithm @6 :UInt8;       # decision: the limit applied
  limit @7 :UInt64;
  windowMs @8 :UInt64;
  quotaExceeded @9 :Bool;    # over its quota-mode limit, but allowed: another
                             # quota-mode descriptor of the request is within its own
}

struct CheckOutcome {
  union {
    decision @0 :Decision;
    error @1 :Error;  # this check alone failed
  }
}

struct Decision {
  allowed @0 :Bool;
  neverAllowed @1 :Bool;   # cost > limit: no wait helps
  limit @2 :UInt64;
  remaining @3 :UInt64;    # the largest cost that would pass now
  resetAfterMs @4 :UInt64; # ms until the full limit is available again
  retryAfterMs @5 :UInt64; # ms until this request would pass; 0 if allowed
}

struct Error {
  code @0 :UInt16;  # one of the error* constants above
  message @1 :Text;
}

struct StatsReply {
  uptimeMs @0 :UInt64;
  keys @1 :UInt64;
  checks @2 :UInt64;
  allowed @3 :UInt64;
  denied @4 :UInt64;
  errors @5 :UInt64;  # checks answered with an error
  connectionsOpen @6 :UInt64;
  connectionsTotal @7 :UInt64;
  # Persistence (all 0 when the node runs memory-only).
  restoreMs @8 :UInt64;  # time the node took to restore its state at start
  keysRestored @9 :UInt64;
  storageFlushes @10 :UInt64;  # runs (batches) written to RocksDB
  storageKeysWritten @11 :UInt64;
  storageWriteErrors @12 :UInt64;  # failed batches (the node then serves from memory)
  storageDiskBytes @13 :UInt64;  # SST files plus write-ahead logs
  storageCheckpoints @14 :UInt64;  # runs that replaced all earlier ones (among storageFlushes)
  # Gossip (all 0, lists empty, on a node without peers): see protocol/messages.h.
  recoveryMs @15 :UInt64;
  recoveryPeersSynced @16 :UInt64;
  gossipRounds @17 :UInt64;
  gossipBytesSent @18 :UInt64;
  gossipBytesReceived @19 :UInt64;
  gossipDeltaBytesSent @20 :UInt64;
  gossipDeltaEntriesSent @21 :UInt64;
  gossipFullSyncsSent @22 :UInt64;
  gossipFullSyncsReceived @23 :UInt64;
  gossipEntriesMerged @24 :UInt64;
  gossipEntriesRejected @25 :UInt64;
  gossipSessionsRefused @26 :UInt64;
  peerLinks @27 :List(PeerLinkStatus);
  peerNodes @28 :List(PeerNodeStatus);
  members @29 :List(MemberStatus);  # this node's view of the cluster
  storageDegraded @30 :Bool;  # the last write to RocksDB failed: the node serves from memory
  shadowDenied @31 :UInt64;  # policy checks denied but allowed by shadow mode (all fronts)
  policyDomains @32 :UInt64;  # domains in the policies in force (--policy-dir)
  policyRules @33 :UInt64;  # limits in them
  policyReloads @34 :UInt64;  # policy sets that took effect, the first included
  policyReloadFailures @35 :UInt64;  # reloads refused: the previous set stayed
  grpcRequests @36 :UInt64;  # ShouldRateLimit calls answered (--grpc-port)
  grpcOverLimit @37 :UInt64;  # of those, OVER_LIMIT
  grpcRefused @38 :UInt64;  # calls answered with an error status
  respCommands @39 :UInt64;  # commands answered on the RESP port (--resp-port)
  respThrottled @40 :UInt64;  # of those, limit checks that denied
  respErrors @41 :UInt64;  # error replies there, protocol errors included
  httpRequests @42 :UInt64;  # requests answered on --http-port, refusals included
  httpAllowed @43 :UInt64;  # of those, allowed (200)
  httpDenied @44 :UInt64;  # of those, denied (429, or 403)
  httpRefused @45 :UInt64;  # of those, errors (malformed, invalid, unknown domain, key cap)
  gossipDigestsSent @46 :UInt64;  # anti-entropy: range digests, summed over the links
  gossipRangesSent @47 :UInt64;   # ranges sent whole because a peer's digest differed
}

struct PeerLinkStatus {
  address @0 :Text;
  up @1 :Bool;
  nodeId @2 :UInt64;
  bytesSent @3 :UInt64;
  queuedBytes @4 :UInt64;
  fullSyncsSent @5 :UInt64;
  connects @6 :UInt64;
  lagMs @7 :UInt64;  # since the link's queue was last empty; 0 when empty or down
}

struct PeerNodeStatus {
  nodeId @0 :UInt64;
  connected @1 :Bool;
  lastHeardMsAgo @2 :UInt64;
  fullSyncs @3 :UInt64;
  entriesMerged @4 :UInt64;
}

struct MemberStatus {
  nodeId @0 :UInt64;
  address @1 :Text;
  state @2 :UInt8;  # one of the member* constants above
  incarnation @3 :UInt64;
  heartbeat @4 :UInt64;
  lastHeardMsAgo @5 :UInt64;
  lagMs @6 :Int64;
  clockOffsetKnown @7 :Bool;  # heard from it directly: clockOffsetMs is its clock minus ours
  clockOffsetMs @8 :Int64;
}

# --- Peer protocol ----------------------------------------------------------
# Between nodes, on the gossip port (which serves nothing else), one
# PeerMessage per frame in the same framing. A connection carries the
# dialling node's state to the accepting node: a hello each way first, then
# any number of state, syncDone and members messages from the dialler.
# Every message but the dialler's hello is followed by a seal that proves
# the cluster secret (protocol/peer_auth.h). See node/gossip/gossip.h.

struct PeerMessage {
  union {
    hello @0 :PeerHello;
    state @1 :PeerState;
    syncDone @2 :Void;   # everything live was sent since the last full = true state
    heartbeat @3 :Void;  # the dialler's first sealed message: it proves the secret
    seal @4 :PeerSeal;   # follows the message it seals
    members @5 :PeerMembers;  # membership records, and a probe (node/gossip/membership.h)
    resync @6 :Void;  # the sender forgot state it had: send it every shard at the next full sync
    digests @7 :PeerDigests;  # anti-entropy: the sender's digests of some key ranges
    ranges @8 :PeerRanges;    # the answer to digests, on the answering node's own link
  }
}

# Anti-entropy (node/gossip/gossip.h): digests of key ranges
# (node/engine/range_digest.h) at a reference time; ranges[i] has digests[i].
struct PeerDigests {
  refMs @0 :Int64;  # wall ms, a multiple of the anti-entropy interval
  ranges @1 :List(UInt32);
  digests @2 :List(UInt64);
}

# What a node wants after comparing digests: `want`, the ranges whose digest
# differed from its own (the digests' sender sends them whole); `later`, the
# ranges it could not compare yet (changes to them were on their way): the
# sender sends their digests again at its next interval.
struct PeerRanges {
  want @0 :List(UInt32);
  later @1 :List(UInt32);
}

struct PeerMembers {
  members @0 :List(PeerMember);
  # The crash losses the sender knows (node/common/crash_loss.h); builds
  # that do not know this field ignore it.
  losses @1 :List(PeerCrashLoss);
  probe @2 :PeerProbe;  # absent: the table after a hello, or a leave
}

struct PeerCrashLoss {
  nodeId @0 :UInt64;
  incarnation @1 :UInt64;  # of the run that started after the loss
  atMs @2 :Int64;          # wall clock when a node first noted it
}

struct PeerMember {
  nodeId @0 :UInt64;
  address @1 :Text;  # host:port of its gossip port
  incarnation @2 :UInt64;
  heartbeat @3 :UInt64;  # the record's version in this run: +1 when it refutes or leaves
  heartbeatWallMs @4 :Int64;  # the member's wall clock when it set that version
  left @5 :Bool;
  forgotten @6 :Bool;  # with left: an operator forgot it (tallyctl members forget)
  state @7 :UInt8;     # memberAlive, memberSuspect or memberDead (left: the flag above)
}

# A SWIM probe (node/gossip/prober.h), carried by a members message with the
# membership changes it piggybacks. A ping from `origin` to `target` is sent
# to the target, or to a helper that forwards it (an indirect probe); the
# target answers with an ack to whoever sent it the ping, and a helper
# forwards that ack to the origin.
struct PeerProbe {
  seq @0 :UInt64;     # the origin's, to match the ack to its ping
  origin @1 :UInt64;
  target @2 :UInt64;
  ack @3 :Bool;
  wallMs @4 :Int64;   # the sender's wall clock when it sent this (clock offsets)
}

struct PeerSeal {
  seq @0 :UInt64;  # 0 for the acceptor's hello, then 1, 2, ... from the dialler
  mac @1 :Data;    # HMAC-SHA256 under the connection's key, see protocol/peer_auth.h
}

struct PeerHello {
  nodeId @0 :UInt64;  # the sender's G-counter slot; never 0
  nonce @1 :Data;     # 16 fresh random bytes: the connection's key depends on both
  peerVersion @2 :UInt32;  # the peer protocol's version (peerProtocolVersion); absent: 1
  relays @3 :Bool;  # the sender relays deltas sent with relay = true (absent: it does not)
  incarnation @4 :UInt64;  # the sender's run (its membership incarnation); absent: 0, not said
}

# 2: token buckets are replicated (a class of algorithm 3 carries bucket
# slices). 3: membership by SWIM probes, not heartbeats to every member.
# Nodes of different versions refuse each other at the hello.
const peerProtocolVersion :UInt32 = 3;

struct PeerState {
  full @0 :Bool;  # part of a full sync (anti-entropy), else a delta
  classes @1 :List(PeerClass);
  # A delta for the receiver to relay: the sender's admissions that waited,
  # on keys whose relayer it takes the receiver to be (node/engine/headroom.h).
  relay @2 :Bool;
}

# The state of many keys of one (algorithm, windowMs), packed as varints
# (protocol/peer_codec.h): a few bytes per key-slot instead of a struct each.
struct PeerClass {
  algorithm @0 :UInt8;
  windowMs @1 :UInt64;
  keys @2 :Data;
  # Counting and token bucket classes of a delta: the sender's denied cost
  # on the entries of `keys` that have any (protocol/peer_codec.h). Builds
  # that do not know this field (or do not weigh a class's) ignore it.
  denied @3 :Data;
}
