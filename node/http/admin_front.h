// AdminFront: what operators and orchestrators ask a node (tallyd
// --admin-port), on the Server's workers:
//   GET /healthz  200 "ok" while the process serves this port;
//   GET /readyz   200 "ready" once the node is ready (node/common/readiness.h:
//                 listening, restored, recovered), else 503 "not ready: <what
//                 it waits for>";
//   GET /metrics  the Prometheus text exposition from the given function
//                 (text/plain; version=0.0.4); without one, 404 "metrics not
//                 built in".
// HEAD works as GET; other methods get 405, other paths 404. Bodies are
// plain text. The Server serves this port before the node is ready
// (Server::ServeEarly), so /readyz answers during a long restore.
//
// Thread safety: NewHandler from any worker; Readiness is thread-safe; the
// metrics function is called on worker threads, possibly several at once.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "node/common/readiness.h"
#include "node/http/http_front.h"

namespace tally {

class AdminFront : public HttpFront {
 public:
  using Metrics = std::function<std::string()>;

  // readiness must outlive the front; `metrics` may be empty.
  AdminFront(const HttpLimits& limits, const Readiness* readiness, Metrics metrics)
      : HttpFront(limits), readiness_(readiness), metrics_(std::move(metrics)) {}

 protected:
  std::unique_ptr<HttpHandler> NewHandler(const SessionContext& context) override;

 private:
  const Readiness* const readiness_;
  const Metrics metrics_;
};

}  // namespace tally
