// Unit tests of host:port parsing and formatting (node/common/host_port.h).
#include "node/common/host_port.h"

#include <string>

#include <doctest/doctest.h>

namespace tally {
namespace {

// The message of a refusal, failing the test when `text` parses.
std::string Refusal(const std::string& text) {
  HostPort parsed{"untouched", 1};
  const Status status = ParseHostPort(text, &parsed);
  CAPTURE(text);
  REQUIRE(status.code() == Status::Code::kInvalidArgument);
  CHECK(parsed.host == "untouched");  // nothing half-written on failure
  CHECK(parsed.port == 1);
  return std::string(status.message());
}

// Names, IPv4 literals and bracketed IPv6 literals parse; brackets are dropped.
TEST_CASE("host_port: well-formed addresses parse") {
  const struct {
    const char* text;
    const char* host;
    uint16_t port;
  } cases[] = {
      {"tally-seeds:7421", "tally-seeds", 7421}, {"10.0.0.1:1", "10.0.0.1", 1},
      {"localhost:65535", "localhost", 65535},   {"[::1]:7421", "::1", 7421},
      {"[fe80::1%eth0]:80", "fe80::1%eth0", 80}, {"host:007", "host", 7},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    HostPort parsed;
    REQUIRE(ParseHostPort(c.text, &parsed).ok());
    CHECK(parsed.host == c.host);
    CHECK(parsed.port == c.port);
  }
}

// Each malformed form is refused with a message that quotes it and says why.
TEST_CASE("host_port: malformed addresses are refused, saying why") {
  CHECK(Refusal("tally-seeds") == "'tally-seeds' is not host:port (no port)");
  CHECK(Refusal("tally-seeds:") == "'tally-seeds:' is not host:port (no port)");
  CHECK(Refusal("[::1]") == "'[::1]' is not host:port (no port)");
  CHECK(Refusal("[::1]7421") == "'[::1]7421' is not host:port (no port)");
  CHECK(Refusal(":7421") == "':7421' is not host:port (no host)");
  CHECK(Refusal("[]:7421") == "'[]:7421' is not host:port (no host)");
  CHECK(Refusal("") == "'' is not host:port (no host)");
  CHECK(Refusal("[::1:7421") == "'[::1:7421' is not host:port ('[' without ']')");
  CHECK(Refusal("::1:7421") ==
        "'::1:7421' is not host:port (an IPv6 address needs brackets, as in [::1]:7421)");
  CHECK(Refusal("host:0") == "'host:0' is not host:port (port 0 is not in 1..65535)");
  CHECK(Refusal("host:65536") == "'host:65536' is not host:port (port 65536 is not in 1..65535)");
  CHECK(Refusal("host:99999999999999999999999") ==
        "'host:99999999999999999999999' is not host:port (port 99999999999999999999999 is not "
        "in 1..65535)");
  CHECK(Refusal("host:http") == "'host:http' is not host:port (port 'http' is not a number)");
  CHECK(Refusal("host:-1") == "'host:-1' is not host:port (port '-1' is not a number)");
  CHECK(Refusal("host:+80") == "'host:+80' is not host:port (port '+80' is not a number)");
  CHECK(Refusal("host:80x") == "'host:80x' is not host:port (port '80x' is not a number)");
}

// FormatHostPort writes what ParseHostPort reads back, bracketing IPv6.
TEST_CASE("host_port: format round-trips through parse") {
  CHECK(FormatHostPort("10.0.0.1", 7421) == "10.0.0.1:7421");
  CHECK(FormatHostPort("::1", 7421) == "[::1]:7421");
  for (const char* host : {"tally-seeds", "127.0.0.1", "::", "fe80::1"}) {
    CAPTURE(host);
    HostPort parsed;
    REQUIRE(ParseHostPort(FormatHostPort(host, 9), &parsed).ok());
    CHECK(parsed.host == host);
    CHECK(parsed.port == 9);
  }
}

}  // namespace
}  // namespace tally
