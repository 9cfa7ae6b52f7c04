// TestPeer: a peer that speaks the gossip protocol by hand, over a
// RawConnection to a node's gossip port, for the hostile-peer tests.
//
// Thread safety: none; owned by one thread.
#pragma once

#include <optional>
#include <span>
#include <string>

#include <doctest/doctest.h>
#include <sys/socket.h>

#include "node/common/node_id.h"
#include "protocol/codec.h"
#include "protocol/frame_buffer.h"
#include "protocol/peer_auth.h"
#include "protocol/peer_codec.h"
#include "tests/support/raw_connection.h"

namespace tally::testing {

class TestPeer {
 public:
  // Connects to 127.0.0.1:port (from `source`, another loopback address, when given).
  explicit TestPeer(uint16_t port, const char* source = nullptr) : connection_(port, source) {
    REQUIRE(connection_.connected());
    timeval timeout{2, 0};
    setsockopt(connection_.fd(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }

  // Sends a hello, reads the node's sealed hello; true when its seal checks
  // out under `secret` (this peer then seals with the key derived from it).
  bool Handshake(NodeId id, const std::string& secret) {
    const std::string nonce = protocol::RandomNonce();
    std::string hello;
    protocol::EncodeHello(id, nonce, /*relays=*/false, 0, &hello);
    Send(hello);
    protocol::FrameBuffer in;
    size_t sizes[2] = {0, 0};
    for (size_t found = 0; found < 2;) {
      found = 0;
      size_t offset = 0;
      while (found < 2) {
        const auto scan = protocol::ScanFrame(in.readable().subspan(offset), {});
        if (scan.state != protocol::FrameScan::State::kComplete) break;
        sizes[found++] = scan.frame_bytes;
        offset += scan.frame_bytes;
      }
      if (found == 2) break;
      const std::span<std::byte> room = in.writable();
      const ssize_t got = recv(connection_.fd(), room.data(), room.size(), 0);
      if (got <= 0) return false;
      in.Commit(static_cast<size_t>(got));
    }
    protocol::PeerMessage reply, seal;
    REQUIRE(protocol::DecodePeerMessage(in.readable().first(sizes[0]), {}, &reply).ok());
    REQUIRE(protocol::DecodePeerMessage(in.readable().subspan(sizes[0], sizes[1]), {}, &seal).ok());
    auth_.emplace(secret, nonce, reply.nonce);
    return auth_->Verify(0, in.readable().first(sizes[0]), seal.mac);
  }

  // The frame followed by its seal, under the next seq.
  std::string Sealed(const std::string& frame) {
    std::string bytes = frame;
    protocol::EncodeSeal(seq_, auth_->Mac(seq_, protocol::FrameBytes(frame)), &bytes);
    ++seq_;
    return bytes;
  }

  void Send(const std::string& bytes) { CHECK(connection_.Send(bytes)); }
  // The connection itself, e.g. to send what the node may refuse midway.
  RawConnection& connection() { return connection_; }

  // True when the node closes the connection within 2 s.
  bool ClosedByNode() { return connection_.ClosedByPeer(); }

 private:
  RawConnection connection_;
  std::optional<protocol::PeerAuth> auth_;
  uint64_t seq_ = 1;
};

}  // namespace tally::testing
