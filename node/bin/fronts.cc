#include "node/bin/fronts.h"

#include <spdlog/spdlog.h>

#include "node/bin/cli_checks.h"
#include "node/bin/tallyd_options.h"

namespace tally::bin {
namespace {

constexpr char kHttpPort[] = "the HTTP port";
constexpr char kAdminPort[] = "the admin port";
constexpr char kRespPort[] = "the RESP port";

// --<flag>-port, --<flag>-address and --<flag>-port-file of the front that
// serves `what` (e.g. "Envoy's rate limit service (gRPC)"), named `name`.
void AddPortOptions(CLI::App* app, const std::string& flag, const std::string& name,
                    const std::string& what, int* port, std::string* address,
                    std::string* port_file) {
  app->add_option("--" + flag + "-port", *port,
                  "Serve " + what + " on this port; 0 picks a free one. Off unless set")
      ->check(bin::InRange(0, 65'535));
  app->add_option("--" + flag + "-address", *address,
                  "Address of the " + name + " front (default: --address)");
  app->add_option("--" + flag + "-port-file", *port_file,
                  "Write the " + name + " front's port to this file once it listens (for --" +
                      flag + "-port 0)");
}

}  // namespace

void AddFrontOptions(CLI::App* app, FrontOptions* options) {
  app->add_option("--policy-dir", options->policy_dir,
                  "Directory of policy files (envoyproxy/ratelimit's YAML format): limits by "
                  "domain and descriptor; reloaded when they change and on SIGHUP");
  app->add_option("--policy-poll-ms", options->policy_poll_ms,
                  "How often the policy directory is looked at for changes")
      ->check(bin::InRange(10, kDayMs))
      ->capture_default_str();
  app->add_flag("--policy-merge-domains", options->policy_merge_domains,
                "Let several policy files define one domain: their descriptors are merged, a "
                "descriptor two files both define is refused (envoyproxy/ratelimit's "
                "MERGE_DOMAIN_CONFIG)");
  AddPortOptions(app, "grpc", "gRPC", "Envoy's rate limit service (gRPC)", &options->grpc_port,
                 &options->grpc_address, &options->grpc_port_file);
  app->add_option("--grpc-max-message-bytes", options->grpc.max_message_bytes,
                  "Largest gRPC request; larger ones get RESOURCE_EXHAUSTED")
      ->check(bin::InRange(1'024, int64_t{64} << 20))
      ->capture_default_str();
  app->add_option("--grpc-max-descriptors", options->grpc.max_descriptors,
                  "Most descriptors in one ShouldRateLimit call; more get INVALID_ARGUMENT")
      ->check(bin::InRange(1, 100'000))
      ->capture_default_str();
  app->add_option("--grpc-max-concurrent-streams", options->grpc.max_concurrent_streams,
                  "Calls in flight per gRPC connection; more wait in the client")
      ->check(bin::InRange(1, 1'000'000))
      ->capture_default_str();
  AddPortOptions(app, "http", "HTTP", "rate-limit checks over HTTP", &options->http_port,
                 &options->http_address, &options->http_port_file);
  app->add_option("--http-max-header-bytes", options->http.max_header_bytes,
                  "Largest HTTP request line and headers; larger get 431")
      ->check(bin::InRange(256, int64_t{1} << 20))
      ->capture_default_str();
  app->add_option("--http-max-body-bytes", options->http.max_body_bytes,
                  "Largest HTTP request body; larger get 413")
      ->check(bin::InRange(0, int64_t{64} << 20))
      ->capture_default_str();
  AddPortOptions(app, "admin", "admin",
                 "/healthz, /readyz and /metrics, from the start (while the node restores and "
                 "recovers too),",
                 &options->admin_port, &options->admin_address, &options->admin_port_file);
  app->add_flag("--grpc-response-headers", options->grpc.response_headers,
                "Return RateLimit and X-RateLimit-* headers for Envoy to add to the response");
  app->add_flag("--grpc-response-metadata", options->grpc.response_metadata,
                "Return the request and the policies' metadata as Envoy dynamic metadata "
                "(envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA)");
  AddPortOptions(app, "resp", "RESP", "the Redis protocol (CL.THROTTLE, TALLY.CHECK, ...)",
                 &options->resp_port, &options->resp_address, &options->resp_port_file);
  app->add_option("--resp-max-bulk-bytes", options->resp.limits.max_bulk_bytes,
                  "Largest argument of a RESP command; a longer one closes the connection")
      ->check(bin::InRange(256, int64_t{64} << 20))
      ->capture_default_str();
  app->add_option("--resp-max-args", options->resp.limits.max_args,
                  "Most arguments in a RESP command; more close the connection")
      ->check(bin::InRange(8, 1'000'000))
      ->capture_default_str();
  app->add_option("--resp-password-file", options->resp_password_file,
                  "RESP clients must AUTH with the password in this file (default: no AUTH)");
}

Status Fronts::LoadPolicies(const FrontOptions& options, std::unique_ptr<Fronts>* fronts) {
  std::unique_ptr<Fronts> loaded(new Fronts(options));
  if (!options.policy_dir.empty()) {
    PolicyStore::Options store{options.policy_dir, options.policy_poll_ms};
    store.merge_domains = options.policy_merge_domains;
    if (Status status = PolicyStore::Open(store, &loaded->policies_); !status.ok()) return status;
  } else if (options.grpc_port >= 0) {
    // Envoy would take OK for "allowed": refused rather than a warning in a log.
    return Status::InvalidArgument(
        "--grpc-port needs --policy-dir: Envoy's rate limit service decides by policies, and "
        "without any it would answer OK to every call");
  }
  if (options.policy_dir.empty() && options.http_port >= 0) {
    spdlog::info("--http-port without --policy-dir: only /v1/check, with explicit limits");
  }
  if (!options.resp_password_file.empty()) {
    if (Status status = ReadSecretFile(options.resp_password_file, "the RESP password", 1,
                                       &loaded->options_.resp.password);
        !status.ok()) {
      return status;
    }
  }
  *fronts = std::move(loaded);
  return Status::OK();
}

Status Fronts::AddTo(Server* server, const std::string& default_address, size_t workers,
                     Limiter* limiter, const Readiness* readiness, Metrics* metrics) {
  const auto address = [&](const std::string& own) { return own.empty() ? default_address : own; };
  server_ = server;
  metrics_ = metrics;
  if (options_.http_port >= 0) {
    http_ = std::make_unique<CheckFront>(options_.http, limiter, policies_.get(), workers);
    server->AddFront(kHttpPort, address(options_.http_address),
                     static_cast<uint16_t>(options_.http_port), http_.get());
    metrics->AddFront("http", &http_->decided());
  }
  if (options_.resp_port >= 0) {
    resp_ = std::make_unique<RespFront>(options_.resp, limiter, policies_.get(), workers,
                                        [server] { return server->Stats(); });
    server->AddFront(kRespPort, address(options_.resp_address),
                     static_cast<uint16_t>(options_.resp_port), resp_.get());
    metrics->AddFront("resp", &resp_->decided());
  }
  if (options_.admin_port < 0) return Status::OK();
  admin_ = std::make_unique<AdminFront>(options_.http, readiness,
                                        [metrics] { return metrics->Render(); });
  server->AddFront(kAdminPort, address(options_.admin_address),
                   static_cast<uint16_t>(options_.admin_port), admin_.get());
  if (Status status = server->ServeEarly(kAdminPort); !status.ok()) return status;
  const uint16_t port = server->front_port(kAdminPort);
  if (!options_.admin_port_file.empty() && !WritePortFile(options_.admin_port_file, port)) {
    return Status::IOError("cannot write --admin-port-file " + options_.admin_port_file);
  }
  spdlog::info("serving /healthz, /readyz and /metrics on {}:{}", address(options_.admin_address),
               port);
  return Status::OK();
}

Status Fronts::Serve(const std::string& default_address, Limiter* limiter) {
  if (policies_ != nullptr) policies_->Start();
  if (http_ != nullptr) {
    const uint16_t port = server_->front_port(kHttpPort);
    if (!options_.http_port_file.empty() && !WritePortFile(options_.http_port_file, port)) {
      return Status::IOError("cannot write --http-port-file " + options_.http_port_file);
    }
    spdlog::info("serving checks over HTTP on port {}", port);
  }
  if (resp_ != nullptr) {
    const uint16_t port = server_->front_port(kRespPort);
    if (!options_.resp_port_file.empty() && !WritePortFile(options_.resp_port_file, port)) {
      return Status::IOError("cannot write --resp-port-file " + options_.resp_port_file);
    }
    spdlog::info("serving the Redis protocol (RESP) on port {}{}", port,
                 options_.resp.password.empty() ? "" : ", AUTH required");
  }
  if (options_.grpc_port < 0) return Status::OK();
  RlsServer::Options grpc = options_.grpc;
  grpc.address = options_.grpc_address.empty() ? default_address : options_.grpc_address;
  grpc.port = static_cast<uint16_t>(options_.grpc_port);
  grpc_ = std::make_unique<RlsServer>(grpc, limiter, policies_.get());
  if (Status status = grpc_->Start(); !status.ok()) return status;
  if (!options_.grpc_port_file.empty() && !WritePortFile(options_.grpc_port_file, grpc_->port())) {
    return Status::IOError("cannot write --grpc-port-file " + options_.grpc_port_file);
  }
  if (metrics_ != nullptr) metrics_->AddFront("grpc", &grpc_->decided());
  spdlog::info("serving Envoy's rate limit service (gRPC) on {}:{}", grpc.address, grpc_->port());
  return Status::OK();
}

void Fronts::Stop(int64_t drain_ms) {
  if (grpc_ != nullptr) grpc_->Shutdown(drain_ms);
  if (policies_ != nullptr) policies_->Stop();
}

void Fronts::ReloadPolicies() {
  if (policies_ != nullptr) static_cast<void>(policies_->Reload());  // Reload logs a refusal
}

void Fronts::AddStats(protocol::StatsReply* stats) const {
  if (policies_ != nullptr) {
    const PolicyStore::Stats policy = policies_->stats();
    stats->policy_domains = policy.domains;
    stats->policy_rules = policy.rules;
    stats->policy_reloads = policy.reloads;
    stats->policy_reload_failures = policy.reload_failures;
  }
  if (grpc_ != nullptr) {
    const RlsServer::Stats grpc = grpc_->stats();
    stats->grpc_requests = grpc.requests;
    stats->grpc_over_limit = grpc.over_limit;
    stats->grpc_refused = grpc.refused;
    stats->shadow_denied += grpc.shadow_denied;
  }
  if (http_ != nullptr) {
    const CheckFront::Stats http = http_->stats();
    stats->http_requests = http.requests;
    stats->http_allowed = http.allowed;
    stats->http_denied = http.denied;
    stats->http_refused = http.refused;
    stats->shadow_denied += http.shadow_denied;
  }
  if (resp_ != nullptr) {
    const RespFront::Stats resp = resp_->stats();
    stats->resp_commands = resp.commands;
    stats->resp_throttled = resp.throttled;
    stats->resp_errors = resp.errors;
  }
}

std::vector<std::string> Fronts::DomainSlotNames() const {
  return policies_ != nullptr ? policies_->DomainSlotNames() : std::vector<std::string>();
}

RuleSeries Fronts::PolicyRuleSeries() const {
  return policies_ != nullptr ? policies_->RuleSeries() : RuleSeries();
}

}  // namespace tally::bin
