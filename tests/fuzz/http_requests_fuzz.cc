// Fuzzes tally's HTTP port: bytes a client sends, in reads of fuzzer-chosen
// sizes, through the session the server runs (libhttp-parser, the limits on
// headers and bodies, query strings, JSON bodies by nlohmann-json, the check
// endpoints, the engine).
#include <cstddef>
#include <cstdint>

#include "node/http/check_front.h"
#include "tests/fuzz/fuzz_engine.h"
#include "tests/fuzz/session_feed.h"

namespace {

tally::HttpLimits Limits() {
  tally::HttpLimits limits;
  limits.max_header_bytes = 2'048;
  limits.max_body_bytes = 4'096;
  return limits;
}

struct Target {
  tally::fuzz::FuzzEngine engine;
  tally::CheckFront front{Limits(), &engine.limiter, nullptr, 1};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tally::fuzz::FeedTarget<Target>(data, size);
}
