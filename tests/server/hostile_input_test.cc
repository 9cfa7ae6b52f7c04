// Bad input against a live tallyd: each case must leave the node serving
// other clients correctly.
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include <doctest/doctest.h>

#include "tests/support/tallyd_process.h"

namespace tally {
namespace {

using protocol::ErrorCode;
using testing::TallydProcess;

constexpr LimitSpec kSpec{Algorithm::kFixedWindow, 1'000, 3'600'000};

std::string Words(std::initializer_list<uint32_t> words) {
  std::string bytes(words.size() * 4, '\0');
  size_t offset = 0;
  for (const uint32_t word : words) {
    std::memcpy(bytes.data() + offset, &word, 4);  // little-endian on x86
    offset += 4;
  }
  return bytes;
}

// How many lines of `log` contain `text`.
size_t LinesWith(const std::string& log, const std::string& text) {
  size_t lines = 0;
  for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++lines;
  return lines;
}

struct Node {
  explicit Node(const std::vector<std::string>& args = {}) {
    const Status status = testing::StartTallyd(args, &process);
    REQUIRE_MESSAGE(status.ok(), status.ToString());
  }
  std::unique_ptr<protocol::Client> Connect() const {
    std::unique_ptr<protocol::Client> client;
    const Status status = process->Connect(&client);
    REQUIRE_MESSAGE(status.ok(), status.ToString());
    return client;
  }
  // A well-behaved client still gets correct answers.
  void ExpectHealthy() const {
    auto client = Connect();
    protocol::CheckOutcome outcome;
    const Status status = client->Check({"healthy", kSpec, 1}, &outcome);
    REQUIRE_MESSAGE(status.ok(), status.ToString());
    CHECK(outcome.error == ErrorCode::kOk);
    CHECK(outcome.decision.allowed);
  }
  // Sends bytes and expects an error frame with `code`, then a closed
  // connection. Returns the error frame.
  protocol::Response ExpectRefused(const std::string& bytes, ErrorCode code) const {
    auto client = Connect();
    REQUIRE(client->SendRaw(bytes).ok());
    protocol::Response response;
    const Status status = client->Receive(&response);
    REQUIRE_MESSAGE(status.ok(), status.ToString());
    CHECK(response.kind == protocol::ResponseKind::kError);
    CHECK(response.error == code);
    CHECK(response.id == 0);
    protocol::Response after;
    CHECK(client->Receive(&after).code() == Status::Code::kUnavailable);
    ExpectHealthy();
    return response;
  }
  std::unique_ptr<TallydProcess> process;
};

// Random bytes: the connection is closed (after an error frame where the
// bytes parse as a segment table at all), the node keeps serving.
TEST_CASE("hostile: random bytes") {
  Node node;
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    std::string bytes(64 + rng() % 512, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    auto client = node.Connect();
    (void)client->SendRaw(bytes);
    client->ShutdownSend();
    protocol::Response response;
    while (client->Receive(&response).ok()) {
    }
  }
  node.ExpectHealthy();
}

// A segment count of 0xFFFFFFFF (it wraps to 0) and an absurd one.
TEST_CASE("hostile: impossible segment counts") {
  Node node;
  node.ExpectRefused(Words({0xFFFFFFFF, 0}), ErrorCode::kMalformedFrame);
  node.ExpectRefused(Words({1'000'000, 1, 1, 1}), ErrorCode::kMalformedFrame);
}

// A frame claiming more than --max-frame-bytes is refused before its body.
TEST_CASE("hostile: frame over the size limit") {
  Node node({"--max-frame-bytes", "4096"});
  node.ExpectRefused(Words({0, 4096 / 8}), ErrorCode::kFrameTooLarge);
  node.ExpectRefused(Words({0, 0x7FFFFFFF}), ErrorCode::kFrameTooLarge);
}

// A well-framed message that is not a Request: its root is a list pointer.
// The client is told so in fixed words; Cap'n Proto's own description of
// the fault (its internals) goes to the node's log only.
TEST_CASE("hostile: valid frame with a wrong schema") {
  Node node;
  const protocol::Response refused =
      node.ExpectRefused(Words({0, 2, 0x00000001, 0x00000000, 0, 0}), ErrorCode::kMalformedFrame);
  CHECK(refused.error_message == "malformed frame: not a valid request message");
  CHECK(node.process->Log().find("non-struct pointer") != std::string::npos);
}

// A request with more checks than --max-checks-per-request is refused whole.
TEST_CASE("hostile: too many checks in one request") {
  Node node({"--max-checks-per-request", "5"});
  auto client = node.Connect();
  const std::vector<protocol::Check> checks(6, protocol::Check{"k", kSpec, 1});
  std::vector<protocol::CheckOutcome> outcomes;
  const Status status = client->CheckBatch(checks, &outcomes);
  CHECK(status.code() == Status::Code::kInvalidArgument);
  CHECK(status.message() == "invalid_argument: request carries 6 checks; the maximum is 5");
  node.ExpectHealthy();
}

// A truncated frame, then the client goes away: the node drops it quietly.
TEST_CASE("hostile: truncated frame then end of stream") {
  Node node;
  auto client = node.Connect();
  REQUIRE(client->SendRaw(Words({0, 100, 0, 0})).ok());
  client->ShutdownSend();
  protocol::Response response;
  CHECK(client->Receive(&response).code() == Status::Code::kUnavailable);
  node.ExpectHealthy();
}

// An empty key and an unknown algorithm are per-check errors: the rest of the
// batch is decided and the connection stays open.
TEST_CASE("hostile: bad checks inside a good batch") {
  Node node;
  auto client = node.Connect();
  const LimitSpec unknown{static_cast<Algorithm>(42), 10, 1'000};
  const std::string oversized_key(300, 'k');
  const protocol::Check checks[] = {
      {"", kSpec, 1}, {"ok", unknown, 1}, {oversized_key, kSpec, 1}, {"ok", kSpec, 1}};
  std::vector<protocol::CheckOutcome> outcomes;
  REQUIRE(client->CheckBatch(checks, &outcomes).ok());
  CHECK(outcomes[0].error == ErrorCode::kInvalidArgument);
  CHECK(outcomes[0].error_message == "key is empty");
  CHECK(outcomes[1].error == ErrorCode::kInvalidArgument);
  CHECK(outcomes[1].error_message == "unknown algorithm 42");
  CHECK(outcomes[2].error == ErrorCode::kInvalidArgument);
  CHECK(outcomes[3].error == ErrorCode::kOk);
  CHECK(outcomes[3].decision.allowed);
  protocol::CheckOutcome again;
  REQUIRE(client->Check({"ok", kSpec, 1}, &again).ok());
  CHECK(again.decision.remaining == 998);
}

// A client that opens a connection and sends half a frame is closed after the
// idle timeout; meanwhile others are served without waiting for it.
TEST_CASE("hostile: half-open and stalled connections time out") {
  Node node({"--idle-timeout-ms", "300"});
  auto silent = node.Connect();
  auto stalled = node.Connect();
  REQUIRE(stalled->SendRaw(Words({0, 4})).ok());
  const auto start = std::chrono::steady_clock::now();
  node.ExpectHealthy();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(300));
  protocol::Response response;
  CHECK(silent->Receive(&response).code() == Status::Code::kUnavailable);
  CHECK(stalled->Receive(&response).code() == Status::Code::kUnavailable);
  node.ExpectHealthy();
}

// Two connections the node has registered (a stats answer proves it): with
// --max-connections 2, every slot is taken.
std::pair<std::unique_ptr<protocol::Client>, std::unique_ptr<protocol::Client>> FillTwoSlots(
    Node& node) {
  auto first = node.Connect();
  auto second = node.Connect();
  protocol::StatsReply stats;
  REQUIRE(first->Stats(&stats).ok());
  REQUIRE(second->Stats(&stats).ok());
  return {std::move(first), std::move(second)};
}

// Beyond --max-connections a new connection gets resource_exhausted.
TEST_CASE("hostile: connection cap") {
  Node node({"--max-connections", "2"});
  auto [first, second] = FillTwoSlots(node);
  protocol::StatsReply stats;
  auto third = node.Connect();
  protocol::Response response;
  REQUIRE(third->Receive(&response).ok());
  CHECK(response.error == ErrorCode::kResourceExhausted);
  second.reset();
  // The node notices the close asynchronously: poll, bounded, for a free slot.
  bool served = false;
  for (int attempt = 0; attempt < 200 && !served; ++attempt) {
    auto client = node.Connect();
    served = client->Stats(&stats).ok();
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(served);
}

// Hundreds of refused connections and bad frames cost a few log lines (at
// most one a second per worker), not one line each.
TEST_CASE("hostile: refused connections and bad frames are logged rate-limited") {
  Node node({"--max-connections", "2"});
  auto [first, second] = FillTwoSlots(node);
  protocol::Response response;
  for (int i = 0; i < 300; ++i) {
    auto refused = node.Connect();
    REQUIRE(refused->Receive(&response).ok());
    CHECK(response.error == ErrorCode::kResourceExhausted);
  }
  first.reset();
  second.reset();
  int bad_frames = 0;
  for (int attempt = 0; attempt < 2'000 && bad_frames < 300; ++attempt) {
    auto client = node.Connect();
    REQUIRE(client->SendRaw(Words({0xFFFFFFFF, 0})).ok());
    REQUIRE(client->Receive(&response).ok());
    bad_frames += response.error == ErrorCode::kMalformedFrame ? 1 : 0;  // not refused at the cap
  }
  REQUIRE(bad_frames == 300);
  const std::string log = node.process->Log();
  CHECK(LinesWith(log, "refusing connection") <= 6);
  CHECK(LinesWith(log, "closing connection") <= 6);
  node.ExpectHealthy();
}

}  // namespace
}  // namespace tally
