#include "node/tls/tls_context.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <openssl/err.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>

namespace tally {
namespace {

// The one PSK identity tally's nodes offer and accept.
constexpr std::string_view kPskIdentity = "tally-cluster";
// TLS_AES_128_GCM_SHA256: the PSK's session needs a cipher for its hash (SHA-256).
constexpr unsigned char kPskCipher[] = {0x13, 0x01};

// The SSL_CTX ex_data slot holding the PSK (a pointer into the TlsContext).
int PskIndex() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// The newest OpenSSL error as text, and the queue emptied.
std::string LastOpenSslError() {
  const unsigned long code = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

// A resumption-style session carrying the PSK, as OpenSSL's PSK callbacks want.
SSL_SESSION* NewPskSession(SSL* ssl) {
  const auto* psk = static_cast<const std::array<uint8_t, 32>*>(
      SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), PskIndex()));
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kPskCipher);
  SSL_SESSION* session = SSL_SESSION_new();
  if (psk == nullptr || cipher == nullptr || session == nullptr ||
      SSL_SESSION_set1_master_key(session, psk->data(), psk->size()) != 1 ||
      SSL_SESSION_set_cipher(session, cipher) != 1 ||
      SSL_SESSION_set_protocol_version(session, TLS1_3_VERSION) != 1) {
    SSL_SESSION_free(session);
    return nullptr;
  }
  return session;
}

// The dialler offers the PSK under kPskIdentity.
int UsePsk(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* id_bytes,
           SSL_SESSION** session) {
  *session = NewPskSession(ssl);
  if (*session == nullptr) return 0;
  if (md != nullptr && SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(*session)) != md) {
    SSL_SESSION_free(*session);  // after a HelloRetryRequest for another hash: no PSK fits
    *session = nullptr;
    *id = nullptr;
    *id_bytes = 0;
    return 1;
  }
  *id = reinterpret_cast<const unsigned char*>(kPskIdentity.data());
  *id_bytes = kPskIdentity.size();
  return 1;
}

// The server knows the PSK of kPskIdentity only; a client that offers
// another gets none, and with no certificate the handshake fails.
int FindPsk(SSL* ssl, const unsigned char* id, size_t id_bytes, SSL_SESSION** session) {
  const std::string_view offered(reinterpret_cast<const char*>(id), id_bytes);
  *session = offered == kPskIdentity ? NewPskSession(ssl) : nullptr;
  return offered != kPskIdentity || *session != nullptr ? 1 : 0;
}

// OK when `path` can be opened for reading; `what` names it in the error.
Status Readable(const std::string& path, const std::string& what) {
  if (path.empty()) return Status::InvalidArgument(what + " is needed");
  std::ifstream in(path);
  if (!in) return Status::IOError("cannot read " + what + " " + path + ": " + std::strerror(errno));
  return Status::OK();
}

// Loads the node's certificate chain and key into *context and checks they belong together.
Status LoadCertificate(const TlsFiles& files, asio::ssl::context* context) {
  if (Status status = Readable(files.cert_file, "the certificate file"); !status.ok())
    return status;
  if (Status status = Readable(files.key_file, "the key file"); !status.ok()) return status;
  asio::error_code ec;
  if (context->use_certificate_chain_file(files.cert_file, ec); ec) {
    return Status::InvalidArgument("the certificate file " + files.cert_file +
                                   " holds no PEM certificate: " + ec.message());
  }
  // OpenSSL checks the key against the certificate as it loads it.
  if (context->use_private_key_file(files.key_file, asio::ssl::context::pem, ec); ec) {
    if (ec.message().find("key values mismatch") != std::string::npos) {
      return Status::InvalidArgument("the key file " + files.key_file +
                                     " does not hold the key of the certificate in " +
                                     files.cert_file);
    }
    return Status::InvalidArgument("the key file " + files.key_file +
                                   " holds no PEM private key: " + ec.message());
  }
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
    return Status::InvalidArgument("the key file " + files.key_file +
                                   " does not hold the key of the certificate in " +
                                   files.cert_file + ": " + LastOpenSslError());
  }
  return Status::OK();
}

// Makes peers' certificates count only when they chain to the CA file.
Status LoadCa(const std::string& ca_file, asio::ssl::context* context) {
  if (Status status = Readable(ca_file, "the CA file"); !status.ok()) return status;
  asio::error_code ec;
  if (context->load_verify_file(ca_file, ec); ec) {
    return Status::InvalidArgument("the CA file " + ca_file +
                                   " holds no PEM certificate: " + ec.message());
  }
  return Status::OK();
}

std::unique_ptr<asio::ssl::context> NewContext(bool tls13_only) {
  auto context = std::make_unique<asio::ssl::context>(asio::ssl::context::tls);
  SSL_CTX* native = context->native_handle();
  SSL_CTX_set_min_proto_version(native, tls13_only ? TLS1_3_VERSION : TLS1_2_VERSION);
  // No session tickets: nodes and clients keep long connections, and a
  // ticket would only add bytes to every handshake.
  SSL_CTX_set_num_tickets(native, 0);
  SSL_CTX_set_options(native, SSL_OP_NO_TICKET);
  return context;
}

}  // namespace

std::array<uint8_t, 32> DeriveGossipPsk(std::string_view cluster_secret) {
  std::array<uint8_t, 32> key{};
  EVP_PKEY_CTX* kdf = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr);
  size_t key_bytes = key.size();
  const bool ok =
      kdf != nullptr && EVP_PKEY_derive_init(kdf) == 1 &&
      EVP_PKEY_CTX_set_hkdf_md(kdf, EVP_sha256()) == 1 &&
      EVP_PKEY_CTX_set1_hkdf_key(kdf, reinterpret_cast<const unsigned char*>(cluster_secret.data()),
                                 static_cast<int>(cluster_secret.size())) == 1 &&
      EVP_PKEY_CTX_add1_hkdf_info(kdf,
                                  reinterpret_cast<const unsigned char*>(kGossipPskLabel.data()),
                                  static_cast<int>(kGossipPskLabel.size())) == 1 &&
      EVP_PKEY_derive(kdf, key.data(), &key_bytes) == 1 && key_bytes == key.size();
  EVP_PKEY_CTX_free(kdf);
  if (!ok) std::abort();  // HKDF-SHA256 is in every OpenSSL 3: its failure is a broken library
  return key;
}

TlsContext::TlsContext(std::unique_ptr<asio::ssl::context> context, std::string description)
    : context_(std::move(context)), description_(std::move(description)) {}

TlsContext::~TlsContext() = default;

Status TlsContext::ForGossipPsk(std::string_view cluster_secret, std::unique_ptr<TlsContext>* out) {
  if (cluster_secret.empty())
    return Status::InvalidArgument("the PSK mode needs the cluster secret");
  std::unique_ptr<TlsContext> made(
      new TlsContext(NewContext(/*tls13_only=*/true), "TLS 1.3 with a pre-shared key"));
  made->psk_ = DeriveGossipPsk(cluster_secret);
  SSL_CTX* native = made->context_->native_handle();
  // Only suites of the PSK's hash: a server that picked a SHA-384 suite
  // would pass over the PSK and look for a certificate it does not have.
  SSL_CTX_set_ciphersuites(native, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256");
  SSL_CTX_set_ex_data(native, PskIndex(), &made->psk_);
  SSL_CTX_set_psk_use_session_callback(native, &UsePsk);
  SSL_CTX_set_psk_find_session_callback(native, &FindPsk);
  made->context_->set_verify_mode(asio::ssl::verify_none);  // the PSK authenticates both ends
  *out = std::move(made);
  return Status::OK();
}

Status TlsContext::ForGossipCerts(const TlsFiles& files, std::unique_ptr<TlsContext>* out) {
  auto context = NewContext(/*tls13_only=*/true);
  if (Status status = LoadCertificate(files, context.get()); !status.ok()) return status;
  if (Status status = LoadCa(files.ca_file, context.get()); !status.ok()) return status;
  context->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  out->reset(new TlsContext(std::move(context), "mutual TLS 1.3 with certificates"));
  return Status::OK();
}

Status TlsContext::ForClientPorts(const TlsFiles& files, ClientVerify verify,
                                  std::unique_ptr<TlsContext>* out) {
  auto context = NewContext(/*tls13_only=*/false);
  if (Status status = LoadCertificate(files, context.get()); !status.ok()) return status;
  std::string description = "TLS 1.2 or 1.3";
  switch (verify) {
    case ClientVerify::kNone: context->set_verify_mode(asio::ssl::verify_none); break;
    case ClientVerify::kOptional:
      if (Status status = LoadCa(files.ca_file, context.get()); !status.ok()) return status;
      context->set_verify_mode(asio::ssl::verify_peer);
      description += ", client certificates checked when given";
      break;
    case ClientVerify::kRequired:
      if (Status status = LoadCa(files.ca_file, context.get()); !status.ok()) return status;
      context->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
      description += ", client certificates required";
      break;
  }
  if (verify != ClientVerify::kNone) {
    // Tell clients which CA to pick a certificate for.
    SSL_CTX_set_client_CA_list(context->native_handle(),
                               SSL_load_client_CA_file(files.ca_file.c_str()));
  }
  out->reset(new TlsContext(std::move(context), description));
  return Status::OK();
}

}  // namespace tally
