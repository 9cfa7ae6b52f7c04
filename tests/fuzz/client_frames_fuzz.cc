// Fuzzes tally's client port: bytes a client sends, in reads of fuzzer-chosen
// sizes, through the session the server runs (framing, Cap'n Proto decoding,
// the request handler, the engine), as node/server/connection.cc feeds it.
#include <cstddef>
#include <cstdint>
#include <string>

#include <spdlog/spdlog.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/net/rate_limited_log.h"
#include "node/server/protocol_front.h"
#include "protocol/frame_buffer.h"
#include "tests/fuzz/fuzz_input.h"

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
  const std::string peer = "fuzzer";
  tally::RateLimitedLog log(&target.clock, "fuzz warnings");
  const auto session = target.front.NewSession(tally::SessionContext{peer, &target.clock, &log, 0});
  tally::protocol::FrameBuffer buffer;
  std::string out;
  while (!input.empty()) {
    const std::span<const std::byte> read = input.Take(1 + input.Byte() % 256);
    const std::span<std::byte> room = buffer.writable(read.size());
    std::copy(read.begin(), read.end(), room.begin());
    buffer.Commit(read.size());
    const tally::StreamProgress progress = session->Answer(buffer.readable(), &out);
    buffer.Consume(progress.consumed_bytes);
    if (progress.close) break;
    out.clear();
    target.clock.AdvanceMs(input.Byte());
  }
  return 0;
}
