#include "protocol/peer_codec.h"

#include <algorithm>
#include <limits>

#include "node/common/varint.h"
#include "protocol/framing.h"
#include "protocol/peer_auth.h"
#include "protocol/tally.capnp.h"

namespace tally::protocol {
namespace {

static_assert(kPeerProtocolVersion == wire::PEER_PROTOCOL_VERSION);

uint64_t ZigZag(int64_t value) {
  return (static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63);
}
int64_t UnZigZag(uint64_t value) {
  return static_cast<int64_t>(value >> 1) ^ -static_cast<int64_t>(value & 1);
}

// `base` moved by a zigzag-encoded step. Wraps (as unsigned arithmetic does)
// rather than overflow on a nonsensical step: the engine then refuses or
// expires the index (a window or a bucket's base slice).
int64_t Stepped(int64_t base, uint64_t step) {
  return static_cast<int64_t>(static_cast<uint64_t>(base) + static_cast<uint64_t>(UnZigZag(step)));
}

void PutNode(NodeId node, NodeId sender, std::string* out) {
  PutVarint(node == sender ? 0 : node, out);
}

void PutKey(std::string_view key, std::string* out) {
  PutVarint(key.size(), out);
  out->append(key);
}

void PutCounter(const GCounter& counter, NodeId sender, std::string* out) {
  PutVarint(counter.slots().size(), out);
  for (const GCounter::Slot& slot : counter.slots()) {
    PutNode(slot.node, sender, out);
    PutVarint(slot.count, out);
  }
}

// Reads a count that announces that many items of at least `min_item_bytes`
// each: false when the bytes left cannot hold them.
bool GetCount(std::string_view* in, size_t min_item_bytes, uint64_t* count) {
  return GetVarint(in, count) && *count <= in->size() / min_item_bytes;
}

bool GetNode(std::string_view* in, NodeId sender, NodeId* node) {
  if (!GetVarint(in, node)) return false;
  if (*node == 0) *node = sender;
  return true;
}

bool GetKey(std::string_view* in, std::string* key) {
  uint64_t size = 0;
  if (!GetVarint(in, &size) || size > in->size()) return false;
  key->assign(in->substr(0, size));
  in->remove_prefix(size);
  return true;
}

bool GetCounter(std::string_view* in, NodeId sender, GCounter* counter) {
  counter->Clear();
  uint64_t slots = 0;
  if (!GetCount(in, 2, &slots)) return false;
  for (uint64_t i = 0; i < slots; ++i) {
    NodeId node = 0;
    uint64_t count = 0;
    if (!GetNode(in, sender, &node) || !GetVarint(in, &count)) return false;
    counter->MergeSlot(node, count);
  }
  return true;
}

bool GetStamps(std::string_view* in, std::vector<LogStamp>* stamps) {
  stamps->clear();
  uint64_t count = 0;
  if (!GetCount(in, 2, &count)) return false;
  int64_t at_ms = 0;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t step = 0, cost = 0;
    if (!GetVarint(in, &step) || !GetVarint(in, &cost)) return false;
    if (i > 0 && step == 0) return false;  // strictly increasing times
    if (step > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() - at_ms)) return false;
    at_ms += static_cast<int64_t>(step);
    stamps->push_back({at_ms, cost});
  }
  return true;
}

bool IsLog(Algorithm algorithm) { return algorithm == Algorithm::kSlidingWindowLog; }

// A bucket's state after its key; *base_slice is the previous key's base on entry.
bool GetBucket(std::string_view* in, NodeId sender, int64_t* base_slice, BucketSlices* bucket) {
  uint64_t step = 0, nodes = 0;
  if (!GetVarint(in, &bucket->capacity) || !GetVarint(in, &step) ||
      !GetVarint(in, &bucket->base_debt) || !GetCount(in, 2, &nodes)) {
    return false;
  }
  *base_slice = Stepped(*base_slice, step);
  bucket->base_slice = *base_slice;
  bucket->nodes.resize(nodes);
  for (NodeSlices& node : bucket->nodes) {
    uint64_t slices = 0;
    if (!GetNode(in, sender, &node.node) || !GetCount(in, 1, &slices) ||
        slices > static_cast<uint64_t>(kBucketMaxSlices)) {
      return false;
    }
    node.counts.resize(slices);
    for (uint32_t& count : node.counts) {
      uint64_t value = 0;
      if (!GetVarint(in, &value) || value > std::numeric_limits<uint32_t>::max()) return false;
      count = static_cast<uint32_t>(value);
    }
  }
  return true;
}

}  // namespace

Status DecodePeerMessage(std::span<const std::byte> frame, const FrameLimits& limits,
                         PeerMessage* message) {
  message->classes.clear();
  message->members.clear();
  message->losses.clear();
  message->digests.clear();
  message->want.clear();
  message->later.clear();
  return ReadFrame<wire::PeerMessage>(frame, limits, [&](wire::PeerMessage::Reader in) {
    switch (in.which()) {
      case wire::PeerMessage::HELLO: {
        // One reader: each getter of the struct counts against the traversal limit.
        const auto hello = in.getHello();
        message->kind = PeerMessageKind::kHello;
        message->node_id = hello.getNodeId();
        message->nonce = ViewOf(hello.getNonce());
        message->peer_version = std::max<uint32_t>(1, hello.getPeerVersion());
        message->relays = hello.getRelays();
        message->incarnation = hello.getIncarnation();
        if (message->node_id == 0) return Status::Corruption("malformed frame: hello from node 0");
        if (message->nonce.size() != kNonceBytes) {
          return Status::Corruption("malformed frame: hello without a nonce of " +
                                    std::to_string(kNonceBytes) + " bytes");
        }
        return Status::OK();
      }
      case wire::PeerMessage::STATE: {
        message->kind = PeerMessageKind::kState;
        const auto state = in.getState();
        message->full = state.getFull();
        message->relay = state.getRelay();
        for (const auto peer_class : state.getClasses()) {
          message->classes.push_back({static_cast<Algorithm>(peer_class.getAlgorithm()),
                                      peer_class.getWindowMs(), ViewOf(peer_class.getKeys()),
                                      ViewOf(peer_class.getDenied())});
        }
        return Status::OK();
      }
      case wire::PeerMessage::SYNC_DONE:
        message->kind = PeerMessageKind::kSyncDone;
        return Status::OK();
      case wire::PeerMessage::RESYNC: message->kind = PeerMessageKind::kResync; return Status::OK();
      case wire::PeerMessage::DIGESTS: {
        message->kind = PeerMessageKind::kDigests;
        const auto digests = in.getDigests();
        const auto ranges = digests.getRanges();
        const auto values = digests.getDigests();
        if (ranges.size() != values.size() || ranges.size() > kMaxRangesPerMessage) {
          return Status::Corruption("malformed frame: digests of " + std::to_string(ranges.size()) +
                                    " ranges with " + std::to_string(values.size()) + " values");
        }
        message->ref_ms = digests.getRefMs();
        message->digests.reserve(ranges.size());
        for (unsigned i = 0; i < ranges.size(); ++i) {
          message->digests.push_back({ranges[i], values[i]});
        }
        return Status::OK();
      }
      case wire::PeerMessage::RANGES: {
        message->kind = PeerMessageKind::kRanges;
        const auto reply = in.getRanges();
        if (reply.getWant().size() + reply.getLater().size() > kMaxRangesPerMessage) {
          return Status::Corruption("malformed frame: ranges names too many");
        }
        for (const uint32_t range : reply.getWant()) message->want.push_back(range);
        for (const uint32_t range : reply.getLater()) message->later.push_back(range);
        return Status::OK();
      }
      case wire::PeerMessage::HEARTBEAT:
        message->kind = PeerMessageKind::kHeartbeat;
        return Status::OK();
      case wire::PeerMessage::SEAL:
        message->kind = PeerMessageKind::kSeal;
        message->seq = in.getSeal().getSeq();
        message->mac = ViewOf(in.getSeal().getMac());
        return Status::OK();
      case wire::PeerMessage::MEMBERS: {
        message->kind = PeerMessageKind::kMembers;
        const auto table = in.getMembers();
        for (const auto member : table.getMembers()) {
          const capnp::Text::Reader address = member.getAddress();
          if (member.getNodeId() == 0) return Status::Corruption("malformed frame: member node 0");
          if (address.size() > kMaxMemberAddressBytes) {
            return Status::Corruption("malformed frame: a member address over " +
                                      std::to_string(kMaxMemberAddressBytes) + " bytes");
          }
          if (member.getState() > static_cast<uint8_t>(MemberState::kDead)) {
            return Status::Corruption("malformed frame: a member state of " +
                                      std::to_string(member.getState()));
          }
          message->members.push_back(
              {member.getNodeId(), std::string(address.cStr(), address.size()),
               member.getIncarnation(), member.getHeartbeat(), member.getHeartbeatWallMs(),
               member.getLeft(), member.getForgotten(),
               static_cast<MemberState>(member.getState())});
        }
        if (table.hasProbe()) {
          const auto probe = table.getProbe();
          if (probe.getOrigin() == 0 || probe.getTarget() == 0) {
            return Status::Corruption("malformed frame: a probe from or to node 0");
          }
          message->probe = Probe{probe.getSeq(), probe.getOrigin(), probe.getTarget(),
                                 probe.getAck(), probe.getWallMs()};
        }
        const auto losses = table.getLosses();
        if (losses.size() > kMaxCrashLosses) {
          return Status::Corruption("malformed frame: more than " +
                                    std::to_string(kMaxCrashLosses) + " crash losses");
        }
        for (const auto loss : losses) {
          if (loss.getNodeId() == 0 || loss.getAtMs() < 0) {
            return Status::Corruption("malformed frame: a crash loss of node 0 or before 1970");
          }
          message->losses.push_back({loss.getNodeId(), loss.getIncarnation(), loss.getAtMs()});
        }
        return Status::OK();
      }
    }
    message->kind = PeerMessageKind::kUnknown;
    return Status::OK();
  });
}

Status DecodePeerClass(const PeerClassView& view, NodeId sender, const SnapshotSink& sink,
                       uint64_t* keys) {
  *keys = 0;
  PeerClassDecoder decoder(view, sender);
  KeySnapshot snapshot;
  while (decoder.Next(&snapshot)) {
    sink(snapshot);
    ++*keys;
  }
  return decoder.status();
}

PeerClassDecoder::PeerClassDecoder(const PeerClassView& view, NodeId sender)
    : algorithm_(view.algorithm),
      window_ms_(view.window_ms),
      sender_(sender),
      in_(view.keys),
      denied_(view.denied) {
  if (static_cast<uint8_t>(view.algorithm) >= kAlgorithmCount) {
    status_ = Status::Corruption("peer state of an unknown algorithm");
  } else if (IsLog(algorithm_)) {
    denied_ = {};  // this version weighs no denials there: a later one may send them
    denied_index_ = UINT64_MAX;
  } else {
    NextDenied(/*first=*/true);
  }
}

void PeerClassDecoder::NextDenied(bool first) {
  if (denied_.empty()) {
    denied_index_ = UINT64_MAX;
    return;
  }
  uint64_t step = 0;
  if (!GetVarint(&denied_, &step) || !GetVarint(&denied_, &denied_current_) ||
      !GetVarint(&denied_, &denied_previous_) || (!first && step == 0) ||
      step > UINT64_MAX - 1 - (first ? 0 : denied_index_)) {
    status_ = Status::Corruption("peer state: denied costs do not decode");
    return;
  }
  denied_index_ = first ? step : denied_index_ + step;
}

bool PeerClassDecoder::Next(KeySnapshot* snapshot) {
  if (!status_.ok()) return false;
  if (in_.empty()) {
    // Every listed entry must have been one of the class's.
    if (denied_index_ != UINT64_MAX)
      status_ = Status::Corruption("peer state: denied costs of no entry");
    return false;
  }
  snapshot->denied = DeniedCost();
  if (entry_index_ == denied_index_) {
    snapshot->denied = {sender_, denied_current_, denied_previous_};
    NextDenied(/*first=*/false);
    if (!status_.ok()) return false;
  }
  ++entry_index_;
  snapshot->algorithm = algorithm_;
  snapshot->window_ms = window_ms_;
  bool decoded = GetKey(&in_, &snapshot->key);
  if (decoded && algorithm_ == Algorithm::kTokenBucket) {
    decoded = GetBucket(&in_, sender_, &window_index_, &snapshot->bucket);
  } else if (decoded && IsLog(algorithm_)) {
    uint64_t nodes = 0;
    decoded = GetCount(&in_, 2, &nodes);
    snapshot->log.resize(decoded ? nodes : 0);
    for (NodeStamps& node : snapshot->log) {
      if (!decoded) break;
      decoded = GetNode(&in_, sender_, &node.node) && GetStamps(&in_, &node.stamps);
    }
  } else if (decoded) {
    uint64_t step = 0;
    decoded = GetVarint(&in_, &step) && GetCounter(&in_, sender_, &snapshot->counts.current) &&
              GetCounter(&in_, sender_, &snapshot->counts.previous);
    window_index_ = Stepped(window_index_, step);
    snapshot->counts.window_index = window_index_;
  }
  if (!decoded) {
    status_ = Status::Corruption("peer state does not decode");
    return false;
  }
  return true;
}

std::string PeerVersionMismatch(uint32_t peer_version) {
  return "the peer speaks peer protocol version " + std::to_string(peer_version) +
         ", this node version " + std::to_string(kPeerProtocolVersion) +
         " (version 3 keeps membership by SWIM probes, version 2 by heartbeats; each refuses "
         "the other's): run one version of tally across the cluster";
}

void EncodeHello(NodeId node_id, std::string_view nonce, bool relays, uint64_t incarnation,
                 std::string* out, uint32_t peer_version) {
  capnp::MallocMessageBuilder message(ScratchSegment());
  auto hello = message.initRoot<wire::PeerMessage>().initHello();
  hello.setNodeId(node_id);
  hello.setNonce(DataOf(nonce));
  hello.setPeerVersion(peer_version);
  hello.setRelays(relays);
  hello.setIncarnation(incarnation);
  AppendFrame(message, out);
}

void EncodeSeal(uint64_t seq, std::string_view mac, std::string* out) {
  capnp::MallocMessageBuilder message(ScratchSegment());
  auto seal = message.initRoot<wire::PeerMessage>().initSeal();
  seal.setSeq(seq);
  seal.setMac(DataOf(mac));
  AppendFrame(message, out);
}

void EncodeSyncDone(std::string* out) {
  capnp::MallocMessageBuilder message(ScratchSegment());
  message.initRoot<wire::PeerMessage>().setSyncDone();
  AppendFrame(message, out);
}

void EncodeResync(std::string* out) {
  capnp::MallocMessageBuilder message(ScratchSegment());
  message.initRoot<wire::PeerMessage>().setResync();
  AppendFrame(message, out);
}

void EncodeDigests(int64_t ref_ms, std::span<const RangeDigest> digests, std::string* out) {
  capnp::MallocMessageBuilder message(ScratchSegment());
  auto wire_digests = message.initRoot<wire::PeerMessage>().initDigests();
  wire_digests.setRefMs(ref_ms);
  auto ranges = wire_digests.initRanges(static_cast<unsigned>(digests.size()));
  auto values = wire_digests.initDigests(static_cast<unsigned>(digests.size()));
  for (size_t i = 0; i < digests.size(); ++i) {
    ranges.set(static_cast<unsigned>(i), digests[i].range);
    values.set(static_cast<unsigned>(i), digests[i].digest);
  }
  AppendFrame(message, out);
}

void EncodeRanges(std::span<const uint32_t> want, std::span<const uint32_t> later,
                  std::string* out) {
  capnp::MallocMessageBuilder message(ScratchSegment());
  auto reply = message.initRoot<wire::PeerMessage>().initRanges();
  const auto fill = [](auto list, std::span<const uint32_t> ranges) {
    for (size_t i = 0; i < ranges.size(); ++i) list.set(static_cast<unsigned>(i), ranges[i]);
  };
  fill(reply.initWant(static_cast<unsigned>(want.size())), want);
  fill(reply.initLater(static_cast<unsigned>(later.size())), later);
  AppendFrame(message, out);
}

void EncodeHeartbeat(std::string* out) {
  capnp::MallocMessageBuilder message(ScratchSegment());
  message.initRoot<wire::PeerMessage>().setHeartbeat();
  AppendFrame(message, out);
}

void EncodeMembers(std::span<const MemberRecord> members, std::span<const CrashLoss> losses,
                   const Probe* probe, std::string* out) {
  capnp::MallocMessageBuilder message(ScratchSegment());
  auto table = message.initRoot<wire::PeerMessage>().initMembers();
  auto lost = table.initLosses(static_cast<unsigned>(std::min(losses.size(), kMaxCrashLosses)));
  for (unsigned i = 0; i < lost.size(); ++i) {
    lost[i].setNodeId(losses[i].node_id);
    lost[i].setIncarnation(losses[i].incarnation);
    lost[i].setAtMs(losses[i].at_ms);
  }
  auto list = table.initMembers(static_cast<unsigned>(members.size()));
  for (unsigned i = 0; i < list.size(); ++i) {
    const MemberRecord& member = members[i];
    list[i].setNodeId(member.node_id);
    list[i].setAddress(capnp::Text::Reader(member.address.data(), member.address.size()));
    list[i].setIncarnation(member.incarnation);
    list[i].setHeartbeat(member.heartbeat);
    list[i].setHeartbeatWallMs(member.heartbeat_wall_ms);
    list[i].setLeft(member.left);
    list[i].setForgotten(member.forgotten);
    list[i].setState(static_cast<uint8_t>(member.state));
  }
  if (probe != nullptr) {
    auto out_probe = table.initProbe();
    out_probe.setSeq(probe->seq);
    out_probe.setOrigin(probe->origin);
    out_probe.setTarget(probe->target);
    out_probe.setAck(probe->ack);
    out_probe.setWallMs(probe->wall_ms);
  }
  AppendFrame(message, out);
}

PeerStateEncoder::PeerStateEncoder(NodeId sender, bool full, size_t max_frame_bytes, bool relay)
    : sender_(sender), full_(full), max_frame_bytes_(max_frame_bytes), relay_(relay) {}

PeerStateEncoder::OpenClass& PeerStateEncoder::ClassFor(const KeySnapshot& snapshot) {
  for (OpenClass& open : classes_) {
    if (open.algorithm == snapshot.algorithm && open.window_ms == snapshot.window_ms) return open;
  }
  return classes_.emplace_back(OpenClass{snapshot.algorithm, snapshot.window_ms, {}, 0, {}, 0, 0});
}

void PeerStateEncoder::Add(const KeySnapshot& snapshot, std::vector<std::string>* frames) {
  if (IsLog(snapshot.algorithm)) {
    for (const NodeStamps& node : snapshot.log) {
      const std::span<const LogStamp> stamps = node.stamps;
      for (size_t first = 0; first < stamps.size(); first += kStampsPerEntry) {
        AddLogEntry(ClassFor(snapshot), snapshot.key, node.node,
                    stamps.subspan(first, std::min(kStampsPerEntry, stamps.size() - first)));
        MaybeFinish(frames);
      }
    }
    return;
  }
  if (snapshot.algorithm == Algorithm::kTokenBucket) {
    AddBucketEntry(ClassFor(snapshot), snapshot);
    MaybeFinish(frames);
    return;
  }
  OpenClass& open = ClassFor(snapshot);
  const size_t before = open.keys.size();
  PutKey(snapshot.key, &open.keys);
  PutVarint(ZigZag(snapshot.counts.window_index - open.last_window_index), &open.keys);
  open.last_window_index = snapshot.counts.window_index;
  PutCounter(snapshot.counts.current, sender_, &open.keys);
  PutCounter(snapshot.counts.previous, sender_, &open.keys);
  ListDenied(open, snapshot.denied);
  ++entries_;
  pending_bytes_ += open.keys.size() - before;
  MaybeFinish(frames);
}

void PeerStateEncoder::ListDenied(OpenClass& open, const DeniedCost& denied) {
  if (denied.node == sender_ && (denied.current > 0 || denied.previous > 0)) {
    const size_t denied_before = open.denied.size();
    PutVarint(open.denied.empty() ? open.entries : open.entries - open.last_denied_entry,
              &open.denied);
    PutVarint(denied.current, &open.denied);
    PutVarint(denied.previous, &open.denied);
    open.last_denied_entry = open.entries;
    pending_bytes_ += open.denied.size() - denied_before;
  }
  ++open.entries;
}

void PeerStateEncoder::AddBucketEntry(OpenClass& open, const KeySnapshot& snapshot) {
  const size_t before = open.keys.size();
  const BucketSlices& bucket = snapshot.bucket;
  PutKey(snapshot.key, &open.keys);
  PutVarint(bucket.capacity, &open.keys);
  PutVarint(ZigZag(bucket.base_slice - open.last_window_index), &open.keys);
  open.last_window_index = bucket.base_slice;
  PutVarint(bucket.base_debt, &open.keys);
  PutVarint(bucket.nodes.size(), &open.keys);
  for (const NodeSlices& node : bucket.nodes) {
    PutNode(node.node, sender_, &open.keys);
    PutVarint(node.counts.size(), &open.keys);
    for (uint32_t count : node.counts) PutVarint(count, &open.keys);
  }
  ListDenied(open, snapshot.denied);
  ++entries_;
  pending_bytes_ += open.keys.size() - before;
}

void PeerStateEncoder::AddLogEntry(OpenClass& open, std::string_view key, NodeId node,
                                   std::span<const LogStamp> stamps) {
  const size_t before = open.keys.size();
  PutKey(key, &open.keys);
  PutVarint(1, &open.keys);
  PutNode(node, sender_, &open.keys);
  PutVarint(stamps.size(), &open.keys);
  int64_t previous_ms = 0;
  for (const LogStamp& stamp : stamps) {
    PutVarint(static_cast<uint64_t>(stamp.at_ms - previous_ms), &open.keys);
    PutVarint(stamp.cost, &open.keys);
    previous_ms = stamp.at_ms;
  }
  ++entries_;
  pending_bytes_ += open.keys.size() - before;
}

void PeerStateEncoder::MaybeFinish(std::vector<std::string>* frames) {
  // Room for the framing and the classes' headers: a few words each.
  if (pending_bytes_ + 64 * (classes_.size() + 1) >= max_frame_bytes_) Finish(frames);
}

void PeerStateEncoder::Finish(std::vector<std::string>* frames) {
  if (classes_.empty()) return;
  capnp::MallocMessageBuilder message(ScratchSegment());
  auto state = message.initRoot<wire::PeerMessage>().initState();
  state.setFull(full_);
  state.setRelay(relay_);
  auto out = state.initClasses(static_cast<unsigned>(classes_.size()));
  for (unsigned i = 0; i < out.size(); ++i) {
    out[i].setAlgorithm(static_cast<uint8_t>(classes_[i].algorithm));
    out[i].setWindowMs(classes_[i].window_ms);
    out[i].setKeys(DataOf(classes_[i].keys));
    if (!classes_[i].denied.empty()) out[i].setDenied(DataOf(classes_[i].denied));
  }
  AppendFrame(message, &frames->emplace_back());
  classes_.clear();
  pending_bytes_ = 0;
}

}  // namespace tally::protocol
