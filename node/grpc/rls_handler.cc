#include "node/grpc/rls_handler.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include <spdlog/spdlog.h>

#include "node/common/ratelimit_headers.h"
#include "node/grpc/rls_metadata.h"
#include "node/policy/policy_checker.h"

namespace tally {
namespace {

namespace rls = envoy::service::ratelimit::v3;
using Unit = rls::RateLimitResponse::RateLimit::Unit;

constexpr size_t kMaxLoggedDomains = 1'000;
constexpr uint32_t kUnlimitedRemaining = std::numeric_limits<uint32_t>::max();

uint32_t Clamp32(uint64_t value) {
  return static_cast<uint32_t>(std::min<uint64_t>(value, std::numeric_limits<uint32_t>::max()));
}

constexpr uint64_t kDayMs = 86'400'000;

// Envoy's units as envoyproxy/ratelimit counts them: a week is 7 days, a
// month 30, a year 365.
Unit UnitOf(uint64_t window_ms) {
  switch (window_ms) {
    case 1'000: return rls::RateLimitResponse::RateLimit::SECOND;
    case 60'000: return rls::RateLimitResponse::RateLimit::MINUTE;
    case 3'600'000: return rls::RateLimitResponse::RateLimit::HOUR;
    case kDayMs: return rls::RateLimitResponse::RateLimit::DAY;
    case 7 * kDayMs: return rls::RateLimitResponse::RateLimit::WEEK;
    case 30 * kDayMs: return rls::RateLimitResponse::RateLimit::MONTH;
    case 365 * kDayMs: return rls::RateLimitResponse::RateLimit::YEAR;
    default: return rls::RateLimitResponse::RateLimit::UNKNOWN;
  }
}

// The window of an Envoy RateLimitUnit; 0 for UNKNOWN.
uint64_t WindowMsOf(envoy::type::v3::RateLimitUnit unit) {
  switch (unit) {
    case envoy::type::v3::SECOND: return 1'000;
    case envoy::type::v3::MINUTE: return 60'000;
    case envoy::type::v3::HOUR: return 3'600'000;
    case envoy::type::v3::DAY: return kDayMs;
    case envoy::type::v3::WEEK: return 7 * kDayMs;
    case envoy::type::v3::MONTH: return 30 * kDayMs;
    case envoy::type::v3::YEAR: return 365 * kDayMs;
    default: return 0;
  }
}

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

// Per-thread scratch, so that steady traffic allocates little.
struct CallScratch {
  std::vector<std::vector<DescriptorEntry>> entries;
  std::vector<DescriptorView> views;
  std::vector<DescriptorOverride> overrides;
  std::vector<PolicyRule> override_rules;
  std::vector<DescriptorOutcome> outcomes;
  PolicyCheckScratch check;
};

}  // namespace

RlsHandler::RlsHandler(const Options& options, Limiter* limiter, PolicyStore* policies)
    : options_(options), limiter_(limiter), policies_(policies) {}

grpc::Status RlsHandler::Validate(const rls::RateLimitRequest& request) const {
  if (static_cast<size_t>(request.descriptors_size()) > options_.max_descriptors) {
    return Invalid(std::to_string(request.descriptors_size()) + " descriptors: at most " +
                   std::to_string(options_.max_descriptors) + " per request");
  }
  for (int i = 0; i < request.descriptors_size(); ++i) {
    const auto& descriptor = request.descriptors(i);
    const std::string which = "descriptor " + std::to_string(i);
    if (static_cast<size_t>(descriptor.entries_size()) > options_.max_entries) {
      return Invalid(which + " has " + std::to_string(descriptor.entries_size()) +
                     " entries: at most " + std::to_string(options_.max_entries));
    }
    if (descriptor.has_limit() && WindowMsOf(descriptor.limit().unit()) == 0) {
      return Invalid(which + "'s limit override has no unit " +
                     "(second, minute, hour, day, week, month or year)");
    }
  }
  return grpc::Status::OK;
}

void RlsHandler::LogUnknownDomainOnce(const std::string& domain) {
  std::lock_guard<std::mutex> lock(logged_mu_);
  if (logged_domains_.size() >= kMaxLoggedDomains || !logged_domains_.insert(domain).second) return;
  spdlog::warn("rate limit requests for domain '{}', which no policy defines: answered OK", domain);
}

grpc::Status RlsHandler::ShouldRateLimit(const rls::RateLimitRequest& request,
                                         rls::RateLimitResponse* response) {
  const auto started = std::chrono::steady_clock::now();
  if (grpc::Status valid = Validate(request); !valid.ok()) {
    counters_.refused.fetch_add(1, std::memory_order_relaxed);
    return valid;
  }
  static const auto kNoPolicies = std::make_shared<const PolicySet>();
  const std::shared_ptr<const PolicySet> policies =
      policies_ != nullptr ? policies_->Current() : kNoPolicies;
  const bool known_domain = policies->HasDomain(request.domain());

  thread_local CallScratch scratch;
  const size_t count = static_cast<size_t>(request.descriptors_size());
  scratch.entries.resize(count);
  scratch.views.resize(count);
  scratch.overrides.assign(count, DescriptorOverride());
  scratch.override_rules.clear();
  scratch.override_rules.reserve(count);  // the overrides point into it
  for (size_t i = 0; i < count; ++i) {
    const auto& descriptor = request.descriptors(static_cast<int>(i));
    std::vector<DescriptorEntry>& entries = scratch.entries[i];
    entries.clear();
    for (const auto& entry : descriptor.entries()) entries.push_back({entry.key(), entry.value()});
    scratch.views[i] = entries;
    if (descriptor.has_hits_addend()) scratch.overrides[i].hits = descriptor.hits_addend().value();
    if (descriptor.has_limit() && known_domain) {
      PolicyRule& rule = scratch.override_rules.emplace_back();
      rule.full_key = CounterKey(request.domain(), entries);
      rule.spec = LimitSpec{Algorithm::kFixedWindow, descriptor.limit().requests_per_unit(),
                            WindowMsOf(descriptor.limit().unit())};
      scratch.overrides[i].rule = &rule;
    }
  }
  if (Status valid = ValidatePolicyRequest(request.domain(), scratch.views); !valid.ok()) {
    counters_.refused.fetch_add(1, std::memory_order_relaxed);
    return Invalid(std::string(valid.message()));
  }
  if (!known_domain) LogUnknownDomainOnce(request.domain());
  CheckDescriptors(limiter_, *policies, request.domain(), scratch.views, request.hits_addend(),
                   &scratch.check, &scratch.outcomes, scratch.overrides);
  const size_t stripe = FrontCounters::ThreadStripe();
  decided_.Count(stripe, policies->DomainSlot(request.domain()), CountOutcomes(scratch.outcomes));
  decided_.RecordLatency(
      stripe, std::chrono::nanoseconds(std::chrono::steady_clock::now() - started).count());

  response->Clear();
  bool over_limit = false;
  const DescriptorOutcome* tightest = nullptr;  // the limited descriptor with the least remaining
  for (const DescriptorOutcome& outcome : scratch.outcomes) {
    auto* status = response->add_statuses();
    status->set_code(rls::RateLimitResponse::OK);
    if (outcome.kind == DescriptorOutcome::Kind::kUnlimited) {
      status->set_limit_remaining(kUnlimitedRemaining);
    }
    if (outcome.kind != DescriptorOutcome::Kind::kLimited) continue;
    if (!outcome.status.ok()) {
      counters_.refused.fetch_add(1, std::memory_order_relaxed);
      const auto code = outcome.status.code() == Status::Code::kResourceExhausted
                            ? grpc::StatusCode::RESOURCE_EXHAUSTED
                            : grpc::StatusCode::INVALID_ARGUMENT;
      response->Clear();
      return grpc::Status(code, std::string(outcome.status.message()));
    }
    const Decision& decision = outcome.decision;
    if (outcome.over_limit()) status->set_code(rls::RateLimitResponse::OVER_LIMIT);
    over_limit |= !outcome.allowed();
    if (outcome.shadow_denied) counters_.shadow_denied.fetch_add(1, std::memory_order_relaxed);
    auto* limit = status->mutable_current_limit();
    limit->set_requests_per_unit(Clamp32(outcome.rule->spec.limit));
    limit->set_unit(UnitOf(outcome.rule->spec.window_ms));
    limit->set_name(outcome.rule->name);
    status->set_limit_remaining(Clamp32(decision.remaining));
    status->mutable_duration_until_reset()->set_seconds(
        static_cast<int64_t>(decision.reset_after_ms / 1'000));
    status->mutable_duration_until_reset()->set_nanos(
        static_cast<int32_t>(decision.reset_after_ms % 1'000 * 1'000'000));
    if (tightest == nullptr || decision.remaining < tightest->decision.remaining)
      tightest = &outcome;
  }
  response->set_overall_code(over_limit ? rls::RateLimitResponse::OVER_LIMIT
                                        : rls::RateLimitResponse::OK);
  if (options_.response_headers && tightest != nullptr) {
    const PolicyRule& rule = *tightest->rule;
    Decision shown = tightest->decision;
    shown.allowed = tightest->allowed();  // a shadow denial is no denial to the client
    std::vector<HeaderField> headers;
    AppendRateLimitHeaders(rule.name.empty() ? rule.full_key : rule.name, shown,
                           rule.spec.window_ms, &headers);
    for (const HeaderField& header : headers) {
      auto* added = response->add_response_headers_to_add();
      added->set_key(header.name);
      added->set_value(header.value);
    }
  }
  if (options_.response_metadata) {
    FillDynamicMetadata(request, scratch.outcomes, response->mutable_dynamic_metadata());
  }
  counters_.requests.fetch_add(1, std::memory_order_relaxed);
  if (over_limit) counters_.over_limit.fetch_add(1, std::memory_order_relaxed);
  return grpc::Status::OK;
}

}  // namespace tally
