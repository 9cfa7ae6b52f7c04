// RawConnection: a TCP connection to a port on loopback that sends bytes as
// they are, for tests of misbehaving clients and peers. Blocking; every wait
// is bounded.
//
// Thread safety: none; owned by one thread.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace tally::testing {

class RawConnection {
 public:
  // Connects to 127.0.0.1:port, from `source` (another loopback address,
  // e.g. "127.0.0.2") when given. connected() says whether it worked.
  explicit RawConnection(uint16_t port, const char* source = nullptr) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return;
    if (source != nullptr) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      inet_pton(AF_INET, source, &local.sin_addr);
      if (bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) Reset();
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      Reset();
    }
  }
  ~RawConnection() { Reset(); }
  RawConnection(RawConnection&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  RawConnection& operator=(RawConnection&& other) noexcept {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
    return *this;
  }

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // Sends all of `bytes`; false when the connection is closed or broken.
  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t sent = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (sent <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(sent));
    }
    return true;
  }

  // Appends what arrives to *received until `wanted` bytes are there, the
  // other end closes, or timeout_ms pass. Returns false when it closed.
  bool Receive(size_t wanted, std::string* received, int timeout_ms = 2'000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (received->size() < wanted) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd readable{fd_, POLLIN, 0};
      if (left.count() <= 0 || poll(&readable, 1, static_cast<int>(left.count())) <= 0) return true;
      char chunk[4096];
      const ssize_t got = recv(fd_, chunk, sizeof(chunk), 0);
      if (got <= 0) return false;
      received->append(chunk, static_cast<size_t>(got));
    }
    return true;
  }

  // True when the other end closes the connection (end of stream or reset)
  // within timeout_ms; what it sends before that is read and dropped.
  bool ClosedByPeer(int timeout_ms = 2'000) {
    std::string ignored;
    return !Receive(SIZE_MAX, &ignored, timeout_ms);
  }

 private:
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
};

}  // namespace tally::testing
