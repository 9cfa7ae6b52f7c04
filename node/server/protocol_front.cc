#include "node/server/protocol_front.h"

#include <utility>

namespace tally {
namespace {

// What a client is told of a frame that does not decode as a Request. The
// decoder's own description quotes Cap'n Proto's internals: it goes to the log.
constexpr char kNotARequest[] = "malformed frame: not a valid request message";
// Scratch kept between requests, so that a steady stream of small ones
// allocates nothing; a large request's is freed once it is answered.
constexpr size_t kKeptChecks = 128;

// One connection speaking tally's protocol; owned by its worker's thread.
class ProtocolSession : public StreamSession {
 public:
  ProtocolSession(const SessionContext& context, Limiter* limiter, FrontCounters* counters,
                  RequestHandler::StatsSource stats, PolicyStore* policies,
                  RequestHandler::ForgetMember forget_member, const protocol::FrameLimits& limits)
      : peer_(context.peer),
        log_(context.log),
        limits_(limits),
        handler_(limiter, counters, context.worker_index, std::move(stats), policies,
                 std::move(forget_member)) {}

  StreamProgress Answer(std::span<const std::byte> received, std::string* out) override {
    StreamProgress progress;
    for (;;) {
      const std::span<const std::byte> rest = received.subspan(progress.consumed_bytes);
      const protocol::FrameScan scan = protocol::ScanFrame(rest, limits_);
      if (scan.state == protocol::FrameScan::State::kNeedMore) {
        progress.wanted_bytes = scan.frame_bytes - rest.size();
        return progress;
      }
      if (scan.state == protocol::FrameScan::State::kInvalid) {
        return RefuseFrame(scan.error, scan.error_message, scan.error_message, progress, out);
      }
      const Status decoded =
          protocol::DecodeRequest(rest.first(scan.frame_bytes), limits_, &request_);
      if (!decoded.ok()) {
        const protocol::ErrorCode code = protocol::ErrorCodeFor(decoded);
        const bool malformed = code == protocol::ErrorCode::kMalformedFrame;
        return RefuseFrame(code, malformed ? kNotARequest : std::string(decoded.message()),
                           decoded.message(), progress, out);
      }
      handler_.Handle(request_, &response_);
      protocol::EncodeResponse(response_, out);
      progress.consumed_bytes += scan.frame_bytes;
    }
  }

  void Refuse(StreamRefusal, std::string_view message, std::string* out) override {
    *out += ErrorFrame(protocol::ErrorCode::kResourceExhausted, std::string(message));
  }

  void TrimMemory() override {
    if (request_.checks.capacity() > kKeptChecks) request_ = protocol::Request();
    if (response_.outcomes.capacity() > kKeptChecks) response_ = protocol::Response();
    handler_.TrimScratch(kKeptChecks);
  }

 private:
  // Queues an error frame saying `reply`, logs `detail` (rate-limited), and
  // closes the connection once the frame is written.
  StreamProgress RefuseFrame(protocol::ErrorCode code, std::string reply, std::string_view detail,
                             StreamProgress progress, std::string* out) {
    log_->Warn("closing connection from " + peer_ + ": " + std::string(detail));
    *out += ErrorFrame(code, std::move(reply));
    progress.close = true;
    return progress;
  }

  const std::string& peer_;
  RateLimitedLog* const log_;
  const protocol::FrameLimits& limits_;
  RequestHandler handler_;
  protocol::Request request_;    // string_views into the received bytes, valid during Answer
  protocol::Response response_;  // reused: its vectors keep their memory
};

}  // namespace

std::string ErrorFrame(protocol::ErrorCode code, std::string message) {
  protocol::Response response;
  response.kind = protocol::ResponseKind::kError;
  response.error = code;
  response.error_message = std::move(message);
  std::string frame;
  protocol::EncodeResponse(response, &frame);
  return frame;
}

ProtocolFront::ProtocolFront(Limiter* limiter, PolicyStore* policies,
                             const protocol::FrameLimits& limits, size_t workers,
                             RequestHandler::StatsSource stats,
                             RequestHandler::ForgetMember forget_member)
    : limiter_(limiter),
      policies_(policies),
      limits_(limits),
      stats_(std::move(stats)),
      forget_member_(std::move(forget_member)),
      counters_(workers, FrontCounters::Writers::kOnePerStripe) {}

std::unique_ptr<StreamSession> ProtocolFront::NewSession(const SessionContext& context) {
  return std::make_unique<ProtocolSession>(context, limiter_, &counters_, stats_, policies_,
                                           forget_member_, limits_);
}

std::string ProtocolFront::TooManyConnections() const {
  return ErrorFrame(protocol::ErrorCode::kResourceExhausted, "too many connections");
}

}  // namespace tally
