// Fuzzes tally's HTTP port: bytes a client sends, in reads of fuzzer-chosen
// sizes, through the session the server runs (libhttp-parser, the limits on
// headers and bodies, query strings, JSON bodies by nlohmann-json, the check
// endpoints, the engine).
#include <cstddef>
#include <cstdint>

#include <spdlog/spdlog.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/http/check_front.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/session_feed.h"

namespace {

struct Target {
  Target() : limiter(Options(&clock)), front(Limits(), &limiter, nullptr, 1) {
    spdlog::set_level(spdlog::level::off);
  }
  static tally::Limiter::Options Options(const tally::Clock* clock) {
    tally::Limiter::Options options;
    options.clock = clock;
    options.max_keys = 10'000;
    return options;
  }
  static tally::HttpLimits Limits() {
    tally::HttpLimits limits;
    limits.max_header_bytes = 2'048;
    limits.max_body_bytes = 4'096;
    return limits;
  }

  tally::ManualClock clock{1'700'000'000'000};
  tally::Limiter limiter;
  tally::CheckFront front;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Target target;
  tally::fuzz::FuzzInput input(data, size);
  tally::fuzz::FeedSession(target.front, target.clock, input);
  return 0;
}
