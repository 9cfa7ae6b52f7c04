// Fuzzes tally's RESP port: bytes a client sends, in reads of fuzzer-chosen
// sizes, through the session the server runs (the RESP command parser of
// protocol/resp.h, the commands of node/resp/, the engine). With a password,
// so that the AUTH and NOAUTH paths are reached as well as the commands
// after AUTH.
#include <cstddef>
#include <cstdint>

#include "node/resp/resp_front.h"
#include "tests/fuzz/fuzz_engine.h"
#include "tests/fuzz/session_feed.h"

namespace {

tally::RespFront::Options FrontOptions() {
  tally::RespFront::Options options;
  options.limits.max_args = 64;
  options.limits.max_bulk_bytes = 4096;
  options.password = "pw";
  return options;
}

struct Target {
  tally::fuzz::FuzzEngine engine;
  tally::RespFront front{FrontOptions(), &engine.limiter, nullptr, 1,
                         [] { return tally::protocol::StatsReply(); }};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tally::fuzz::FeedTarget<Target>(data, size);
}
