#include "node/server/protocol_front.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

namespace tally {
namespace {

// What a client is told of a frame that does not decode as a Request. The
// decoder's own description quotes Cap'n Proto's internals: it goes to the log.
constexpr char kNotARequest[] = "malformed frame: not a valid request message";
// Checks decoded and decided together at most: a pipelining client's
// requests share one engine batch up to this many (a longer pipeline makes
// several passes). Requests that are not checks count one each.
constexpr size_t kMaxPassChecks = 128;
// Scratch kept between requests, so that a steady stream of small ones
// allocates nothing; a large request's is freed once it is answered.
constexpr size_t kKeptChecks = 128;
constexpr size_t kKeptRequests = 32;

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

  // Decodes every complete frame received (kMaxPassChecks' worth at a time),
  // answers them together (RequestHandler::HandleAll) and encodes the answers
  // in order. A frame refused answers the ones before it first.
  StreamProgress Answer(std::span<const std::byte> received, std::string* out) override {
    StreamProgress progress;
    for (;;) {
      size_t decoded = 0;      // requests_[0, decoded) hold this pass's requests
      size_t pass_bytes = 0;   // their frames' bytes
      size_t pass_checks = 0;  // their checks; other requests count one
      bool need_more = false;
      std::optional<Refusal> refusal;
      while (pass_checks < kMaxPassChecks) {
        const std::span<const std::byte> rest =
            received.subspan(progress.consumed_bytes + pass_bytes);
        const protocol::FrameScan scan = protocol::ScanFrame(rest, limits_);
        if (scan.state == protocol::FrameScan::State::kNeedMore) {
          progress.wanted_bytes = scan.frame_bytes - rest.size();
          need_more = true;
          break;
        }
        if (scan.state == protocol::FrameScan::State::kInvalid) {
          refusal = Refusal{scan.error, scan.error_message, scan.error_message};
          break;
        }
        if (decoded == requests_.size()) requests_.emplace_back();
        const Status status =
            protocol::DecodeRequest(rest.first(scan.frame_bytes), limits_, &requests_[decoded]);
        if (!status.ok()) {
          const protocol::ErrorCode code = protocol::ErrorCodeFor(status);
          const bool malformed = code == protocol::ErrorCode::kMalformedFrame;
          refusal = Refusal{code, malformed ? kNotARequest : std::string(status.message()),
                            std::string(status.message())};
          break;
        }
        pass_checks += std::max<size_t>(requests_[decoded].checks.size(), 1);
        pass_bytes += scan.frame_bytes;
        ++decoded;
      }
      if (responses_.size() < decoded) responses_.resize(decoded);
      handler_.HandleAll(std::span(requests_).first(decoded), std::span(responses_).first(decoded));
      for (size_t i = 0; i < decoded; ++i) protocol::EncodeResponse(responses_[i], out);
      progress.consumed_bytes += pass_bytes;
      if (refusal) return RefuseFrame(*refusal, progress, out);
      if (need_more) return progress;
    }
  }

  void Refuse(StreamRefusal, std::string_view message, std::string* out) override {
    *out += ErrorFrame(protocol::ErrorCode::kResourceExhausted, std::string(message));
  }

  void TrimMemory() override {
    if (requests_.size() > kKeptRequests) requests_.resize(kKeptRequests);
    if (responses_.size() > kKeptRequests) responses_.resize(kKeptRequests);
    for (protocol::Request& request : requests_) {
      if (request.checks.capacity() > kKeptChecks) request = protocol::Request();
    }
    for (protocol::Response& response : responses_) {
      if (response.outcomes.capacity() > kKeptChecks) response = protocol::Response();
    }
    handler_.TrimScratch(kKeptChecks);
  }

 private:
  struct Refusal {
    protocol::ErrorCode code;
    std::string reply;   // to the client
    std::string detail;  // to the log
  };

  // Queues an error frame saying the refusal's reply, logs its detail
  // (rate-limited), and closes the connection once the frame is written.
  StreamProgress RefuseFrame(const Refusal& refusal, StreamProgress progress, std::string* out) {
    log_->Warn("closing connection from " + peer_ + ": " + refusal.detail);
    *out += ErrorFrame(refusal.code, refusal.reply);
    progress.close = true;
    return progress;
  }

  const std::string& peer_;
  RateLimitedLog* const log_;
  const protocol::FrameLimits& limits_;
  RequestHandler handler_;
  // One pass's requests (string_views into the received bytes, valid during
  // Answer) and their answers; reused, so their vectors keep their memory.
  std::vector<protocol::Request> requests_;
  std::vector<protocol::Response> responses_;
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
