// Unit tests of the peer protocol (protocol/peer_codec.h, peer_auth.h): packing replicated
// state, the control messages, hostile bytes, and that duplicated, replayed
// and reordered state messages change nothing once merged.
#include "protocol/peer_codec.h"

#include <algorithm>
#include <map>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>
#include <openssl/evp.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "protocol/peer_auth.h"

namespace tally {
namespace {

using protocol::PeerMessage;
using protocol::PeerMessageKind;
using protocol::PeerStateEncoder;

constexpr int64_t kNowMs = 1'700'000'000'000;
constexpr NodeId kSender = 0xDEADBEEFCAFE;

// std::string's buffer is not guaranteed 8-byte aligned: decode from words.
PeerMessage Decode(const std::string& frame) {
  std::vector<uint64_t> words((frame.size() + 7) / 8);
  std::memcpy(words.data(), frame.data(), frame.size());
  static std::vector<std::vector<uint64_t>> keep;  // the message's views point into it
  keep.push_back(std::move(words));
  PeerMessage message;
  const Status status = protocol::DecodePeerMessage(
      {reinterpret_cast<const std::byte*>(keep.back().data()), frame.size()}, {}, &message);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return message;
}

// Every key entry of the frames, decoded.
std::vector<KeySnapshot> DecodeAll(const std::vector<std::string>& frames) {
  std::vector<KeySnapshot> snapshots;
  for (const std::string& frame : frames) {
    const PeerMessage message = Decode(frame);
    REQUIRE(message.kind == PeerMessageKind::kState);
    for (const protocol::PeerClassView& view : message.classes) {
      uint64_t keys = 0;
      REQUIRE(protocol::DecodePeerClass(
                  view, kSender, [&](const KeySnapshot& s) { snapshots.push_back(s); }, &keys)
                  .ok());
    }
  }
  return snapshots;
}

KeySnapshot Counting(std::string key, uint64_t window_ms, int64_t window_index,
                     std::vector<GCounter::Slot> current, std::vector<GCounter::Slot> previous) {
  KeySnapshot snapshot;
  snapshot.key = std::move(key);
  snapshot.algorithm = Algorithm::kSlidingWindowCounter;
  snapshot.window_ms = window_ms;
  snapshot.counts.window_index = window_index;
  for (const auto& slot : current) snapshot.counts.current.MergeSlot(slot.node, slot.count);
  for (const auto& slot : previous) snapshot.counts.previous.MergeSlot(slot.node, slot.count);
  return snapshot;
}

KeySnapshot Log(std::string key, std::vector<NodeStamps> log) {
  KeySnapshot snapshot;
  snapshot.key = std::move(key);
  snapshot.algorithm = Algorithm::kSlidingWindowLog;
  snapshot.window_ms = 60'000;
  snapshot.log = std::move(log);
  return snapshot;
}

// A bucket of three nodes' slices over a base folded at base_slice.
KeySnapshot Bucket(std::string key, int64_t base_slice, uint64_t base_debt) {
  KeySnapshot snapshot;
  snapshot.key = std::move(key);
  snapshot.algorithm = Algorithm::kTokenBucket;
  snapshot.window_ms = 3'200;
  snapshot.bucket.capacity = 1'000'000'000;
  snapshot.bucket.base_slice = base_slice;
  snapshot.bucket.base_debt = base_debt;
  snapshot.bucket.nodes = {
      {2, {0, 5, UINT32_MAX}}, {9, {1}}, {kSender, std::vector<uint32_t>(24, 7)}};
  return snapshot;
}

// Counting and bucket keys come back exactly, the sender's slots included; a log comes
// back as entries per node that together hold every stamp; frames stay
// within the size asked for.
TEST_CASE("peer codec: state round-trips through frames of bounded size") {
  std::vector<KeySnapshot> written = {
      Counting("a", 1'000, kNowMs / 1'000, {{kSender, 5}, {7, 300}}, {{kSender, 1}}),
      Counting(std::string("b\0\xff", 3), 1'000, kNowMs / 1'000 - 1, {}, {{UINT64_MAX, 9}}),
      Counting("c", 60'000, kNowMs / 60'000, {{3, uint64_t{1} << 40}}, {}),
  };
  std::vector<LogStamp> many;
  for (int i = 0; i < 10'000; ++i) many.push_back({kNowMs - 20'000 + 2 * i, 1 + uint64_t(i % 5)});
  written.push_back(Log("log", {{2, many}, {kSender, {{kNowMs, 1'000'000'000}}}}));
  written.push_back(Bucket("bucket", kNowMs / 100 - 8, 12'345));
  written.push_back(Bucket("bucket 2", kNowMs / 100 - 16, UINT64_MAX));
  for (int i = 0; i < 3'000; ++i) {
    written.push_back(
        Counting("key " + std::to_string(i), 1'000, kNowMs / 1'000, {{kSender, 1}}, {}));
  }
  constexpr size_t kMaxFrameBytes = 16 * 1024;
  PeerStateEncoder encoder(kSender, /*full=*/true, kMaxFrameBytes);
  std::vector<std::string> frames;
  for (const KeySnapshot& snapshot : written) encoder.Add(snapshot, &frames);
  encoder.Finish(&frames);
  CHECK(frames.size() >= 3);  // ~60 KB of state in 16 KiB frames
  for (const std::string& frame : frames) CHECK(frame.size() <= kMaxFrameBytes + 21 * 1'024);
  CHECK(Decode(frames[0]).full);

  const std::vector<KeySnapshot> read = DecodeAll(frames);
  CHECK(encoder.entries() == read.size());
  std::map<std::string, KeySnapshot> counting;
  std::map<std::pair<std::string, NodeId>, std::vector<LogStamp>> stamps;
  for (const KeySnapshot& snapshot : read) {
    if (snapshot.algorithm == Algorithm::kSlidingWindowLog) {
      REQUIRE(snapshot.log.size() == 1);
      auto& into = stamps[{snapshot.key, snapshot.log[0].node}];
      into.insert(into.end(), snapshot.log[0].stamps.begin(), snapshot.log[0].stamps.end());
    } else {
      counting[snapshot.key] = snapshot;
    }
  }
  for (const KeySnapshot& snapshot : written) {
    CAPTURE(snapshot.key);
    if (snapshot.algorithm == Algorithm::kSlidingWindowLog) {
      for (const NodeStamps& node : snapshot.log)
        CHECK(stamps[{snapshot.key, node.node}] == node.stamps);
      continue;
    }
    REQUIRE(counting.count(snapshot.key) == 1);
    CHECK(counting[snapshot.key].counts == snapshot.counts);
    CHECK(counting[snapshot.key].bucket == snapshot.bucket);
    CHECK(counting[snapshot.key].window_ms == snapshot.window_ms);
  }
}

// A delta's counting key costs its key size plus a few bytes.
TEST_CASE("peer codec: a delta key-slot costs a few bytes") {
  PeerStateEncoder encoder(kSender, /*full=*/false, 1 << 20);
  std::vector<std::string> frames;
  constexpr int kKeys = 1'000;
  for (int i = 0; i < kKeys; ++i) {
    encoder.Add(Counting("user:" + std::to_string(100'000 + i), 60'000, kNowMs / 60'000,
                         {{kSender, uint64_t(i % 100)}}, {{kSender, 37}}),
                &frames);
  }
  encoder.Finish(&frames);
  REQUIRE(frames.size() == 1);
  const double per_key = static_cast<double>(frames[0].size()) / kKeys;
  MESSAGE("bytes per delta key (11-byte keys): " << per_key);
  CHECK(per_key < 11 + 10);
  CHECK_FALSE(Decode(frames[0]).full);
  CHECK_FALSE(Decode(frames[0]).relay);
}

// A delta for its receiver to relay says so, and nothing else changes.
TEST_CASE("peer codec: a delta to relay says so") {
  PeerStateEncoder encoder(kSender, /*full=*/false, 1 << 20, /*relay=*/true);
  std::vector<std::string> frames;
  const KeySnapshot written = Counting("user:1", 60'000, kNowMs / 60'000, {{kSender, 3}}, {});
  encoder.Add(written, &frames);
  encoder.Finish(&frames);
  REQUIRE(frames.size() == 1);
  const PeerMessage message = Decode(frames[0]);
  CHECK(message.relay);
  CHECK_FALSE(message.full);
  const std::vector<KeySnapshot> read = DecodeAll(frames);
  REQUIRE(read.size() == 1);
  CHECK(read[0].counts == written.counts);
}

// hello, seal, syncDone and heartbeat decode as themselves; a hello from
// node 0 or without a proper nonce is refused.
TEST_CASE("peer codec: control messages") {
  const std::string nonce = protocol::RandomNonce();
  std::string frame;
  protocol::EncodeHello(kSender, nonce, /*relays=*/true, /*incarnation=*/1'800'000'000'000, &frame);
  PeerMessage message = Decode(frame);
  CHECK(message.incarnation == 1'800'000'000'000);
  CHECK(message.kind == PeerMessageKind::kHello);
  CHECK(message.node_id == kSender);
  CHECK(message.nonce == nonce);
  CHECK(message.peer_version == protocol::kPeerProtocolVersion);
  CHECK(message.relays);
  frame.clear();
  protocol::EncodeHello(kSender, nonce, /*relays=*/false, 0, &frame);
  CHECK_FALSE(Decode(frame).relays);
  CHECK(Decode(frame).incarnation == 0);
  frame.clear();
  protocol::EncodeSeal(7, std::string(protocol::kMacBytes, 'm'), &frame);
  message = Decode(frame);
  CHECK(message.kind == PeerMessageKind::kSeal);
  CHECK(message.seq == 7);
  CHECK(message.mac == std::string(protocol::kMacBytes, 'm'));
  frame.clear();
  protocol::EncodeSyncDone(&frame);
  CHECK(Decode(frame).kind == PeerMessageKind::kSyncDone);
  frame.clear();
  protocol::EncodeResync(&frame);
  CHECK(Decode(frame).kind == PeerMessageKind::kResync);
  frame.clear();
  protocol::EncodeHeartbeat(&frame);
  CHECK(Decode(frame).kind == PeerMessageKind::kHeartbeat);
  frame.clear();
  const protocol::RangeDigest digests[] = {{0, 17}, {4'095, uint64_t{1} << 63}};
  protocol::EncodeDigests(1'800'000'000'000, digests, &frame);
  message = Decode(frame);
  CHECK(message.kind == PeerMessageKind::kDigests);
  CHECK(message.ref_ms == 1'800'000'000'000);
  CHECK(message.digests ==
        std::vector<protocol::RangeDigest>(std::begin(digests), std::end(digests)));
  frame.clear();
  const uint32_t want[] = {3, 4'095}, later[] = {7};
  protocol::EncodeRanges(want, later, &frame);
  message = Decode(frame);
  CHECK(message.kind == PeerMessageKind::kRanges);
  CHECK(message.want == std::vector<uint32_t>{3, 4'095});
  CHECK(message.later == std::vector<uint32_t>{7});
  // Decoded again into the same message (a session reuses one), lists start afresh.
  for (const bool ranges : {false, true}) {
    frame.clear();
    if (ranges) {
      protocol::EncodeRanges(want, later, &frame);
    } else {
      protocol::EncodeDigests(1'800'000'000'000, digests, &frame);
    }
    std::vector<uint64_t> words((frame.size() + 7) / 8);
    std::memcpy(words.data(), frame.data(), frame.size());
    for (int i = 0; i < 2; ++i) {
      REQUIRE(protocol::DecodePeerMessage(
                  {reinterpret_cast<const std::byte*>(words.data()), frame.size()}, {}, &message)
                  .ok());
    }
    CHECK(message.digests.size() == (ranges ? 0 : 2));
    CHECK(message.want.size() == (ranges ? 2 : 0));
    CHECK(message.later.size() == (ranges ? 1 : 0));
  }
  for (const auto& [node, bad_nonce] :
       {std::pair<NodeId, std::string>{0, nonce}, {kSender, "short"}}) {
    frame.clear();
    protocol::EncodeHello(node, bad_nonce, false, 0, &frame);
    std::vector<uint64_t> words((frame.size() + 7) / 8);
    std::memcpy(words.data(), frame.data(), frame.size());
    CHECK(protocol::DecodePeerMessage(
              {reinterpret_cast<const std::byte*>(words.data()), frame.size()}, {}, &message)
              .code() == Status::Code::kCorruption);
  }
}

// A hello from a build before token buckets were replicated carries no
// version: it reads as version 1, which a node of this version refuses by
// saying what to do.
TEST_CASE("peer codec: a hello without a version is version 1") {
  std::string frame;
  protocol::EncodeHello(7, protocol::RandomNonce(), false, 0, &frame,
                        /*peer_version=*/0);  // as then
  const PeerMessage message = Decode(frame);
  CHECK(message.kind == PeerMessageKind::kHello);
  CHECK(message.peer_version == 1);
  CHECK(protocol::PeerVersionMismatch(message.peer_version).find("version 1") != std::string::npos);
}

// Decodes a frame that must be corrupt.
bool DecodesAsCorrupt(const std::string& frame) {
  std::vector<uint64_t> words((frame.size() + 7) / 8);
  std::memcpy(words.data(), frame.data(), frame.size());
  PeerMessage decoded;
  return protocol::DecodePeerMessage(
             {reinterpret_cast<const std::byte*>(words.data()), frame.size()}, {}, &decoded)
             .code() == Status::Code::kCorruption;
}

// A members message carries every record whole; a member with node id 0,
// an address over kMaxMemberAddressBytes or a state past dead makes the frame corrupt.
TEST_CASE("peer codec: members") {
  const std::vector<protocol::MemberRecord> members = {
      {1, "10.0.0.1:7421", 1'800'000'000'000, 42, 1'800'000'000'123, false, false,
       protocol::MemberState::kSuspect},
      {kSender, "[::1]:7421", 7, 0, -5, true}};
  std::string frame;
  protocol::EncodeMembers(members, {}, nullptr, &frame);
  const PeerMessage message = Decode(frame);
  CHECK(message.losses.empty());
  CHECK_FALSE(message.probe.has_value());
  CHECK(message.members[0].state == protocol::MemberState::kSuspect);
  CHECK(message.members[1].state == protocol::MemberState::kAlive);
  CHECK(message.kind == PeerMessageKind::kMembers);
  REQUIRE(message.members.size() == 2);
  CHECK(message.members[0].address == "10.0.0.1:7421");
  CHECK(message.members[0].incarnation == 1'800'000'000'000);
  CHECK(message.members[0].heartbeat == 42);
  CHECK(message.members[0].heartbeat_wall_ms == 1'800'000'000'123);
  CHECK_FALSE(message.members[0].left);
  CHECK(message.members[1].node_id == kSender);
  CHECK(message.members[1].heartbeat_wall_ms == -5);
  CHECK(message.members[1].left);
  for (const protocol::MemberRecord& bad :
       {protocol::MemberRecord{0, "10.0.0.1:7421", 1, 1, 1, false},
        protocol::MemberRecord{2, std::string(protocol::kMaxMemberAddressBytes + 1, 'a'), 1, 1, 1,
                               false},
        protocol::MemberRecord{2, "10.0.0.1:7421", 1, 1, 1, false, false,
                               protocol::MemberState::kLeft}}) {
    frame.clear();
    protocol::EncodeMembers(std::span(&bad, 1), {}, nullptr, &frame);
    CHECK(DecodesAsCorrupt(frame));
  }
}

// A probe travels whole with the records it piggybacks; one from or to node 0 is corrupt.
TEST_CASE("peer codec: a probe rides on a members message") {
  const std::vector<protocol::MemberRecord> members = {{1, "10.0.0.1:7421", 5, 1, 5, false}};
  const protocol::Probe probe{77, 3, 4, true, 1'800'000'000'456};
  std::string frame;
  protocol::EncodeMembers(members, {}, &probe, &frame);
  const PeerMessage message = Decode(frame);
  REQUIRE(message.probe.has_value());
  CHECK(message.probe->seq == 77);
  CHECK(message.probe->origin == 3);
  CHECK(message.probe->target == 4);
  CHECK(message.probe->ack);
  CHECK(message.probe->wall_ms == 1'800'000'000'456);
  CHECK(message.members.size() == 1);
  for (const protocol::Probe& bad : {protocol::Probe{1, 0, 4}, protocol::Probe{1, 3, 0}}) {
    frame.clear();
    protocol::EncodeMembers({}, {}, &bad, &frame);
    CHECK(DecodesAsCorrupt(frame));
  }
}

// A members message carries the sender's crash losses whole, at most
// kMaxCrashLosses of them; a loss of node 0 or a negative time is corrupt.
TEST_CASE("peer codec: crash losses travel with the members") {
  const std::vector<protocol::MemberRecord> members = {{1, "10.0.0.1:7421", 5, 1, 5, false}};
  const std::vector<CrashLoss> losses = {{2, 1'800'000'000'000, 1'799'999'999'000}, {3, 7, 0}};
  std::string frame;
  protocol::EncodeMembers(members, losses, nullptr, &frame);
  CHECK(Decode(frame).losses == losses);
  frame.clear();
  const std::vector<CrashLoss> many(kMaxCrashLosses + 5, CrashLoss{2, 1, 1});
  protocol::EncodeMembers(members, many, nullptr, &frame);
  CHECK(Decode(frame).losses.size() == kMaxCrashLosses);
  for (const CrashLoss& bad : {CrashLoss{0, 1, 1}, CrashLoss{2, 1, -1}}) {
    frame.clear();
    protocol::EncodeMembers(members, std::span(&bad, 1), nullptr, &frame);
    CHECK(DecodesAsCorrupt(frame));
  }
}

// A seal verifies only with the same secret, both nonces, the same seq and
// the very bytes sealed.
TEST_CASE("peer auth: a seal binds secret, connection, sequence and bytes") {
  const std::string secret = "a cluster secret of some length";
  const std::string dialler = protocol::RandomNonce(), acceptor = protocol::RandomNonce();
  CHECK(dialler != acceptor);
  const protocol::PeerAuth auth(secret, dialler, acceptor);
  std::string frame;
  protocol::EncodeHeartbeat(&frame);
  const std::string mac = auth.Mac(5, protocol::FrameBytes(frame));
  CHECK(mac.size() == protocol::kMacBytes);
  CHECK(auth.Verify(5, protocol::FrameBytes(frame), mac));
  CHECK(protocol::PeerAuth(secret, dialler, acceptor).Verify(5, protocol::FrameBytes(frame), mac));
  CHECK_FALSE(auth.Verify(6, protocol::FrameBytes(frame), mac));  // replayed under another seq
  CHECK_FALSE(protocol::PeerAuth("another secret of some length", dialler, acceptor)
                  .Verify(5, protocol::FrameBytes(frame), mac));
  CHECK_FALSE(protocol::PeerAuth(secret, dialler, protocol::RandomNonce())
                  .Verify(5, protocol::FrameBytes(frame), mac));  // another connection
  std::string altered = frame;
  altered.back() ^= 1;
  CHECK_FALSE(auth.Verify(5, protocol::FrameBytes(altered), mac));
  CHECK_FALSE(auth.Verify(5, protocol::FrameBytes(frame), mac.substr(1)));
}

// Truncated, altered and random packed state never crashes and never reads
// past the bytes given: it decodes or it is Corruption. An unknown algorithm is refused.
TEST_CASE("peer codec: hostile packed state") {
  PeerStateEncoder encoder(kSender, false, 1 << 20);
  std::vector<std::string> frames;
  encoder.Add(Counting("k", 1'000, kNowMs / 1'000, {{kSender, 3}, {9, 4}}, {{2, 2}}), &frames);
  encoder.Add(Log("l", {{kSender, {{kNowMs - 5, 1}, {kNowMs, 2}}}}), &frames);
  encoder.Add(Bucket("b", kNowMs / 100 - 8, 5), &frames);
  encoder.Finish(&frames);
  const PeerMessage message = Decode(frames[0]);
  REQUIRE(message.classes.size() == 3);
  std::mt19937_64 rng(5);
  uint64_t keys = 0;
  const auto sink = [](const KeySnapshot&) {};
  for (const protocol::PeerClassView& view : message.classes) {
    const std::string valid(view.keys);
    for (size_t cut = 0; cut < valid.size(); ++cut) {
      std::string truncated = valid.substr(0, cut);  // a copy: nothing past it is readable
      protocol::PeerClassView shorter = view;
      shorter.keys = truncated;
      const Status status = protocol::DecodePeerClass(shorter, kSender, sink, &keys);
      CHECK((status.ok() || status.code() == Status::Code::kCorruption));
    }
    for (int round = 0; round < 2'000; ++round) {
      std::string bytes = round % 2 == 0 ? valid : std::string(rng() % 64, '\0');
      for (char& byte : bytes) {
        if (round % 2 == 1 || rng() % 8 == 0) byte = static_cast<char>(rng());
      }
      protocol::PeerClassView altered = view;
      altered.keys = bytes;
      const Status status = protocol::DecodePeerClass(altered, kSender, sink, &keys);
      CHECK((status.ok() || status.code() == Status::Code::kCorruption));
    }
  }
  protocol::PeerClassView unknown = message.classes[0];
  unknown.algorithm = static_cast<Algorithm>(kAlgorithmCount);
  CHECK(protocol::DecodePeerClass(unknown, kSender, sink, &keys).code() ==
        Status::Code::kCorruption);
}

// "k<n>". (GCC 12 warns falsely, -Wrestrict, on "k" + std::to_string(n) inlined here.)
std::string KeyName(uint64_t n) {
  std::string key = std::to_string(n);
  key.insert(key.begin(), 'k');
  return key;
}

// A delta's denied costs: the sender's, on the entries that have any, come
// back on those entries only; others' (or none) are not sent; a class
// without the field (an older sender) decodes with none.
TEST_CASE("peer codec: the sender's denied costs ride on the entries that have them") {
  PeerStateEncoder encoder(kSender, false, 1 << 20);
  std::vector<std::string> frames;
  const int64_t window = kNowMs / 1'000;
  std::vector<KeySnapshot> sent;
  for (uint64_t i = 0; i < 6; ++i) {
    sent.push_back(Counting(KeyName(i), 1'000, window, {{kSender, i + 1}}, {}));
  }
  sent[1].denied = {kSender, 7, 0};
  sent[2].denied = {9, 5, 5};  // another node's: not this sender's to send
  sent[4].denied = {kSender, 300, 1'000'000};
  sent[5].denied = {kSender, 0, 2};
  for (const KeySnapshot& snapshot : sent) encoder.Add(snapshot, &frames);
  encoder.Finish(&frames);
  const std::vector<KeySnapshot> got = DecodeAll(frames);
  REQUIRE(got.size() == sent.size());
  CHECK(got[0].denied == DeniedCost());
  CHECK(got[1].denied == DeniedCost{kSender, 7, 0});
  CHECK(got[2].denied == DeniedCost());
  CHECK(got[3].denied == DeniedCost());
  CHECK(got[4].denied == DeniedCost{kSender, 300, 1'000'000});
  CHECK(got[5].denied == DeniedCost{kSender, 0, 2});
  const PeerMessage message = Decode(frames[0]);
  REQUIRE(message.classes.size() == 1);
  CHECK(message.classes[0].denied.size() == 3 + 6 + 3);  // (1, 7, 0) (3, 300, 10^6) (1, 0, 2)
  protocol::PeerClassView older = message.classes[0];
  older.denied = {};
  protocol::PeerClassDecoder decoder(older, kSender);
  KeySnapshot snapshot;
  while (decoder.Next(&snapshot)) CHECK(snapshot.denied == DeniedCost());
  CHECK(decoder.status().ok());
}

// A bucket's denied costs ride on its entries alike (this version weighs
// them), beside a counting class's.
TEST_CASE("peer codec: a bucket's denied costs ride on its entries") {
  PeerStateEncoder encoder(kSender, false, 1 << 20);
  std::vector<std::string> frames;
  std::vector<KeySnapshot> sent;
  for (uint64_t i = 0; i < 3; ++i) sent.push_back(Bucket(KeyName(i), kNowMs / 100 - 8, 0));
  sent[1].denied = {kSender, 4, 9};
  sent.push_back(Counting("c", 1'000, kNowMs / 1'000, {{kSender, 1}}, {}));
  sent[3].denied = {kSender, 2, 0};
  for (const KeySnapshot& snapshot : sent) encoder.Add(snapshot, &frames);
  encoder.Finish(&frames);
  const std::vector<KeySnapshot> got = DecodeAll(frames);
  REQUIRE(got.size() == sent.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].key == sent[i].key);
    CHECK(got[i].denied == (i == 1 || i == 3 ? sent[i].denied : DeniedCost()));
  }
  const PeerMessage message = Decode(frames[0]);
  REQUIRE(message.classes.size() == 2);
  protocol::PeerClassView past_the_last = message.classes[0];  // the buckets' class
  REQUIRE(past_the_last.algorithm == Algorithm::kTokenBucket);
  const std::string listed_fourth("\x03\x01\x01", 3);  // of three entries
  past_the_last.denied = listed_fourth;
  uint64_t keys = 0;
  CHECK(protocol::DecodePeerClass(
            past_the_last, kSender, [](const KeySnapshot&) {}, &keys)
            .code() == Status::Code::kCorruption);
}

// Denied costs that do not fit a counting or bucket class are Corruption: a
// listed entry past the last one, an index step of 0 after the first, bytes
// cut short. A log's class ignores them (a later version may send them
// there).
TEST_CASE("peer codec: hostile denied costs") {
  PeerStateEncoder encoder(kSender, false, 1 << 20);
  std::vector<std::string> frames;
  encoder.Add(Counting("a", 1'000, kNowMs / 1'000, {{kSender, 3}}, {}), &frames);
  encoder.Add(Counting("b", 1'000, kNowMs / 1'000, {{kSender, 4}}, {}), &frames);
  encoder.Add(Log("l", {{kSender, {{kNowMs, 2}}}}), &frames);
  encoder.Finish(&frames);
  const PeerMessage message = Decode(frames[0]);
  REQUIRE(message.classes.size() == 2);
  const auto status_of = [](protocol::PeerClassView view, const std::string& denied) {
    view.denied = denied;
    uint64_t keys = 0;
    return protocol::DecodePeerClass(
        view, kSender, [](const KeySnapshot&) {}, &keys);
  };
  const protocol::PeerClassView& counting = message.classes[0];
  CHECK(status_of(counting, std::string("\x01\x05\x00", 3)).ok());
  CHECK(status_of(counting, std::string("\x00\x05\x00\x01\x01\x01", 6)).ok());
  CHECK(status_of(counting, std::string("\x02\x05\x00", 3)).code() == Status::Code::kCorruption);
  CHECK(status_of(counting, std::string("\x00\x05\x00\x00\x01\x01", 6)).code() ==
        Status::Code::kCorruption);
  CHECK(status_of(counting, std::string("\x01\x05", 2)).code() == Status::Code::kCorruption);
  CHECK(status_of(counting, std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x01\x01", 12))
            .code() == Status::Code::kCorruption);
  CHECK(status_of(message.classes[1], std::string("\x00\x01\x00", 3)).ok());
  CHECK(status_of(message.classes[1], std::string("\xff", 1)).ok());
}

// Three nodes' deltas and full syncs, merged in order into one limiter and
// shuffled with duplicates and replays into another: the same state.
TEST_CASE("peer codec: duplicated, replayed and reordered state changes nothing") {
  ManualClock clock(kNowMs);
  std::vector<std::tuple<NodeId, std::string>> frames;  // (sender, frame)
  std::mt19937_64 rng(11);
  const LimitSpec specs[] = {{Algorithm::kFixedWindow, 1'000, 10'000},
                             {Algorithm::kSlidingWindowCounter, 1'000, 10'000},
                             {Algorithm::kSlidingWindowLog, 1'000, 10'000},
                             {Algorithm::kTokenBucket, 1'000, 10'000}};
  std::vector<std::unique_ptr<Limiter>> senders;
  for (NodeId node : {11, 12, 13}) {
    Limiter::Options options{node, 100'000, &clock};
    options.replicate = true;
    senders.push_back(std::make_unique<Limiter>(options));
  }
  for (int round = 0; round < 30; ++round) {
    for (auto& sender : senders) {
      Decision decision;
      for (int i = 0; i < 20; ++i) {
        const LimitSpec& spec = specs[rng() % 4];
        REQUIRE(sender->Check(KeyName(rng() % 15), spec, 1 + rng() % 3, &decision).ok());
      }
      PeerStateEncoder encoder(sender->node_id(), round % 10 == 9, 2'048);
      std::vector<std::string> out;
      const auto add = [&](const KeySnapshot& s) { encoder.Add(s, &out); };
      if (round % 10 == 9) {
        for (size_t shard = 0; shard < Limiter::shard_count(); ++shard)
          sender->CollectReplica(shard, add);
      } else {
        sender->CollectGossip(add);
      }
      encoder.Finish(&out);
      for (std::string& frame : out) frames.emplace_back(sender->node_id(), std::move(frame));
    }
    clock.AdvanceMs(97);
  }
  const auto apply = [&](Limiter& limiter, const std::vector<size_t>& order) {
    for (size_t i : order) {
      const auto& [sender, frame] = frames[i];
      for (const protocol::PeerClassView& view : Decode(frame).classes) {
        uint64_t keys = 0;
        REQUIRE(
            protocol::DecodePeerClass(
                view, sender, [&](const KeySnapshot& s) { REQUIRE(limiter.Merge(s).ok()); }, &keys)
                .ok());
      }
    }
  };
  Limiter in_order(Limiter::Options{99, 100'000, &clock});
  Limiter shuffled(Limiter::Options{99, 100'000, &clock});
  std::vector<size_t> order(frames.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  apply(in_order, order);
  std::vector<size_t> messy = order;
  for (size_t i = 0; i < order.size(); i += 3) messy.push_back(order[i]);  // duplicates, replays
  std::shuffle(messy.begin(), messy.end(), rng);
  apply(shuffled, messy);
  for (int k = 0; k < 15; ++k) {
    for (const LimitSpec& spec : specs) {
      const std::string key = KeyName(k);
      KeySnapshot want, got, origin;
      const Status found = in_order.Read(key, spec, &want);
      CHECK(shuffled.Read(key, spec, &got).code() == found.code());
      CHECK(got.counts == want.counts);
      CHECK(got.log == want.log);
      CHECK(got.bucket == want.bucket);
      // And it is each sender's own state, nothing more.
      uint64_t total = 0, origin_total = 0;
      for (const auto& slot : want.counts.current.slots()) total += slot.count;
      for (auto& sender : senders) {
        if (sender->Read(key, spec, &origin).ok()) {
          origin_total += origin.counts.current.Get(sender->node_id());
        }
      }
      if (spec.algorithm != Algorithm::kSlidingWindowLog) CHECK(total == origin_total);
    }
  }
}

// The seal is the documented HMAC-SHA256 construction, byte for byte (what
// members of every build compute), for many messages on one connection.
TEST_CASE("peer auth: the seal is HMAC-SHA256 under the connection's key") {
  const auto hmac = [](std::string_view key, std::string_view data) {
    std::string mac(protocol::kMacBytes, '\0');
    size_t length = 0;
    char digest[] = "SHA256";
    REQUIRE(EVP_Q_mac(nullptr, "HMAC", nullptr, digest, nullptr, key.data(), key.size(),
                      reinterpret_cast<const unsigned char*>(data.data()), data.size(),
                      reinterpret_cast<unsigned char*>(mac.data()), mac.size(),
                      &length) != nullptr);
    REQUIRE(length == protocol::kMacBytes);
    return mac;
  };
  const std::string secret = "a cluster secret of some length";
  const std::string dialler(protocol::kNonceBytes, 'd'), acceptor(protocol::kNonceBytes, 'a');
  const std::string key = hmac(secret, "tally-peer-1" + dialler + acceptor);
  const protocol::PeerAuth auth(secret, dialler, acceptor);
  for (uint64_t seq : {uint64_t{0}, uint64_t{1}, uint64_t{0x0102030405060708}}) {
    const std::string frame = "frame " + std::to_string(seq);
    std::string seq_bytes;
    for (int shift = 56; shift >= 0; shift -= 8)
      seq_bytes.push_back(static_cast<char>(seq >> shift));
    CHECK(auth.Mac(seq, protocol::FrameBytes(frame)) == hmac(key, seq_bytes + frame));
  }
}

}  // namespace
}  // namespace tally
