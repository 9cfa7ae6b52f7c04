#include "node/grpc/rls_server.h"

#include <chrono>

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "node/grpc/rls_handler.h"

namespace tally {
namespace {

namespace rls = envoy::service::ratelimit::v3;

// The service on gRPC's callback API: each call is answered on the thread
// that received it, without a thread of its own.
class RlsService final : public rls::RateLimitService::CallbackService {
 public:
  explicit RlsService(RlsHandler* handler) : handler_(handler) {}

  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* context,
                                            const rls::RateLimitRequest* request,
                                            rls::RateLimitResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (context->IsCancelled()) {
      reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client gave up"));
    } else {
      reactor->Finish(handler_->ShouldRateLimit(*request, response));
    }
    return reactor;
  }

 private:
  RlsHandler* const handler_;
};

}  // namespace

struct RlsServer::Impl {
  Impl(const Options& opts, Limiter* limiter, PolicyStore* policies)
      : options(opts),
        handler(RlsHandler::Options{opts.max_descriptors, opts.max_entries, opts.response_headers,
                                    opts.response_metadata},
                limiter, policies),
        service(&handler) {}

  const Options options;
  RlsHandler handler;
  RlsService service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

RlsServer::RlsServer(const Options& options, Limiter* limiter, PolicyStore* policies)
    : impl_(std::make_unique<Impl>(options, limiter, policies)) {}

RlsServer::~RlsServer() { Shutdown(0); }

Status RlsServer::Start() {
  const Options& options = impl_->options;
  const std::string address = options.address.find(':') != std::string::npos
                                  ? "[" + options.address + "]"
                                  : options.address;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.tls.cert_pem.empty()) {
    grpc::SslServerCredentialsOptions ssl(options.tls.client_certificates);
    ssl.pem_root_certs = options.tls.ca_pem;
    ssl.pem_key_cert_pairs.push_back({options.tls.key_pem, options.tls.cert_pem});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address + ":" + std::to_string(options.port), credentials, &impl_->port);
  builder.RegisterService(&impl_->service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  grpc::ResourceQuota quota("tally-rls");
  quota.Resize(options.max_memory_bytes);
  builder.SetResourceQuota(quota);
  impl_->server = builder.BuildAndStart();
  if (impl_->server == nullptr || impl_->port == 0) {
    impl_->server.reset();
    return Status::IOError("cannot serve gRPC on " + address + ":" + std::to_string(options.port));
  }
  return Status::OK();
}

uint16_t RlsServer::port() const { return static_cast<uint16_t>(impl_->port); }

void RlsServer::Shutdown(int64_t deadline_ms) {
  if (impl_->server == nullptr) return;
  // gRPC takes its deadline as a system_clock time point: this is its API, not a reading of time.
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(deadline_ms));
  impl_->server->Wait();
  impl_->server.reset();
}

const FrontCounters& RlsServer::decided() const { return impl_->handler.decided(); }

RlsServer::Stats RlsServer::stats() const {
  const RlsHandler::Counters& counters = impl_->handler.counters();
  return Stats{counters.requests.load(std::memory_order_relaxed),
               counters.over_limit.load(std::memory_order_relaxed),
               counters.shadow_denied.load(std::memory_order_relaxed),
               counters.refused.load(std::memory_order_relaxed)};
}

}  // namespace tally
