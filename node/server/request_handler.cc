#include "node/server/request_handler.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "protocol/codec.h"

namespace tally {

static_assert(static_cast<int>(DescriptorOutcome::Kind::kNoLimit) ==
              static_cast<int>(protocol::PolicyOutcome::Kind::kNoLimit));
static_assert(static_cast<int>(DescriptorOutcome::Kind::kUnlimited) ==
              static_cast<int>(protocol::PolicyOutcome::Kind::kUnlimited));
static_assert(static_cast<int>(DescriptorOutcome::Kind::kLimited) ==
              static_cast<int>(protocol::PolicyOutcome::Kind::kLimited));

RequestHandler::RequestHandler(Limiter* limiter, FrontCounters* counters, size_t stripe,
                               StatsSource stats, PolicyStore* policies, ForgetMember forget_member)
    : limiter_(limiter),
      counters_(counters),
      stripe_(stripe),
      stats_(std::move(stats)),
      policies_(policies),
      forget_member_(std::move(forget_member)) {}

namespace {

// Starts the answer to `request` afresh, keeping the response's memory.
void StartResponse(const protocol::Request& request, protocol::Response* response) {
  response->id = request.id;
  response->outcomes.clear();
  response->policy_outcomes.clear();
  response->error = protocol::ErrorCode::kOk;
  response->error_message.clear();
}

}  // namespace

void RequestHandler::Handle(const protocol::Request& request, protocol::Response* response) {
  if (request.kind == protocol::RequestKind::kCheck) {
    return HandleChecks(std::span(&request, 1), std::span(response, 1));
  }
  StartResponse(request, response);
  switch (request.kind) {
    case protocol::RequestKind::kCheck: return;  // answered above
    case protocol::RequestKind::kStats:
      response->kind = protocol::ResponseKind::kStats;
      response->stats = stats_();
      return;
    case protocol::RequestKind::kPolicyCheck: {
      const auto started = std::chrono::steady_clock::now();
      HandlePolicyCheck(request.policy_check, response);
      const auto took = std::chrono::steady_clock::now() - started;
      counters_->RecordLatency(stripe_, std::chrono::nanoseconds(took).count());
      return;
    }
    case protocol::RequestKind::kInspect: HandleInspect(request.key_limit, response); return;
    case protocol::RequestKind::kReset: HandleReset(request.key_limit, response); return;
    case protocol::RequestKind::kForgetMember:
      if (!forget_member_) break;  // a node that does not gossip has no members
      HandleForgetMember(request.member_id, response);
      return;
    case protocol::RequestKind::kUnknown: break;
  }
  response->kind = protocol::ResponseKind::kError;
  response->error = protocol::ErrorCode::kUnsupported;
  response->error_message = "this server does not know that request kind";
}

void RequestHandler::HandleAll(std::span<const protocol::Request> requests,
                               std::span<protocol::Response> responses) {
  size_t begin = 0;
  while (begin < requests.size()) {
    if (requests[begin].kind != protocol::RequestKind::kCheck) {
      Handle(requests[begin], &responses[begin]);
      ++begin;
      continue;
    }
    size_t end = begin + 1;
    while (end < requests.size() && requests[end].kind == protocol::RequestKind::kCheck) ++end;
    HandleChecks(requests.subspan(begin, end - begin), responses.subspan(begin, end - begin));
    begin = end;
  }
}

void RequestHandler::TrimScratch(size_t kept_checks) {
  if (batch_.capacity() > kept_checks) std::vector<Limiter::CheckRequest>().swap(batch_);
  if (results_.capacity() > kept_checks) std::vector<Limiter::CheckResult>().swap(results_);
}

void RequestHandler::HandleChecks(std::span<const protocol::Request> requests,
                                  std::span<protocol::Response> responses) {
  const auto started = std::chrono::steady_clock::now();
  batch_.clear();
  for (const protocol::Request& request : requests) {
    for (const protocol::Check& check : request.checks) {
      batch_.push_back(Limiter::CheckRequest{check.key, check.spec, check.cost});
    }
  }
  results_.resize(batch_.size());
  limiter_->CheckBatch(batch_, results_);

  FrontCounters::Outcomes counted;
  const Limiter::CheckResult* result = results_.data();
  for (size_t i = 0; i < requests.size(); ++i) {
    protocol::Response& response = responses[i];
    StartResponse(requests[i], &response);
    response.kind = protocol::ResponseKind::kCheck;
    response.outcomes.resize(requests[i].checks.size());
    for (protocol::CheckOutcome& outcome : response.outcomes) {
      outcome.error = protocol::ErrorCodeFor(result->status);
      if (result->status.ok()) {
        outcome.error_message.clear();
        outcome.decision = result->decision;
        ++(result->decision.allowed ? counted.allowed : counted.denied);
      } else {
        outcome.error_message.assign(result->status.message());
        outcome.decision = Decision();
        ++counted.errors;
      }
      ++result;
    }
  }
  counters_->Count(stripe_, FrontCounters::kNoDomain, counted);
  const auto took = std::chrono::steady_clock::now() - started;
  counters_->RecordLatency(stripe_, std::chrono::nanoseconds(took).count(), requests.size());
}

void RequestHandler::HandlePolicyCheck(const protocol::PolicyCheck& check,
                                       protocol::Response* response) {
  descriptors_.clear();
  size_t next = 0;
  for (const uint32_t size : check.descriptor_sizes) {
    descriptors_.push_back(DescriptorView(check.entries).subspan(next, size));
    next += size;
  }
  if (Status valid = ValidatePolicyRequest(check.domain, descriptors_); !valid.ok()) {
    response->kind = protocol::ResponseKind::kError;
    response->error = protocol::ErrorCode::kInvalidArgument;
    response->error_message.assign(valid.message());
    return;
  }
  static const PolicySet kNoPolicies;
  const std::shared_ptr<const PolicySet> policies =
      policies_ != nullptr ? policies_->Current() : nullptr;
  CheckDescriptors(limiter_, policies ? *policies : kNoPolicies, check.domain, descriptors_,
                   check.hits, &policy_scratch_, &policy_outcomes_);

  response->kind = protocol::ResponseKind::kPolicyCheck;
  response->policy_outcomes.resize(policy_outcomes_.size());
  for (size_t i = 0; i < policy_outcomes_.size(); ++i) {
    const DescriptorOutcome& in = policy_outcomes_[i];
    protocol::PolicyOutcome& out = response->policy_outcomes[i];
    out = protocol::PolicyOutcome();
    out.kind = static_cast<protocol::PolicyOutcome::Kind>(in.kind);
    if (in.rule != nullptr) {
      out.rule = in.rule->name.empty() ? in.rule->full_key : in.rule->name;
      out.spec = in.rule->spec;
    }
    if (in.kind != DescriptorOutcome::Kind::kLimited) continue;
    out.error = protocol::ErrorCodeFor(in.status);
    if (!in.status.ok()) {
      out.error_message.assign(in.status.message());
      continue;
    }
    out.decision = in.decision;
    out.shadow_denied = in.shadow_denied;
    out.quota_exceeded = in.quota_exceeded;
  }
  const size_t domain_slot =
      policies ? policies->DomainSlot(check.domain) : FrontCounters::kOtherDomain;
  counters_->Count(stripe_, domain_slot, CountOutcomes(policy_outcomes_));
}

namespace {

void Refuse(const Status& status, protocol::Response* response) {
  response->kind = protocol::ResponseKind::kError;
  response->error = protocol::ErrorCodeFor(status);
  response->error_message.assign(status.message());
}

// The node's entry in `nodes`, added (with zero counts) if missing.
protocol::NodeCounts& EntryOf(std::vector<protocol::NodeCounts>& nodes, NodeId node) {
  for (protocol::NodeCounts& counts : nodes) {
    if (counts.node_id == node) return counts;
  }
  return nodes.emplace_back(protocol::NodeCounts{node, 0, 0, 0});
}

}  // namespace

void RequestHandler::HandleInspect(const protocol::KeyLimit& limit, protocol::Response* response) {
  KeySnapshot snapshot;
  const Status status = limiter_->Read(limit.key, limit.spec, &snapshot);
  if (!status.ok() && status.code() != Status::Code::kNotFound) return Refuse(status, response);
  response->kind = protocol::ResponseKind::kInspect;
  protocol::InspectReply& reply = response->inspect;
  reply = protocol::InspectReply();
  reply.node_id = limiter_->node_id();
  reply.found = status.ok();
  if (!reply.found) return;
  reply.window_index = snapshot.counts.window_index;
  for (const GCounter::Slot& slot : snapshot.counts.current.slots()) {
    EntryOf(reply.nodes, slot.node).current = slot.count;
  }
  for (const GCounter::Slot& slot : snapshot.counts.previous.slots()) {
    EntryOf(reply.nodes, slot.node).previous = slot.count;
  }
  for (const NodeStamps& node : snapshot.log) {
    protocol::NodeCounts& counts = EntryOf(reply.nodes, node.node);
    counts.stamps = node.stamps.size();
    for (const LogStamp& stamp : node.stamps) counts.current += stamp.cost;
  }
  for (const NodeSlices& node : snapshot.bucket.nodes) {
    for (uint32_t count : node.counts) EntryOf(reply.nodes, node.node).current += count;
  }
  std::sort(reply.nodes.begin(), reply.nodes.end(),
            [](const auto& a, const auto& b) { return a.node_id < b.node_id; });
  reply.bucket_level = snapshot.bucket_level;
  reply.bucket_refilled_at_ms = snapshot.bucket_level_at_ms;
}

void RequestHandler::HandleReset(const protocol::KeyLimit& limit, protocol::Response* response) {
  if (limiter_->replicated() && !limit.local) {
    return Refuse(
        Status::InvalidArgument(
            "this node is in a cluster: its peers hold this key's counts, its own "
            "included, and send them back at this node's next full sync, so a reset here does not "
            "last; reset --local forgets this node's copy anyway"),
        response);
  }
  const Status status = limiter_->Erase(limit.key, limit.spec);
  if (!status.ok() && status.code() != Status::Code::kNotFound) return Refuse(status, response);
  response->kind = protocol::ResponseKind::kReset;
  response->reset_erased = status.ok();
}

void RequestHandler::HandleForgetMember(uint64_t member_id, protocol::Response* response) {
  bool forgotten = false;
  if (Status status = forget_member_(member_id, &forgotten); !status.ok()) {
    return Refuse(status, response);
  }
  response->kind = protocol::ResponseKind::kForgetMember;
  response->member_forgotten = forgotten;
}

}  // namespace tally
