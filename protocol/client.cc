#include "protocol/client.h"

#include <netdb.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "protocol/client_tls.h"

namespace tally::protocol {
namespace {

std::string Errno(std::string_view what) { return std::string(what) + ": " + std::strerror(errno); }

void SetTimeouts(int fd, int timeout_ms) {
  timeval tv{};
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = (timeout_ms % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace

Status StatusFromError(ErrorCode code, std::string_view message) {
  std::string text = std::string(ErrorCodeName(code)) + ": " + std::string(message);
  switch (code) {
    case ErrorCode::kInvalidArgument: return Status::InvalidArgument(text);
    case ErrorCode::kResourceExhausted: return Status::ResourceExhausted(text);
    case ErrorCode::kMalformedFrame:
    case ErrorCode::kFrameTooLarge: return Status::Corruption(text);
    case ErrorCode::kUnavailable: return Status::Unavailable(text);
    default: return Status::IOError(text);
  }
}

Status Client::Connect(const Options& options, std::unique_ptr<Client>* client) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  const std::string port = std::to_string(options.port);
  if (int rc = getaddrinfo(options.host.c_str(), port.c_str(), &hints, &addresses); rc != 0) {
    return Status::Unavailable("cannot resolve " + options.host + ": " + gai_strerror(rc));
  }
  std::string last_error = "no address for " + options.host;
  int fd = -1;
  for (addrinfo* address = addresses; address != nullptr && fd < 0; address = address->ai_next) {
    fd = socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, address->ai_protocol);
    if (fd < 0) {
      last_error = Errno("socket");
      continue;
    }
    SetTimeouts(fd, options.timeout_ms);  // bounds connect() too
    if (connect(fd, address->ai_addr, address->ai_addrlen) != 0) {
      last_error = Errno("connect to " + options.host + ":" + port);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(addresses);
  if (fd < 0) return Status::Unavailable(last_error);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::unique_ptr<ClientTls> tls;
  if (options.tls.enabled) {
    if (Status status = ClientTls::Handshake(fd, options, &tls); !status.ok()) {
      close(fd);
      return status;
    }
  }
  client->reset(new Client(fd, options, std::move(tls)));
  return Status::OK();
}

Client::Client(int fd, const Options& options, std::unique_ptr<ClientTls> tls)
    : fd_(fd), options_(options), tls_(std::move(tls)) {}

Client::~Client() { close(fd_); }  // tls_ then frees its session, writing nothing

void Client::Send(Request request, uint64_t* request_id) {
  request.id = next_id_++;
  if (request_id) *request_id = request.id;
  EncodeRequest(request, &send_buffer_);
}

Status Client::Flush() { return SendRaw(std::exchange(send_buffer_, std::string())); }

Status Client::SendRaw(std::string_view bytes) {
  if (tls_) return tls_->Write(bytes);
  while (!bytes.empty()) {
    const ssize_t sent = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::IOError("timed out sending");
      return Status::Unavailable(Errno("send"));
    }
    bytes.remove_prefix(static_cast<size_t>(sent));
  }
  return Status::OK();
}

void Client::ShutdownSend() {
  if (tls_) tls_->Shutdown();
  shutdown(fd_, SHUT_WR);
}

Status Client::ReceiveSome(std::span<std::byte> room, size_t* received) {
  if (tls_) return tls_->Read(room, received);
  for (;;) {
    const ssize_t got = recv(fd_, room.data(), room.size(), 0);
    if (got >= 0) {
      *received = static_cast<size_t>(got);
      return Status::OK();
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::IOError("timed out receiving");
    return Status::Unavailable(Errno("recv"));
  }
}

Status Client::Receive(Response* response) {
  if (!send_buffer_.empty()) {
    if (Status status = Flush(); !status.ok()) return status;
  }
  for (;;) {
    const FrameScan scan = ScanFrame(receive_buffer_.readable(), options_.limits);
    if (scan.state == FrameScan::State::kInvalid) {
      return Status::Corruption("bad frame from server: " + scan.error_message);
    }
    if (scan.state == FrameScan::State::kComplete) {
      const Status status = DecodeResponse(receive_buffer_.readable().first(scan.frame_bytes),
                                           options_.limits, response);
      receive_buffer_.Consume(scan.frame_bytes);
      answered_ = true;
      return status;
    }
    const size_t missing = scan.frame_bytes - receive_buffer_.readable().size();
    size_t received = 0;
    if (Status status = ReceiveSome(receive_buffer_.writable(missing), &received); !status.ok()) {
      return status;
    }
    if (received == 0) {
      return Status::Unavailable(
          answered_ || tls_ ? "connection closed by the server"
                            : "connection closed by the server before any answer (a node with "
                              "--client-tls on closes clients that do not speak TLS)");
    }
    receive_buffer_.Commit(received);
  }
}

Status Client::Call(Request request, Response* response) {
  uint64_t id = 0;
  Send(std::move(request), &id);
  if (Status status = Receive(response); !status.ok()) return status;
  if (response->kind == ResponseKind::kError) {
    return StatusFromError(response->error, response->error_message);
  }
  if (response->id != id) {
    return Status::Corruption("response id " + std::to_string(response->id) +
                              " does not match request id " + std::to_string(id));
  }
  return Status::OK();
}

Status Client::CheckBatch(std::span<const protocol::Check> checks,
                          std::vector<CheckOutcome>* outcomes) {
  Request request;
  request.kind = RequestKind::kCheck;
  request.checks.assign(checks.begin(), checks.end());
  Response response;
  if (Status status = Call(std::move(request), &response); !status.ok()) return status;
  if (response.kind != ResponseKind::kCheck || response.outcomes.size() != checks.size()) {
    return Status::Corruption("check response does not answer every check");
  }
  *outcomes = std::move(response.outcomes);
  return Status::OK();
}

Status Client::Check(const protocol::Check& check, CheckOutcome* outcome) {
  std::vector<CheckOutcome> outcomes;
  if (Status status = CheckBatch({&check, 1}, &outcomes); !status.ok()) return status;
  *outcome = std::move(outcomes.front());
  return Status::OK();
}

Status Client::CheckPolicy(const PolicyCheck& check, std::vector<PolicyOutcome>* outcomes) {
  Request request;
  request.kind = RequestKind::kPolicyCheck;
  request.policy_check = check;
  Response response;
  if (Status status = Call(std::move(request), &response); !status.ok()) return status;
  if (response.kind != ResponseKind::kPolicyCheck ||
      response.policy_outcomes.size() != check.descriptor_sizes.size()) {
    return Status::Corruption("policy check response does not answer every descriptor");
  }
  *outcomes = std::move(response.policy_outcomes);
  return Status::OK();
}

Status Client::Stats(StatsReply* stats) {
  Request request;
  request.kind = RequestKind::kStats;
  Response response;
  if (Status status = Call(std::move(request), &response); !status.ok()) return status;
  if (response.kind != ResponseKind::kStats) {
    return Status::Corruption("stats request answered with another kind");
  }
  *stats = response.stats;
  return Status::OK();
}

Status Client::CallOnLimit(RequestKind kind, const KeyLimit& limit, ResponseKind expected,
                           Response* response) {
  Request request;
  request.kind = kind;
  request.key_limit = limit;
  if (Status status = Call(std::move(request), response); !status.ok()) return status;
  if (response->kind != expected) return Status::Corruption("answered with another kind");
  return Status::OK();
}

Status Client::Inspect(const KeyLimit& limit, InspectReply* reply) {
  Response response;
  Status status = CallOnLimit(RequestKind::kInspect, limit, ResponseKind::kInspect, &response);
  if (status.ok()) *reply = std::move(response.inspect);
  return status;
}

Status Client::ForgetMember(uint64_t member, bool* forgotten) {
  Request request;
  request.kind = RequestKind::kForgetMember;
  request.member_id = member;
  Response response;
  if (Status status = Call(std::move(request), &response); !status.ok()) return status;
  if (response.kind != ResponseKind::kForgetMember) {
    return Status::Corruption("the node answered a forget with another kind of response");
  }
  *forgotten = response.member_forgotten;
  return Status::OK();
}

Status Client::Reset(const KeyLimit& limit, bool* erased) {
  Response response;
  Status status = CallOnLimit(RequestKind::kReset, limit, ResponseKind::kReset, &response);
  if (status.ok()) *erased = response.reset_erased;
  return status;
}

}  // namespace tally::protocol
