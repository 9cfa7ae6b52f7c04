// Internal to protocol/: what the client codec (codec.cc) and the peer codec
// (peer_codec.cc) share to read and write Cap'n Proto frames. Includes Cap'n
// Proto headers: never include it outside protocol/.
//
// Thread safety: stateless, but ScratchSegment is per thread and must not be
// used by two message builders at once on one thread.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include "node/common/status.h"
#include "protocol/codec.h"

namespace tally::protocol {

// OK when `frame` is exactly one complete, aligned frame within the limits.
Status CheckWholeFrame(std::span<const std::byte> frame, const FrameLimits& limits);

// Reads `frame` (checked whole) as a message with root `Root` and hands the
// root to `read_root`. Every Cap'n Proto getter may throw, so `read_root` runs
// inside the one try block that turns kj::Exception into a Corruption status.
template <typename Root, typename ReadFn>
Status ReadFrame(std::span<const std::byte> frame, const FrameLimits& limits, ReadFn&& read_root) {
  if (Status status = CheckWholeFrame(frame, limits); !status.ok()) return status;
  const size_t words = frame.size() / sizeof(capnp::word);
  capnp::ReaderOptions options;
  // Honest reading touches each word about once; twice the frame leaves room
  // and stops amplification (e.g. huge lists of zero-sized structs). The frame
  // is within max_frame_bytes, so this is bounded by max_frame_bytes / 4.
  options.traversalLimitInWords = words * 2;
  options.nestingLimit = limits.nesting_limit;
  try {
    capnp::FlatArrayMessageReader reader(
        kj::arrayPtr(reinterpret_cast<const capnp::word*>(frame.data()), words), options);
    return read_root(reader.template getRoot<Root>());
  } catch (const kj::Exception& e) {
    return Status::Corruption("malformed frame: " + std::string(e.getDescription().cStr()));
  }
}

inline std::string_view ViewOf(capnp::Data::Reader data) {
  return {reinterpret_cast<const char*>(data.begin()), data.size()};
}

inline capnp::Data::Reader DataOf(std::string_view bytes) {
  return {reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()};
}

// The first segment of every message this thread encodes: reusing it saves a
// zeroed 8 KiB allocation per message. MallocMessageBuilder requires it zeroed
// and zeroes what it used when destroyed. Encoding never nests on a thread.
kj::ArrayPtr<capnp::word> ScratchSegment();

// Appends the standard stream framing (segment table, then segments) without
// an intermediate flat copy of the message.
void AppendFrame(capnp::MessageBuilder& message, std::string* out);

}  // namespace tally::protocol
