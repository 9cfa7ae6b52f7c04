// TlsContext: the TLS settings of one kind of port (gossip, or the client
// ports), loaded and checked once at start: OpenSSL's SSL_CTX behind
// asio::ssl::context. node/tls/tls_stream.h puts connections under it.
//
// Gossip over TLS is TLS 1.3 only, in one of two modes:
//  - PSK: an external pre-shared key, HKDF-SHA256 of the cluster secret
//    under a fixed label (DeriveGossipPsk), so the raw secret is never a
//    key. No certificates; (EC)DHE with the PSK, so past traffic stays
//    secret if the cluster secret leaks later.
//  - certificates: each node presents its certificate and key and accepts
//    only peers whose certificate chains to the CA file (both directions:
//    mutual TLS). Host names are not checked: the CA is the cluster's.
// The client ports take TLS 1.2 or 1.3 with the node's certificate and,
// by ClientVerify, client certificates checked against the CA file.
//
// Thread safety: a TlsContext is immutable once made; connections on any
// thread may use it at once (OpenSSL's SSL_CTX is thread-safe for that).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "node/common/status.h"

namespace asio::ssl {
class context;
}  // namespace asio::ssl

namespace tally {

// The files of a node's certificate: PEM, the certificate (chain) and its
// private key, and the CA whose certificates peers (or clients) must carry.
struct TlsFiles {
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
};

// What the client ports ask of a client's certificate.
enum class ClientVerify {
  kNone,      // none is asked for
  kOptional,  // asked for; a client without one is served, one with a bad one is refused
  kRequired,  // a client without a certificate chaining to the CA file is refused
};

// The gossip PSK: HKDF-SHA256 (RFC 5869) of the cluster secret, no salt,
// info kGossipPskLabel.
inline constexpr std::string_view kGossipPskLabel = "tally gossip tls 1.3 psk v1";
std::array<uint8_t, 32> DeriveGossipPsk(std::string_view cluster_secret);

class TlsContext {
 public:
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // Gossip, PSK mode: TLS 1.3 with the key DeriveGossipPsk(cluster_secret).
  static Status ForGossipPsk(std::string_view cluster_secret, std::unique_ptr<TlsContext>* out);
  // Gossip, certificate mode: mutual TLS 1.3, every file required.
  static Status ForGossipCerts(const TlsFiles& files, std::unique_ptr<TlsContext>* out);
  // The client ports: cert_file and key_file required; ca_file required
  // unless verify is kNone (and ignored then).
  static Status ForClientPorts(const TlsFiles& files, ClientVerify verify,
                               std::unique_ptr<TlsContext>* out);

  // "TLS 1.3 with a pre-shared key" and the like, for the log.
  const std::string& description() const { return description_; }
  // For node/tls/tls_stream.h.
  asio::ssl::context& asio_context() const { return *context_; }

 private:
  TlsContext(std::unique_ptr<asio::ssl::context> context, std::string description);

  std::unique_ptr<asio::ssl::context> context_;
  const std::string description_;
  std::array<uint8_t, 32> psk_{};  // PSK mode; read by OpenSSL's callbacks through ex_data
};

}  // namespace tally
