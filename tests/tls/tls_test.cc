// The TLS layer in-process, on loopback sockets of one io_context: the
// gossip PSK's derivation, the contexts' checks of their files, and
// handshakes between NetStreams in every mode, accepted and refused, with the
// reason a refusal gives. Certificates come from make_certs.sh at run time.
#include <array>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include <doctest/doctest.h>

#include "node/tls/tls_context.h"
#include "node/tls/tls_stream.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

using asio::ip::tcp;
using testing::TempDir;

constexpr char kSecret[] = "correct horse battery staple, twice";

std::string Hex(const std::array<uint8_t, 32>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (uint8_t byte : bytes) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

// What each end of one connection saw.
struct Outcome {
  Status client = Status::Unavailable("did not finish");
  Status server = Status::Unavailable("did not finish");
  std::string received;  // by the server after its handshake
};

// A loopback connection between a client NetStream under `client_tls` and a
// server NetStream under `server_tls` (null: plain): both handshake, the
// client sends "hello" and the server reads it. Bounded: 5 s.
Outcome Connect(const TlsContext* client_tls, const TlsContext* server_tls) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket client_socket(io);
  client_socket.connect(acceptor.local_endpoint());
  NetStream server(acceptor.accept(), server_tls);
  NetStream client(std::move(client_socket), client_tls);
  Outcome outcome;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        outcome.server = co_await server.Handshake(NetStream::Side::kServer);
        if (outcome.server.ok()) {
          std::array<char, 5> bytes{};
          asio::error_code ec;
          co_await asio::async_read(server, asio::buffer(bytes),
                                    asio::redirect_error(asio::use_awaitable, ec));
          if (!ec) outcome.received.assign(bytes.data(), bytes.size());
        }
        server.socket().close();
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        outcome.client = co_await client.Handshake(NetStream::Side::kClient);
        if (outcome.client.ok()) {
          asio::error_code ec;
          co_await asio::async_write(client, asio::buffer(std::string_view("hello")),
                                     asio::redirect_error(asio::use_awaitable, ec));
          std::array<char, 16> ignored;
          while (!ec) {  // until the server closes
            co_await client.async_read_some(asio::buffer(ignored),
                                            asio::redirect_error(asio::use_awaitable, ec));
          }
        }
        client.socket().close();
      },
      asio::detached);
  io.run_for(std::chrono::seconds(5));
  return outcome;
}

// Certificates made by tests/tls/make_certs.sh into a temporary directory.
class Certs {
 public:
  Certs() {
    const std::string command = std::string("sh ") + MAKE_CERTS_PATH + " " + dir_.Path("c");
    REQUIRE(std::system(command.c_str()) == 0);
  }
  std::string operator()(const std::string& name) const { return dir_.Path("c/" + name); }
  TlsFiles Files(const std::string& leaf, const std::string& ca = "ca") const {
    return {(*this)(leaf + ".pem"), (*this)(leaf + ".key"), (*this)(ca + ".pem")};
  }

 private:
  TempDir dir_;
};

std::unique_ptr<TlsContext> Psk(const std::string& secret) {
  std::unique_ptr<TlsContext> context;
  REQUIRE(TlsContext::ForGossipPsk(secret, &context).ok());
  return context;
}

std::unique_ptr<TlsContext> GossipCerts(const TlsFiles& files) {
  std::unique_ptr<TlsContext> context;
  const Status status = TlsContext::ForGossipCerts(files, &context);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return context;
}

// The PSK is RFC 5869's HKDF-SHA256 of the secret under the fixed label (the
// value computed independently with Python's hmac), never the secret itself,
// and another secret gives another key.
TEST_CASE("tls: the gossip PSK is HKDF-SHA256 of the cluster secret under tally's label") {
  const std::array<uint8_t, 32> key = DeriveGossipPsk(kSecret);
  CHECK(Hex(key) == "c280cf2c11f17956a7278e2541605c9b4c06ca665a5438c09c787f5ecc728837");
  CHECK(Hex(DeriveGossipPsk("correct horse battery staple, thrice")) != Hex(key));
}

// Nodes with the same secret complete TLS 1.3 and carry bytes; with another
// secret both ends fail, the server saying the PSK differs.
TEST_CASE("tls: PSK handshakes pass with the same secret and fail with another") {
  auto ours = Psk(kSecret);
  auto theirs = Psk("another cluster's secret, longer");
  const Outcome same = Connect(ours.get(), ours.get());
  CHECK_MESSAGE(same.client.ok(), same.client.ToString());
  CHECK_MESSAGE(same.server.ok(), same.server.ToString());
  CHECK(same.received == "hello");
  const Outcome other = Connect(theirs.get(), ours.get());
  CHECK(!other.client.ok());
  REQUIRE(!other.server.ok());
  CHECK_MESSAGE(other.server.ToString().find("pre-shared key differs") != std::string::npos,
                other.server.ToString());
}

// Mutual certificates: accepted both ways when both chain to the CA; a
// certificate from another CA is refused by the side checking it, naming
// the CA file; a PSK-only client gets no TLS with a certificate server.
TEST_CASE("tls: mutual certificates pass from the CA and fail from another") {
  Certs certs;
  auto node = GossipCerts(certs.Files("node"));
  auto client = GossipCerts(certs.Files("client"));
  auto rogue = GossipCerts(certs.Files("rogue"));  // trusts our CA, but is not from it
  const Outcome mutual = Connect(client.get(), node.get());
  CHECK_MESSAGE(mutual.server.ok(), mutual.server.ToString());
  CHECK(mutual.received == "hello");
  const Outcome refused = Connect(rogue.get(), node.get());
  REQUIRE(!refused.server.ok());
  CHECK_MESSAGE(
      refused.server.ToString().find("does not chain to the CA file") != std::string::npos,
      refused.server.ToString());
  const Outcome psk_client = Connect(Psk(kSecret).get(), node.get());
  CHECK(!psk_client.server.ok());
}

// A plaintext client on a TLS server: the handshake fails saying the other
// end does not speak TLS; the first bytes of a TLS client are recognised.
TEST_CASE("tls: a plaintext client on a TLS port is named as such") {
  auto ours = Psk(kSecret);
  const Outcome plain = Connect(nullptr, ours.get());
  REQUIRE(!plain.server.ok());
  CHECK_MESSAGE(plain.server.ToString().find("does not speak TLS") != std::string::npos,
                plain.server.ToString());
  const std::byte hello[] = {std::byte{0x16}, std::byte{0x03}, std::byte{0x01}};
  const std::byte frame[] = {std::byte{0x00}, std::byte{0x00}, std::byte{0x00}};
  CHECK(LooksLikeTlsHandshake(hello));
  CHECK(!LooksLikeTlsHandshake(frame));
  CHECK(!LooksLikeTlsHandshake(std::span<const std::byte>(hello, 1)));
}

// The client ports: served with a certificate and no client certificate,
// and refused with a reason when a required one is missing.
TEST_CASE("tls: client ports ask for client certificates only when told to") {
  Certs certs;
  std::unique_ptr<TlsContext> open, required, trusting;
  REQUIRE(TlsContext::ForClientPorts(certs.Files("node"), ClientVerify::kNone, &open).ok());
  REQUIRE(TlsContext::ForClientPorts(certs.Files("node"), ClientVerify::kRequired, &required).ok());
  // A client with no certificate of its own (a PSK context offers none).
  auto anonymous = Psk(kSecret);
  const Outcome served = Connect(anonymous.get(), open.get());
  CHECK_MESSAGE(served.server.ok(), served.server.ToString());
  CHECK(served.received == "hello");
  const Outcome refused = Connect(anonymous.get(), required.get());
  REQUIRE(!refused.server.ok());
  CHECK_MESSAGE(refused.server.ToString().find("a certificate is required") != std::string::npos,
                refused.server.ToString());
}

// Files are checked when the context is made: a missing file and a key of
// another certificate are refused naming the file.
TEST_CASE("tls: contexts refuse missing files and a key that is not the certificate's") {
  Certs certs;
  std::unique_ptr<TlsContext> context;
  TlsFiles missing = certs.Files("node");
  missing.ca_file = certs("nowhere.pem");
  Status status = TlsContext::ForGossipCerts(missing, &context);
  CHECK(status.ToString().find("cannot read the CA file " + certs("nowhere.pem")) !=
        std::string::npos);
  TlsFiles crossed = certs.Files("node");
  crossed.key_file = certs("client.key");
  status = TlsContext::ForClientPorts(crossed, ClientVerify::kNone, &context);
  CHECK_MESSAGE(
      status.ToString().find("does not hold the key of the certificate") != std::string::npos,
      status.ToString());
  status = TlsContext::ForClientPorts({certs("node.pem"), certs("node.key"), ""},
                                      ClientVerify::kOptional, &context);
  CHECK(!status.ok());
  CHECK(context == nullptr);
}

}  // namespace
}  // namespace tally
