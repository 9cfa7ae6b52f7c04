#include "protocol/client_tls.h"

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

namespace tally::protocol {
namespace {

// The socket under a session, and what its last call met.
struct Socket {
  int fd = -1;
  int error = 0;     // errno of the last failed send or recv
  bool eof = false;  // recv returned 0: the server closed the connection
};

// A BIO on send(2) and recv(2): MSG_NOSIGNAL on every write (OpenSSL's own
// socket BIO writes with write(2), which raises SIGPIPE), EINTR retried, and
// the socket's timeouts (EAGAIN) reported as a retry, which SSL_get_error
// turns into SSL_ERROR_WANT_READ or _WRITE.
int SocketWrite(BIO* bio, const char* data, size_t size, size_t* written) {
  Socket* socket = static_cast<Socket*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  for (;;) {
    const ssize_t sent = send(socket->fd, data, size, MSG_NOSIGNAL);
    if (sent >= 0) {
      *written = static_cast<size_t>(sent);
      return 1;
    }
    if (errno == EINTR) continue;
    socket->error = errno;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(bio);
    return 0;
  }
}

int SocketRead(BIO* bio, char* data, size_t size, size_t* read) {
  Socket* socket = static_cast<Socket*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  for (;;) {
    const ssize_t received = recv(socket->fd, data, size, 0);
    if (received > 0) {
      *read = static_cast<size_t>(received);
      return 1;
    }
    if (received == 0) {
      socket->eof = true;
      return 0;
    }
    if (errno == EINTR) continue;
    socket->error = errno;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
    return 0;
  }
}

long SocketControl(BIO* bio, int command, long, void*) {  // NOLINT(runtime/int): OpenSSL's type
  if (command == BIO_CTRL_FLUSH) return 1;
  if (command == BIO_CTRL_EOF) return static_cast<Socket*>(BIO_get_data(bio))->eof ? 1 : 0;
  return 0;
}

const BIO_METHOD* SocketMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* made =
        BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "tally client socket");
    BIO_meth_set_write_ex(made, &SocketWrite);
    BIO_meth_set_read_ex(made, &SocketRead);
    BIO_meth_set_ctrl(made, &SocketControl);
    return made;
  }();
  return method;
}

// The newest OpenSSL error as text, with a hint where one helps, and the queue emptied.
std::string OpenSslError() {
  const unsigned long code = ERR_peek_last_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  std::string error = text;
  switch (ERR_GET_REASON(code)) {
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
      return error + " (the node requires a client certificate from its CA)";
    case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
      return error + " (the node may require a client certificate from its CA)";
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
      return error + " (the node does not trust the client certificate's CA)";
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_RECORD_LENGTH_MISMATCH: return error + " (the node does not speak TLS on this port)";
    default: return error;
  }
}

// Why a read or a handshake stopped, when the server closed the connection.
constexpr std::string_view kClosed = "the node closed the connection";

}  // namespace

struct ClientTls::Session {
  Socket socket;
  SSL_CTX* context = nullptr;
  SSL* ssl = nullptr;  // owns the BIO

  ~Session() {
    SSL_free(ssl);
    SSL_CTX_free(context);
  }

  // Why a call that returned `rc` failed.
  std::string Why(int rc) {
    switch (SSL_get_error(ssl, rc)) {
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE: return "timed out";
      case SSL_ERROR_ZERO_RETURN: return std::string(kClosed);
      case SSL_ERROR_SYSCALL:
        if (ERR_peek_last_error() != 0) return OpenSslError();
        if (socket.eof) return std::string(kClosed);
        return socket.error != 0 ? std::strerror(socket.error) : "the connection broke";
      default: break;
    }
    std::string why = OpenSslError();
    if (const long verdict = SSL_get_verify_result(ssl);  // NOLINT(runtime/int)
        verdict != X509_V_OK) {
      why +=
          std::string(" (the node's certificate: ") + X509_verify_cert_error_string(verdict) + ")";
    }
    return why;
  }

  // The status of a read or write that returned `rc`: IOError(`timeout`)
  // when the socket's timeout passed, Unavailable otherwise.
  Status Failed(int rc, std::string_view timeout) {
    const int error = SSL_get_error(ssl, rc);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      return Status::IOError(timeout);
    }
    return Status::Unavailable("TLS: " + Why(rc));
  }
};

ClientTls::ClientTls(std::unique_ptr<Session> session) : session_(std::move(session)) {}

ClientTls::~ClientTls() = default;

Status ClientTls::Handshake(int fd, const Client::Options& options,
                            std::unique_ptr<ClientTls>* out) {
  const Client::Options::Tls& tls = options.tls;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return Status::InvalidArgument("a client certificate needs both its file and its key file");
  }
  ERR_clear_error();
  auto session = std::make_unique<Session>();
  session->socket.fd = fd;
  SSL_CTX* context = session->context = SSL_CTX_new(TLS_client_method());
  if (context == nullptr)
    return Status::Unavailable("cannot make a TLS context: " + OpenSslError());
  SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
  SSL_CTX_set_options(context, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nullptr);
  if (tls.ca_file.empty()
          ? SSL_CTX_set_default_verify_paths(context) != 1
          : SSL_CTX_load_verify_locations(context, tls.ca_file.c_str(), nullptr) != 1) {
    return Status::InvalidArgument((tls.ca_file.empty()
                                        ? "the system's CAs do not load"
                                        : "the CA file " + tls.ca_file + " does not load") +
                                   ": " + OpenSslError());
  }
  if (!tls.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(context, tls.cert_file.c_str()) != 1) {
      return Status::InvalidArgument("the certificate file " + tls.cert_file +
                                     " does not load: " + OpenSslError());
    }
    if (SSL_CTX_use_PrivateKey_file(context, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(context) != 1) {
      return Status::InvalidArgument("the key file " + tls.key_file +
                                     " does not hold the key of the certificate in " +
                                     tls.cert_file + ": " + OpenSslError());
    }
  }
  SSL* ssl = session->ssl = SSL_new(context);
  BIO* bio = ssl != nullptr ? BIO_new(SocketMethod()) : nullptr;
  if (bio == nullptr) return Status::Unavailable("cannot make a TLS session: " + OpenSslError());
  BIO_set_data(bio, &session->socket);
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl, bio, bio);
  // The name the certificate must carry: an IP address, or a DNS name (sent as SNI too).
  const std::string& name = tls.server_name.empty() ? options.host : tls.server_name;
  if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) != 1) {
    ERR_clear_error();
    if (SSL_set1_host(ssl, name.c_str()) != 1 || SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
      return Status::InvalidArgument("cannot check the server name " + name + ": " +
                                     OpenSslError());
    }
  }
  if (const int rc = SSL_connect(ssl); rc != 1) {
    std::string why = session->Why(rc);
    if (why == kClosed) why += " (a node without --client-tls on closes TLS clients)";
    return Status::Unavailable("TLS handshake with " + options.host + ":" +
                               std::to_string(options.port) + " failed: " + why);
  }
  out->reset(new ClientTls(std::move(session)));
  return Status::OK();
}

Status ClientTls::Write(std::string_view bytes) {
  while (!bytes.empty()) {
    ERR_clear_error();  // SSL_get_error reads the queue: only this call's errors in it
    size_t written = 0;
    if (const int rc = SSL_write_ex(session_->ssl, bytes.data(), bytes.size(), &written); rc != 1) {
      return session_->Failed(rc, "timed out sending");
    }
    bytes.remove_prefix(written);
  }
  return Status::OK();
}

Status ClientTls::Read(std::span<std::byte> room, size_t* received) {
  *received = 0;
  ERR_clear_error();
  if (const int rc = SSL_read_ex(session_->ssl, room.data(), room.size(), received); rc != 1) {
    // The server closed the connection (SSL_OP_IGNORE_UNEXPECTED_EOF: with or without
    // close_notify; frames are self-delimiting, so nothing is cut short unseen).
    if (SSL_get_error(session_->ssl, rc) == SSL_ERROR_ZERO_RETURN) return Status::OK();
    return session_->Failed(rc, "timed out receiving");
  }
  return Status::OK();
}

void ClientTls::Shutdown() {
  SSL_shutdown(session_->ssl);
  ERR_clear_error();
}

}  // namespace tally::protocol
