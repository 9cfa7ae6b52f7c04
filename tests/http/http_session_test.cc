// HttpFront's session in-process: bytes in as the Server hands them over
// (whole, pipelined, split anywhere), answers and connection decisions out.
// A ManualClock, no sockets, no sleeps.
#include <memory>
#include <string>

#include <doctest/doctest.h>

#include "node/http/http_front.h"
#include "tests/http/http_wire.h"

namespace tally {
namespace {

// Answers every request with its method, path, query and body, and
// remembers how many were refused before reaching it.
class EchoFront : public HttpFront {
 public:
  using HttpFront::HttpFront;
  int refused = 0;

 protected:
  std::unique_ptr<HttpHandler> NewHandler(const SessionContext&) override {
    return std::make_unique<Echo>(this);
  }

 private:
  class Echo : public HttpHandler {
   public:
    explicit Echo(EchoFront* front) : front_(front) {}
    void Handle(const HttpRequest& request, HttpResponse* response) override {
      response->content_type = "text/plain";
      response->AddHeader("X-Path", request.path);
      response->body = std::string(request.method) + " " + std::string(request.path) + "?" +
                       std::string(request.query) + " [" + std::string(request.body) + "]";
    }
    void Refused() override { ++front_->refused; }

   private:
    EchoFront* const front_;
  };
};

// An echo front and one connection to it.
struct EchoWire : EchoFront, Wire {
  explicit EchoWire(HttpLimits limits = HttpLimits()) : EchoFront(limits), Wire(this) {}
  EchoFront& front() { return *this; }
};

// Two requests in one read are answered in order, and the connection stays open.
TEST_CASE("http session: pipelined requests in one read are answered in order") {
  EchoWire wire;
  const StreamProgress progress =
      wire.Feed("GET /a?x=1 HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n");
  CHECK(progress.consumed_bytes > 0);
  CHECK_FALSE(wire.closed);
  CHECK(wire.received.empty());
  const size_t first = wire.out.find("GET /a?x=1 []");
  const size_t second = wire.out.find("GET /b? []");
  REQUIRE(first != std::string::npos);
  REQUIRE(second != std::string::npos);
  CHECK(first < second);
  CHECK(wire.Count("HTTP/1.1 200 OK\r\n") == 2);
  CHECK(wire.out.find("Date: Tue, 14 Nov 2023 22:13:20 GMT\r\n") != std::string::npos);
}

// A request that arrives a byte at a time is answered once, when its last byte is there.
TEST_CASE("http session: a request split over many reads is answered once complete") {
  EchoWire wire;
  const std::string request =
      "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
      "GET /next HTTP/1.1\r\n\r\n";
  for (size_t i = 0; i + 1 < request.size(); ++i) {
    wire.Feed(request.substr(i, 1));
    if (i + 1 < request.find("GET")) CHECK(wire.out.empty());
  }
  CHECK(wire.out.find("POST /p? [hello]") != std::string::npos);
  CHECK(wire.Count("HTTP/1.1 200") == 1);  // the second is still one byte short
  wire.Feed("\n");
  CHECK(wire.out.find("GET /next? []") != std::string::npos);
  CHECK(wire.received.empty());
}

// A chunked body is joined before the handler sees it.
TEST_CASE("http session: a chunked body reaches the handler whole") {
  EchoWire wire;
  wire.Feed(
      "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  CHECK(wire.out.find("POST /c? [abcde]") != std::string::npos);
  CHECK_FALSE(wire.closed);
}

// Connection: close, and HTTP/1.0 without keep-alive, close after the answer; HTTP/1.0 with
// keep-alive stays open and says so.
TEST_CASE("http session: Connection close and HTTP/1.0 decide whether the connection stays") {
  {
    EchoWire wire;
    wire.Feed("GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    CHECK(wire.closed);
    CHECK(wire.out.find("Connection: close\r\n") != std::string::npos);
  }
  {
    EchoWire wire;
    wire.Feed("GET / HTTP/1.0\r\n\r\n");
    CHECK(wire.closed);
  }
  {
    EchoWire wire;
    wire.Feed("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    CHECK_FALSE(wire.closed);
    CHECK(wire.out.find("Connection: keep-alive\r\n") != std::string::npos);
  }
}

// Garbage gets 400 and a close, after the requests before it were answered.
TEST_CASE("http session: a malformed request gets 400 and closes, earlier ones answered") {
  EchoWire wire;
  wire.Feed("GET /ok HTTP/1.1\r\n\r\nthis is not http\r\n\r\n");
  CHECK(wire.out.find("GET /ok? []") != std::string::npos);
  CHECK(wire.out.find("HTTP/1.1 400 Bad Request\r\n") != std::string::npos);
  CHECK(wire.out.find("Connection: close\r\n") != std::string::npos);
  CHECK(wire.out.find("{\"error\":\"malformed request: ") != std::string::npos);
  CHECK(wire.closed);
  CHECK(wire.front().refused == 1);
}

// Headers over the limit get 431, whether they arrive at once or never end.
TEST_CASE("http session: headers over max_header_bytes get 431") {
  const HttpLimits limits{/*max_header_bytes=*/256, /*max_body_bytes=*/64};
  {
    EchoWire wire(limits);
    wire.Feed("GET / HTTP/1.1\r\nX-Big: " + std::string(300, 'a') + "\r\n\r\n");
    CHECK(wire.out.find("HTTP/1.1 431 Request Header Fields Too Large\r\n") == 0);
    CHECK(wire.closed);
  }
  {
    EchoWire wire(limits);
    wire.Feed("GET / HTTP/1.1\r\n");
    for (int i = 0; i < 40 && !wire.closed; ++i) wire.Feed("X-Header: value\r\n");
    CHECK(wire.out.find("HTTP/1.1 431") == 0);
    CHECK(wire.closed);
  }
}

// A body over the limit is refused with 413 from its Content-Length, before it arrives;
// a chunked one as soon as it passes the limit.
TEST_CASE("http session: a body over max_body_bytes gets 413") {
  const HttpLimits limits{/*max_header_bytes=*/1024, /*max_body_bytes=*/64};
  {
    EchoWire wire(limits);
    wire.Feed("POST / HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n");
    CHECK(wire.out.find("HTTP/1.1 413 Content Too Large\r\n") == 0);
    CHECK(wire.out.find("body over 64 bytes") != std::string::npos);
    CHECK(wire.closed);
  }
  {
    EchoWire wire(limits);
    wire.Feed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n50\r\n" + std::string(80, 'x') +
              "\r\n");
    CHECK(wire.out.find("HTTP/1.1 413") == 0);
    CHECK(wire.closed);
  }
}

// A transfer coding other than chunked is not implemented; the connection closes.
TEST_CASE("http session: an unsupported Transfer-Encoding gets 501") {
  EchoWire wire;
  wire.Feed("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
  CHECK(wire.out.find("HTTP/1.1 501 Not Implemented\r\n") == 0);
  CHECK(wire.closed);
}

// Expect: 100-continue gets the interim answer before the body is sent.
TEST_CASE("http session: Expect 100-continue is answered before the body") {
  EchoWire wire;
  wire.Feed("POST /e HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
  CHECK(wire.out == "HTTP/1.1 100 Continue\r\n\r\n");
  wire.Feed("hi");
  CHECK(wire.out.find("POST /e? [hi]") != std::string::npos);
}

// HEAD gets GET's headers, with its Content-Length, and no body.
TEST_CASE("http session: HEAD is answered as GET without the body") {
  EchoWire wire;
  wire.Feed("HEAD /h HTTP/1.1\r\n\r\n");
  CHECK(wire.out.find("HTTP/1.1 200 OK\r\n") == 0);
  CHECK(wire.out.find("Content-Length: 10\r\n") != std::string::npos);  // "GET /h? []"
  CHECK(wire.out.ends_with("\r\n\r\n"));
}

// A request for another protocol is answered in HTTP/1.1; what follows is not HTTP, so the
// connection closes.
TEST_CASE("http session: an Upgrade request is answered, then the connection closes") {
  EchoWire wire;
  wire.Feed("GET /u HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x05hello");
  CHECK(wire.out.find("GET /u? []") != std::string::npos);
  CHECK(wire.closed);
}

// A refusal by the Server (receive-buffer budget) is a 503 that closes.
TEST_CASE("http session: the server's refusal is a 503") {
  EchoWire wire;
  wire.session->Refuse(StreamRefusal::kBufferBudget, "buffers full", &wire.out);
  CHECK(wire.out.find("HTTP/1.1 503 Service Unavailable\r\n") == 0);
  CHECK(wire.out.find("Connection: close\r\n") != std::string::npos);
  CHECK(wire.out.find("{\"error\":\"buffers full\"}") != std::string::npos);
}

}  // namespace
}  // namespace tally
