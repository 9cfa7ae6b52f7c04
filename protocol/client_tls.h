// ClientTls: the TLS session of one Client's connection (OpenSSL), for a
// node started with --client-tls on. Internal to the client library.
//
// The server's certificate must chain to Options::Tls::ca_file (empty: the
// system's CAs) and name Options::Tls::server_name (empty: Options::host, a
// DNS name or an IP address); a client certificate is presented when given.
// TLS 1.2 or 1.3, as the client ports take.
//
// Every read and write goes through send(2) and recv(2) on the socket, as
// the plaintext path does: bounded by the socket's SO_RCVTIMEO and
// SO_SNDTIMEO, and never raising SIGPIPE.
//
// Thread safety: none; owned by one Client. The socket is not owned and must
// stay open while the ClientTls lives.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "node/common/status.h"
#include "protocol/client.h"

namespace tally::protocol {

class ClientTls {
 public:
  // Completes a handshake on `fd`, a connected socket. A failure is
  // Unavailable and says why (the certificate's verdict, a node that does
  // not speak TLS, a file that does not load).
  static Status Handshake(int fd, const Client::Options& options, std::unique_ptr<ClientTls>* out);
  ~ClientTls();
  ClientTls(const ClientTls&) = delete;
  ClientTls& operator=(const ClientTls&) = delete;

  // Writes all of `bytes`. IOError on a timeout, Unavailable otherwise.
  Status Write(std::string_view bytes);
  // Reads what has arrived, at most room.size() bytes, into room, waiting for
  // at least one; *received 0 means the server closed the connection.
  Status Read(std::span<std::byte> room, size_t* received);
  // Sends close_notify (the server sees the end of the stream).
  void Shutdown();

 private:
  struct Session;
  explicit ClientTls(std::unique_ptr<Session> session);

  std::unique_ptr<Session> session_;
};

}  // namespace tally::protocol
