// Internal to node/resp: one RESP connection (RespFront's session). The
// command loop and the connection's own commands are in resp_session.cc, the
// commands that decide limits in limit_commands.cc.
//
// Pipelining: CL.THROTTLE and TALLY.CHECK commands that arrive together (one
// Answer) are queued and decided by one Limiter::CheckBatch, which fetches
// later keys' memory while deciding earlier ones. Any other reply (another
// command's, any error) first decides and answers what is queued, so replies
// keep the commands' order and each command means what it means alone; the
// batch shares one clock reading (Limiter::CheckBatch).
//
// Threads: every member is owned by the connection's worker thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "node/common/limit.h"
#include "node/common/status.h"
#include "node/engine/limiter.h"
#include "node/net/stream_front.h"
#include "node/policy/policy_checker.h"
#include "node/resp/cl_throttle.h"
#include "node/resp/resp_front.h"

namespace tally {

class RespSession : public StreamSession {
 public:
  struct Shared {  // what the front owns; outlives the session
    const RespFront::Options* options;
    Limiter* limiter;
    PolicyStore* policies;  // null: no policies
    const RespFront::StatsSource* stats;
    RespFront::Counters* counters;  // this worker's
    FrontCounters* decided;         // the front's; stripe `worker` is this worker's
    size_t worker;
  };

  RespSession(const SessionContext& context, const Shared& shared, uint64_t client_id);

  StreamProgress Answer(std::span<const std::byte> received, std::string* out) override;
  void Refuse(StreamRefusal refusal, std::string_view message, std::string* out) override;
  void TrimMemory() override;

 private:
  using Args = std::span<const std::string_view>;

  // A queued check: what its reply needs besides the engine's decision.
  struct PendingCheck {
    bool throttle = false;  // CL.THROTTLE (else TALLY.CHECK)
    ThrottleArgs throttle_args;
  };

  // Answers one command, or queues it (a check); false: close the connection
  // after the reply.
  bool Dispatch(Args args, std::string* out);
  // Answers an error, after the checks queued before it.
  void Error(std::string_view text, std::string* out);
  // Appends an error reply now (counted), whatever is queued.
  void AppendErrorReply(std::string_view text, std::string* out);
  // "-ERR wrong number of arguments for 'name' command".
  void WrongArity(std::string_view name, std::string* out);

  // The connection's commands (resp_session.cc).
  void Hello(Args args, std::string* out);
  void Auth(Args args, std::string* out);
  void Client(Args args, std::string* out);
  void Command(Args args, std::string* out);
  void Info(Args args, std::string* out);
  // OK when `password` (for user `user`) is the configured one.
  Status CheckPassword(std::string_view user, std::string_view password) const;

  // The commands that decide (limit_commands.cc). Throttle and Check queue
  // the check (or answer an error); DecideQueued decides the queue in one
  // batch and appends its replies in order.
  void Throttle(Args args, std::string* out);
  void Check(Args args, std::string* out);
  void Queue(std::string_view key, const LimitSpec& spec, uint64_t cost, PendingCheck pending,
             std::string* out);
  void DecideQueued(std::string* out);
  void PolicyCheck(Args args, std::string* out);
  // TALLY.CHECK's and TALLY.POLICY's decision fields (6 pairs).
  void AppendDecision(const Decision& decision, bool allowed, std::string* out) const;

  const std::string& peer_;
  RateLimitedLog* const log_;
  const Shared shared_;
  const uint64_t client_id_;
  int resp_version_ = 2;
  bool authenticated_;
  std::string name_;                    // CLIENT SETNAME
  std::vector<std::string_view> args_;  // views into the received bytes, during Answer
  // The queued checks (keys: views into the received bytes, during Answer),
  // at most kMaxQueued; queued_at: when the first was queued.
  std::vector<Limiter::CheckRequest> batch_;
  std::vector<PendingCheck> pending_;
  std::vector<Limiter::CheckResult> results_;
  std::chrono::steady_clock::time_point queued_at_;
  std::vector<DescriptorEntry> entries_;  // TALLY.POLICY's descriptor
  std::vector<DescriptorOutcome> outcomes_;
  PolicyCheckScratch policy_scratch_;
};

// Strict decimal integers, as Redis parses command arguments.
bool ParseInt64(std::string_view text, int64_t* value);
// ASCII case-insensitive equality, for command and option names.
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

}  // namespace tally
