#include "node/bin/tls_options.h"

#include <fstream>
#include <sstream>

namespace tally::bin {
namespace {

Status ReadPem(const std::string& path, std::string* pem) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return Status::IOError("cannot read " + path);
  *pem = text.str();
  return Status::OK();
}

}  // namespace

void AddTlsOptions(CLI::App* app, TlsOptions* options) {
  app->add_option("--gossip-tls", options->gossip_tls,
                  "TLS 1.3 between nodes: off; psk (a key derived from the cluster secret, no "
                  "certificates); cert (mutual: --tls-cert-file, --tls-key-file, peers' "
                  "certificates must chain to --tls-ca-file). Every member must use the same")
      ->check(CLI::IsMember({"off", "psk", "cert"}))
      ->capture_default_str();
  app->add_option("--client-tls", options->client_tls,
                  "TLS on every client port (--port, --http-port, --resp-port, --admin-port, "
                  "--grpc-port) with --tls-cert-file and --tls-key-file: off or on")
      ->check(CLI::IsMember({"off", "on"}))
      ->capture_default_str();
  app->add_option("--client-tls-verify", options->client_verify,
                  "Client certificates on the client ports, checked against --tls-ca-file: none "
                  "(not asked for), optional (checked when given), required")
      ->check(CLI::IsMember({"none", "optional", "required"}))
      ->capture_default_str();
  app->add_option("--tls-cert-file", options->files.cert_file,
                  "PEM certificate (chain) of this node, for --gossip-tls cert and --client-tls");
  app->add_option("--tls-key-file", options->files.key_file, "PEM private key of --tls-cert-file");
  app->add_option("--tls-ca-file", options->files.ca_file,
                  "PEM CA certificates that peers' (--gossip-tls cert) and clients' "
                  "(--client-tls-verify) certificates must chain to");
}

Status MakeTlsContexts(const TlsOptions& options, bool clustered, const std::string& cluster_secret,
                       TlsContexts* contexts) {
  const bool gossip_certs = options.gossip_tls == "cert";
  const bool client_tls = options.client_tls == "on";
  const bool client_verify = options.client_verify != "none";
  if (options.gossip_tls != "off" && !clustered) {
    return Status::InvalidArgument("--gossip-tls " + options.gossip_tls +
                                   " needs a cluster: --cluster-secret-file (and --seed)");
  }
  if (client_verify && !client_tls) {
    return Status::InvalidArgument("--client-tls-verify " + options.client_verify +
                                   " needs --client-tls on");
  }
  if (!gossip_certs && !client_tls &&
      (!options.files.cert_file.empty() || !options.files.key_file.empty())) {
    return Status::InvalidArgument(
        "--tls-cert-file and --tls-key-file are used only by --gossip-tls cert and "
        "--client-tls on, and neither is set");
  }
  if (!gossip_certs && !client_verify && !options.files.ca_file.empty()) {
    return Status::InvalidArgument(
        "--tls-ca-file is used only by --gossip-tls cert and --client-tls-verify optional or "
        "required, and neither is set");
  }
  if ((gossip_certs || client_tls) &&
      (options.files.cert_file.empty() || options.files.key_file.empty())) {
    return Status::InvalidArgument(
        std::string(gossip_certs ? "--gossip-tls cert" : "--client-tls on") +
        " needs --tls-cert-file and --tls-key-file");
  }
  if ((gossip_certs || client_verify) && options.files.ca_file.empty()) {
    return Status::InvalidArgument(
        std::string(gossip_certs ? "--gossip-tls cert"
                                 : "--client-tls-verify " + options.client_verify) +
        " needs --tls-ca-file");
  }
  if (options.gossip_tls == "psk") {
    if (Status status = TlsContext::ForGossipPsk(cluster_secret, &contexts->gossip); !status.ok()) {
      return status;
    }
  } else if (gossip_certs) {
    if (Status status = TlsContext::ForGossipCerts(options.files, &contexts->gossip);
        !status.ok()) {
      return status;
    }
  }
  if (client_tls) {
    const ClientVerify verify = options.client_verify == "required"   ? ClientVerify::kRequired
                                : options.client_verify == "optional" ? ClientVerify::kOptional
                                                                      : ClientVerify::kNone;
    if (Status status = TlsContext::ForClientPorts(options.files, verify, &contexts->client);
        !status.ok()) {
      return status;
    }
  }
  return Status::OK();
}

Status MakeGrpcTls(const TlsOptions& options, RlsServer::Options::Tls* tls) {
  if (options.client_tls != "on") return Status::OK();
  if (Status status = ReadPem(options.files.cert_file, &tls->cert_pem); !status.ok()) return status;
  if (Status status = ReadPem(options.files.key_file, &tls->key_pem); !status.ok()) return status;
  if (options.client_verify == "none") return Status::OK();
  tls->client_certificates = options.client_verify == "required"
                                 ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                 : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  return ReadPem(options.files.ca_file, &tls->ca_pem);
}

}  // namespace tally::bin
