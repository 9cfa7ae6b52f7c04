// tallyd as operators run it: under systemd (sd_notify: READY, STATUS,
// STOPPING to the socket in NOTIFY_SOCKET) and with JSON logs for a log
// shipper (--log-format json: every line of stderr one JSON object).
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <sys/un.h>

#include "tests/support/raw_connection.h"
#include "tests/support/tallyd_process.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

using testing::TempDir;

// A unix datagram socket bound at `path`, as systemd's notify socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  }
  ~NotifySocket() { close(fd_); }

  // Receives messages until one holds `line` (a whole line of it), or
  // timeout_ms pass; every message received is kept in messages().
  bool WaitFor(const std::string& line, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd wait{fd_, POLLIN, 0};
      if (poll(&wait, 1, 50) <= 0) continue;
      char buffer[4096];
      const ssize_t got = recv(fd_, buffer, sizeof(buffer), 0);
      if (got <= 0) continue;
      messages_.emplace_back(buffer, static_cast<size_t>(got));
      if (HasLine(messages_.back(), line)) return true;
    }
    return false;
  }
  const std::vector<std::string>& messages() const { return messages_; }

  static bool HasLine(const std::string& message, const std::string& line) {
    std::istringstream lines(message);
    for (std::string got; std::getline(lines, got);) {
      if (got == line) return true;
    }
    return false;
  }

 private:
  int fd_ = -1;
  std::vector<std::string> messages_;
};

std::string Joined(const std::vector<std::string>& messages) {
  std::string all;
  for (const std::string& message : messages) all += message + "\n---\n";
  return all;
}

// Under systemd, tallyd says what it is doing while it starts, that it is
// ready once it serves, and that it stops at SIGTERM.
TEST_CASE("operations: sd_notify tells systemd the progress, READY=1 and STOPPING=1") {
  TempDir dir;
  NotifySocket notify(dir.Path("notify.sock"));
  REQUIRE(setenv("NOTIFY_SOCKET", dir.Path("notify.sock").c_str(), 1) == 0);
  std::unique_ptr<testing::TallydProcess> node;
  const Status started = testing::StartTallyd({"--data-dir", dir.Path("data")}, &node);
  unsetenv("NOTIFY_SOCKET");
  REQUIRE_MESSAGE(started.ok(), started.ToString());

  REQUIRE_MESSAGE(notify.WaitFor("READY=1", 10'000), Joined(notify.messages()));
  // Before it: the restore as a status, with the start timeout extended.
  const std::string& first = notify.messages().front();
  CHECK_MESSAGE(first.starts_with("STATUS=restoring counters from "), first);
  CHECK_MESSAGE(first.find("EXTEND_TIMEOUT_USEC=") != std::string::npos, first);
  CHECK(NotifySocket::HasLine(notify.messages().back(), "STATUS=ready: serving"));

  CHECK(node->SignalAndWait(SIGTERM, 10'000) == 0);
  CHECK_MESSAGE(notify.WaitFor("STOPPING=1", 2'000), Joined(notify.messages()));
}

// Without NOTIFY_SOCKET nothing is sent and the node starts as always.
TEST_CASE("operations: without systemd the node starts and says ready in its log") {
  unsetenv("NOTIFY_SOCKET");
  std::unique_ptr<testing::TallydProcess> node;
  REQUIRE(testing::StartTallyd({}, &node).ok());
  CHECK(node->SignalAndWait(SIGTERM, 10'000) == 0);
  CHECK_MESSAGE(node->Log().find("] ready") != std::string::npos, node->Log());
}

// Every line is one JSON object with an RFC 3339 UTC time, a level, the
// logger and the message; returns the messages.
std::vector<std::string> ParseJsonLines(const std::string& log) {
  std::vector<std::string> messages;
  std::istringstream lines(log);
  const std::regex rfc3339(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
  for (std::string line; std::getline(lines, line);) {
    INFO("line: ", line);
    const nlohmann::json object = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    REQUIRE(object.is_object());
    CHECK(object.size() == 4);
    CHECK(std::regex_match(object.value("time", ""), rfc3339));
    CHECK(object.value("level", "").size() > 0);
    CHECK(object.value("logger", "") == "tallyd");
    messages.push_back(object.value("message", ""));
  }
  return messages;
}

bool AnyHolds(const std::vector<std::string>& messages, const std::string& part) {
  for (const std::string& message : messages) {
    if (message.find(part) != std::string::npos) return true;
  }
  return false;
}

// A refusal whose message holds a quote and a newline is still one line of
// JSON, and gives the value back intact.
TEST_CASE("operations: --log-format json escapes quotes and newlines in a refusal") {
  std::string log;
  const std::string seed = "bad\"seed\nnext";
  CHECK(testing::RunTallyd({"--log-format", "json", "--port", "0", "--memory-only", "--seed", seed},
                           &log) == 1);
  const std::vector<std::string> messages = ParseJsonLines(log);
  REQUIRE_MESSAGE(messages.size() == 1, log);
  CHECK_MESSAGE(messages[0].find(seed) != std::string::npos, messages[0]);
  CHECK(messages[0].starts_with("not starting: "));
}

// A running node logs in JSON from its first line to its last, a client's
// bad frame included.
TEST_CASE("operations: --log-format json from start to stop, a bad client included") {
  std::unique_ptr<testing::TallydProcess> node;
  REQUIRE(testing::StartTallyd({"--log-format", "json", "--memory-only"}, &node).ok());
  {
    testing::RawConnection client(node->port());
    REQUIRE(client.connected());
    // A segment table claiming 0xFFFFFFFF segments: not a frame.
    CHECK(client.Send(std::string("\xff\xff\xff\xff\"quoted\"\n", 14)));
    CHECK(client.ClosedByPeer(5'000));
  }
  CHECK(node->SignalAndWait(SIGTERM, 10'000) == 0);
  const std::vector<std::string> messages = ParseJsonLines(node->Log());
  CHECK(AnyHolds(messages, "closing connection from 127.0.0.1:"));
  CHECK(AnyHolds(messages, "ready"));
  CHECK(AnyHolds(messages, "stopped"));
}

}  // namespace
}  // namespace tally
