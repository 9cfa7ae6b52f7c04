// Fuzzes tally's client port: bytes a client sends, in reads of fuzzer-chosen
// sizes, through the session the server runs (framing, Cap'n Proto decoding,
// the request handler, the engine), as node/server/connection.cc feeds it.
#include <cstddef>
#include <cstdint>

#include "node/server/protocol_front.h"
#include "tests/fuzz/fuzz_engine.h"
#include "tests/fuzz/session_feed.h"

namespace {

tally::protocol::FrameLimits Limits() {
  tally::protocol::FrameLimits limits;
  limits.max_frame_bytes = 64 << 10;
  limits.max_checks_per_request = 1'000;
  return limits;
}

struct Target {
  tally::fuzz::FuzzEngine engine;
  tally::ProtocolFront front{&engine.limiter, nullptr, Limits(), 1,
                             [] { return tally::protocol::StatsReply(); }};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tally::fuzz::FeedTarget<Target>(data, size);
}
