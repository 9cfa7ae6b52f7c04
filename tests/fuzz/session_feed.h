// FeedSession: runs a fuzzer's bytes through a new session of `front` as
// node/server/connection.cc does: in reads of fuzzer-chosen sizes (1 to 256
// bytes) into a receive buffer, answering after each read, consuming what
// the session consumed, stopping when it closes the connection, and moving
// the clock on by a fuzzer-chosen 0 to 255 ms between reads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "node/common/clock.h"
#include "node/net/rate_limited_log.h"
#include "node/net/stream_front.h"
#include "protocol/frame_buffer.h"
#include "tests/fuzz/fuzz_input.h"

namespace tally::fuzz {

inline void FeedSession(StreamFront& front, ManualClock& clock, FuzzInput& input) {
  const std::string peer = "fuzzer";
  RateLimitedLog log(&clock, "fuzz warnings");
  const auto session = front.NewSession(SessionContext{peer, &clock, &log, 0});
  protocol::FrameBuffer buffer;
  std::string out;
  while (!input.empty()) {
    const std::span<const std::byte> read = input.Take(1 + input.Byte() % 256);
    const std::span<std::byte> room = buffer.writable(read.size());
    std::copy(read.begin(), read.end(), room.begin());
    buffer.Commit(read.size());
    const StreamProgress progress = session->Answer(buffer.readable(), &out);
    buffer.Consume(progress.consumed_bytes);
    if (progress.close) break;
    out.clear();
    session->TrimMemory();
    clock.AdvanceMs(input.Byte());
  }
}

// A fuzz target's whole body for a front: `Target` holds `engine` (a
// FuzzEngine) and `front`, made once per fuzzing process.
template <typename Target>
int FeedTarget(const uint8_t* data, size_t size) {
  static Target target;
  FuzzInput input(data, size);
  FeedSession(target.front, target.engine.clock, input);
  return 0;
}

}  // namespace tally::fuzz
