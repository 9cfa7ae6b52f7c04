// Unit tests of the load generator's pure parts: the RESP2 codec
// (cluster/resp.h) and the latency histogram (cluster/latency_histogram.h).
#include <cstring>
#include <string>
#include <string_view>

#include <doctest/doctest.h>

#include "cluster/latency_histogram.h"
#include "cluster/resp.h"

namespace tally::cluster {
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
  for (int i = 0; i <= cluster::kMaxNesting + 1; ++i) nested += "*1\r\n";
  CHECK(StateOf(nested + ":1\r\n") == RespParse::State::kInvalid);
  CHECK(StateOf(std::string(100 * 1024, 'x')) == RespParse::State::kInvalid);  // no CRLF
}

// Commands go out as an array of bulk strings, which Redis requires.
TEST_CASE("resp encodes commands as arrays of bulk strings") {
  std::string out;
  const std::string_view args[] = {"INCR", "k:1"};
  cluster::AppendCommand(args, &out);
  CHECK(out == "*2\r\n$4\r\nINCR\r\n$3\r\nk:1\r\n");
  const std::string_view empty[] = {""};
  cluster::AppendCommand(empty, &out);
  CHECK(out == "*2\r\n$4\r\nINCR\r\n$3\r\nk:1\r\n*1\r\n$0\r\n\r\n");
}

// The reader yields pipelined replies one by one, across receive boundaries.
TEST_CASE("resp reader splits pipelined replies across reads") {
  cluster::RespReader reader;
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

// Percentiles of 1..100000 µs, each once, are within 1% of the exact ones.
TEST_CASE("latency histogram percentiles of a uniform distribution") {
  LatencyHistogram histogram;
  for (uint64_t us = 1; us <= 100'000; ++us) histogram.Record(us * 1'000);
  CHECK(histogram.count() == 100'000);
  CHECK(histogram.max_ns() == 100'000'000);
  const struct {
    double q;
    double exact_ns;
  } expected[] = {{0.5, 50e6}, {0.9, 90e6}, {0.99, 99e6}, {0.999, 99.9e6}, {1.0, 100e6}};
  for (const auto& [q, exact_ns] : expected) {
    CHECK_MESSAGE(
        static_cast<double>(histogram.PercentileNs(q)) == doctest::Approx(exact_ns).epsilon(0.01),
        "q=", q);
  }
}

// Small values are exact; the empty histogram reports 0; max is exact even
// past the tracked range, and no percentile exceeds it.
TEST_CASE("latency histogram edges: exact small values, empty, overflow") {
  LatencyHistogram histogram;
  CHECK(histogram.PercentileNs(0.5) == 0);
  for (uint64_t ns = 0; ns < 100; ++ns) histogram.Record(ns);
  CHECK(histogram.PercentileNs(0.5) == 49);
  CHECK(histogram.PercentileNs(0.01) == 0);
  CHECK(histogram.PercentileNs(1.0) == 99);

  LatencyHistogram overflow;
  overflow.Record(200'000'000'000);  // 200 s, past kMaxTrackedNs
  CHECK(overflow.max_ns() == 200'000'000'000);
  CHECK(overflow.PercentileNs(0.5) <= overflow.max_ns());
  CHECK(static_cast<double>(overflow.PercentileNs(0.5)) ==
        doctest::Approx(static_cast<double>(LatencyHistogram::kMaxTrackedNs)).epsilon(0.01));
}

// Merging per-thread histograms gives the histogram of all the values.
TEST_CASE("latency histogram merge equals recording everything in one") {
  LatencyHistogram low, high, all;
  for (uint64_t ns = 1'000; ns <= 2'000'000; ns += 997) {
    (ns % 2 ? low : high).Record(ns);
    all.Record(ns);
  }
  low.Merge(high);
  CHECK(low.count() == all.count());
  CHECK(low.max_ns() == all.max_ns());
  for (const double q : {0.1, 0.5, 0.99, 0.999}) CHECK(low.PercentileNs(q) == all.PercentileNs(q));
}

}  // namespace
}  // namespace tally::cluster
