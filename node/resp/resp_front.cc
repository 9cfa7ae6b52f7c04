#include "node/resp/resp_front.h"

#include <utility>

#include "node/resp/resp_session.h"

namespace tally {

RespFront::RespFront(const Options& options, Limiter* limiter, PolicyStore* policies,
                     size_t workers, StatsSource stats)
    : options_(options),
      limiter_(limiter),
      policies_(policies),
      stats_(std::move(stats)),
      counters_(workers),
      decided_(workers, FrontCounters::Writers::kOnePerStripe) {}

std::unique_ptr<StreamSession> RespFront::NewSession(const SessionContext& context) {
  const RespSession::Shared shared{&options_,
                                   limiter_,
                                   policies_,
                                   &stats_,
                                   &counters_[context.worker_index],
                                   &decided_,
                                   context.worker_index};
  return std::make_unique<RespSession>(context, shared,
                                       next_client_id_.fetch_add(1, std::memory_order_relaxed));
}

std::string RespFront::TooManyConnections() const {
  std::string reply;
  protocol::AppendError("ERR max number of clients reached", &reply);
  return reply;
}

RespFront::Stats RespFront::stats() const {
  Stats stats;
  for (const Counters& counters : counters_) {
    stats.commands += counters.commands.load(std::memory_order_relaxed);
    stats.errors += counters.errors.load(std::memory_order_relaxed);
  }
  stats.throttled = decided_.Read().Total().denied;
  return stats;
}

}  // namespace tally
