#include "node/http/check_front.h"

#include <charconv>
#include <chrono>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "node/common/ratelimit_headers.h"
#include "node/http/json_writer.h"
#include "node/http/query_string.h"
#include "node/policy/policy_checker.h"

namespace tally {
namespace {

using Json = nlohmann::ordered_json;

// Caps on one request by policy (as the gRPC front's defaults).
constexpr size_t kMaxDescriptors = 256;
constexpr size_t kMaxEntries = 32;

// A request that is answered with an error instead of a decision.
struct BadRequest {
  int status;
  std::string message;
};

void Add(std::atomic<uint64_t>& counter, uint64_t value) {
  if (value != 0) counter.fetch_add(value, std::memory_order_relaxed);
}

int StatusOfError(const Status& status) {
  return status.code() == Status::Code::kResourceExhausted ? 503 : 400;
}

// `text` as a uint64; false if it is not one.
bool ParseNumber(std::string_view text, uint64_t* value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size() && !text.empty();
}

// The unsigned integer member `name` of `object`, or `fallback` when absent.
uint64_t NumberField(const Json& object, const char* name, uint64_t fallback) {
  const auto it = object.find(name);
  if (it == object.end()) return fallback;
  if (!it->is_number_unsigned()) {
    throw BadRequest{400, std::string("\"") + name + "\" must be a non-negative integer"};
  }
  return it->get<uint64_t>();
}

const std::string& StringField(const Json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end() || !it->is_string()) {
    throw BadRequest{400, std::string("\"") + name + "\" must be a string"};
  }
  return it->get_ref<const std::string&>();
}

Json ParseBody(std::string_view body) {
  Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) throw BadRequest{400, "the body is not valid JSON"};
  if (!json.is_object()) throw BadRequest{400, "the body must be a JSON object"};
  return json;
}

void AddDecision(const Decision& decision, JsonWriter* json) {
  json->Bool("allowed", decision.allowed);
  json->Number("limit", decision.limit);
  json->Number("remaining", decision.remaining);
  json->Number("reset_after_ms", decision.reset_after_ms);
  json->Number("retry_after_ms", decision.retry_after_ms);
  json->Bool("never_allowed", decision.never_allowed);
}

// One connection's checks; owned by its worker's thread. The scratch keeps
// its memory between requests.
class CheckHandler : public HttpHandler {
 public:
  CheckHandler(Limiter* limiter, PolicyStore* policies, CheckFront::Counters* counters,
               FrontCounters* decided, size_t stripe)
      : limiter_(limiter),
        policies_(policies),
        counters_(counters),
        decided_(decided),
        stripe_(stripe) {}

  void Handle(const HttpRequest& request, HttpResponse* response) override {
    Add(counters_->requests, 1);
    const auto started = std::chrono::steady_clock::now();
    try {
      Route(request, response);
    } catch (const BadRequest& bad) {
      SetJsonError(bad.status, bad.message, response);
      Add(counters_->refused, 1);
      FrontCounters::Outcomes error;
      error.errors = 1;
      decided_->Count(stripe_, FrontCounters::kNoDomain, error);
    }
    const auto took = std::chrono::steady_clock::now() - started;
    decided_->RecordLatency(stripe_, std::chrono::nanoseconds(took).count());
  }

  void Refused() override {
    Add(counters_->requests, 1);
    Add(counters_->refused, 1);
  }

 private:
  void Route(const HttpRequest& request, HttpResponse* response) {
    const bool get = request.method == "GET";
    const bool post = request.method == "POST";
    if (request.path == "/v1/policy") {
      if (!get && !post) return MethodNotAllowed("GET, POST", response);
      return post ? PolicyFromJson(request.body, response)
                  : PolicyFromQuery(request.query, /*deny_status=*/429, response);
    }
    if (request.path == "/v1/auth") return PolicyFromQuery(request.query, 403, response);
    if (request.path == "/v1/check") {
      if (!get && !post) return MethodNotAllowed("GET, POST", response);
      return post ? CheckFromJson(request.body, response) : CheckFromQuery(request.query, response);
    }
    throw BadRequest{404, "no such endpoint: " + std::string(request.path) +
                              " (try /v1/policy, /v1/check or /v1/auth)"};
  }

  void MethodNotAllowed(std::string_view allow, HttpResponse* response) {
    response->AddHeader("Allow", allow);
    throw BadRequest{405, "this endpoint takes " + std::string(allow)};
  }

  void ParseQueryOrThrow(std::string_view query) {
    if (Status status = ParseQuery(query, &params_); !status.ok()) {
      throw BadRequest{400, std::string(status.message())};
    }
  }

  void PolicyFromQuery(std::string_view query, int deny_status, HttpResponse* response) {
    ParseQueryOrThrow(query);
    std::string_view domain;
    uint64_t hits = 0;
    ResizeDescriptors(1);
    for (const auto& [name, value] : params_) {
      if (name == "domain") {
        domain = value;
      } else if (name == "hits_addend") {
        if (!ParseNumber(value, &hits)) throw BadRequest{400, "hits_addend must be a number"};
      } else {
        entries_[0].push_back({name, value});
      }
    }
    DecidePolicy(domain, hits, deny_status, response);
  }

  void PolicyFromJson(std::string_view body, HttpResponse* response) {
    const Json json = ParseBody(body);
    const std::string& domain = StringField(json, "domain");
    const auto descriptors = json.find("descriptors");
    if (descriptors == json.end() || !descriptors->is_array()) {
      throw BadRequest{400, "\"descriptors\" must be an array"};
    }
    ResizeDescriptors(descriptors->size());
    for (size_t i = 0; i < descriptors->size(); ++i) {
      const Json& descriptor = (*descriptors)[i];
      const auto entries = descriptor.is_object() ? descriptor.find("entries") : descriptor.end();
      if (entries == descriptor.end() || !entries->is_array()) {
        throw BadRequest{400, "descriptor " + std::to_string(i) + ": \"entries\" must be an array"};
      }
      for (const Json& entry : *entries) {
        if (!entry.is_object()) throw BadRequest{400, "an entry must be an object"};
        entries_[i].push_back({StringField(entry, "key"), StringField(entry, "value")});
      }
      overrides_[i].hits = NumberField(descriptor, "hits_addend", 0);
    }
    DecidePolicy(domain, NumberField(json, "hits_addend", 0), 429, response);
  }

  void ResizeDescriptors(size_t count) {
    if (count > kMaxDescriptors) {
      throw BadRequest{400, std::to_string(count) + " descriptors: at most " +
                                std::to_string(kMaxDescriptors) + " per request"};
    }
    if (entries_.size() < count) entries_.resize(count);
    for (size_t i = 0; i < count; ++i) entries_[i].clear();
    views_.resize(count);
    overrides_.assign(count, DescriptorOverride());
  }

  void DecidePolicy(std::string_view domain, uint64_t hits, int deny_status,
                    HttpResponse* response) {
    for (size_t i = 0; i < views_.size(); ++i) {
      if (entries_[i].size() > kMaxEntries) {
        throw BadRequest{400, "descriptor " + std::to_string(i) + " has " +
                                  std::to_string(entries_[i].size()) + " entries: at most " +
                                  std::to_string(kMaxEntries)};
      }
      views_[i] = entries_[i];
    }
    if (Status valid = ValidatePolicyRequest(domain, views_); !valid.ok()) {
      throw BadRequest{400, std::string(valid.message())};
    }
    static const auto kNoPolicies = std::make_shared<const PolicySet>();
    const std::shared_ptr<const PolicySet> policies =
        policies_ != nullptr ? policies_->Current() : kNoPolicies;
    if (!policies->HasDomain(domain)) {
      throw BadRequest{400, "unknown domain '" + std::string(domain) + "': no policy defines it"};
    }
    CheckDescriptors(limiter_, *policies, domain, views_, hits, &scratch_, &outcomes_, overrides_);

    const DescriptorOutcome* shown = nullptr;  // whose headers the client gets
    bool denied = false, fixable = false;
    uint64_t shadow_denied = 0, quota_exceeded = 0;
    for (const DescriptorOutcome& outcome : outcomes_) {
      if (outcome.kind != DescriptorOutcome::Kind::kLimited) continue;
      if (!outcome.status.ok()) {
        throw BadRequest{StatusOfError(outcome.status), std::string(outcome.status.message())};
      }
      shadow_denied += outcome.shadow_denied ? 1 : 0;
      quota_exceeded += outcome.quota_exceeded ? 1 : 0;
      if (!outcome.allowed()) {
        denied = true;
        fixable |= !outcome.decision.never_allowed;
      }
      if (shown == nullptr || Tighter(outcome, *shown)) shown = &outcome;
    }
    WritePolicyBody(domain, !denied, shadow_denied > 0, quota_exceeded > 0, &response->body);
    if (shown != nullptr) {
      Decision decision = shown->decision;
      decision.allowed = shown->allowed();  // a shadow denial is no denial to the client
      const PolicyRule& rule = *shown->rule;
      AppendRateLimitHeaderLines(rule.name.empty() ? rule.full_key : rule.name, decision,
                                 rule.spec.window_ms, &response->headers);
    }
    if (shadow_denied > 0) response->AddHeader("Tally-Shadow-Denied", "1");
    if (quota_exceeded > 0) response->AddHeader("Tally-Quota-Exceeded", "1");
    response->status = !denied ? 200 : (fixable ? deny_status : 403);
    Count(!denied, policies->DomainSlot(domain), shadow_denied, quota_exceeded);
    Add(counters_->shadow_denied, shadow_denied);
  }

  // The whole decision of a check by policy, from outcomes_.
  void WritePolicyBody(std::string_view domain, bool allowed, bool shadow_denied,
                       bool quota_exceeded, std::string* out) const {
    JsonWriter json(out);
    json.BeginObject();
    json.Bool("allowed", allowed);
    json.String("domain", domain);
    json.Bool("shadow_denied", shadow_denied);
    json.Bool("quota_exceeded", quota_exceeded);
    json.BeginArray("descriptors");
    for (const DescriptorOutcome& outcome : outcomes_) {
      json.BeginObject();
      if (outcome.kind == DescriptorOutcome::Kind::kNoLimit) {
        json.String("kind", "no_limit");
        json.EndObject();
        continue;
      }
      const PolicyRule& rule = *outcome.rule;
      const bool unlimited = outcome.kind == DescriptorOutcome::Kind::kUnlimited;
      json.String("kind", unlimited ? "unlimited" : "limited");
      json.String("rule", rule.name.empty() ? rule.full_key : rule.name);
      if (!unlimited) {
        json.String("algorithm", AlgorithmName(rule.spec.algorithm));
        json.Number("window_ms", rule.spec.window_ms);
        AddDecision(outcome.decision, &json);
        json.Bool("shadow_denied", outcome.shadow_denied);
        json.Bool("quota_exceeded", outcome.quota_exceeded);
      }
      if (!rule.metadata_json.empty()) json.Json("metadata", rule.metadata_json);
      json.EndObject();
    }
    json.EndArray();
    json.EndObject();
    *out += '\n';
  }

  // Whether `a`'s headers tell the client more than `b`'s: a denial before an
  // admission, the longer wait among denials, the least remaining otherwise.
  static bool Tighter(const DescriptorOutcome& a, const DescriptorOutcome& b) {
    if (a.allowed() != b.allowed()) return !a.allowed();
    if (!a.allowed()) return a.decision.retry_after_ms > b.decision.retry_after_ms;
    return a.decision.remaining < b.decision.remaining;
  }

  void CheckFromQuery(std::string_view query, HttpResponse* response) {
    ParseQueryOrThrow(query);
    std::string_view key, algorithm = "sliding_counter";
    std::string_view limit, window_ms, cost;
    for (const auto& [name, value] : params_) {
      if (name == "key") {
        key = value;
      } else if (name == "algorithm") {
        algorithm = value;
      } else if (name == "limit") {
        limit = value;
      } else if (name == "window_ms") {
        window_ms = value;
      } else if (name == "cost") {
        cost = value;
      } else {
        throw BadRequest{
            400, "unknown parameter '" + name + "' (key, algorithm, limit, window_ms, cost)"};
      }
    }
    LimitSpec spec;
    uint64_t cost_value = 1;
    if (!ParseNumber(limit, &spec.limit)) throw BadRequest{400, "limit must be a number"};
    if (!ParseNumber(window_ms, &spec.window_ms)) {
      throw BadRequest{400, "window_ms must be a number"};
    }
    if (!cost.empty() && !ParseNumber(cost, &cost_value)) {
      throw BadRequest{400, "cost must be a number"};
    }
    Decide(key, algorithm, spec, cost_value, response);
  }

  void CheckFromJson(std::string_view body, HttpResponse* response) {
    const Json json = ParseBody(body);
    LimitSpec spec;
    if (!json.contains("limit") || !json.contains("window_ms")) {
      throw BadRequest{400, "\"limit\" and \"window_ms\" are required"};
    }
    spec.limit = NumberField(json, "limit", 0);
    spec.window_ms = NumberField(json, "window_ms", 0);
    const std::string& algorithm =
        json.contains("algorithm") ? StringField(json, "algorithm") : kDefaultAlgorithm;
    Decide(StringField(json, "key"), algorithm, spec, NumberField(json, "cost", 1), response);
  }

  void Decide(std::string_view key, std::string_view algorithm_name, LimitSpec spec, uint64_t cost,
              HttpResponse* response) {
    const std::optional<Algorithm> algorithm = ParseAlgorithm(algorithm_name);
    if (!algorithm) {
      throw BadRequest{400, "unknown algorithm '" + std::string(algorithm_name) +
                                "' (fixed_window, sliding_log, sliding_counter, token_bucket)"};
    }
    spec.algorithm = *algorithm;
    Decision decision;
    if (Status status = limiter_->Check(key, spec, cost, &decision); !status.ok()) {
      throw BadRequest{StatusOfError(status), std::string(status.message())};
    }
    JsonWriter json(&response->body);
    json.BeginObject();
    json.String("key", key);
    json.String("algorithm", algorithm_name);
    json.Number("window_ms", spec.window_ms);
    json.Number("cost", cost);
    AddDecision(decision, &json);
    json.EndObject();
    response->body += '\n';
    AppendRateLimitHeaderLines(key, decision, spec.window_ms, &response->headers);
    response->status = decision.allowed ? 200 : (decision.never_allowed ? 403 : 429);
    Count(decision.allowed, FrontCounters::kNoDomain, 0);
  }

  // One decided request: its stats, and its outcome in the front's counters
  // under the policy domain's metrics slot.
  void Count(bool allowed, size_t domain_slot, uint64_t shadow_denied,
             uint64_t quota_exceeded = 0) {
    Add(allowed ? counters_->allowed : counters_->denied, 1);
    FrontCounters::Outcomes outcome;
    (allowed ? outcome.allowed : outcome.denied) = 1;
    outcome.shadow_denied = shadow_denied;
    outcome.quota_exceeded = quota_exceeded;
    decided_->Count(stripe_, domain_slot, outcome);
  }

  static inline const std::string kDefaultAlgorithm = "sliding_counter";

  Limiter* const limiter_;
  PolicyStore* const policies_;
  CheckFront::Counters* const counters_;
  FrontCounters* const decided_;
  const size_t stripe_;  // this worker's
  QueryParams params_;
  std::vector<std::vector<DescriptorEntry>> entries_;
  std::vector<DescriptorView> views_;
  std::vector<DescriptorOverride> overrides_;
  std::vector<DescriptorOutcome> outcomes_;
  PolicyCheckScratch scratch_;
};

}  // namespace

CheckFront::CheckFront(const HttpLimits& limits, Limiter* limiter, PolicyStore* policies,
                       size_t workers)
    : HttpFront(limits),
      limiter_(limiter),
      policies_(policies),
      counters_(workers),
      decided_(workers, FrontCounters::Writers::kOnePerStripe) {}

CheckFront::Stats CheckFront::stats() const {
  Stats stats;
  for (const Counters& counters : counters_) {
    stats.requests += counters.requests.load(std::memory_order_relaxed);
    stats.allowed += counters.allowed.load(std::memory_order_relaxed);
    stats.denied += counters.denied.load(std::memory_order_relaxed);
    stats.refused += counters.refused.load(std::memory_order_relaxed);
    stats.shadow_denied += counters.shadow_denied.load(std::memory_order_relaxed);
  }
  return stats;
}

std::unique_ptr<HttpHandler> CheckFront::NewHandler(const SessionContext& context) {
  return std::make_unique<CheckHandler>(limiter_, policies_, &counters_[context.worker_index],
                                        &decided_, context.worker_index);
}

}  // namespace tally
