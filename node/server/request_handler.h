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
// request. A request kind the server does not know is answered with
// ErrorCode::kUnsupported.
//
// Thread safety: one RequestHandler per connection, used by the thread that
// owns the connection. The Limiter is shared and thread-safe; the counters
// belong to the connection's worker thread (other threads only read them).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "node/engine/limiter.h"
#include "node/policy/policy_checker.h"
#include "node/policy/policy_store.h"
#include "protocol/messages.h"

namespace tally {

// What a worker thread has served. Written only by that worker (relaxed
// atomics, so that a stats request on another thread may read them).
struct alignas(64) WorkerCounters {
  std::atomic<uint64_t> checks{0};
  std::atomic<uint64_t> allowed{0};
  std::atomic<uint64_t> denied{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> shadow_denied{0};  // policy checks: denied, but allowed by shadow mode

  static void Add(std::atomic<uint64_t>& counter, uint64_t delta) {
    counter.store(counter.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  }
};

class RequestHandler {
 public:
  using StatsSource = std::function<protocol::StatsReply()>;

  // limiter, counters and policies (null: none) must outlive the handler.
  RequestHandler(Limiter* limiter, WorkerCounters* counters, StatsSource stats,
                 PolicyStore* policies = nullptr);

  // Fills *response (its previous contents are replaced; its vectors' memory
  // is reused) with the answer to `request`.
  void Handle(const protocol::Request& request, protocol::Response* response);
  // Frees the scratch space if a large request grew it past `kept_checks`.
  void TrimScratch(size_t kept_checks);

 private:
  void HandleChecks(const protocol::Request& request, protocol::Response* response);
  void HandlePolicyCheck(const protocol::PolicyCheck& check, protocol::Response* response);
  void HandleInspect(const protocol::KeyLimit& limit, protocol::Response* response);
  void HandleReset(const protocol::KeyLimit& limit, protocol::Response* response);
  void Count(uint64_t checks, uint64_t allowed, uint64_t errors);

  Limiter* const limiter_;
  WorkerCounters* const counters_;
  const StatsSource stats_;
  PolicyStore* const policies_;
  // Scratch space reused across requests, so a steady stream allocates nothing.
  std::vector<Limiter::CheckRequest> batch_;
  std::vector<Limiter::CheckResult> results_;
  std::vector<DescriptorView> descriptors_;
  std::vector<DescriptorOutcome> policy_outcomes_;
  PolicyCheckScratch policy_scratch_;
};

}  // namespace tally
