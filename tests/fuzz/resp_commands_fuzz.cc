// Fuzzes tally's RESP port: bytes a client sends, in reads of fuzzer-chosen
// sizes, through the session the server runs (the RESP command parser of
// protocol/resp.h, the commands of node/resp/, the engine). With a password,
// so that the AUTH and NOAUTH paths are reached as well as the commands
// after AUTH.
#include <cstddef>
#include <cstdint>

#include <spdlog/spdlog.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/resp/resp_front.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/session_feed.h"

namespace {

struct Target {
  Target()
      : limiter(Options(&clock)),
        front(FrontOptions(), &limiter, nullptr, 1, [] { return tally::protocol::StatsReply(); }) {
    spdlog::set_level(spdlog::level::off);
  }
  static tally::Limiter::Options Options(const tally::Clock* clock) {
    tally::Limiter::Options options;
    options.clock = clock;
    options.max_keys = 10'000;
    return options;
  }
  static tally::RespFront::Options FrontOptions() {
    tally::RespFront::Options options;
    options.limits.max_args = 64;
    options.limits.max_bulk_bytes = 4096;
    options.password = "pw";
    return options;
  }

  tally::ManualClock clock{1'700'000'000'000};
  tally::Limiter limiter;
  tally::RespFront front;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Target target;
  tally::fuzz::FuzzInput input(data, size);
  tally::fuzz::FeedSession(target.front, target.clock, input);
  return 0;
}
