// RequestHandler: answers decoded protocol requests with the engine. No I/O:
// the server decodes frames, calls Handle, and encodes what it fills in.
//
// Problems with a single check (bad key or spec, key cap) become that check's
// error; the other checks of the batch are still decided. A check by policy
// is decided as node/policy/policy_checker.h says (a node without policies
// knows no domain: every descriptor is answered kNoLimit); a malformed one
// (empty domain, no descriptors, an empty key) is an invalid_argument error
// for the request. Inspect answers one limit's state as Limiter::Read gives
// it (found = false when the node holds none); reset forgets it
// (Limiter::Erase), and a node whose peers merge state in (a clustered one)
// refuses a reset unless the request says `local`: the peers would send
// the counts back. A bad key or spec in either is invalid_argument for the
// request. Forgetting a member asks the node's gossip (ForgetMember); a node
// without one answers kUnsupported. A request kind the server does not know
// is answered with ErrorCode::kUnsupported.
//
// Thread safety: one RequestHandler per connection, used by the thread that
// owns the connection. The Limiter is shared and thread-safe; the counters'
// stripe belongs to the connection's worker thread (others only read it).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "node/common/front_counters.h"
#include "node/engine/limiter.h"
#include "node/policy/policy_checker.h"
#include "node/policy/policy_store.h"
#include "protocol/messages.h"

namespace tally {

class RequestHandler {
 public:
  using StatsSource = std::function<protocol::StatsReply()>;
  // Drops a member gone for good from the cluster (Gossip::ForgetMember);
  // *forgotten: it was counted and is not now. Called on the connection's thread.
  using ForgetMember = std::function<Status(NodeId member, bool* forgotten)>;

  // limiter, counters and policies (null: none) must outlive the handler.
  // Checks and their latency are counted on `counters`' stripe `stripe`.
  // forget_member may be empty (a node that does not gossip).
  RequestHandler(Limiter* limiter, FrontCounters* counters, size_t stripe, StatsSource stats,
                 PolicyStore* policies = nullptr, ForgetMember forget_member = {});

  // Fills *response (its previous contents are replaced; its vectors' memory
  // is reused) with the answer to `request`.
  void Handle(const protocol::Request& request, protocol::Response* response);
  // Answers requests[i] into responses[i] (sizes equal), in order, as Handle
  // would. The checks of consecutive check requests go to the engine in one
  // Limiter::CheckBatch, which overlaps their memory accesses: a pipelining
  // client's requests arrive together. Each of them is counted as taking the
  // whole batch's time, since their answers leave together.
  void HandleAll(std::span<const protocol::Request> requests,
                 std::span<protocol::Response> responses);
  // Frees the scratch space if a large request grew it past `kept_checks`.
  void TrimScratch(size_t kept_checks);

 private:
  void HandleChecks(std::span<const protocol::Request> requests,
                    std::span<protocol::Response> responses);
  void HandlePolicyCheck(const protocol::PolicyCheck& check, protocol::Response* response);
  void HandleInspect(const protocol::KeyLimit& limit, protocol::Response* response);
  void HandleReset(const protocol::KeyLimit& limit, protocol::Response* response);
  void HandleForgetMember(uint64_t member_id, protocol::Response* response);

  Limiter* const limiter_;
  FrontCounters* const counters_;
  const size_t stripe_;
  const StatsSource stats_;
  PolicyStore* const policies_;
  const ForgetMember forget_member_;
  // Scratch space reused across requests, so a steady stream allocates nothing.
  std::vector<Limiter::CheckRequest> batch_;
  std::vector<Limiter::CheckResult> results_;
  std::vector<DescriptorView> descriptors_;
  std::vector<DescriptorOutcome> policy_outcomes_;
  PolicyCheckScratch policy_scratch_;
};

}  // namespace tally
