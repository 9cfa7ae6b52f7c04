// Unit tests of the RESP front (node/resp/): sessions fed bytes in process,
// as the Server feeds them, on an engine with a ManualClock. CL.THROTTLE is
// checked against redis-cell's own examples (its README, its unit test
// it_rate_limits in src/cell/mod.rs and its end-to-end test tests/e2e.rs).
#include "node/resp/resp_front.h"

#include <array>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/net/rate_limited_log.h"
#include "node/policy/policy_store.h"
#include "node/resp/cl_throttle.h"
#include "protocol/resp.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

constexpr int64_t kStartMs = 1'700'000'000'000;

// A front on its own engine and clock, and one connection to it.
class Harness {
 public:
  explicit Harness(RespFront::Options options = {}, PolicyStore* policies = nullptr)
      : limiter_(LimiterOptions(&clock_)), front_(options, &limiter_, policies, 1, [] {
          protocol::StatsReply stats;
          stats.keys = 42;
          return stats;
        }) {
    Reconnect();
  }

  // A new connection; the engine keeps its state.
  void Reconnect() { session_ = front_.NewSession(SessionContext{peer_, &clock_, &log_, 0}); }

  // Sends `bytes` (after what an earlier call left unconsumed), returns what
  // the session answered.
  std::string Send(std::string_view bytes) {
    pending_ += bytes;
    std::string out;
    const StreamProgress progress =
        session_->Answer(std::as_bytes(std::span(pending_.data(), pending_.size())), &out);
    pending_.erase(0, progress.consumed_bytes);
    closed_ = progress.close;
    wanted_ = progress.wanted_bytes;
    return out;
  }
  std::string Call(std::vector<std::string_view> args) {
    std::string command;
    protocol::AppendCommand(args, &command);
    return Send(command);
  }
  // CL.THROTTLE's five integers.
  std::array<int64_t, 5> Throttle(std::vector<std::string_view> args) {
    args.insert(args.begin(), "CL.THROTTLE");
    const std::string reply = Call(args);
    protocol::RespValue value;
    REQUIRE(protocol::ParseReply(reply, &value).state == protocol::RespParse::State::kComplete);
    REQUIRE_MESSAGE(value.elements.size() == 5, reply);
    std::array<int64_t, 5> integers{};
    for (size_t i = 0; i < 5; ++i) integers[i] = value.elements[i].integer;
    return integers;
  }

  ManualClock& clock() { return clock_; }
  RespFront& front() { return front_; }
  bool closed() const { return closed_; }
  size_t wanted() const { return wanted_; }
  size_t pending() const { return pending_.size(); }

 private:
  static Limiter::Options LimiterOptions(const Clock* clock) {
    Limiter::Options options;
    options.clock = clock;
    return options;
  }

  ManualClock clock_{kStartMs};
  Limiter limiter_;
  RespFront front_;
  const std::string peer_ = "127.0.0.1:1";
  RateLimitedLog log_{&clock_, "test warnings"};
  std::unique_ptr<StreamSession> session_;
  std::string pending_;
  bool closed_ = false;
  size_t wanted_ = 0;
};

using Reply = std::array<int64_t, 5>;

// redis-cell's README: CL.THROTTLE user123 15 30 60 on a new key.
TEST_CASE("resp: CL.THROTTLE answers redis-cell's README example") {
  Harness harness;
  CHECK(harness.Throttle({"user123", "15", "30", "60"}) == Reply{0, 16, 15, -1, 2});
  CHECK(harness.Throttle({"user123", "15", "30", "60", "1"}) == Reply{0, 16, 14, -1, 4});
}

// redis-cell's it_rate_limits: limit 5 (max_burst 4) at 1 per second, each
// case at its time with its quantity: (limited, remaining, retry, reset).
TEST_CASE("resp: CL.THROTTLE follows redis-cell's it_rate_limits, case by case") {
  Harness harness;
  struct Case {
    int64_t at_ms;
    const char* quantity;
    Reply expected;
  };
  const Case cases[] = {
      {0, "6", {1, 5, 5, -1, 0}},  // never more than the maximum
      {0, "1", {0, 5, 4, -1, 1}},    {0, "1", {0, 5, 3, -1, 2}},    {0, "1", {0, 5, 2, -1, 3}},
      {0, "1", {0, 5, 1, -1, 4}},    {0, "1", {0, 5, 0, -1, 5}},    {0, "1", {1, 5, 0, 1, 5}},
      {3000, "1", {0, 5, 2, -1, 3}}, {3100, "1", {0, 5, 1, -1, 4}},  // reset 3.9 s
      {4000, "1", {0, 5, 1, -1, 4}}, {8000, "1", {0, 5, 4, -1, 1}}, {9500, "1", {0, 5, 4, -1, 1}},
      {9500, "0", {0, 5, 4, -1, 1}},  // a peek
      {9500, "2", {0, 5, 2, -1, 3}}, {9500, "5", {1, 5, 2, 3, 3}},
  };
  for (const Case& c : cases) {
    harness.clock().SetWallMs(kStartMs + c.at_ms);
    CHECK_MESSAGE(harness.Throttle({"foo", "4", "1", "1", c.quantity}) == c.expected, "at ",
                  c.at_ms, " ms, quantity ", c.quantity);
  }
}

// redis-cell's tests/e2e.rs: max_burst 0, 1 per 2 s; allowed, limited, and
// allowed again after the retry_after it gave.
TEST_CASE("resp: CL.THROTTLE follows redis-cell's end-to-end test") {
  Harness harness;
  CHECK(harness.Throttle({"user123", "0", "1", "2", "1"}) == Reply{0, 1, 0, -1, 2});
  CHECK(harness.Throttle({"user123", "0", "1", "2", "1"}) == Reply{1, 1, 0, 2, 2});
  harness.clock().AdvanceMs(2000);
  CHECK(harness.Throttle({"user123", "0", "1", "2", "1"}) == Reply{0, 1, 0, -1, 2});
}

// The bucket's window is C * period / count, rounded to the ms; rates the
// engine cannot hold and arguments redis-cell would misuse are refused.
TEST_CASE("resp: CL.THROTTLE maps its rate onto the token bucket") {
  LimitSpec spec;
  REQUIRE(ThrottleSpec({15, 30, 60, 1}, &spec).ok());
  CHECK(spec.algorithm == Algorithm::kTokenBucket);
  CHECK(spec.limit == 16);
  CHECK(spec.window_ms == 32'000);
  REQUIRE(ThrottleSpec({4, 3, 1, 1}, &spec).ok());  // 5 * 1000 / 3 = 1666.67 ms
  CHECK(spec.window_ms == 1'667);
  REQUIRE(ThrottleSpec({0, 2000, 1, 1}, &spec).ok());  // 0.5 ms rounds to 1
  CHECK(spec.window_ms == 1);
  CHECK(ThrottleSpec({0, 3000, 1, 1}, &spec).code() == Status::Code::kInvalidArgument);
  CHECK(ThrottleSpec({0, 1, 366 * 24 * 3600, 1}, &spec).code() == Status::Code::kInvalidArgument);
  // Beyond 30 days capacity * window_ms is bounded (MaxLimitFor): a year holds 82,191,780.
  CHECK(ThrottleSpec({82'191'779, 82'191'780, 365 * 24 * 3600, 1}, &spec).ok());
  CHECK(ThrottleSpec({82'191'780, 82'191'781, 365 * 24 * 3600, 1}, &spec).code() ==
        Status::Code::kInvalidArgument);
  CHECK(ThrottleSpec({1'000'000'000, 1, 1, 1}, &spec).code() == Status::Code::kInvalidArgument);
  CHECK(ThrottleSpec({1, 0, 1, 1}, &spec).code() == Status::Code::kInvalidArgument);
  CHECK(ThrottleSpec({1, 1, 0, 1}, &spec).code() == Status::Code::kInvalidArgument);
  CHECK(ThrottleSpec({-1, 1, 1, 1}, &spec).code() == Status::Code::kInvalidArgument);
  CHECK(ThrottleSpec({1, 1, 1, -1}, &spec).code() == Status::Code::kInvalidArgument);
  CHECK(ThrottleSpec({INT64_MAX, INT64_MAX, INT64_MAX, 1}, &spec).code() ==
        Status::Code::kInvalidArgument);
}

// Bad arguments get an error and the connection goes on.
TEST_CASE("resp: CL.THROTTLE refuses bad arguments with an error") {
  Harness harness;
  CHECK(harness.Call({"CL.THROTTLE", "k", "1", "x", "1"}) ==
        "-ERR value is not an integer or out of range\r\n");
  CHECK(harness.Call({"CL.THROTTLE", "k", "1", "0", "1"}) ==
        "-ERR zero rates are not supported\r\n");
  CHECK(harness.Call({"cl.throttle", "k"}) ==
        "-ERR wrong number of arguments for 'cl.throttle' command\r\n");
  CHECK(harness.Call({"CL.THROTTLE", std::string(300, 'k'), "1", "1", "1"}).starts_with("-ERR "));
  CHECK(harness.Call({"PING"}) == "+PONG\r\n");
  CHECK_FALSE(harness.closed());
}

// TALLY.CHECK answers the engine's whole decision: pairs in RESP2, a map in RESP3.
TEST_CASE("resp: TALLY.CHECK replies with the decision") {
  Harness harness;
  CHECK(harness.Call({"TALLY.CHECK", "k", "fixed_window", "2", "3600000", "2"}) ==
        "*12\r\n$7\r\nallowed\r\n:1\r\n$5\r\nlimit\r\n:2\r\n$9\r\nremaining\r\n:0\r\n"
        "$14\r\nretry_after_ms\r\n:0\r\n$14\r\nreset_after_ms\r\n:2800000\r\n"
        "$13\r\nnever_allowed\r\n:0\r\n");
  harness.Call({"HELLO", "3"});
  CHECK(harness.Call({"TALLY.CHECK", "k", "fixed_window", "2", "3600000"}) ==
        "%6\r\n$7\r\nallowed\r\n:0\r\n$5\r\nlimit\r\n:2\r\n$9\r\nremaining\r\n:0\r\n"
        "$14\r\nretry_after_ms\r\n:2800000\r\n$14\r\nreset_after_ms\r\n:2800000\r\n"
        "$13\r\nnever_allowed\r\n:0\r\n");
  CHECK(harness.Call({"TALLY.CHECK", "k", "fixed_window", "2", "3600000", "3"})
            .find("never_allowed\r\n:1") != std::string::npos);
  CHECK(harness.Call({"TALLY.CHECK", "k", "leaky", "2", "1000"})
            .starts_with("-ERR unknown algorithm 'leaky'"));
  CHECK(harness.Call({"TALLY.CHECK", "k", "sliding_log", "-1", "1000"}) ==
        "-ERR value is not an integer or out of range\r\n");
  CHECK(harness.Call({"TALLY.CHECK", "k", "sliding_log", "1", "0"}).starts_with("-ERR "));
  CHECK(harness.front().stats().throttled == 2);
}

// TALLY.POLICY decides one descriptor under the node's policies; HITS is the cost.
TEST_CASE("resp: TALLY.POLICY decides by the node's policies") {
  testing::TempDir dir;
  std::ofstream(dir.Path("api.yaml"))
      << "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n"
         "      requests_per_unit: 3\n    metadata: {tier: gold}\n";
  std::unique_ptr<PolicyStore> policies;
  REQUIRE(PolicyStore::Open({dir.Path(""), 1000}, &policies).ok());
  Harness harness({}, policies.get());
  harness.Call({"HELLO", "3"});
  const std::string first = harness.Call({"TALLY.POLICY", "api", "user", "u1", "HITS", "2"});
  CHECK(first.starts_with(
      "%10\r\n$7\r\nallowed\r\n:1\r\n$5\r\nlimit\r\n:3\r\n$9\r\nremaining\r\n:1"));
  CHECK(first.ends_with("$8\r\nmetadata\r\n$15\r\n{\"tier\":\"gold\"}\r\n"));  // as JSON
  // the rule is named by its full key, as it has no name
  CHECK(first.find("$4\r\nkind\r\n$7\r\nlimited\r\n$4\r\nrule\r\n$8\r\napi.user\r\n") !=
        std::string::npos);
  CHECK(harness.Call({"TALLY.POLICY", "api", "user", "u1", "HITS", "2"})
            .starts_with("%10\r\n$7\r\nallowed\r\n:0\r\n"));
  const std::string unknown = harness.Call({"TALLY.POLICY", "web", "user", "u1"});
  CHECK(unknown.starts_with("%10\r\n$7\r\nallowed\r\n:1\r\n"));
  CHECK(unknown.find("$8\r\nno_limit\r\n$4\r\nrule\r\n_\r\n") != std::string::npos);
  CHECK(unknown.ends_with("$8\r\nmetadata\r\n_\r\n"));  // no rule, no metadata
  CHECK(harness.Call({"TALLY.POLICY", "api", "user"}) ==
        "-ERR wrong number of arguments for 'tally.policy' command\r\n");
  CHECK(harness.Call({"TALLY.POLICY", "", "user", "u1"}).starts_with("-ERR "));
}

// Commands pipelined in one buffer are answered in order, however the bytes
// are split; an incomplete command waits in the buffer and is not consumed.
TEST_CASE("resp: pipelined commands are answered in order across any split") {
  std::string commands;
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::string_view> args = {"CL.THROTTLE", "p", "1", "1", "60"};
    protocol::AppendCommand(args, &commands);
  }
  const std::vector<std::string_view> echo = {"ECHO", "done"};
  protocol::AppendCommand(echo, &commands);
  const std::string expected =
      "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n*5\r\n:0\r\n:2\r\n:0\r\n:-1\r\n:120\r\n"
      "*5\r\n:1\r\n:2\r\n:0\r\n:60\r\n:120\r\n$4\r\ndone\r\n";
  for (size_t split = 0; split <= commands.size(); ++split) {
    Harness harness;
    std::string out = harness.Send(std::string_view(commands).substr(0, split));
    out += harness.Send(std::string_view(commands).substr(split));
    CHECK_MESSAGE(out == expected, "split at ", split);
    CHECK(harness.pending() == 0);
  }
}

// Checks pipelined with other commands, errors, AUTH and QUIT in one buffer
// (decided in batches) answer exactly what the same commands sent one at a
// time answer, in order; nothing after QUIT is answered.
TEST_CASE("resp: pipelined checks answer as the same commands sent one by one") {
  std::vector<std::vector<std::string_view>> commands = {
      {"CL.THROTTLE", "p", "1", "1", "60"},  // before AUTH: NOAUTH
      {"AUTH", "pw"},
      {"CL.THROTTLE", "p", "1", "1", "60"},
      {"TALLY.CHECK", "k", "fixed_window", "2", "3600000"},
      {"CL.THROTTLE", "p", "1", "1", "60"},
      {"CL.THROTTLE", "p", "x", "1", "60"},  // not an integer
      {"TALLY.CHECK", "k", "fixed_window", "2", "3600000"},
      {"CL.THROTTLE", "p", "1", "1", "60"},                  // limited
      {"TALLY.CHECK", "k", "fixed_window", "2", "3600000"},  // denied
      {"TALLY.CHECK", "", "fixed_window", "2", "3600000"},   // the engine refuses the key
      {"PING"},
      {"TALLY.CHECK", "k", "leaky", "2", "1000"},
      {"TALLY.CHECK", "s", "sliding_counter", "5", "60000", "2"},
      {"HELLO", "3"},
      {"TALLY.CHECK", "s", "sliding_counter", "5", "60000", "2"},
      {"CL.THROTTLE", "q", "2", "1", "60", "0"},  // a peek
  };
  // Longer than one batch: a few keys, each checked until limited.
  for (int i = 0; i < 300; ++i) {
    static const std::string_view kKeys[] = {"a", "b", "c", "d", "e"};
    commands.push_back({"CL.THROTTLE", kKeys[i % 5], "40", "1", "60"});
  }
  commands.push_back({"QUIT"});
  commands.push_back({"CL.THROTTLE", "p", "1", "1", "60"});  // after QUIT: not answered

  RespFront::Options options;
  options.password = "pw";
  Harness one_by_one(options);
  std::string expected;
  for (const auto& command : commands) {
    if (!one_by_one.closed()) expected += one_by_one.Call(command);
  }
  std::string pipelined;
  for (const auto& command : commands) protocol::AppendCommand(command, &pipelined);
  Harness harness(options);
  CHECK(harness.Send(pipelined) == expected);
  CHECK(harness.closed());
  CHECK(harness.front().stats().commands == one_by_one.front().stats().commands);
  CHECK(harness.front().stats().errors == one_by_one.front().stats().errors);
  CHECK(harness.front().stats().throttled == one_by_one.front().stats().throttled);
  CHECK(harness.front().stats().throttled == 2 + 5 * (60 - 41));
  CHECK(harness.front().decided().Read().latency_count ==
        one_by_one.front().decided().Read().latency_count);
}

// Bytes that are not a command get a protocol error and the connection is
// closed, at once, before a claimed length's bytes arrive.
TEST_CASE("resp: malformed commands close the connection with a protocol error") {
  RespFront::Options options;
  options.limits.max_bulk_bytes = 1024;
  options.limits.max_args = 16;
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"PING\r\n", "-ERR Protocol error: expected '*' (array), got 'P'"},
      {"*1\r\n*1\r\n$4\r\nPING\r\n", "-ERR Protocol error: expected '$' (bulk string), got '*'"},
      {"*1\r\n$1025\r\n", "-ERR Protocol error: invalid bulk length 1025 (at most 1024 bytes)"},
      {"*17\r\n", "-ERR Protocol error: invalid multibulk length 17 (at most 16 arguments)"},
      {"*-5\r\n", "-ERR Protocol error: invalid multibulk length -5"},
      {"*1\r\n$x\r\n", "-ERR Protocol error: invalid bulk string length"},
      {"*1\r\n$4\r\nPINGxx", "-ERR Protocol error: bulk string without CRLF"},
  };
  for (const auto& [bytes, error] : cases) {
    Harness harness(options);
    const std::string out = harness.Send(std::string("*1\r\n$4\r\nPING\r\n") + std::string(bytes));
    CHECK_MESSAGE(out.starts_with(std::string("+PONG\r\n") + std::string(error)), out);
    CHECK(harness.closed());
    CHECK(harness.front().stats().errors == 1);
  }
}

// A half-sent command asks for the rest of its argument and holds nothing else.
TEST_CASE("resp: a half-sent command waits for the bytes it lacks") {
  Harness harness;
  CHECK(harness.Send("*2\r\n$4\r\nECHO\r\n$100\r\nabc").empty());
  CHECK(harness.wanted() == 99);
  CHECK_FALSE(harness.closed());
}

// Unknown commands get Redis's error; the connection stays usable.
TEST_CASE("resp: an unknown command gets an error and the next one an answer") {
  Harness harness;
  CHECK(harness.Call({"SET", "a", "b"}) ==
        "-ERR unknown command 'SET', with args beginning with: 'a' 'b' \r\n");
  CHECK(harness.Call({"PING", "hi"}) == "$2\r\nhi\r\n");
  CHECK(harness.Send("*0\r\n*1\r\n$4\r\nPING\r\n") == "+PONG\r\n");  // *0 is skipped
  CHECK(harness.front().stats().commands == 3);
  CHECK(harness.front().stats().errors == 1);
}

// What clients send on connect and to check health.
TEST_CASE("resp: connection commands answer as Redis does") {
  Harness harness;
  CHECK(harness.Call({"ECHO", "x"}) == "$1\r\nx\r\n");
  CHECK(harness.Call({"SELECT", "0"}) == "+OK\r\n");
  CHECK(harness.Call({"SELECT", "1"}) == "-ERR DB index is out of range\r\n");
  CHECK(harness.Call({"CLIENT", "GETNAME"}) == "$-1\r\n");
  CHECK(harness.Call({"CLIENT", "SETNAME", "worker-1"}) == "+OK\r\n");
  CHECK(harness.Call({"CLIENT", "GETNAME"}) == "$8\r\nworker-1\r\n");
  CHECK(harness.Call({"CLIENT", "SETNAME", "a b"}).starts_with("-ERR Client names"));
  CHECK(harness.Call({"CLIENT", "SETINFO", "LIB-NAME", "redis-py"}) == "+OK\r\n");
  CHECK(harness.Call({"CLIENT", "ID"}) == ":1\r\n");
  CHECK(harness.Call({"COMMAND", "COUNT"}) == ":12\r\n");
  CHECK(harness.Call({"COMMAND", "INFO", "cl.throttle"})
            .starts_with("*1\r\n*10\r\n$11\r\ncl.throttle\r\n:-5\r\n"));
  CHECK(harness.Call({"COMMAND", "DOCS", "ping"}).starts_with("*2\r\n$4\r\nping\r\n*6\r\n"));
  const std::string info = harness.Call({"INFO"});
  CHECK(info.find("# Tally\r\nkeys:42\r\n") != std::string::npos);
  CHECK(info.find("client_name:worker-1") != std::string::npos);
  CHECK(harness.Call({"INFO", "clients"}).find("# Server") == std::string::npos);
  CHECK(harness.Call({"HELLO", "4"}) == "-NOPROTO unsupported protocol version\r\n");
  const std::string hello = harness.Call({"HELLO", "3", "SETNAME", "w2"});
  CHECK(hello.starts_with("%7\r\n$6\r\nserver\r\n$5\r\ntally\r\n"));
  CHECK(hello.find("$5\r\nproto\r\n:3\r\n") != std::string::npos);
  CHECK(harness.Call({"CLIENT", "GETNAME"}) == "$2\r\nw2\r\n");
  CHECK(harness.Call({"AUTH", "x"}).starts_with("-ERR AUTH <password> called without"));
  CHECK(harness.Call({"QUIT"}) == "+OK\r\n");
  CHECK(harness.closed());
}

// With a password, nothing but AUTH, HELLO and QUIT works before it is given.
TEST_CASE("resp: AUTH is required when a password is configured") {
  RespFront::Options options;
  options.password = "s3cret";
  Harness harness(options);
  CHECK(harness.Call({"PING"}) == "-NOAUTH Authentication required.\r\n");
  CHECK(harness.Call({"CL.THROTTLE", "k", "1", "1", "1"}) ==
        "-NOAUTH Authentication required.\r\n");
  CHECK(harness.Call({"HELLO", "3"}).starts_with("-NOAUTH HELLO must be called"));
  CHECK(harness.Call({"AUTH", "wrong"}) ==
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
  CHECK(harness.Call({"AUTH", "s3cre"}).starts_with("-WRONGPASS"));
  CHECK(harness.Call({"AUTH", "other", "s3cret"}).starts_with("-WRONGPASS"));
  CHECK(harness.Call({"PING"}) == "-NOAUTH Authentication required.\r\n");
  CHECK(harness.Call({"AUTH", "s3cret"}) == "+OK\r\n");
  CHECK(harness.Call({"PING"}) == "+PONG\r\n");
  harness.Reconnect();  // authentication belongs to the connection
  CHECK(harness.Call({"PING"}) == "-NOAUTH Authentication required.\r\n");
  CHECK(harness.Call({"HELLO", "2", "AUTH", "default", "s3cret"}).starts_with("*14\r\n"));
  CHECK(harness.Call({"PING"}) == "+PONG\r\n");
}

// A refusal by the server (the receive budget) is an error reply.
TEST_CASE("resp: the server's refusal and connection cap are error replies") {
  Harness harness;
  CHECK(harness.front().TooManyConnections() == "-ERR max number of clients reached\r\n");
}

}  // namespace
}  // namespace tally
