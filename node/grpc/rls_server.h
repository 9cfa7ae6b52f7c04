// RlsServer: Envoy's rate limit service (envoy.service.ratelimit.v3.
// RateLimitService/ShouldRateLimit) over gRPC on a port of its own
// (tallyd --grpc-port), answered by RlsHandler.
//
// Limits, so that no caller wedges the node: messages over
// max_message_bytes are refused by gRPC with RESOURCE_EXHAUSTED; each
// connection may have at most max_concurrent_streams calls in flight (more
// wait in the client); gRPC's memory for calls is capped by
// max_memory_bytes. A call whose client has already given up (deadline
// passed, cancelled) is answered CANCELLED without being counted.
//
// Thread safety: Start and Shutdown from one thread; calls run on gRPC's
// own threads (the callback API: no thread per call). gRPC headers stay out
// of this header: one gRPC translation unit costs seconds to compile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <grpc/grpc_security_constants.h>

#include "node/common/front_counters.h"
#include "node/common/status.h"
#include "node/engine/limiter.h"
#include "node/policy/policy_store.h"

namespace tally {

class RlsServer {
 public:
  struct Options {
    std::string address = "127.0.0.1";
    uint16_t port = 0;  // 0: an ephemeral port, see port()
    size_t max_message_bytes = 1 << 20;
    int max_concurrent_streams = 1'000;  // per connection
    size_t max_memory_bytes = 256ull << 20;
    size_t max_descriptors = 256;  // per request
    size_t max_entries = 32;       // per descriptor
    bool response_headers = false;
    bool response_metadata = false;  // RlsHandler::Options::response_metadata
    // TLS with gRPC's own credentials: PEM text of the certificate chain and
    // key (empty: plain text), of the CA that client certificates must chain
    // to, and whether they are asked for.
    struct Tls {
      std::string cert_pem;
      std::string key_pem;
      std::string ca_pem;
      grpc_ssl_client_certificate_request_type client_certificates =
          GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
    } tls;
  };

  struct Stats {
    uint64_t requests = 0;
    uint64_t over_limit = 0;
    uint64_t shadow_denied = 0;
    uint64_t refused = 0;
  };

  // limiter and policies (null: none) must outlive the server.
  RlsServer(const Options& options, Limiter* limiter, PolicyStore* policies);
  ~RlsServer();  // Shutdown(0)
  RlsServer(const RlsServer&) = delete;
  RlsServer& operator=(const RlsServer&) = delete;

  // Binds and starts serving. IOError when the port cannot be bound.
  Status Start();
  uint16_t port() const;
  // Stops taking calls; calls in flight get up to deadline_ms to finish.
  void Shutdown(int64_t deadline_ms);

  Stats stats() const;
  // Descriptors decided by domain and outcome, and call latency (RlsHandler::decided).
  const FrontCounters& decided() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally
