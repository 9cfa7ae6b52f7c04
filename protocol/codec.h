// Framing and (de)serialisation of tally's protocol messages.
//
// Frames use Cap'n Proto's standard stream framing: a segment table
// (uint32 segment_count - 1, then one uint32 size in words per segment,
// padded to 8 bytes) followed by the segments. Every frame is a multiple of
// 8 bytes long.
//
// Hostile input is expected. ScanFrame checks the segment table before any
// decoding: segment count (1..max_segments), total size summed in 64 bits
// against max_frame_bytes. Decode* then reads the message with Cap'n Proto's
// traversal and nesting limits inside one try/catch, so that any Cap'n Proto
// exception (including those thrown lazily by getters) becomes a Status and
// never escapes. Nothing here allocates in proportion to a size the peer
// claims before the bytes have actually arrived.
//
// Thread safety: stateless functions; distinct buffers may be used from
// different threads concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "node/common/status.h"
#include "protocol/messages.h"

namespace tally::protocol {

struct FrameLimits {
  size_t max_frame_bytes = 1 << 20;  // the whole frame, segment table included
  uint32_t max_segments = 16;
  int nesting_limit = 16;
  // Checks in one request. Cap'n Proto lets a small frame declare many empty
  // list elements, so the frame size alone does not bound the work.
  size_t max_checks_per_request = 10'000;
};

struct FrameScan {
  enum class State { kNeedMore, kComplete, kInvalid };
  State state = State::kNeedMore;
  // kNeedMore: the bytes needed before scanning again (at least the whole
  // segment table, or once it is known, the whole frame). kComplete: the
  // frame's length. kInvalid: 0.
  size_t frame_bytes = 0;
  ErrorCode error = ErrorCode::kOk;  // kInvalid: kMalformedFrame or kFrameTooLarge
  std::string error_message;         // kInvalid: what exactly is wrong
};

// Looks at the bytes received so far on a connection, starting at a frame
// boundary, and says whether a whole frame is there.
FrameScan ScanFrame(std::span<const std::byte> received, const FrameLimits& limits);

// Decode one complete frame (as delimited by ScanFrame). `frame` must be
// 8-byte aligned (an unaligned frame is rejected with InvalidArgument).
// string_views in the result point into `frame`. Errors: kCorruption-coded
// Status with a message; the caller answers ErrorCode::kMalformedFrame. The
// message may quote Cap'n Proto's internals: it is for logs, not for peers.
Status DecodeRequest(std::span<const std::byte> frame, const FrameLimits& limits, Request* request);
Status DecodeResponse(std::span<const std::byte> frame, const FrameLimits& limits,
                      Response* response);

// Append one frame holding the message to *out.
void EncodeRequest(const Request& request, std::string* out);
void EncodeResponse(const Response& response, std::string* out);

// An ErrorCode for an engine Status.
ErrorCode ErrorCodeFor(const Status& status);

}  // namespace tally::protocol
