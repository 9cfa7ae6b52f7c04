// Framing and (de)serialisation of tally's protocol messages: see codec.h.
//
// Alignment: Decode* read the frame in place (the string_views in a decoded
// Request point into it), so an unaligned frame is rejected with
// InvalidArgument rather than copied: a copy would have to outlive the call
// for those views to stay valid. Callers keep their receive buffer in 8-byte
// words; frames are whole words, so consecutive frames stay aligned.
#include "protocol/codec.h"

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/schema.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include "protocol/framing.h"
#include "protocol/tally.capnp.h"

namespace tally::protocol {
namespace {

constexpr uint64_t kWordBytes = sizeof(capnp::word);

// The schema's constants and the C++ enums name the same numbers.
template <typename Enum>
constexpr auto Number(Enum value) {
  return static_cast<std::underlying_type_t<Enum>>(value);
}
static_assert(Number(Algorithm::kFixedWindow) == wire::ALGORITHM_FIXED_WINDOW);
static_assert(Number(Algorithm::kSlidingWindowLog) == wire::ALGORITHM_SLIDING_LOG);
static_assert(Number(Algorithm::kSlidingWindowCounter) == wire::ALGORITHM_SLIDING_COUNTER);
static_assert(Number(Algorithm::kTokenBucket) == wire::ALGORITHM_TOKEN_BUCKET);
static_assert(Number(ErrorCode::kOk) == wire::ERROR_OK);
static_assert(Number(ErrorCode::kInvalidArgument) == wire::ERROR_INVALID_ARGUMENT);
static_assert(Number(ErrorCode::kResourceExhausted) == wire::ERROR_RESOURCE_EXHAUSTED);
static_assert(Number(ErrorCode::kMalformedFrame) == wire::ERROR_MALFORMED_FRAME);
static_assert(Number(ErrorCode::kFrameTooLarge) == wire::ERROR_FRAME_TOO_LARGE);
static_assert(Number(ErrorCode::kUnsupported) == wire::ERROR_UNSUPPORTED);
static_assert(Number(ErrorCode::kUnavailable) == wire::ERROR_UNAVAILABLE);
static_assert(Number(ErrorCode::kInternal) == wire::ERROR_INTERNAL);
static_assert(Number(MemberState::kAlive) == wire::MEMBER_ALIVE);
static_assert(Number(MemberState::kSuspect) == wire::MEMBER_SUSPECT);
static_assert(Number(MemberState::kDead) == wire::MEMBER_DEAD);
static_assert(Number(MemberState::kLeft) == wire::MEMBER_LEFT);

// --- framing -----------------------------------------------------------------

uint32_t LoadLittleEndian32(std::span<const std::byte> bytes, size_t offset) {
  uint32_t value = 0;
  for (size_t i = 0; i < 4; ++i) {
    value |= std::to_integer<uint32_t>(bytes[offset + i]) << (8 * i);
  }
  return value;
}

FrameScan Scanned(FrameScan::State state, uint64_t frame_bytes) {
  FrameScan scan;
  scan.state = state;
  scan.frame_bytes = static_cast<size_t>(frame_bytes);
  return scan;
}

FrameScan Invalid(ErrorCode code, std::string message) {
  FrameScan scan;
  scan.state = FrameScan::State::kInvalid;
  scan.error = code;
  scan.error_message = std::move(message);
  return scan;
}

FrameScan TooLarge(uint64_t header_bytes, uint64_t body_words, const FrameLimits& limits) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  const bool overflows = body_words > (kMax - header_bytes) / kWordBytes;
  const std::string total =
      overflows ? "more than 2^64" : std::to_string(header_bytes + body_words * kWordBytes);
  return Invalid(ErrorCode::kFrameTooLarge, "frame of " + total +
                                                " bytes exceeds max_frame_bytes " +
                                                std::to_string(limits.max_frame_bytes));
}

// --- decoding ----------------------------------------------------------------

Check ReadCheck(wire::Check::Reader in) {
  Check check;
  check.key = ViewOf(in.getKey());
  check.spec.algorithm = static_cast<Algorithm>(in.getAlgorithm());
  check.spec.limit = in.getLimit();
  check.spec.window_ms = in.getWindowMs();
  check.cost = in.getCost();
  return check;
}

std::string_view TextOf(capnp::Text::Reader text) { return {text.cStr(), text.size()}; }

// Entries over all descriptors count against max_checks_per_request, as checks do.
Status ReadPolicyCheck(wire::PolicyCheck::Reader in, const FrameLimits& limits, PolicyCheck* out) {
  out->domain = TextOf(in.getDomain());
  out->hits = in.getHitsAddend();
  const auto descriptors = in.getDescriptors();
  size_t entries = 0;
  for (const auto descriptor : descriptors) entries += descriptor.getEntries().size();
  if (descriptors.size() > limits.max_checks_per_request ||
      entries > limits.max_checks_per_request) {
    return Status::InvalidArgument("request carries " + std::to_string(descriptors.size()) +
                                   " descriptors with " + std::to_string(entries) +
                                   " entries; the maximum is " +
                                   std::to_string(limits.max_checks_per_request) + " of each");
  }
  out->entries.reserve(entries);
  out->descriptor_sizes.reserve(descriptors.size());
  for (const auto descriptor : descriptors) {
    const auto list = descriptor.getEntries();
    out->descriptor_sizes.push_back(list.size());
    for (const auto entry : list) {
      out->entries.push_back({TextOf(entry.getKey()), TextOf(entry.getValue())});
    }
  }
  return Status::OK();
}

KeyLimit ReadKeyLimit(wire::KeyLimit::Reader in) {
  KeyLimit limit;
  limit.key = ViewOf(in.getKey());
  limit.spec.algorithm = static_cast<Algorithm>(in.getAlgorithm());
  limit.spec.window_ms = in.getWindowMs();
  limit.local = in.getLocal();
  return limit;
}

Status ReadRequest(wire::Request::Reader in, const FrameLimits& limits, Request* out) {
  out->id = in.getId();
  out->checks.clear();  // keeps its capacity: a connection's requests reuse it
  out->policy_check.entries.clear();
  out->policy_check.descriptor_sizes.clear();
  switch (in.which()) {
    case wire::Request::CHECK: {
      out->kind = RequestKind::kCheck;
      const auto checks = in.getCheck();
      if (checks.size() > limits.max_checks_per_request) {
        return Status::InvalidArgument("request carries " + std::to_string(checks.size()) +
                                       " checks; the maximum is " +
                                       std::to_string(limits.max_checks_per_request));
      }
      out->checks.reserve(checks.size());
      for (const auto check : checks) out->checks.push_back(ReadCheck(check));
      break;
    }
    case wire::Request::STATS: out->kind = RequestKind::kStats; break;
    case wire::Request::POLICY_CHECK:
      out->kind = RequestKind::kPolicyCheck;
      return ReadPolicyCheck(in.getPolicyCheck(), limits, &out->policy_check);
    case wire::Request::INSPECT:
      out->kind = RequestKind::kInspect;
      out->key_limit = ReadKeyLimit(in.getInspect());
      break;
    case wire::Request::RESET:
      out->kind = RequestKind::kReset;
      out->key_limit = ReadKeyLimit(in.getReset());
      break;
    case wire::Request::FORGET_MEMBER:
      out->kind = RequestKind::kForgetMember;
      out->member_id = in.getForgetMember();
      break;
    default:  // a newer client's request kind: answered kUnsupported
      out->kind = RequestKind::kUnknown;
      break;
  }
  return Status::OK();
}

Decision ReadDecision(wire::Decision::Reader in) {
  Decision decision;
  decision.allowed = in.getAllowed();
  decision.never_allowed = in.getNeverAllowed();
  decision.limit = in.getLimit();
  decision.remaining = in.getRemaining();
  decision.reset_after_ms = in.getResetAfterMs();
  decision.retry_after_ms = in.getRetryAfterMs();
  return decision;
}

StatsReply ReadStats(wire::StatsReply::Reader in) {
  StatsReply stats;
  stats.uptime_ms = in.getUptimeMs();
  stats.keys = in.getKeys();
  stats.checks = in.getChecks();
  stats.allowed = in.getAllowed();
  stats.denied = in.getDenied();
  stats.errors = in.getErrors();
  stats.connections_open = in.getConnectionsOpen();
  stats.connections_total = in.getConnectionsTotal();
  stats.restore_ms = in.getRestoreMs();
  stats.keys_restored = in.getKeysRestored();
  stats.storage_flushes = in.getStorageFlushes();
  stats.storage_keys_written = in.getStorageKeysWritten();
  stats.storage_write_errors = in.getStorageWriteErrors();
  stats.storage_disk_bytes = in.getStorageDiskBytes();
  stats.storage_checkpoints = in.getStorageCheckpoints();
  stats.storage_degraded = in.getStorageDegraded();
  stats.shadow_denied = in.getShadowDenied();
  stats.policy_domains = in.getPolicyDomains();
  stats.policy_rules = in.getPolicyRules();
  stats.policy_reloads = in.getPolicyReloads();
  stats.policy_reload_failures = in.getPolicyReloadFailures();
  stats.grpc_requests = in.getGrpcRequests();
  stats.grpc_over_limit = in.getGrpcOverLimit();
  stats.grpc_refused = in.getGrpcRefused();
  stats.resp_commands = in.getRespCommands();
  stats.resp_throttled = in.getRespThrottled();
  stats.resp_errors = in.getRespErrors();
  stats.http_requests = in.getHttpRequests();
  stats.http_allowed = in.getHttpAllowed();
  stats.http_denied = in.getHttpDenied();
  stats.http_refused = in.getHttpRefused();
  stats.recovery_ms = in.getRecoveryMs();
  stats.recovery_peers_synced = in.getRecoveryPeersSynced();
  stats.gossip_rounds = in.getGossipRounds();
  stats.gossip_bytes_sent = in.getGossipBytesSent();
  stats.gossip_bytes_received = in.getGossipBytesReceived();
  stats.gossip_delta_bytes_sent = in.getGossipDeltaBytesSent();
  stats.gossip_delta_entries_sent = in.getGossipDeltaEntriesSent();
  stats.gossip_full_syncs_sent = in.getGossipFullSyncsSent();
  stats.gossip_full_syncs_received = in.getGossipFullSyncsReceived();
  stats.gossip_entries_merged = in.getGossipEntriesMerged();
  stats.gossip_entries_rejected = in.getGossipEntriesRejected();
  stats.gossip_sessions_refused = in.getGossipSessionsRefused();
  stats.gossip_digests_sent = in.getGossipDigestsSent();
  stats.gossip_ranges_sent = in.getGossipRangesSent();
  for (const auto link : in.getPeerLinks()) {
    PeerLinkStatus& out = stats.peer_links.emplace_back();
    out.address = link.getAddress().cStr();
    out.up = link.getUp();
    out.node_id = link.getNodeId();
    out.bytes_sent = link.getBytesSent();
    out.queued_bytes = link.getQueuedBytes();
    out.full_syncs_sent = link.getFullSyncsSent();
    out.connects = link.getConnects();
    out.lag_ms = link.getLagMs();
  }
  for (const auto node : in.getPeerNodes()) {
    PeerNodeStatus& out = stats.peer_nodes.emplace_back();
    out.node_id = node.getNodeId();
    out.connected = node.getConnected();
    out.last_heard_ms_ago = node.getLastHeardMsAgo();
    out.full_syncs = node.getFullSyncs();
    out.entries_merged = node.getEntriesMerged();
  }
  for (const auto member : in.getMembers()) {
    MemberStatus& out = stats.members.emplace_back();
    out.node_id = member.getNodeId();
    out.address = member.getAddress().cStr();
    out.state = static_cast<MemberState>(member.getState());
    out.incarnation = member.getIncarnation();
    out.heartbeat = member.getHeartbeat();
    out.last_heard_ms_ago = member.getLastHeardMsAgo();
    out.lag_ms = member.getLagMs();
    out.clock_offset_known = member.getClockOffsetKnown();
    out.clock_offset_ms = member.getClockOffsetMs();
  }
  return stats;
}

// An Error member must carry a failure: code 0 would read as a decision.
Status ReadError(wire::Error::Reader in, ErrorCode* code, std::string* message) {
  *code = static_cast<ErrorCode>(in.getCode());
  const capnp::Text::Reader text = in.getMessage();
  message->assign(text.cStr(), text.size());
  if (*code == ErrorCode::kOk) return Status::Corruption("malformed frame: error with code 0");
  return Status::OK();
}

Status ReadOutcome(wire::CheckOutcome::Reader in, CheckOutcome* out) {
  switch (in.which()) {
    case wire::CheckOutcome::DECISION:
      out->decision = ReadDecision(in.getDecision());
      return Status::OK();
    case wire::CheckOutcome::ERROR:
      return ReadError(in.getError(), &out->error, &out->error_message);
  }
  return Status::Corruption("malformed frame: unknown check outcome kind " +
                            std::to_string(static_cast<unsigned>(in.which())));
}

Status ReadPolicyOutcome(wire::PolicyOutcome::Reader in, PolicyOutcome* out) {
  out->shadow_denied = in.getShadowDenied();
  out->quota_exceeded = in.getQuotaExceeded();
  out->rule = TextOf(in.getRule());
  out->spec = LimitSpec{static_cast<Algorithm>(in.getAlgorithm()), in.getLimit(), in.getWindowMs()};
  switch (in.which()) {
    case wire::PolicyOutcome::NO_LIMIT:
      out->kind = PolicyOutcome::Kind::kNoLimit;
      return Status::OK();
    case wire::PolicyOutcome::UNLIMITED:
      out->kind = PolicyOutcome::Kind::kUnlimited;
      return Status::OK();
    case wire::PolicyOutcome::DECISION:
      out->kind = PolicyOutcome::Kind::kLimited;
      out->decision = ReadDecision(in.getDecision());
      return Status::OK();
    case wire::PolicyOutcome::ERROR:
      out->kind = PolicyOutcome::Kind::kLimited;
      return ReadError(in.getError(), &out->error, &out->error_message);
  }
  return Status::Corruption("malformed frame: unknown policy outcome kind " +
                            std::to_string(static_cast<unsigned>(in.which())));
}

InspectReply ReadInspect(wire::InspectReply::Reader in) {
  InspectReply reply;
  reply.node_id = in.getNodeId();
  reply.found = in.getFound();
  reply.window_index = in.getWindowIndex();
  for (const auto node : in.getNodes()) {  // bounded by the traversal limit
    reply.nodes.push_back(
        {node.getNodeId(), node.getCurrent(), node.getPrevious(), node.getStamps()});
  }
  reply.bucket_level = in.getBucketLevel();
  reply.bucket_refilled_at_ms = in.getBucketRefilledAtMs();
  return reply;
}

Status ReadResponse(wire::Response::Reader in, Response* out) {
  out->id = in.getId();
  switch (in.which()) {
    case wire::Response::CHECK: {
      out->kind = ResponseKind::kCheck;
      const auto outcomes = in.getCheck();
      out->outcomes.resize(outcomes.size());  // bounded by the traversal limit
      for (unsigned i = 0; i < outcomes.size(); ++i) {
        Status status = ReadOutcome(outcomes[i], &out->outcomes[i]);
        if (!status.ok()) return status;
      }
      return Status::OK();
    }
    case wire::Response::STATS:
      out->kind = ResponseKind::kStats;
      out->stats = ReadStats(in.getStats());
      return Status::OK();
    case wire::Response::ERROR:
      out->kind = ResponseKind::kError;
      return ReadError(in.getError(), &out->error, &out->error_message);
    case wire::Response::POLICY_CHECK: {
      out->kind = ResponseKind::kPolicyCheck;
      const auto outcomes = in.getPolicyCheck();
      out->policy_outcomes.resize(outcomes.size());  // bounded by the traversal limit
      for (unsigned i = 0; i < outcomes.size(); ++i) {
        Status status = ReadPolicyOutcome(outcomes[i], &out->policy_outcomes[i]);
        if (!status.ok()) return status;
      }
      return Status::OK();
    }
    case wire::Response::INSPECT:
      out->kind = ResponseKind::kInspect;
      out->inspect = ReadInspect(in.getInspect());
      return Status::OK();
    case wire::Response::RESET:
      out->kind = ResponseKind::kReset;
      out->reset_erased = in.getReset();
      return Status::OK();
    case wire::Response::FORGET_MEMBER:
      out->kind = ResponseKind::kForgetMember;
      out->member_forgotten = in.getForgetMember();
      return Status::OK();
  }
  return Status::Corruption("malformed frame: unknown response kind " +
                            std::to_string(static_cast<unsigned>(in.which())));
}

// --- encoding ----------------------------------------------------------------

void WriteCheck(const Check& check, wire::Check::Builder out) {
  out.setKey(DataOf(check.key));
  out.setAlgorithm(static_cast<uint8_t>(check.spec.algorithm));
  out.setLimit(check.spec.limit);
  out.setWindowMs(check.spec.window_ms);
  out.setCost(check.cost);
}

// RequestKind::kUnknown has no member to write: it goes out as a union
// discriminant no server knows, which lets tests exercise kUnsupported.
void WriteUnknownKind(wire::Request::Builder out) {
  constexpr uint16_t kUnknownDiscriminant = 0xFFFF;
  const uint32_t offset =
      capnp::Schema::from<wire::Request>().getProto().getStruct().getDiscriminantOffset();
  kj::ArrayPtr<kj::byte> data = capnp::AnyStruct::Builder(std::move(out)).getDataSection();
  data[offset * 2] = kUnknownDiscriminant & 0xFF;  // little-endian uint16
  data[offset * 2 + 1] = kUnknownDiscriminant >> 8;
}

void WriteKeyLimit(const KeyLimit& limit, wire::KeyLimit::Builder out) {
  out.setKey(DataOf(limit.key));
  out.setAlgorithm(static_cast<uint8_t>(limit.spec.algorithm));
  out.setWindowMs(limit.spec.window_ms);
  out.setLocal(limit.local);
}

void WriteInspect(const InspectReply& reply, wire::InspectReply::Builder out) {
  out.setNodeId(reply.node_id);
  out.setFound(reply.found);
  out.setWindowIndex(reply.window_index);
  auto nodes = out.initNodes(static_cast<unsigned>(reply.nodes.size()));
  for (unsigned i = 0; i < nodes.size(); ++i) {
    nodes[i].setNodeId(reply.nodes[i].node_id);
    nodes[i].setCurrent(reply.nodes[i].current);
    nodes[i].setPrevious(reply.nodes[i].previous);
    nodes[i].setStamps(reply.nodes[i].stamps);
  }
  out.setBucketLevel(reply.bucket_level);
  out.setBucketRefilledAtMs(reply.bucket_refilled_at_ms);
}

void WriteDecision(const Decision& decision, wire::Decision::Builder out) {
  out.setAllowed(decision.allowed);
  out.setNeverAllowed(decision.never_allowed);
  out.setLimit(decision.limit);
  out.setRemaining(decision.remaining);
  out.setResetAfterMs(decision.reset_after_ms);
  out.setRetryAfterMs(decision.retry_after_ms);
}

void WriteStats(const StatsReply& stats, wire::StatsReply::Builder out) {
  out.setUptimeMs(stats.uptime_ms);
  out.setKeys(stats.keys);
  out.setChecks(stats.checks);
  out.setAllowed(stats.allowed);
  out.setDenied(stats.denied);
  out.setErrors(stats.errors);
  out.setConnectionsOpen(stats.connections_open);
  out.setConnectionsTotal(stats.connections_total);
  out.setRestoreMs(stats.restore_ms);
  out.setKeysRestored(stats.keys_restored);
  out.setStorageFlushes(stats.storage_flushes);
  out.setStorageKeysWritten(stats.storage_keys_written);
  out.setStorageWriteErrors(stats.storage_write_errors);
  out.setStorageDiskBytes(stats.storage_disk_bytes);
  out.setStorageCheckpoints(stats.storage_checkpoints);
  out.setStorageDegraded(stats.storage_degraded);
  out.setShadowDenied(stats.shadow_denied);
  out.setPolicyDomains(stats.policy_domains);
  out.setPolicyRules(stats.policy_rules);
  out.setPolicyReloads(stats.policy_reloads);
  out.setPolicyReloadFailures(stats.policy_reload_failures);
  out.setGrpcRequests(stats.grpc_requests);
  out.setGrpcOverLimit(stats.grpc_over_limit);
  out.setGrpcRefused(stats.grpc_refused);
  out.setRespCommands(stats.resp_commands);
  out.setRespThrottled(stats.resp_throttled);
  out.setRespErrors(stats.resp_errors);
  out.setHttpRequests(stats.http_requests);
  out.setHttpAllowed(stats.http_allowed);
  out.setHttpDenied(stats.http_denied);
  out.setHttpRefused(stats.http_refused);
  out.setRecoveryMs(stats.recovery_ms);
  out.setRecoveryPeersSynced(stats.recovery_peers_synced);
  out.setGossipRounds(stats.gossip_rounds);
  out.setGossipBytesSent(stats.gossip_bytes_sent);
  out.setGossipBytesReceived(stats.gossip_bytes_received);
  out.setGossipDeltaBytesSent(stats.gossip_delta_bytes_sent);
  out.setGossipDeltaEntriesSent(stats.gossip_delta_entries_sent);
  out.setGossipFullSyncsSent(stats.gossip_full_syncs_sent);
  out.setGossipFullSyncsReceived(stats.gossip_full_syncs_received);
  out.setGossipEntriesMerged(stats.gossip_entries_merged);
  out.setGossipEntriesRejected(stats.gossip_entries_rejected);
  out.setGossipSessionsRefused(stats.gossip_sessions_refused);
  out.setGossipDigestsSent(stats.gossip_digests_sent);
  out.setGossipRangesSent(stats.gossip_ranges_sent);
  auto links = out.initPeerLinks(static_cast<unsigned>(stats.peer_links.size()));
  for (unsigned i = 0; i < links.size(); ++i) {
    const PeerLinkStatus& link = stats.peer_links[i];
    links[i].setAddress(capnp::Text::Reader(link.address.data(), link.address.size()));
    links[i].setUp(link.up);
    links[i].setNodeId(link.node_id);
    links[i].setBytesSent(link.bytes_sent);
    links[i].setQueuedBytes(link.queued_bytes);
    links[i].setFullSyncsSent(link.full_syncs_sent);
    links[i].setConnects(link.connects);
    links[i].setLagMs(link.lag_ms);
  }
  auto nodes = out.initPeerNodes(static_cast<unsigned>(stats.peer_nodes.size()));
  for (unsigned i = 0; i < nodes.size(); ++i) {
    const PeerNodeStatus& node = stats.peer_nodes[i];
    nodes[i].setNodeId(node.node_id);
    nodes[i].setConnected(node.connected);
    nodes[i].setLastHeardMsAgo(node.last_heard_ms_ago);
    nodes[i].setFullSyncs(node.full_syncs);
    nodes[i].setEntriesMerged(node.entries_merged);
  }
  auto members = out.initMembers(static_cast<unsigned>(stats.members.size()));
  for (unsigned i = 0; i < members.size(); ++i) {
    const MemberStatus& member = stats.members[i];
    members[i].setNodeId(member.node_id);
    members[i].setAddress(capnp::Text::Reader(member.address.data(), member.address.size()));
    members[i].setState(static_cast<uint8_t>(member.state));
    members[i].setIncarnation(member.incarnation);
    members[i].setHeartbeat(member.heartbeat);
    members[i].setLastHeardMsAgo(member.last_heard_ms_ago);
    members[i].setLagMs(member.lag_ms);
    members[i].setClockOffsetKnown(member.clock_offset_known);
    members[i].setClockOffsetMs(member.clock_offset_ms);
  }
}

void WriteError(ErrorCode code, std::string_view message, wire::Error::Builder out) {
  out.setCode(static_cast<uint16_t>(code));
  out.setMessage(capnp::Text::Reader(message.data(), message.size()));
}

capnp::Text::Reader TextReader(std::string_view text) { return {text.data(), text.size()}; }

void WritePolicyCheck(const PolicyCheck& check, wire::PolicyCheck::Builder out) {
  out.setDomain(TextReader(check.domain));
  out.setHitsAddend(check.hits);
  auto descriptors = out.initDescriptors(static_cast<unsigned>(check.descriptor_sizes.size()));
  size_t next = 0;
  for (unsigned i = 0; i < descriptors.size(); ++i) {
    auto entries = descriptors[i].initEntries(check.descriptor_sizes[i]);
    for (unsigned j = 0; j < entries.size(); ++j, ++next) {
      entries[j].setKey(TextReader(check.entries[next].key));
      entries[j].setValue(TextReader(check.entries[next].value));
    }
  }
}

void WritePolicyOutcome(const PolicyOutcome& outcome, wire::PolicyOutcome::Builder out) {
  out.setShadowDenied(outcome.shadow_denied);
  out.setQuotaExceeded(outcome.quota_exceeded);
  out.setRule(TextReader(outcome.rule));
  out.setAlgorithm(static_cast<uint8_t>(outcome.spec.algorithm));
  out.setLimit(outcome.spec.limit);
  out.setWindowMs(outcome.spec.window_ms);
  switch (outcome.kind) {
    case PolicyOutcome::Kind::kNoLimit: out.setNoLimit(); return;
    case PolicyOutcome::Kind::kUnlimited: out.setUnlimited(); return;
    case PolicyOutcome::Kind::kLimited:
      if (outcome.error == ErrorCode::kOk) {
        WriteDecision(outcome.decision, out.initDecision());
      } else {
        WriteError(outcome.error, outcome.error_message, out.initError());
      }
      return;
  }
}

}  // namespace

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
    case ErrorCode::kMalformedFrame: return "malformed_frame";
    case ErrorCode::kFrameTooLarge: return "frame_too_large";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown_error_code";
}

std::string_view MemberStateName(MemberState state) {
  switch (state) {
    case MemberState::kAlive: return "alive";
    case MemberState::kSuspect: return "suspect";
    case MemberState::kDead: return "dead";
    case MemberState::kLeft: return "left";
  }
  return "unknown";
}

FrameScan ScanFrame(std::span<const std::byte> received, const FrameLimits& limits) {
  constexpr uint64_t kSmallestTable = 8;  // one segment: count word + one size word
  if (received.size() < 4) return Scanned(FrameScan::State::kNeedMore, kSmallestTable);
  // The first word is segment_count - 1. Adding 1 in 64 bits means 0xFFFFFFFF
  // is 2^32 segments (rejected below) rather than a wrapped count of 0.
  const uint64_t segments = uint64_t{LoadLittleEndian32(received, 0)} + 1;
  if (segments > limits.max_segments) {
    return Invalid(ErrorCode::kMalformedFrame, "frame claims " + std::to_string(segments) +
                                                   " segments, more than max_segments " +
                                                   std::to_string(limits.max_segments));
  }
  const uint64_t header_bytes = (4 * (1 + segments) + 7) / 8 * 8;
  if (header_bytes > limits.max_frame_bytes) return TooLarge(header_bytes, 0, limits);
  if (received.size() < header_bytes) return Scanned(FrameScan::State::kNeedMore, header_bytes);

  // At most (2^32 - 1) segments of at most 2^32 - 1 words: the sum fits in 64 bits.
  uint64_t body_words = 0;
  for (uint64_t i = 0; i < segments; ++i) body_words += LoadLittleEndian32(received, 4 + 4 * i);
  if (body_words > (limits.max_frame_bytes - header_bytes) / kWordBytes) {
    return TooLarge(header_bytes, body_words, limits);
  }
  const uint64_t frame_bytes = header_bytes + body_words * kWordBytes;
  if (received.size() < frame_bytes) return Scanned(FrameScan::State::kNeedMore, frame_bytes);
  return Scanned(FrameScan::State::kComplete, frame_bytes);
}

Status DecodeRequest(std::span<const std::byte> frame, const FrameLimits& limits,
                     Request* request) {
  Status status = ReadFrame<wire::Request>(frame, limits, [&](wire::Request::Reader root) {
    return ReadRequest(root, limits, request);
  });
  if (!status.ok()) *request = Request{};
  return status;
}

Status DecodeResponse(std::span<const std::byte> frame, const FrameLimits& limits,
                      Response* response) {
  Response decoded;
  Status status = ReadFrame<wire::Response>(
      frame, limits, [&](wire::Response::Reader root) { return ReadResponse(root, &decoded); });
  *response = status.ok() ? std::move(decoded) : Response{};
  return status;
}

void EncodeRequest(const Request& request, std::string* out) {
  capnp::MallocMessageBuilder message(ScratchSegment());
  auto root = message.initRoot<wire::Request>();
  root.setId(request.id);
  switch (request.kind) {
    case RequestKind::kCheck: {
      auto checks = root.initCheck(static_cast<unsigned>(request.checks.size()));
      for (unsigned i = 0; i < checks.size(); ++i) WriteCheck(request.checks[i], checks[i]);
      break;
    }
    case RequestKind::kStats: root.setStats(); break;
    case RequestKind::kPolicyCheck:
      WritePolicyCheck(request.policy_check, root.initPolicyCheck());
      break;
    case RequestKind::kInspect: WriteKeyLimit(request.key_limit, root.initInspect()); break;
    case RequestKind::kReset: WriteKeyLimit(request.key_limit, root.initReset()); break;
    case RequestKind::kForgetMember: root.setForgetMember(request.member_id); break;
    case RequestKind::kUnknown: WriteUnknownKind(root); break;
  }
  AppendFrame(message, out);
}

void EncodeResponse(const Response& response, std::string* out) {
  capnp::MallocMessageBuilder message(ScratchSegment());
  auto root = message.initRoot<wire::Response>();
  root.setId(response.id);
  switch (response.kind) {
    case ResponseKind::kCheck: {
      auto outcomes = root.initCheck(static_cast<unsigned>(response.outcomes.size()));
      for (unsigned i = 0; i < outcomes.size(); ++i) {
        const CheckOutcome& outcome = response.outcomes[i];
        if (outcome.error == ErrorCode::kOk) {
          WriteDecision(outcome.decision, outcomes[i].initDecision());
        } else {
          WriteError(outcome.error, outcome.error_message, outcomes[i].initError());
        }
      }
      break;
    }
    case ResponseKind::kStats: WriteStats(response.stats, root.initStats()); break;
    case ResponseKind::kError:
      WriteError(response.error, response.error_message, root.initError());
      break;
    case ResponseKind::kPolicyCheck: {
      auto outcomes = root.initPolicyCheck(static_cast<unsigned>(response.policy_outcomes.size()));
      for (unsigned i = 0; i < outcomes.size(); ++i) {
        WritePolicyOutcome(response.policy_outcomes[i], outcomes[i]);
      }
      break;
    }
    case ResponseKind::kInspect: WriteInspect(response.inspect, root.initInspect()); break;
    case ResponseKind::kReset: root.setReset(response.reset_erased); break;
    case ResponseKind::kForgetMember: root.setForgetMember(response.member_forgotten); break;
  }
  AppendFrame(message, out);
}

ErrorCode ErrorCodeFor(const Status& status) {
  switch (status.code()) {
    case Status::Code::kOk: return ErrorCode::kOk;
    case Status::Code::kInvalidArgument: return ErrorCode::kInvalidArgument;
    case Status::Code::kResourceExhausted: return ErrorCode::kResourceExhausted;
    case Status::Code::kCorruption: return ErrorCode::kMalformedFrame;
    case Status::Code::kUnavailable: return ErrorCode::kUnavailable;
    default: return ErrorCode::kInternal;
  }
}

}  // namespace tally::protocol
