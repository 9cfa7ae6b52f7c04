// Fuzzes tally's client port: bytes a client sends, in reads of fuzzer-chosen
// sizes, through the session the server runs (framing, Cap'n Proto decoding,
// the request handler, the engine), as node/server/connection.cc feeds it.
#include <cstddef>
#include <cstdint>

#include <spdlog/spdlog.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/server/protocol_front.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/session_feed.h"

namespace {

struct Target {
  Target()
      : limiter(Options(&clock)),
        front(&limiter, nullptr, Limits(), 1, [] { return tally::protocol::StatsReply(); }) {
    spdlog::set_level(spdlog::level::off);
  }
  static tally::Limiter::Options Options(const tally::Clock* clock) {
    tally::Limiter::Options options;
    options.clock = clock;
    options.max_keys = 10'000;
    return options;
  }
  static tally::protocol::FrameLimits Limits() {
    tally::protocol::FrameLimits limits;
    limits.max_frame_bytes = 64 << 10;
    limits.max_checks_per_request = 1'000;
    return limits;
  }

  tally::ManualClock clock{1'700'000'000'000};
  tally::Limiter limiter;
  tally::ProtocolFront front;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Target target;
  tally::fuzz::FuzzInput input(data, size);
  tally::fuzz::FeedSession(target.front, target.clock, input);
  return 0;
}
