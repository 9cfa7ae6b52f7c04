#include "protocol/framing.h"

#include <cstdint>

namespace tally::protocol {

Status CheckWholeFrame(std::span<const std::byte> frame, const FrameLimits& limits) {
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(capnp::word) != 0) {
    return Status::InvalidArgument("frame not 8-byte aligned");
  }
  const FrameScan scan = ScanFrame(frame, limits);
  if (scan.state == FrameScan::State::kInvalid) {
    return Status::Corruption("malformed frame: " + scan.error_message);
  }
  if (scan.state != FrameScan::State::kComplete || scan.frame_bytes != frame.size()) {
    return Status::Corruption("malformed frame: " + std::to_string(frame.size()) +
                              " bytes given, the segment table needs " +
                              std::to_string(scan.frame_bytes));
  }
  return Status::OK();
}

kj::ArrayPtr<capnp::word> ScratchSegment() {
  thread_local capnp::word scratch[capnp::SUGGESTED_FIRST_SEGMENT_WORDS];  // zero-initialised
  return kj::arrayPtr(scratch, capnp::SUGGESTED_FIRST_SEGMENT_WORDS);
}

void AppendFrame(capnp::MessageBuilder& message, std::string* out) {
  const kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments =
      message.getSegmentsForOutput();
  const size_t table_words = segments.size() / 2 + 1;  // (1 + count) uint32s, padded to 8 bytes
  uint32_t table[2 * 16] = {};
  KJ_REQUIRE(segments.size() <= 2 * 16 - 1, "message has too many segments to frame");
  table[0] = static_cast<uint32_t>(segments.size() - 1);
  for (size_t i = 0; i < segments.size(); ++i)
    table[i + 1] = static_cast<uint32_t>(segments[i].size());
  out->append(reinterpret_cast<const char*>(table), table_words * sizeof(capnp::word));
  for (const kj::ArrayPtr<const capnp::word>& segment : segments) {
    const kj::ArrayPtr<const kj::byte> bytes = segment.asBytes();
    out->append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  }
}

}  // namespace tally::protocol
