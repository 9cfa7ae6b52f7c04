// RespFront: the Redis protocol (RESP2, and RESP3 after HELLO 3) as a
// StreamFront of the Server (node/server/server.h), so that any Redis client
// can check limits: redis-cell's CL.THROTTLE, TALLY.CHECK with an explicit
// limit, TALLY.POLICY by the node's policies, and what clients send on
// connect (PING, ECHO, HELLO, AUTH, CLIENT, COMMAND, INFO, SELECT, QUIT).
// README "The RESP front" lists every command and reply.
//
// Each session parses complete commands in place (protocol/resp.h), answers
// them in order (pipelining), and leaves a partial command in the Server's
// receive buffer, where the frame deadline and the receive budget bound it.
// A command that does not parse (inline commands, nested arrays, lengths
// beyond Options::limits, ...) gets "-ERR Protocol error: ..." and its
// connection is closed, as Redis does; any other bad command gets an error
// reply and the connection stays usable. With a password, every command but
// AUTH, HELLO and QUIT gets -NOAUTH until the client has authenticated.
//
// Thread safety: NewSession from any worker; a session is used by its
// connection's worker only. Counters are per worker (written by that worker,
// read by any thread through stats()).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "node/common/front_counters.h"
#include "node/engine/limiter.h"
#include "node/net/stream_front.h"
#include "node/policy/policy_store.h"
#include "protocol/messages.h"
#include "protocol/resp.h"

namespace tally {

class RespFront : public StreamFront {
 public:
  struct Options {
    protocol::RespCommandLimits limits;
    std::string password;  // empty: no AUTH needed
  };
  using StatsSource = std::function<protocol::StatsReply()>;

  // What the front has served, summed over the workers.
  struct Stats {
    uint64_t commands = 0;   // commands answered (parsed ones, errors included)
    uint64_t throttled = 0;  // CL.THROTTLE, TALLY.CHECK and TALLY.POLICY answers that denied
    uint64_t errors = 0;     // error replies, protocol errors included
  };

  // One worker's counters, written by that worker only (relaxed atomics).
  // Denials are counted once, in decided().
  struct alignas(64) Counters {
    std::atomic<uint64_t> commands{0};
    std::atomic<uint64_t> errors{0};
    static void Add(std::atomic<uint64_t>& counter, uint64_t delta) {
      counter.store(counter.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
    }
  };

  // limiter and policies (null: none, every domain unknown) must outlive the
  // front; `stats` fills INFO (called on a worker thread); `workers` bounds
  // SessionContext::worker_index.
  RespFront(const Options& options, Limiter* limiter, PolicyStore* policies, size_t workers,
            StatsSource stats);

  std::unique_ptr<StreamSession> NewSession(const SessionContext& context) override;
  std::string TooManyConnections() const override;

  Stats stats() const;
  // Decisions by outcome and policy domain, and how long they took: what
  // /metrics exports for front="resp".
  const FrontCounters& decided() const { return decided_; }

 private:
  const Options options_;
  Limiter* const limiter_;
  PolicyStore* const policies_;
  const StatsSource stats_;
  std::vector<Counters> counters_;  // one per worker, written by that worker
  FrontCounters decided_;           // a stripe per worker
  std::atomic<uint64_t> next_client_id_{1};
};

}  // namespace tally
