// NetStream: one TCP connection in plain text or under TLS, for the server's
// connections and gossip's links and sessions. It is an Asio
// AsyncReadStream and AsyncWriteStream (async_read_some, async_write_some,
// asio::async_write on it), so code above it reads and writes the same
// either way; the StreamFront sessions above the server never see it.
// Include it only from .cc files that include asio anyway.
//
// Thread safety: a NetStream belongs to the thread or strand of its socket.
// The TlsContext is not owned and must outlive it.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include <asio.hpp>
#include <asio/ssl.hpp>

#include "node/common/status.h"
#include "node/tls/tls_context.h"

namespace tally {

// True when `received`, the first bytes of a connection, start a TLS
// handshake record: a TLS client on a plaintext port.
bool LooksLikeTlsHandshake(std::span<const std::byte> received);

class NetStream {
 public:
  using executor_type = asio::ip::tcp::socket::executor_type;
  enum class Side { kClient, kServer };

  // Plain text when `tls` is null; TLS from Handshake on otherwise.
  NetStream(asio::ip::tcp::socket socket, const TlsContext* tls)
      : socket_(std::move(socket)), tls_(tls) {}
  // Not connected yet (a link that dials).
  NetStream(asio::io_context& io, const TlsContext* tls) : socket_(io), tls_(tls) {}
  NetStream(const NetStream&) = delete;
  NetStream& operator=(const NetStream&) = delete;

  // The TCP socket under it: connect, options, endpoints, close.
  asio::ip::tcp::socket& socket() { return socket_; }
  const asio::ip::tcp::socket& socket() const { return socket_; }
  executor_type get_executor() { return socket_.get_executor(); }
  bool tls() const { return tls_ != nullptr; }

  // On a connected socket: starts a fresh TLS session (so a redialled link
  // reuses the stream) and completes its handshake. Plain text: OK at once.
  // A failure is Unavailable with a reason for the log (a peer's certificate
  // that does not chain to the CA, a plaintext client, another PSK...), or
  // IOError when the connection ended under it (closed by the other end, or
  // by the caller's deadline), as a read that fails is.
  // It takes as long as the other end does: the caller bounds it with its
  // own deadline, closing the socket.
  asio::awaitable<Status> Handshake(Side side);

  // Under TLS, sends close_notify when the handshake completed, without
  // blocking (a full send buffer drops it). Only while no read or write is
  // pending on the stream; then the caller closes the socket. (A connection
  // closed for a timeout or a refusal is closed without it.)
  void ShutdownTls();

  // Writes what fits now without blocking into a non-blocking socket, in
  // plain text; under TLS nothing (0): the caller writes asynchronously.
  size_t TryWrite(asio::const_buffer bytes, asio::error_code& ec);

  template <typename Buffers, typename Token>
  auto async_read_some(const Buffers& buffers, Token&& token) {
    if (ssl_) return ssl_->async_read_some(buffers, std::forward<Token>(token));
    return socket_.async_read_some(buffers, std::forward<Token>(token));
  }
  template <typename Buffers, typename Token>
  auto async_write_some(const Buffers& buffers, Token&& token) {
    if (ssl_) return ssl_->async_write_some(buffers, std::forward<Token>(token));
    return socket_.async_write_some(buffers, std::forward<Token>(token));
  }

 private:
  // Why a handshake failed, with the certificate check's verdict and a hint.
  std::string Describe(const asio::error_code& error);

  asio::ip::tcp::socket socket_;
  const TlsContext* const tls_;
  std::optional<asio::ssl::stream<asio::ip::tcp::socket&>> ssl_;  // after Handshake began
  bool handshake_done_ = false;
};

}  // namespace tally
