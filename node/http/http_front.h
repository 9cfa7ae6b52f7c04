// HttpFront: HTTP/1.1 as a StreamFront of the Server (node/net/stream_front.h).
// Requests are parsed by libhttp-parser (Debian's libhttp-parser-dev); a
// front built on it only answers parsed requests (HttpHandler).
//
// What the session does for every front:
//  - keep-alive (HTTP/1.1 by default, HTTP/1.0 with `Connection:
//    keep-alive`) and pipelining: several requests in one read are answered
//    in request order; a request split over reads waits for its bytes;
//  - `Connection: close` and HTTP/1.0 without keep-alive: the connection is
//    closed once the answer is written;
//  - bodies by Content-Length or chunked; `Expect: 100-continue` gets its
//    interim answer; HEAD gets the headers of GET without the body; a
//    request for a protocol upgrade is answered, then the connection closed;
//  - refusals, after which the connection closes (what the client sent can no
//    longer be framed): 400 for anything libhttp-parser rejects (a malformed
//    request line or header, a bad chunk, Content-Length with
//    Transfer-Encoding), 501 for a transfer coding other than chunked, 431
//    when the request line and headers exceed max_header_bytes, 413 when the
//    body exceeds max_body_bytes (told from Content-Length before the body
//    is read). Every refusal's body is JSON: {"error": "..."}.
// Slow clients are bounded by the Server: a request not complete
// frame_timeout_ms after its first byte, or nothing for idle_timeout_ms
// between requests, closes the connection.
//
// Thread safety: NewSession from any worker; a session and its handler are
// used by their connection's worker thread only.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "node/net/stream_front.h"

namespace tally {

struct HttpLimits {
  size_t max_header_bytes = 16 * 1024;  // request line and headers
  size_t max_body_bytes = 64 * 1024;
};

// One parsed request. Views into the session's buffers, valid during Handle.
struct HttpRequest {
  std::string_view method;  // "GET", "POST", ... (HEAD is passed as "GET")
  std::string_view path;    // as sent, not percent-decoded
  std::string_view query;   // after '?', not decoded; empty without one
  std::string_view body;
};

// The answer a handler fills. The session reuses it (Clear keeps capacity),
// adds Date, Content-Length and Connection, and writes it.
struct HttpResponse {
  int status = 200;
  std::string_view content_type = "application/json";  // a literal: not copied
  std::string headers;                                 // extra lines, each "Name: value\r\n"
  std::string body;

  void AddHeader(std::string_view name, std::string_view value);
  void Clear();
};

// What a front does with requests, per connection.
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // Fills *response (cleared, status 200) for `request`.
  virtual void Handle(const HttpRequest& request, HttpResponse* response) = 0;
  // The session refused a request before it reached Handle (see above).
  virtual void Refused() {}
};

// The reason phrase of a status the fronts use ("Too Many Requests").
std::string_view HttpReason(int status);

// Sets *response to `status` with the body {"error": message}.
void SetJsonError(int status, std::string_view message, HttpResponse* response);

class HttpFront : public StreamFront {
 public:
  explicit HttpFront(const HttpLimits& limits) : limits_(limits) {}

  std::unique_ptr<StreamSession> NewSession(const SessionContext& context) final;
  // 503 with Connection: close.
  std::string TooManyConnections() const final;

 protected:
  // The handler of a new connection, on its worker thread.
  virtual std::unique_ptr<HttpHandler> NewHandler(const SessionContext& context) = 0;

 private:
  const HttpLimits limits_;
};

}  // namespace tally
