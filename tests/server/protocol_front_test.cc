// ProtocolFront's sessions: frames in, encoded answers out, with a real
// engine on a ManualClock and no socket. Pipelined frames that arrive
// together are answered together, in order.
#include "node/server/protocol_front.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/net/rate_limited_log.h"
#include "protocol/frame_buffer.h"

namespace tally {
namespace {

const LimitSpec kSpec{Algorithm::kFixedWindow, 2, 1'000};

struct Fixture {
  Fixture()
      : limiter(LimiterOptions(&clock)),
        front(&limiter, nullptr, protocol::FrameLimits(), 1, [] { return protocol::StatsReply(); }),
        session(front.NewSession(SessionContext{peer, &clock, &log, 0})) {}

  static Limiter::Options LimiterOptions(const Clock* clock) {
    Limiter::Options options;
    options.clock = clock;
    return options;
  }

  // A check request's frame: id `id`, one check of `key` under kSpec.
  static std::string Frame(uint64_t id, std::string_view key) {
    protocol::Request request;
    request.id = id;
    request.checks = {protocol::Check{key, kSpec, 1}};
    std::string frame;
    protocol::EncodeRequest(request, &frame);
    return frame;
  }
  // Appends Frame(id, key) to the received bytes.
  void Receive(uint64_t id, std::string_view key) { Receive(Frame(id, key)); }
  void Receive(std::string_view bytes) {
    const std::span<std::byte> room = buffer.writable(bytes.size());
    std::memcpy(room.data(), bytes.data(), bytes.size());
    buffer.Commit(bytes.size());
  }

  StreamProgress Answer() { return session->Answer(buffer.readable(), &out); }

  // The responses encoded in `out`, in order.
  std::vector<protocol::Response> Responses() const {
    protocol::FrameBuffer frames;
    const std::span<std::byte> room = frames.writable(out.size());
    std::memcpy(room.data(), out.data(), out.size());
    frames.Commit(out.size());
    std::vector<protocol::Response> responses;
    std::span<const std::byte> rest = frames.readable();
    while (!rest.empty()) {
      const protocol::FrameScan scan = protocol::ScanFrame(rest, protocol::FrameLimits());
      REQUIRE(scan.state == protocol::FrameScan::State::kComplete);
      protocol::Response& response = responses.emplace_back();
      REQUIRE(
          protocol::DecodeResponse(rest.first(scan.frame_bytes), protocol::FrameLimits(), &response)
              .ok());
      rest = rest.subspan(scan.frame_bytes);
    }
    return responses;
  }

  const std::string peer = "test";
  ManualClock clock{1'700'000'000'000};
  RateLimitedLog log{&clock, "test warnings"};
  Limiter limiter;
  ProtocolFront front;
  std::unique_ptr<StreamSession> session;
  protocol::FrameBuffer buffer;
  std::string out;
};

// Frames received together are all answered, in order, each check decided after the one before.
TEST_CASE("protocol front: a pipeline in one read is answered in order") {
  Fixture f;
  for (uint64_t id = 1; id <= 300; ++id) f.Receive(id, id % 2 == 0 ? "even" : "odd");
  const StreamProgress progress = f.Answer();
  CHECK(progress.consumed_bytes == f.buffer.readable().size());
  CHECK_FALSE(progress.close);
  const std::vector<protocol::Response> responses = f.Responses();
  REQUIRE(responses.size() == 300);
  for (uint64_t i = 0; i < responses.size(); ++i) {
    CHECK(responses[i].id == i + 1);
    REQUIRE(responses[i].outcomes.size() == 1);
    // Each key's first two checks fit its limit of 2.
    CHECK(responses[i].outcomes[0].decision.allowed == (i < 4));
  }
}

// A partial frame at the end waits for its bytes; the complete ones before it are answered.
TEST_CASE("protocol front: a partial last frame waits, the others are answered") {
  Fixture f;
  f.Receive(1, "k");
  f.Receive(2, "k");
  const size_t complete_bytes = f.buffer.readable().size();
  const std::string third = Fixture::Frame(3, "k");
  f.Receive(std::string_view(third).substr(0, 16));

  const StreamProgress progress = f.Answer();
  CHECK(progress.consumed_bytes == complete_bytes);
  CHECK(progress.wanted_bytes == third.size() - 16);
  CHECK_FALSE(progress.close);
  const std::vector<protocol::Response> responses = f.Responses();
  REQUIRE(responses.size() == 2);
  CHECK(responses[1].id == 2);
}

// A bad frame after good ones: the good ones are answered first, then the error, then the close.
TEST_CASE("protocol front: a bad frame in a pipeline answers the frames before it") {
  Fixture f;
  f.Receive(1, "k");
  f.Receive(2, "k");
  const size_t good_bytes = f.buffer.readable().size();
  const uint32_t impossible_segments[2] = {0xFFFFFFFF, 0};
  f.Receive(std::string_view(reinterpret_cast<const char*>(impossible_segments), 8));
  f.Receive(4, "k");  // never read: the connection closes

  const StreamProgress progress = f.Answer();
  CHECK(progress.close);
  CHECK(progress.consumed_bytes == good_bytes);
  const std::vector<protocol::Response> responses = f.Responses();
  REQUIRE(responses.size() == 3);
  CHECK(responses[0].id == 1);
  CHECK(responses[1].id == 2);
  CHECK(responses[2].kind == protocol::ResponseKind::kError);
  CHECK(responses[2].error == protocol::ErrorCode::kMalformedFrame);
  // Only the checks of the requests before the bad frame were decided.
  CHECK(f.front.counters().Read().Total().checks() == 2);
}

}  // namespace
}  // namespace tally
