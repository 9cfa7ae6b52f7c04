#include "node/server/request_handler.h"

#include <utility>

#include "protocol/codec.h"

namespace tally {

RequestHandler::RequestHandler(Limiter* limiter, WorkerCounters* counters, StatsSource stats)
    : limiter_(limiter), counters_(counters), stats_(std::move(stats)) {}

void RequestHandler::Handle(const protocol::Request& request, protocol::Response* response) {
  response->id = request.id;
  response->outcomes.clear();
  response->error = protocol::ErrorCode::kOk;
  response->error_message.clear();
  switch (request.kind) {
    case protocol::RequestKind::kCheck:
      response->kind = protocol::ResponseKind::kCheck;
      HandleChecks(request, response);
      return;
    case protocol::RequestKind::kStats:
      response->kind = protocol::ResponseKind::kStats;
      response->stats = stats_();
      return;
    case protocol::RequestKind::kUnknown:
      break;
  }
  response->kind = protocol::ResponseKind::kError;
  response->error = protocol::ErrorCode::kUnsupported;
  response->error_message = "this server does not know that request kind";
}

void RequestHandler::TrimScratch(size_t kept_checks) {
  if (batch_.capacity() > kept_checks) std::vector<Limiter::CheckRequest>().swap(batch_);
  if (results_.capacity() > kept_checks) std::vector<Limiter::CheckResult>().swap(results_);
}

void RequestHandler::HandleChecks(const protocol::Request& request, protocol::Response* response) {
  const size_t count = request.checks.size();
  batch_.resize(count);
  results_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const protocol::Check& check = request.checks[i];
    batch_[i] = Limiter::CheckRequest{check.key, check.spec, check.cost};
  }
  limiter_->CheckBatch(batch_, results_);

  response->outcomes.resize(count);
  uint64_t allowed = 0;
  uint64_t errors = 0;
  for (size_t i = 0; i < count; ++i) {
    protocol::CheckOutcome& outcome = response->outcomes[i];
    const Limiter::CheckResult& result = results_[i];
    outcome.error = protocol::ErrorCodeFor(result.status);
    if (result.status.ok()) {
      outcome.error_message.clear();
      outcome.decision = result.decision;
      allowed += result.decision.allowed ? 1 : 0;
    } else {
      outcome.error_message.assign(result.status.message());
      outcome.decision = Decision();
      ++errors;
    }
  }
  WorkerCounters::Add(counters_->checks, count);
  WorkerCounters::Add(counters_->allowed, allowed);
  WorkerCounters::Add(counters_->denied, count - allowed - errors);
  WorkerCounters::Add(counters_->errors, errors);
}

}  // namespace tally
