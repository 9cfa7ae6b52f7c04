// Client: a blocking connection to one tallyd, used by tallyctl, the load
// generator and the tests.
//
// Two ways to use it:
//  - one call per round trip: Check, CheckBatch, Stats;
//  - pipelined: Send any number of requests (each gets the next id), Flush,
//    then Receive the responses, which arrive in the order sent.
// Do not mix the two while pipelined responses are outstanding.
//
// Every socket operation is bounded by Options::timeout_ms; a timeout or a
// broken connection is an IOError or Unavailable status, and the Client is
// unusable afterwards (connect a new one).
//
// TLS (Options::tls.enabled), for a node started with --client-tls on:
// Connect completes the handshake, verifying the node's certificate against
// a CA file and its name; everything after is as in plain text.
//
// Thread safety: none. One thread at a time per Client; use one Client per
// thread (or connection) for concurrency.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "node/common/status.h"
#include "protocol/codec.h"
#include "protocol/frame_buffer.h"
#include "protocol/messages.h"

namespace tally::protocol {

class ClientTls;

class Client {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // an IPv4 or IPv6 literal, or a name
    uint16_t port = 0;
    int timeout_ms = 5'000;
    FrameLimits limits;
    // TLS 1.2 or 1.3; the node's certificate is always verified.
    struct Tls {
      bool enabled = false;
      std::string ca_file;      // PEM: the CAs the node's certificate must chain to; empty: the
                                // system's (/etc/ssl/certs)
      std::string cert_file;    // PEM: a client certificate (chain), with key_file; empty: none
      std::string key_file;     // PEM: its private key
      std::string server_name;  // the name the certificate must carry (an IP address or a DNS
                                // name, sent as SNI); empty: host
    } tls;
  };

  // Connects, and under TLS completes the handshake. A file that does not
  // load is InvalidArgument; a node that cannot be reached, a certificate
  // that does not verify or a failed handshake is Unavailable, saying why.
  static Status Connect(const Options& options, std::unique_ptr<Client>* client);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One check in one request. A per-check error (bad key, unknown algorithm)
  // is an OK status with outcome->error set; a request-level error reply is
  // a non-OK status.
  Status Check(const protocol::Check& check, CheckOutcome* outcome);
  Status CheckBatch(std::span<const protocol::Check> checks, std::vector<CheckOutcome>* outcomes);
  Status Stats(StatsReply* stats);
  // A check by policy (domain and descriptors): one outcome per descriptor.
  // A malformed check (empty domain, no descriptors, an empty key) is a
  // non-OK status; a descriptor's own error is in its outcome.
  Status CheckPolicy(const PolicyCheck& check, std::vector<PolicyOutcome>* outcomes);
  // One limit's state on the node (every node's counts, as it holds them).
  Status Inspect(const KeyLimit& limit, InspectReply* reply);
  // Forgets one limit's state on the node; *erased says whether it held
  // any. A clustered node refuses unless limit.local (invalid_argument).
  Status Reset(const KeyLimit& limit, bool* erased);
  // Tells a clustered node that member `member` is gone for good: every
  // node stops dialling and counting it (Gossip::ForgetMember). *forgotten
  // says whether it was counted until now. Unsupported on a node that does
  // not gossip; invalid_argument for an unknown id or the node's own.
  Status ForgetMember(uint64_t member, bool* forgotten);

  // Pipelining. Send encodes the request with the next id (returned in
  // *request_id) into the send buffer; Flush writes the buffer; Receive reads
  // the next response (flushing first if anything is buffered).
  void Send(Request request, uint64_t* request_id = nullptr);
  Status Flush();
  Status Receive(Response* response);

  // Writes bytes as they are: for tests that send hostile input.
  Status SendRaw(std::string_view bytes);
  // Half-closes the sending side (the server sees end of stream; under TLS
  // after close_notify).
  void ShutdownSend();

 private:
  Client(int fd, const Options& options, std::unique_ptr<ClientTls> tls);
  // Reads what has arrived into room, waiting for one byte at least.
  Status ReceiveSome(std::span<std::byte> room, size_t* received);
  Status Call(Request request, Response* response);
  // Call for a request about one limit, answered by a response of `expected` kind.
  Status CallOnLimit(RequestKind kind, const KeyLimit& limit, ResponseKind expected,
                     Response* response);

  const int fd_;
  const Options options_;
  const std::unique_ptr<ClientTls> tls_;  // null in plain text
  bool answered_ = false;                 // a frame has come from the server
  uint64_t next_id_ = 1;
  std::string send_buffer_;
  FrameBuffer receive_buffer_;
};

// Status for a response of kind kError (request-level failure).
Status StatusFromError(ErrorCode code, std::string_view message);

}  // namespace tally::protocol
