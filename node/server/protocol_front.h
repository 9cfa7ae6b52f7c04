// ProtocolFront: tally's own protocol (Cap'n Proto frames, protocol/codec.h)
// as a StreamFront of the Server. Each session decodes complete frames in
// place, answers them with a RequestHandler and encodes the responses. The
// frames of one read are answered together (RequestHandler::HandleAll): a
// pipelining client's checks go to the engine as one batch, whose cache
// hints overlap their memory accesses.
//
// A frame that fails ScanFrame or decoding gets an error frame
// (kMalformedFrame, kFrameTooLarge, or kInvalidArgument for too many checks;
// id 0) and the connection is closed; other connections are not affected.
//
// Thread safety: NewSession from any worker; each session is used by its
// connection's worker only. The counters have a stripe per worker (written
// by that worker, read by any thread).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "node/common/front_counters.h"
#include "node/engine/limiter.h"
#include "node/net/stream_front.h"
#include "node/policy/policy_store.h"
#include "node/server/request_handler.h"
#include "protocol/codec.h"
#include "protocol/messages.h"

namespace tally {

// An error response (id 0) as one frame.
std::string ErrorFrame(protocol::ErrorCode code, std::string message);

class ProtocolFront : public StreamFront {
 public:
  // limiter and policies (null: none) must outlive the front; `workers` is
  // the number of worker threads (SessionContext::worker_index is below it).
  ProtocolFront(Limiter* limiter, PolicyStore* policies, const protocol::FrameLimits& limits,
                size_t workers, RequestHandler::StatsSource stats,
                RequestHandler::ForgetMember forget_member = {});

  std::unique_ptr<StreamSession> NewSession(const SessionContext& context) override;
  std::string TooManyConnections() const override;

  // What the front has decided; any thread may read them.
  const FrontCounters& counters() const { return counters_; }

 private:
  Limiter* const limiter_;
  PolicyStore* const policies_;
  const protocol::FrameLimits limits_;
  const RequestHandler::StatsSource stats_;
  const RequestHandler::ForgetMember forget_member_;
  FrontCounters counters_;  // a stripe per worker, written by that worker
};

}  // namespace tally
