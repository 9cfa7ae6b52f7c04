// The commands that decide limits: CL.THROTTLE, TALLY.CHECK, TALLY.POLICY.
#include <string>

#include "node/resp/cl_throttle.h"
#include "node/resp/resp_session.h"

namespace tally {
namespace {

using protocol::AppendBulkString;
using protocol::AppendInteger;

constexpr char kNotAnInteger[] = "ERR value is not an integer or out of range";
// Checks decided in one batch at most (a longer pipeline makes several).
constexpr size_t kMaxQueued = 128;

// Non-negative integers, as the limit commands take them.
bool ParseCount(std::string_view text, int64_t* value) {
  return ParseInt64(text, value) && *value >= 0;
}

void AppendField(std::string_view name, int64_t value, std::string* out) {
  AppendBulkString(name, out);
  AppendInteger(value, out);
}

std::string_view KindName(DescriptorOutcome::Kind kind) {
  switch (kind) {
    case DescriptorOutcome::Kind::kNoLimit: return "no_limit";
    case DescriptorOutcome::Kind::kUnlimited: return "unlimited";
    case DescriptorOutcome::Kind::kLimited: return "limited";
  }
  return "no_limit";
}

}  // namespace

// CL.THROTTLE key max_burst count_per_period period [quantity]
void RespSession::Throttle(Args args, std::string* out) {
  if (args.size() != 5 && args.size() != 6) return WrongArity("cl.throttle", out);
  PendingCheck pending;
  pending.throttle = true;
  ThrottleArgs& throttle = pending.throttle_args;
  if (!ParseInt64(args[2], &throttle.max_burst) ||
      !ParseInt64(args[3], &throttle.count_per_period) ||
      !ParseInt64(args[4], &throttle.period_s) ||
      (args.size() == 6 && !ParseInt64(args[5], &throttle.quantity))) {
    return Error(kNotAnInteger, out);
  }
  LimitSpec spec;
  if (Status status = ThrottleSpec(throttle, &spec); !status.ok()) {
    return Error("ERR " + std::string(status.message()), out);
  }
  Queue(args[1], spec, static_cast<uint64_t>(throttle.quantity), pending, out);
}

// TALLY.CHECK key algorithm limit window_ms [cost]
void RespSession::Check(Args args, std::string* out) {
  if (args.size() != 5 && args.size() != 6) return WrongArity("tally.check", out);
  const std::optional<Algorithm> algorithm = ParseAlgorithm(args[2]);
  if (!algorithm) {
    return Error("ERR unknown algorithm '" + std::string(args[2].substr(0, 64)) +
                     "' (fixed_window, sliding_log, sliding_counter, token_bucket)",
                 out);
  }
  int64_t limit = 0, window_ms = 0, cost = 1;
  if (!ParseCount(args[3], &limit) || !ParseCount(args[4], &window_ms) ||
      (args.size() == 6 && !ParseCount(args[5], &cost))) {
    return Error(kNotAnInteger, out);
  }
  const LimitSpec spec{*algorithm, static_cast<uint64_t>(limit), static_cast<uint64_t>(window_ms)};
  Queue(args[1], spec, static_cast<uint64_t>(cost), PendingCheck(), out);
}

void RespSession::Queue(std::string_view key, const LimitSpec& spec, uint64_t cost,
                        PendingCheck pending, std::string* out) {
  if (pending_.empty()) queued_at_ = std::chrono::steady_clock::now();
  batch_.push_back(Limiter::CheckRequest{key, spec, cost});
  pending_.push_back(pending);
  if (pending_.size() == kMaxQueued) DecideQueued(out);
}

void RespSession::DecideQueued(std::string* out) {
  if (pending_.empty()) return;
  results_.resize(batch_.size());
  shared_.limiter->CheckBatch(batch_, results_);
  const auto took = std::chrono::steady_clock::now() - queued_at_;
  FrontCounters::Outcomes counted;
  for (size_t i = 0; i < pending_.size(); ++i) {
    const Limiter::CheckResult& result = results_[i];
    if (!result.status.ok()) {
      AppendErrorReply("ERR " + std::string(result.status.message()), out);
      continue;
    }
    const Decision& decision = result.decision;
    bool allowed = decision.allowed;
    if (pending_[i].throttle) {
      const ThrottleReply reply = ToThrottleReply(pending_[i].throttle_args, decision);
      allowed = reply.limited == 0;
      protocol::AppendArrayHeader(5, out);
      AppendInteger(reply.limited, out);
      AppendInteger(reply.limit, out);
      AppendInteger(reply.remaining, out);
      AppendInteger(reply.retry_after_s, out);
      AppendInteger(reply.reset_after_s, out);
    } else {
      protocol::AppendMapHeader(6, resp_version_, out);
      AppendDecision(decision, allowed, out);
    }
    ++(allowed ? counted.allowed : counted.denied);
  }
  // Each decided command waited for the whole batch.
  shared_.decided->Count(shared_.worker, FrontCounters::kNoDomain, counted);
  shared_.decided->RecordLatency(shared_.worker, std::chrono::nanoseconds(took).count(),
                                 counted.allowed + counted.denied);
  batch_.clear();
  pending_.clear();
}

// TALLY.POLICY domain key value [key value ...] [HITS n]
void RespSession::PolicyCheck(Args args, std::string* out) {
  if (args.size() < 4 || args.size() % 2 != 0) return WrongArity("tally.policy", out);
  const auto started = std::chrono::steady_clock::now();
  size_t end = args.size();
  int64_t hits = 0;
  if (end >= 6 && EqualsIgnoreCase(args[end - 2], "HITS")) {
    if (!ParseCount(args[end - 1], &hits)) return Error(kNotAnInteger, out);
    end -= 2;
  }
  entries_.clear();
  for (size_t i = 2; i < end; i += 2) entries_.push_back(DescriptorEntry{args[i], args[i + 1]});
  const DescriptorView descriptor(entries_);
  const std::span<const DescriptorView> descriptors(&descriptor, 1);
  if (Status valid = ValidatePolicyRequest(args[1], descriptors); !valid.ok()) {
    return Error("ERR " + std::string(valid.message()), out);
  }
  static const PolicySet kNoPolicies;
  const std::shared_ptr<const PolicySet> policies =
      shared_.policies != nullptr ? shared_.policies->Current() : nullptr;
  CheckDescriptors(shared_.limiter, policies ? *policies : kNoPolicies, args[1], descriptors,
                   static_cast<uint64_t>(hits), &policy_scratch_, &outcomes_);
  const DescriptorOutcome& outcome = outcomes_.front();
  if (!outcome.status.ok()) return Error("ERR " + std::string(outcome.status.message()), out);
  FrontCounters::Outcomes counted;
  ++(outcome.allowed() ? counted.allowed : counted.denied);
  counted.shadow_denied = outcome.shadow_denied ? 1 : 0;
  shared_.decided->Count(shared_.worker,
                         policies ? policies->DomainSlot(args[1]) : FrontCounters::kOtherDomain,
                         counted);
  const auto took = std::chrono::steady_clock::now() - started;
  shared_.decided->RecordLatency(shared_.worker, std::chrono::nanoseconds(took).count());
  protocol::AppendMapHeader(10, resp_version_, out);
  // A descriptor without a limit, an unlimited one and a shadow denial pass.
  AppendDecision(outcome.decision, outcome.allowed(), out);
  AppendBulkString("kind", out);
  AppendBulkString(KindName(outcome.kind), out);
  AppendBulkString("rule", out);
  if (outcome.rule == nullptr) {
    protocol::AppendNull(resp_version_, out);
  } else {
    AppendBulkString(outcome.rule->name.empty() ? outcome.rule->full_key : outcome.rule->name, out);
  }
  AppendField("shadow_denied", outcome.shadow_denied ? 1 : 0, out);
  AppendBulkString("metadata", out);  // the rule's, as JSON
  if (outcome.rule == nullptr || outcome.rule->metadata_json.empty()) {
    protocol::AppendNull(resp_version_, out);
  } else {
    AppendBulkString(outcome.rule->metadata_json, out);
  }
}

void RespSession::AppendDecision(const Decision& decision, bool allowed, std::string* out) const {
  AppendField("allowed", allowed ? 1 : 0, out);
  AppendField("limit", static_cast<int64_t>(decision.limit), out);
  AppendField("remaining", static_cast<int64_t>(decision.remaining), out);
  AppendField("retry_after_ms", static_cast<int64_t>(decision.retry_after_ms), out);
  AppendField("reset_after_ms", static_cast<int64_t>(decision.reset_after_ms), out);
  AppendField("never_allowed", decision.never_allowed ? 1 : 0, out);
}

}  // namespace tally
