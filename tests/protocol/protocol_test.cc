// Tests of protocol/codec.h: round trips, framing, and hostile input.
//
// Hand-built messages use the wire layout of protocol/tally.capnp (see
// `capnp compile -ocapnp protocol/tally.capnp`): Request is 2 data words +
// 1 pointer with the union tag in bytes 8..9; Check is 4 data words (algorithm
// byte 0, limit, windowMs, cost) + 1 pointer (key).
#include <bit>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <doctest/doctest.h>

#include "protocol/codec.h"

namespace tally::protocol {
namespace {

static_assert(std::endian::native == std::endian::little, "hand-built frames assume little-endian");

using Words = std::vector<uint64_t>;  // keeps frames 8-byte aligned

std::span<const std::byte> Bytes(const Words& words) { return std::as_bytes(std::span(words)); }

Words ToWords(std::string_view bytes) {
  Words words(bytes.size() / 8);
  std::memcpy(words.data(), bytes.data(), words.size() * 8);
  return words;
}

Words Flat(capnp::MessageBuilder& message) {
  const kj::Array<capnp::word> flat = capnp::messageToFlatArray(message);
  return ToWords({reinterpret_cast<const char*>(flat.begin()), flat.size() * 8});
}

Words Encoded(const Request& request) {
  std::string out;
  EncodeRequest(request, &out);
  return ToWords(out);
}
Words Encoded(const Response& response) {
  std::string out;
  EncodeResponse(response, &out);
  return ToWords(out);
}

// Raw words: a segment table (segment_count - 1, first segment's size), and
// struct / list pointers with offset 0 (the target follows the pointer).
uint64_t Table(uint32_t count_less_1, uint32_t size) { return uint64_t{size} << 32 | count_less_1; }
uint64_t StructPointer(uint64_t data, uint64_t pointers) { return data << 32 | pointers << 48; }
uint64_t ListPointer(uint64_t size_tag, uint64_t count) { return 1 | size_tag << 32 | count << 35; }

template <typename T>
void Put(kj::ArrayPtr<kj::byte> data, size_t offset, T value) {
  std::memcpy(data.begin() + offset, &value, sizeof value);
}

// A raw Request message: id, union tag 0 (check), a list of `count` checks of
// `data_words` data words (3 = an older client without the cost field).
capnp::AnyStruct::Builder RawRequest(capnp::MallocMessageBuilder& message, uint16_t data_words,
                                     unsigned count) {
  auto root = message.getRoot<capnp::AnyPointer>().initAsAnyStruct(2, 1);
  Put<uint64_t>(root.getDataSection(), 0, 77);
  auto checks = root.getPointerSection()[0].initAsListOfAnyStruct(data_words, 1, count);
  for (auto check : checks) {
    const kj::byte key[] = {'k', 0, 0xFF};
    check.getPointerSection()[0].setAs<capnp::Data>(capnp::Data::Reader(key, sizeof key));
    Put<uint8_t>(check.getDataSection(), 0, 3);
    Put<uint64_t>(check.getDataSection(), 8, 20);
    Put<uint64_t>(check.getDataSection(), 16, 4000);
  }
  return root;
}

// Overwrites the union tag of a single-segment frame's root (bytes 8..9 of
// its data section, for both Request and Response).
void SetRootTag(Words& frame, uint16_t tag) {
  const auto offset = static_cast<int32_t>(frame[1] & 0xFFFFFFFF) >> 2;
  std::memcpy(reinterpret_cast<char*>(&frame[2 + offset]) + 8, &tag, sizeof tag);
}

Status DecodeWords(const Words& frame, Request* request = nullptr, FrameLimits limits = {}) {
  Request ignored;
  return DecodeRequest(Bytes(frame), limits, request ? request : &ignored);
}

void CheckCorrupt(const Words& frame) {
  Status status;
  CHECK_NOTHROW(status = DecodeWords(frame));
  CHECK(status.code() == Status::Code::kCorruption);
  CHECK(status.message().starts_with("malformed frame: "));
}

Response RoundTrip(const Response& sent) {
  Response got;
  REQUIRE(DecodeResponse(Bytes(Encoded(sent)), {}, &got).ok());
  CHECK(got.id == sent.id);
  CHECK(got.kind == sent.kind);
  return got;
}

void CheckScanInvalid(const Words& frame, ErrorCode error, FrameLimits limits = {}) {
  const FrameScan scan = ScanFrame(Bytes(frame), limits);
  CHECK(scan.state == FrameScan::State::kInvalid);
  CHECK(scan.error == error);
  CHECK(scan.frame_bytes == 0);
  CHECK(!scan.error_message.empty());
}

Request SampleRequest() {
  Request request;
  request.id = 0xDEADBEEF12345678;
  const std::string_view binary("\0\xFF\x01key\0", 7);
  request.checks = {
      {"user:1", {Algorithm::kFixedWindow, 10, 1000}, 1},
      {binary, {Algorithm::kTokenBucket, kMaxLimit, kMaxWindowMs}, 0},
      {"", {static_cast<Algorithm>(200), 5, 60000}, 1'000'000},  // unknown algorithm survives
  };
  return request;
}

// Request round trip: several checks with binary keys, an unknown algorithm, cost 0 and large.
TEST_CASE("protocol: encode/decode request round trip") {
  Request sent = SampleRequest();
  const std::string long_key(kMaxKeyBytes, 'x');
  sent.checks.push_back({long_key, {Algorithm::kSlidingWindowLog, 3, 50}, 1});
  const Words frame = Encoded(sent);
  Request got;
  REQUIRE(DecodeWords(frame, &got).ok());
  CHECK(got.id == sent.id);
  CHECK(got.kind == RequestKind::kCheck);
  REQUIRE(got.checks.size() == sent.checks.size());
  for (size_t i = 0; i < sent.checks.size(); ++i) {
    const Check& a = got.checks[i];
    const Check& b = sent.checks[i];
    CHECK((a.key == b.key && a.spec.algorithm == b.spec.algorithm && a.spec.limit == b.spec.limit &&
           a.spec.window_ms == b.spec.window_ms && a.cost == b.cost));
  }
  // The key views point into the frame itself.
  const auto* begin = reinterpret_cast<const char*>(frame.data());
  CHECK(got.checks[0].key.data() >= begin);
  CHECK(got.checks[0].key.data() < begin + frame.size() * 8);
}

// Stats, empty-batch and unknown-kind requests round trip; unknown keeps its id.
TEST_CASE("protocol: encode/decode request kinds") {
  for (const RequestKind kind : {RequestKind::kStats, RequestKind::kCheck, RequestKind::kUnknown}) {
    Request sent;
    sent.id = 9;
    sent.kind = kind;
    Request got;
    REQUIRE(DecodeWords(Encoded(sent), &got).ok());
    CHECK(got.kind == kind);
    CHECK(got.id == 9);
    CHECK(got.checks.empty());
  }
}

// Inspect and reset name one limit (binary key, algorithm, window, local)
// and round-trip with their replies: every node's counts, the bucket, erased.
TEST_CASE("protocol: inspect and reset round-trip") {
  const std::string_view binary("\0\xFFk", 3);
  for (const RequestKind kind : {RequestKind::kInspect, RequestKind::kReset}) {
    Request sent;
    sent.id = 3;
    sent.kind = kind;
    sent.key_limit = {binary, {Algorithm::kSlidingWindowLog, 0, 60'000}, true};
    const Words frame = Encoded(sent);  // the decoded key points into it
    Request got;
    REQUIRE(DecodeWords(frame, &got).ok());
    CHECK(got.kind == kind);
    CHECK(got.key_limit.key == binary);
    CHECK(got.key_limit.spec.algorithm == Algorithm::kSlidingWindowLog);
    CHECK(got.key_limit.spec.window_ms == 60'000);
    CHECK(got.key_limit.local);
  }
  Response inspect;
  inspect.id = 4;
  inspect.kind = ResponseKind::kInspect;
  inspect.inspect = {9, true, -2, {{1, 2, 3, 4}, {~0ULL, 5, 6, 7}}, 8, -9};
  const Response got = RoundTrip(inspect);
  CHECK(got.inspect.node_id == 9);
  CHECK(got.inspect.found);
  CHECK(got.inspect.window_index == -2);
  REQUIRE(got.inspect.nodes.size() == 2);
  CHECK(got.inspect.nodes[1].node_id == ~0ULL);
  CHECK(got.inspect.nodes[1].current == 5);
  CHECK(got.inspect.nodes[1].previous == 6);
  CHECK(got.inspect.nodes[1].stamps == 7);
  CHECK(got.inspect.bucket_level == 8);
  CHECK(got.inspect.bucket_refilled_at_ms == -9);
  Response reset;
  reset.kind = ResponseKind::kReset;
  reset.reset_erased = true;
  CHECK(RoundTrip(reset).reset_erased);
}

// Forgetting a member names it by id, and the reply says whether it was counted.
TEST_CASE("protocol: forget member round-trips") {
  Request sent;
  sent.id = 5;
  sent.kind = RequestKind::kForgetMember;
  sent.member_id = ~0ULL;
  const Words frame = Encoded(sent);
  Request got;
  REQUIRE(DecodeWords(frame, &got).ok());
  CHECK(got.kind == RequestKind::kForgetMember);
  CHECK(got.member_id == ~0ULL);
  Response forgot;
  forgot.kind = ResponseKind::kForgetMember;
  forgot.member_forgotten = true;
  const Response answer = RoundTrip(forgot);
  CHECK(answer.kind == ResponseKind::kForgetMember);
  CHECK(answer.member_forgotten);
}

// A Check without a cost on the wire (absent or zero field) decodes with cost 1.
TEST_CASE("protocol: decode request cost defaults to 1") {
  for (const uint16_t data_words : {3, 4}) {  // 3: an older client's Check without the field
    capnp::MallocMessageBuilder message;
    RawRequest(message, data_words, 2);
    const Words frame = Flat(message);  // outlives the key views
    Request got;
    REQUIRE(DecodeWords(frame, &got).ok());
    CHECK(got.id == 77);
    REQUIRE(got.checks.size() == 2);
    CHECK(got.checks[1].key == std::string_view("k\0\xFF", 3));
    CHECK(got.checks[1].spec.algorithm == Algorithm::kTokenBucket);
    CHECK(got.checks[1].spec.limit == 20);
    CHECK(got.checks[1].spec.window_ms == 4000);
    CHECK(got.checks[1].cost == 1);
  }
}

// Response round trip: decisions and per-check errors, stats, and a request-level error.
TEST_CASE("protocol: encode/decode response round trip") {
  Response sent;
  sent.id = 42;
  sent.outcomes.resize(3);
  sent.outcomes[0].decision = {true, false, 10, 9, 1000, 0};
  sent.outcomes[1] = {ErrorCode::kInvalidArgument, "key is empty", {}};
  sent.outcomes[2].decision = {false, true, 5, 0, 7, 0};
  Response got = RoundTrip(sent);
  REQUIRE(got.outcomes.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(got.outcomes[i].error == sent.outcomes[i].error);
    CHECK(got.outcomes[i].error_message == sent.outcomes[i].error_message);
    CHECK(got.outcomes[i].decision == sent.outcomes[i].decision);
  }

  Response stats;
  stats.kind = ResponseKind::kStats;
  stats.stats.uptime_ms = 1;
  stats.stats.errors = 6;
  stats.stats.connections_total = 8;
  stats.stats.gossip_delta_entries_sent = 9;
  stats.stats.peer_links = {{"127.0.0.1:7421", true, 42, 100, 5, 2, 3}};
  stats.stats.peer_nodes = {{42, true, 17, 2, 1000}, {43, false, 9000, 0, 0}};
  stats.stats.members = {{42, "127.0.0.1:7421", protocol::MemberState::kDead, 5, 6, 3000, -2}};
  got = RoundTrip(stats);
  CHECK(got.stats.uptime_ms == 1);
  CHECK(got.stats.errors == 6);
  CHECK(got.stats.connections_total == 8);
  CHECK(got.stats.gossip_delta_entries_sent == 9);
  REQUIRE(got.stats.peer_links.size() == 1);
  CHECK(got.stats.peer_links[0].address == "127.0.0.1:7421");
  CHECK(got.stats.peer_links[0].node_id == 42);
  CHECK(got.stats.peer_links[0].connects == 3);
  REQUIRE(got.stats.peer_nodes.size() == 2);
  CHECK(got.stats.peer_nodes[1].node_id == 43);
  CHECK_FALSE(got.stats.peer_nodes[1].connected);
  CHECK(got.stats.peer_nodes[0].entries_merged == 1000);
  REQUIRE(got.stats.members.size() == 1);
  CHECK(got.stats.members[0].address == "127.0.0.1:7421");
  CHECK(got.stats.members[0].state == protocol::MemberState::kDead);
  CHECK(got.stats.members[0].incarnation == 5);
  CHECK(got.stats.members[0].heartbeat == 6);
  CHECK(got.stats.members[0].last_heard_ms_ago == 3000);
  CHECK(got.stats.members[0].lag_ms == -2);

  Response error;
  error.kind = ResponseKind::kError;
  error.error = ErrorCode::kUnsupported;
  error.error_message = "unknown request kind";
  got = RoundTrip(error);
  CHECK(got.error == ErrorCode::kUnsupported);
  CHECK(got.error_message == "unknown request kind");
}

// Pipelining: frames concatenated in one buffer are scanned and decoded one after another.
TEST_CASE("protocol: scan pipelined frames") {
  std::string stream;
  for (uint64_t id = 1; id <= 3; ++id) {
    Request request = SampleRequest();
    request.id = id;
    request.checks.resize(id);
    EncodeRequest(request, &stream);
  }
  const Words words = ToWords(stream);
  std::span<const std::byte> rest = Bytes(words);
  for (uint64_t id = 1; id <= 3; ++id) {
    const FrameScan scan = ScanFrame(rest, {});
    REQUIRE(scan.state == FrameScan::State::kComplete);
    Request got;
    REQUIRE(DecodeRequest(rest.first(scan.frame_bytes), {}, &got).ok());
    CHECK(got.id == id);
    CHECK(got.checks.size() == id);
    rest = rest.subspan(scan.frame_bytes);
  }
  CHECK(rest.empty());
  CHECK(ScanFrame(rest, {}).state == FrameScan::State::kNeedMore);
}

// Every strict prefix of a multi-segment frame needs more, with a non-decreasing target.
TEST_CASE("protocol: scan every prefix of a frame needs more") {
  capnp::MallocMessageBuilder message(4, capnp::AllocationStrategy::FIXED_SIZE);
  RawRequest(message, 4, 3);
  REQUIRE(message.getSegmentsForOutput().size() > 2);
  const Words frame = Flat(message);
  const std::span<const std::byte> bytes = Bytes(frame);
  size_t previous = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    const FrameScan scan = ScanFrame(bytes.first(n), {});
    REQUIRE(scan.state == FrameScan::State::kNeedMore);
    CHECK(scan.frame_bytes > n);
    CHECK(scan.frame_bytes >= previous);
    previous = scan.frame_bytes;
  }
  const FrameScan scan = ScanFrame(bytes, {});
  CHECK(scan.state == FrameScan::State::kComplete);
  CHECK(scan.frame_bytes == bytes.size());
  Request got;
  REQUIRE(DecodeWords(frame, &got).ok());
  CHECK(got.checks.size() == 3);
}

// Segment counts of 2^32 (first word 0xFFFFFFFF) or above max_segments are malformed.
TEST_CASE("protocol: scan rejects bad segment counts") {
  CheckScanInvalid({Table(0xFFFFFFFF, 0)}, ErrorCode::kMalformedFrame);
  CheckScanInvalid({Table(16, 0)}, ErrorCode::kMalformedFrame);  // 17 segments
  CHECK(ScanFrame(Bytes({Table(15, 0)}), {}).state == FrameScan::State::kNeedMore);
  CHECK(DecodeWords({Table(0xFFFFFFFF, 0)}).code() == Status::Code::kCorruption);
}

// Claimed sizes over max_frame_bytes are refused from the table alone; the limit is inclusive.
TEST_CASE("protocol: scan frame size against max_frame_bytes") {
  CheckScanInvalid({Table(0, 0x80000000)}, ErrorCode::kFrameTooLarge);  // 2^31 words, 8 bytes sent
  const FrameScan huge = ScanFrame(Bytes({Table(0, 0x80000000)}), {});
  CHECK(huge.error_message.find("17179869192") != std::string::npos);
  CHECK(huge.error_message.find("1048576") != std::string::npos);
  Words many(9, 0xFFFFFFFFFFFFFFFF);  // 16 segments of 2^32 - 1 words each
  many[0] = Table(15, 0xFFFFFFFF);
  CheckScanInvalid(many, ErrorCode::kFrameTooLarge);

  FrameLimits limits;
  limits.max_frame_bytes = 64;
  const FrameScan at = ScanFrame(Bytes({Table(0, 7)}), limits);  // 8 + 56 bytes
  CHECK(at.state == FrameScan::State::kNeedMore);
  CHECK(at.frame_bytes == 64);
  CheckScanInvalid({Table(0, 8)}, ErrorCode::kFrameTooLarge, limits);  // 72 bytes

  const Words frame = Encoded(SampleRequest());
  limits.max_frame_bytes = frame.size() * 8;
  CHECK(DecodeWords(frame, nullptr, limits).ok());
  limits.max_frame_bytes -= 1;
  CheckScanInvalid(frame, ErrorCode::kFrameTooLarge, limits);
  CHECK(DecodeWords(frame, nullptr, limits).code() == Status::Code::kCorruption);
}

// Decode requires exactly one aligned frame: trailing bytes, truncation and misalignment fail.
TEST_CASE("protocol: decode rejects frames not delimited by ScanFrame") {
  Words frame = Encoded(SampleRequest());
  Request got;
  const auto bytes = Bytes(frame);
  CHECK(DecodeRequest(bytes.first(bytes.size() - 8), {}, &got).code() == Status::Code::kCorruption);
  CHECK(DecodeRequest(bytes.subspan(4, 16), {}, &got).code() == Status::Code::kInvalidArgument);
  frame.push_back(0);
  CHECK(DecodeWords(frame, &got).code() == Status::Code::kCorruption);
  CHECK(got.id == 0);
}

// Valid frames of a different shape (wrong pointer kinds, garbage after the table) are corruption.
TEST_CASE("protocol: decode of another schema is corruption, never a throw") {
  capnp::MallocMessageBuilder struct_for_list;
  auto root = struct_for_list.getRoot<capnp::AnyPointer>().initAsAnyStruct(2, 1);
  root.getPointerSection()[0].initAsAnyStruct(1, 1);  // a struct where List(Check) belongs
  capnp::MallocMessageBuilder struct_for_key;
  auto checks = RawRequest(struct_for_key, 4, 1).getPointerSection()[0];
  auto check = checks.initAsListOfAnyStruct(4, 1, 1)[0];
  check.getPointerSection()[0].initAsAnyStruct(1, 0);  // a struct where the Data key belongs
  const Words frames[] = {
      Flat(struct_for_list),
      Flat(struct_for_key),
      {Table(0, 2), ListPointer(5, 1), 0},   // root is a list, not a struct
      {Table(0, 2), 0xFFFFFFFFFFFFFFFA, 0},  // far pointer to a missing segment
      {Table(0, 1), StructPointer(4, 4)},    // root struct past the segment end
      {Table(0, 3), 0x0123456789ABCDEF, 0xFEDCBA9876543210, 0x5555555555555555},
  };
  for (const Words& frame : frames) CheckCorrupt(frame);
}

// A list pointer claiming a huge element count inside a small frame is corruption.
TEST_CASE("protocol: decode traversal-limit abuse is corruption") {
  // Request with a check list of 2^29 - 1 zero-sized structs: no bounds error,
  // only the traversal limit catches the amplification.
  const Words zero_sized = {Table(0, 5), StructPointer(2, 1), 1,
                            0,           ListPointer(7, 0),   uint64_t{(1u << 29) - 1} << 2};
  // A check whose key claims 2^29 - 1 bytes.
  const Words long_key = {Table(0, 10),
                          StructPointer(2, 1),
                          1,
                          0,
                          ListPointer(7, 5),
                          StructPointer(4, 1) | 1 << 2,  // 1 element
                          0,
                          0,
                          0,
                          0,
                          ListPointer(2, (1u << 29) - 1)};
  CheckCorrupt(zero_sized);
  CheckCorrupt(long_key);
}

// An unknown union member: a request decodes as kUnknown, a response is corruption (as is an
// Error member carrying kOk).
TEST_CASE("protocol: decode unknown union members") {
  Request request;
  request.id = 5;
  Words frame = Encoded(request);
  SetRootTag(frame, 7);
  Request got;
  REQUIRE(DecodeWords(frame, &got).ok());
  CHECK(got.kind == RequestKind::kUnknown);
  CHECK(got.id == 5);

  Response response;
  response.kind = ResponseKind::kStats;
  frame = Encoded(response);
  SetRootTag(frame, 9);
  Response decoded;
  const Status status = DecodeResponse(Bytes(frame), {}, &decoded);
  CHECK(status.code() == Status::Code::kCorruption);
  CHECK(status.message().find("unknown response kind 9") != std::string_view::npos);

  response.kind = ResponseKind::kError;  // an Error member with code 0 (kOk) is no error
  frame = Encoded(response);
  CHECK(DecodeResponse(Bytes(frame), {}, &decoded).code() == Status::Code::kCorruption);
}

// A check by policy and its outcomes survive encoding and decoding, every outcome kind included.
TEST_CASE("protocol: policy checks and their outcomes round-trip") {
  Request request;
  request.id = 11;
  request.kind = RequestKind::kPolicyCheck;
  request.policy_check.domain = "edge";
  request.policy_check.hits = 3;
  request.policy_check.entries = {{"remote_address", "10.0.0.1"}, {"user", "a"}, {"path", "/x"}};
  request.policy_check.descriptor_sizes = {1, 2};
  Words frame = Encoded(request);
  Request got;
  REQUIRE(DecodeWords(frame, &got).ok());
  CHECK(got.kind == RequestKind::kPolicyCheck);
  CHECK(got.policy_check.domain == "edge");
  CHECK(got.policy_check.hits == 3);
  CHECK(got.policy_check.descriptor_sizes == std::vector<uint32_t>{1, 2});
  REQUIRE(got.policy_check.entries.size() == 3);
  CHECK(got.policy_check.entries[2].key == "path");
  CHECK(got.policy_check.entries[2].value == "/x");

  Response response;
  response.id = 11;
  response.kind = ResponseKind::kPolicyCheck;
  response.policy_outcomes.resize(4);
  response.policy_outcomes[1].kind = PolicyOutcome::Kind::kUnlimited;
  response.policy_outcomes[1].rule = "edge.path";
  PolicyOutcome& limited = response.policy_outcomes[2];
  limited.kind = PolicyOutcome::Kind::kLimited;
  limited.rule = "per_ip";
  limited.spec = LimitSpec{Algorithm::kSlidingWindowCounter, 10, 60'000};
  limited.decision =
      Decision{.allowed = false, .limit = 10, .reset_after_ms = 5, .retry_after_ms = 7};
  limited.shadow_denied = true;
  response.policy_outcomes[3].kind = PolicyOutcome::Kind::kLimited;
  response.policy_outcomes[3].quota_exceeded = true;  // the field travels whatever the kind
  response.policy_outcomes[3].error = ErrorCode::kResourceExhausted;
  response.policy_outcomes[3].error_message = "full";
  frame = Encoded(response);
  Response decoded;
  REQUIRE(DecodeResponse(Bytes(frame), {}, &decoded).ok());
  CHECK(decoded.kind == ResponseKind::kPolicyCheck);
  REQUIRE(decoded.policy_outcomes.size() == 4);
  CHECK(decoded.policy_outcomes[0].kind == PolicyOutcome::Kind::kNoLimit);
  CHECK(decoded.policy_outcomes[1].kind == PolicyOutcome::Kind::kUnlimited);
  CHECK(decoded.policy_outcomes[1].rule == "edge.path");
  CHECK(decoded.policy_outcomes[2].decision == limited.decision);
  CHECK(decoded.policy_outcomes[2].shadow_denied);
  CHECK_FALSE(decoded.policy_outcomes[2].quota_exceeded);
  CHECK(decoded.policy_outcomes[3].quota_exceeded);
  CHECK(decoded.policy_outcomes[2].spec.algorithm == Algorithm::kSlidingWindowCounter);
  CHECK(decoded.policy_outcomes[2].spec.window_ms == 60'000);
  CHECK(decoded.policy_outcomes[3].error == ErrorCode::kResourceExhausted);
  CHECK(decoded.policy_outcomes[3].error_message == "full");
}

// A policy check with more entries than the per-request maximum is refused before decoding them.
TEST_CASE("protocol: a policy check's entries are bounded") {
  Request request;
  request.kind = RequestKind::kPolicyCheck;
  request.policy_check.domain = "d";
  request.policy_check.entries.assign(11, DescriptorEntry{"k", "v"});
  request.policy_check.descriptor_sizes = {11};
  const Words frame = Encoded(request);
  FrameLimits limits;
  limits.max_checks_per_request = 10;
  Request got;
  const Status status = DecodeRequest(Bytes(frame), limits, &got);
  CHECK(status.code() == Status::Code::kInvalidArgument);
  CHECK(status.message().find("11 entries") != std::string_view::npos);
}

// Random and mutated bytes through ScanFrame + Decode* never crash or throw.
TEST_CASE("protocol: decode random bytes never throws") {
  std::mt19937_64 rng(20240611);
  const Words valid = Encoded(SampleRequest());
  int decoded_ok = 0;
  for (int i = 0; i < 3000; ++i) {
    Words frame;
    if (i % 3 == 2) {  // a valid request with a few bits flipped
      frame = valid;
      for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
        frame[1 + rng() % (frame.size() - 1)] ^= uint64_t{1} << (rng() % 64);
      }
    } else {  // random words, half of them behind a valid one-segment table
      frame.resize(1 + rng() % 32);
      for (auto& word : frame) word = rng();
      if (i % 3 == 1) frame[0] = Table(0, static_cast<uint32_t>(frame.size() - 1));
    }
    const FrameScan scan = ScanFrame(Bytes(frame), {});
    if (scan.state != FrameScan::State::kComplete) continue;
    const auto bytes = Bytes(frame).first(scan.frame_bytes);
    Request request;
    Response response;
    bool threw = false;
    try {
      decoded_ok += DecodeRequest(bytes, {}, &request).ok();
      decoded_ok += DecodeResponse(bytes, {}, &response).ok();
    } catch (...) {
      threw = true;
    }
    REQUIRE_FALSE(threw);
  }
  CHECK(decoded_ok > 0);  // the mutations are not all rejected: the decoder was exercised
}

// Engine statuses map to wire error codes, and every code has a name.
TEST_CASE("protocol: error codes for statuses") {
  CHECK(ErrorCodeFor(Status::OK()) == ErrorCode::kOk);
  CHECK(ErrorCodeFor(Status::InvalidArgument("x")) == ErrorCode::kInvalidArgument);
  CHECK(ErrorCodeFor(Status::ResourceExhausted("x")) == ErrorCode::kResourceExhausted);
  CHECK(ErrorCodeFor(Status::Corruption("x")) == ErrorCode::kMalformedFrame);
  CHECK(ErrorCodeFor(Status::Unavailable("x")) == ErrorCode::kUnavailable);
  CHECK(ErrorCodeFor(Status::IOError("x")) == ErrorCode::kInternal);
  CHECK(ErrorCodeName(ErrorCode::kFrameTooLarge) == "frame_too_large");
  CHECK(ErrorCodeName(static_cast<ErrorCode>(99)) == "unknown_error_code");
}

}  // namespace
}  // namespace tally::protocol
