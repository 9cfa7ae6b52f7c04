// tallyd's TLS flags (README "TLS"): TLS 1.3 between nodes (--gossip-tls
// psk|cert) and TLS on the client ports (--client-tls on, with
// --client-tls-verify none|optional|required for client certificates),
// from one set of files (--tls-cert-file, --tls-key-file, --tls-ca-file).
// Checked whole at start: a mode without its files, files no mode uses, a
// file that does not read or a key that is not the certificate's stop tallyd
// with one line naming the flag or file.
//
// Thread safety: main's thread, before other threads start.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "node/common/status.h"
#include "node/grpc/rls_server.h"
#include "node/tls/tls_context.h"

namespace tally::bin {

struct TlsOptions {
  std::string gossip_tls = "off";      // off, psk, cert
  std::string client_tls = "off";      // off, on
  std::string client_verify = "none";  // none, optional, required
  TlsFiles files;
};

// What the options make: null where TLS is off.
struct TlsContexts {
  std::unique_ptr<TlsContext> gossip;
  std::unique_ptr<TlsContext> client;
};

void AddTlsOptions(CLI::App* app, TlsOptions* options);

// Checks the options against each other and loads the contexts.
// `clustered`: the node gossips (--seed or --cluster-secret-file);
// cluster_secret: the secret read, for the PSK.
Status MakeTlsContexts(const TlsOptions& options, bool clustered, const std::string& cluster_secret,
                       TlsContexts* contexts);

// The gRPC port's TLS under --client-tls (gRPC's own credentials, from the
// same files); left plain when it is off. After MakeTlsContexts checked them.
Status MakeGrpcTls(const TlsOptions& options, RlsServer::Options::Tls* tls);

}  // namespace tally::bin
