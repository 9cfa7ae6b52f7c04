// Unit tests of the RESP codec (protocol/resp.h): replies as the load
// generator reads them, and commands as the RESP front reads them.
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include "protocol/resp.h"

namespace tally::protocol {
namespace {

// Parses `bytes`, which must hold exactly one complete reply.
RespValue ParseWhole(std::string_view bytes) {
  RespValue value;
  const RespParse parse = ParseReply(bytes, &value);
  REQUIRE(parse.state == RespParse::State::kComplete);
  CHECK(parse.consumed_bytes == bytes.size());
  return value;
}

RespParse::State StateOf(std::string_view bytes) {
  RespValue value;
  return ParseReply(bytes, &value).state;
}

// Integer replies, negative ones included, are read as 64-bit values.
TEST_CASE("resp parses integer replies") {
  const RespValue one = ParseWhole(":1\r\n");
  CHECK(one.type == RespValue::Type::kInteger);
  CHECK(one.integer == 1);
  CHECK(ParseWhole(":-42\r\n").integer == -42);
  CHECK(ParseWhole(":9223372036854775807\r\n").integer == INT64_MAX);
}

// A bulk string is taken by its length, so CRLF inside it is content.
TEST_CASE("resp parses bulk strings, binary content included") {
  const RespValue sha = ParseWhole("$5\r\nab\r\nc\r\n");
  CHECK(sha.type == RespValue::Type::kBulkString);
  CHECK(sha.text == "ab\r\nc");
  CHECK(ParseWhole("$0\r\n\r\n").text.empty());
}

// $-1 is the nil bulk string (GET of a missing key), distinct from "".
TEST_CASE("resp parses the nil bulk string") {
  CHECK(ParseWhole("$-1\r\n").type == RespValue::Type::kNilBulk);
}

// Arrays hold any reply type, arrays included; *-1 is the nil array.
TEST_CASE("resp parses nested arrays and the nil array") {
  const RespValue array = ParseWhole("*3\r\n:7\r\n$3\r\nfoo\r\n*2\r\n+OK\r\n$-1\r\n");
  REQUIRE(array.type == RespValue::Type::kArray);
  REQUIRE(array.elements.size() == 3);
  CHECK(array.elements[0].integer == 7);
  CHECK(array.elements[1].text == "foo");
  REQUIRE(array.elements[2].elements.size() == 2);
  CHECK(array.elements[2].elements[0].text == "OK");
  CHECK(array.elements[2].elements[1].type == RespValue::Type::kNilBulk);
  CHECK(ParseWhole("*0\r\n").elements.empty());
  CHECK(ParseWhole("*-1\r\n").type == RespValue::Type::kNilArray);
}

// An error reply keeps its whole message, error prefix included.
TEST_CASE("resp parses error replies") {
  const RespValue error = ParseWhole("-NOSCRIPT No matching script\r\n");
  CHECK(error.type == RespValue::Type::kError);
  CHECK(error.text == "NOSCRIPT No matching script");
}

// Simple strings (+OK, +PONG) are the line without the marker.
TEST_CASE("resp parses simple strings") {
  const RespValue ok = ParseWhole("+OK\r\n");
  CHECK(ok.type == RespValue::Type::kSimpleString);
  CHECK(ok.text == "OK");
}

// Every strict prefix of a reply asks for more and consumes nothing.
TEST_CASE("resp asks for more on every partial reply") {
  const std::string reply = "*3\r\n:1\r\n$5\r\nhello\r\n-ERR x\r\n";
  for (size_t length = 0; length < reply.size(); ++length) {
    RespValue value;
    const RespParse parse = ParseReply(std::string_view(reply).substr(0, length), &value);
    CHECK_MESSAGE(parse.state == RespParse::State::kNeedMore, "prefix of ", length, " bytes");
    CHECK(parse.consumed_bytes == 0);
  }
  CHECK(ParseWhole(reply).elements.size() == 3);
}

// Bytes that no Redis would send are rejected rather than waited on.
TEST_CASE("resp rejects malformed replies") {
  CHECK(StateOf("!5\r\n") == RespParse::State::kInvalid);            // unknown type
  CHECK(StateOf(":12a\r\n") == RespParse::State::kInvalid);          // not a number
  CHECK(StateOf("$-2\r\n") == RespParse::State::kInvalid);           // negative length
  CHECK(StateOf("$3\r\nabcd\r\n") == RespParse::State::kInvalid);    // length mismatch
  CHECK(StateOf("*99999999999\r\n") == RespParse::State::kInvalid);  // absurd count
  CHECK(StateOf("\r\n") == RespParse::State::kInvalid);              // empty line
  std::string nested;
  for (int i = 0; i <= kMaxNesting + 1; ++i) nested += "*1\r\n";
  CHECK(StateOf(nested + ":1\r\n") == RespParse::State::kInvalid);
  CHECK(StateOf(std::string(100 * 1024, 'x')) == RespParse::State::kInvalid);  // no CRLF
}

// Commands go out as an array of bulk strings, which Redis requires.
TEST_CASE("resp encodes commands as arrays of bulk strings") {
  std::string out;
  const std::string_view args[] = {"INCR", "k:1"};
  AppendCommand(args, &out);
  CHECK(out == "*2\r\n$4\r\nINCR\r\n$3\r\nk:1\r\n");
  const std::string_view empty[] = {""};
  AppendCommand(empty, &out);
  CHECK(out == "*2\r\n$4\r\nINCR\r\n$3\r\nk:1\r\n*1\r\n$0\r\n\r\n");
}

// The reader yields pipelined replies one by one, across receive boundaries.
TEST_CASE("resp reader splits pipelined replies across reads") {
  RespReader reader;
  auto receive = [&reader](std::string_view bytes) {
    const auto room = reader.writable(bytes.size());
    std::memcpy(room.data(), bytes.data(), bytes.size());
    reader.Commit(bytes.size());
  };
  RespValue value;
  receive(":1\r\n:0\r\n$2\r\nx");
  REQUIRE(reader.Next(&value).state == RespParse::State::kComplete);
  CHECK(value.integer == 1);
  REQUIRE(reader.Next(&value).state == RespParse::State::kComplete);
  CHECK(value.integer == 0);
  CHECK(reader.Next(&value).state == RespParse::State::kNeedMore);
  receive("y\r\n");
  REQUIRE(reader.Next(&value).state == RespParse::State::kComplete);
  CHECK(value.text == "xy");
  CHECK(reader.Next(&value).state == RespParse::State::kNeedMore);
}

// Parses `bytes` as commands under `limits`; the state of the first.
RespCommandParse Command(std::string_view bytes, std::vector<std::string_view>* args,
                         RespCommandLimits limits = {}) {
  return ParseCommand(bytes, limits, args);
}

// A command is an array of bulk strings; binary and empty arguments included.
TEST_CASE("resp parses a command and says how long it was") {
  std::vector<std::string_view> args;
  const std::string bytes =
      std::string("*3\r\n$11\r\nCL.THROTTLE\r\n$4\r\na\r\nb\r\n$0\r\n\r\n") + "*1";
  const RespCommandParse parse = Command(bytes, &args);
  REQUIRE(parse.state == RespCommandParse::State::kComplete);
  CHECK(parse.consumed_bytes == bytes.size() - 2);
  REQUIRE(args.size() == 3);
  CHECK(args[0] == "CL.THROTTLE");
  CHECK(args[1] == "a\r\nb");
  CHECK(args[2].empty());
}

// Every strict prefix of a command asks for more, without consuming anything;
// inside an argument it asks for the rest of that argument.
TEST_CASE("resp asks for more on every partial command") {
  const std::string command = "*2\r\n$4\r\nECHO\r\n$10\r\n0123456789\r\n";
  std::vector<std::string_view> args;
  for (size_t length = 0; length < command.size(); ++length) {
    const RespCommandParse parse = Command(std::string_view(command).substr(0, length), &args);
    CHECK_MESSAGE(parse.state == RespCommandParse::State::kNeedMore, "prefix of ", length);
    CHECK(parse.consumed_bytes == 0);
    CHECK(parse.wanted_bytes >= 1);
  }
  CHECK(Command(command.substr(0, command.size() - 12), &args).wanted_bytes == 12);
  CHECK(Command(command, &args).state == RespCommandParse::State::kComplete);
}

// *0, *-1 and empty lines are commands without arguments, which the front
// skips as Redis does.
TEST_CASE("resp reads empty arrays as empty commands") {
  std::vector<std::string_view> args{"stale"};
  RespCommandParse parse = Command("*0\r\n", &args);
  CHECK(parse.state == RespCommandParse::State::kComplete);
  CHECK(parse.consumed_bytes == 4);
  CHECK(args.empty());
  CHECK(Command("*-1\r\n", &args).state == RespCommandParse::State::kComplete);
  parse = Command("\r\n*1", &args);  // redis-cli --pipe sends an empty line before its ECHO
  CHECK(parse.state == RespCommandParse::State::kComplete);
  CHECK(parse.consumed_bytes == 2);
  CHECK(args.empty());
}

// Anything but an array of bulk strings within the limits is refused at once,
// before the bytes a length claims have arrived.
TEST_CASE("resp refuses commands it cannot trust") {
  std::vector<std::string_view> args;
  const RespCommandLimits limits{4, 16};
  auto refused = [&](std::string_view bytes) {
    return Command(bytes, &args, limits).state == RespCommandParse::State::kInvalid;
  };
  CHECK(refused("PING\r\n"));                      // inline
  CHECK(refused("P"));                             // inline, at its first byte
  CHECK(refused("*1\r\n*1\r\n$1\r\nx\r\n"));       // nested array
  CHECK(refused("*1\r\n:1\r\n"));                  // an integer argument
  CHECK(refused("*5\r\n"));                        // more arguments than max_args
  CHECK(refused("*-2\r\n"));                       // negative count
  CHECK(refused("*99999999999999999999999\r\n"));  // beyond 64 bits
  CHECK(refused("*1\r\n$17\r\n"));                 // bulk over max_bulk_bytes
  CHECK(refused("*1\r\n$-1\r\n"));                 // a nil argument
  CHECK(refused("*1\r\n$3\r\nabcd\r\n"));          // length mismatch
  CHECK(refused("*1x\r\n"));                       // not a number
  CHECK(refused("* 1\r\n"));                       // not a plain number
  CHECK(refused("*\r\n"));                         // no number
  CHECK(refused("*1" + std::string(40, '0')));     // a length line without end
  const RespCommandParse parse = Command("*1\r\n$17\r\n", &args, limits);
  CHECK(parse.error_message == "invalid bulk length 17 (at most 16 bytes)");
}

// Replies are written as Redis writes them, RESP3 only where it differs.
TEST_CASE("resp encodes replies") {
  std::string out;
  AppendSimpleString("OK", &out);
  AppendError("ERR bad\r\nthing", &out);
  AppendInteger(-1, &out);
  AppendBulkString("a\r\n", &out);
  CHECK(out == "+OK\r\n-ERR bad  thing\r\n:-1\r\n$3\r\na\r\n\r\n");
  out.clear();
  AppendNull(2, &out);
  AppendNull(3, &out);
  AppendMapHeader(2, 2, &out);
  AppendMapHeader(2, 3, &out);
  CHECK(out == "$-1\r\n_\r\n*4\r\n%2\r\n");
}

}  // namespace
}  // namespace tally::protocol
