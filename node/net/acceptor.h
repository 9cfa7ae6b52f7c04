// Listening sockets and the names and addresses of accepted peers, for the
// server and gossip (the two users of asio in node/). Include it only from
// .cc files that include asio anyway.
//
// Thread safety: Listen before the acceptor's io_context runs; the others
// on the thread that owns the socket.
#pragma once

#include <cstdint>
#include <string>

#include <asio.hpp>

#include "node/common/status.h"

namespace tally {

// Opens, binds (SO_REUSEADDR) and listens on address:port (port 0: an
// ephemeral one). `what` names the port in errors, e.g. "the gossip port".
inline Status Listen(asio::ip::tcp::acceptor& acceptor, const std::string& address, uint16_t port,
                     const std::string& what) {
  asio::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(address, ec);
  if (ec) return Status::InvalidArgument("bad address for " + what + ": '" + address + "'");
  const asio::ip::tcp::endpoint endpoint(ip, port);
  if (acceptor.open(endpoint.protocol(), ec); ec) return Status::IOError("socket: " + ec.message());
  acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (acceptor.bind(endpoint, ec); ec) {
    return Status::IOError("cannot bind " + what + " " + address + ":" + std::to_string(port) +
                           ": " + ec.message());
  }
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) {
    return Status::IOError("listen on " + what + ": " + ec.message());
  }
  return Status::OK();
}

// The bound port; 0 when not listening.
inline uint16_t BoundPort(const asio::ip::tcp::acceptor& acceptor) {
  asio::error_code ec;
  const asio::ip::tcp::endpoint endpoint = acceptor.local_endpoint(ec);
  return ec ? 0 : endpoint.port();
}

// The IP address of the other end of a connected socket; unspecified when unknown.
inline asio::ip::address RemoteAddress(const asio::ip::tcp::socket& socket) {
  asio::error_code ec;
  const asio::ip::tcp::endpoint peer = socket.remote_endpoint(ec);
  return ec ? asio::ip::address() : peer.address();
}

// "address:port" of the other end of a connected socket; "?" when unknown.
inline std::string PeerName(const asio::ip::tcp::socket& socket) {
  asio::error_code ec;
  const asio::ip::tcp::endpoint peer = socket.remote_endpoint(ec);
  return ec ? std::string("?") : peer.address().to_string() + ":" + std::to_string(peer.port());
}

}  // namespace tally
