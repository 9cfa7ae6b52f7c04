#include "node/http/http_front.h"

#include <http_parser.h>

#include <charconv>
#include <ctime>
#include <limits>

#include <nlohmann/json.hpp>

namespace tally {
namespace {

// Scratch kept between requests; a large request's is freed once answered.
constexpr size_t kKeptBytes = 16 * 1024;

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string_view Trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

void AppendNumber(uint64_t value, std::string* out) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
  out->append(digits, end);
}

// A byte range of the request in progress, relative to its first byte (the
// bytes stay in the receive buffer until the request is answered, though the
// buffer may move between reads).
struct Range {
  size_t offset = 0;
  size_t size = 0;
};

// One HTTP connection; owned by its worker's thread. libhttp-parser keeps its
// state between reads; it is paused at the end of each request so that
// requests are answered one at a time, in order.
class HttpSession : public StreamSession {
 public:
  HttpSession(const SessionContext& context, const HttpLimits& limits,
              std::unique_ptr<HttpHandler> handler)
      : clock_(context.clock), limits_(limits), handler_(std::move(handler)) {
    http_parser_init(&parser_, HTTP_REQUEST);
    parser_.data = this;
    StartRequest();
  }

  StreamProgress Answer(std::span<const std::byte> received, std::string* out) override {
    base_ = reinterpret_cast<const char*>(received.data());
    out_ = out;
    StreamProgress progress;
    while (parsed_ < received.size()) {
      const size_t taken =
          http_parser_execute(&parser_, &kSettings, base_ + parsed_, received.size() - parsed_);
      parsed_ += taken;
      const http_errno error = HTTP_PARSER_ERRNO(&parser_);
      if (error == HPE_PAUSED) {  // a request is complete
        http_parser_pause(&parser_, 0);
        const bool keep_alive = Respond(out);
        progress.consumed_bytes = parsed_;
        if (!keep_alive || parser_.upgrade) {  // what follows an upgrade is not HTTP
          progress.close = true;
          break;
        }
        continue;
      }
      if (error != HPE_OK) {
        RefuseRequest(error, out);
        progress.close = true;
        break;
      }
      if (taken == 0) break;  // nothing more the parser takes without an answer
    }
    if (!progress.close && !headers_complete_ &&
        parsed_ - progress.consumed_bytes > limits_.max_header_bytes) {
      refusal_ = {431, HeaderLimitMessage()};
      RefuseRequest(HPE_UNKNOWN, out);
      progress.close = true;
    }
    parsed_ -= progress.consumed_bytes;
    message_start_ = 0;
    if (headers_complete_ && parser_.content_length != std::numeric_limits<uint64_t>::max()) {
      progress.wanted_bytes = std::max<size_t>(progress.wanted_bytes, parser_.content_length);
    }
    out_ = nullptr;
    return progress;
  }

  void Refuse(StreamRefusal, std::string_view message, std::string* out) override {
    response_.Clear();
    SetJsonError(503, message, &response_);
    handler_->Refused();
    Write(/*keep_alive=*/false, /*head=*/false, out);
  }

  void TrimMemory() override {
    if (body_.capacity() > kKeptBytes) std::string().swap(body_);
    if (response_.body.capacity() > kKeptBytes) std::string().swap(response_.body);
  }

 private:
  // The error a callback stopped the parser with.
  struct Refusal {
    int status = 0;
    std::string message;
  };

  static HttpSession& Of(http_parser* parser) { return *static_cast<HttpSession*>(parser->data); }
  size_t OffsetOf(const char* at) const { return static_cast<size_t>(at - base_) - message_start_; }

  static int OnMessageBegin(http_parser* parser) {
    HttpSession& session = Of(parser);
    session.message_start_ = static_cast<size_t>(session.parsed_);
    return 0;
  }
  static int OnUrl(http_parser* parser, const char* at, size_t length) {
    HttpSession& session = Of(parser);
    if (session.url_.size == 0) session.url_.offset = session.OffsetOf(at);
    session.url_.size += length;
    return session.CheckHeaderBytes(at + length);
  }
  static int OnHeaderField(http_parser* parser, const char* at, size_t length) {
    HttpSession& session = Of(parser);
    if (session.in_value_) session.EndHeader();
    if (session.field_.size == 0) session.field_.offset = session.OffsetOf(at);
    session.field_.size += length;
    return session.CheckHeaderBytes(at + length);
  }
  static int OnHeaderValue(http_parser* parser, const char* at, size_t length) {
    HttpSession& session = Of(parser);
    if (!session.in_value_) session.value_ = Range{session.OffsetOf(at), 0};
    session.in_value_ = true;
    session.value_.size += length;
    return session.CheckHeaderBytes(at + length);
  }
  static int OnHeadersComplete(http_parser* parser) {
    HttpSession& session = Of(parser);
    if (session.in_value_) session.EndHeader();
    session.headers_complete_ = true;
    if (session.refusal_.status != 0) return -1;
    if ((parser->flags & F_CONTENTLENGTH) != 0 &&
        parser->content_length > session.limits_.max_body_bytes) {
      session.refusal_ = {413, session.BodyLimitMessage()};
      return -1;
    }
    const bool has_body = (parser->flags & F_CHUNKED) != 0 ||
                          ((parser->flags & F_CONTENTLENGTH) != 0 && parser->content_length > 0);
    if (session.expect_continue_ && has_body && parser->http_minor >= 1) {
      *session.out_ += "HTTP/1.1 100 Continue\r\n\r\n";
    }
    return 0;
  }
  static int OnBody(http_parser* parser, const char* at, size_t length) {
    HttpSession& session = Of(parser);
    if (session.body_.size() + length > session.limits_.max_body_bytes) {
      session.refusal_ = {413, session.BodyLimitMessage()};
      return -1;
    }
    session.body_.append(at, length);
    return 0;
  }
  static int OnMessageComplete(http_parser* parser) {
    http_parser_pause(parser, 1);  // Answer responds before parsing on
    return 0;
  }

  // 431 once the request line and headers pass the limit (`end`: how far they
  // have come).
  int CheckHeaderBytes(const char* end) {
    if (OffsetOf(end) <= limits_.max_header_bytes) return 0;
    refusal_ = {431, HeaderLimitMessage()};
    return -1;
  }
  std::string HeaderLimitMessage() const {
    return "request line and headers over " + std::to_string(limits_.max_header_bytes) + " bytes";
  }
  std::string BodyLimitMessage() const {
    return "body over " + std::to_string(limits_.max_body_bytes) + " bytes";
  }

  std::string_view Bytes(Range range) const {
    return {base_ + message_start_ + range.offset, range.size};
  }

  // A header's name and value are complete: note those the session acts on.
  void EndHeader() {
    const std::string_view name = Bytes(field_);
    const std::string_view value = Trimmed(Bytes(value_));
    if (EqualsIgnoringCase(name, "expect")) {
      if (EqualsIgnoringCase(value, "100-continue")) {
        expect_continue_ = true;
      } else if (refusal_.status == 0) {
        refusal_ = {417, "expectation not supported: " + std::string(value)};
      }
    } else if (EqualsIgnoringCase(name, "transfer-encoding") &&
               !EqualsIgnoringCase(value, "chunked") && refusal_.status == 0) {
      refusal_ = {501, "transfer coding not supported: " + std::string(value)};
    }
    field_ = Range{};
    in_value_ = false;
  }

  void StartRequest() {
    url_ = field_ = value_ = Range{};
    in_value_ = headers_complete_ = expect_continue_ = false;
    body_.clear();
    refusal_ = Refusal{};
  }

  // Answers the complete request; false when the connection is to close.
  bool Respond(std::string* out) {
    const bool keep_alive = http_should_keep_alive(&parser_) != 0;
    const auto method = static_cast<http_method>(parser_.method);
    const bool head = method == HTTP_HEAD;
    response_.Clear();
    const std::string_view url = Bytes(url_);
    http_parser_url parts;
    http_parser_url_init(&parts);
    if (http_parser_parse_url(url.data(), url.size(), method == HTTP_CONNECT, &parts) != 0 ||
        (parts.field_set & (1 << UF_PATH)) == 0) {
      SetJsonError(400, "the request target is not a path", &response_);
      handler_->Refused();
    } else {
      HttpRequest request;
      request.method = head ? "GET" : http_method_str(method);
      request.path = url.substr(parts.field_data[UF_PATH].off, parts.field_data[UF_PATH].len);
      if ((parts.field_set & (1 << UF_QUERY)) != 0) {
        request.query = url.substr(parts.field_data[UF_QUERY].off, parts.field_data[UF_QUERY].len);
      }
      request.body = body_;
      handler_->Handle(request, &response_);
    }
    Write(keep_alive, head, out);
    StartRequest();
    return keep_alive;
  }

  // Answers a request that cannot be parsed on; the connection closes after.
  void RefuseRequest(http_errno error, std::string* out) {
    if (refusal_.status == 0) {
      refusal_ = {error == HPE_INVALID_TRANSFER_ENCODING ? 501 : 400,
                  std::string("malformed request: ") + http_errno_description(error)};
    }
    response_.Clear();
    SetJsonError(refusal_.status, refusal_.message, &response_);
    handler_->Refused();
    Write(/*keep_alive=*/false, /*head=*/false, out);
  }

  void Write(bool keep_alive, bool head, std::string* out) {
    *out += "HTTP/1.1 ";
    AppendNumber(static_cast<uint64_t>(response_.status), out);
    *out += ' ';
    *out += HttpReason(response_.status);
    *out += "\r\nDate: ";
    *out += Date();
    *out += "\r\nContent-Type: ";
    *out += response_.content_type;
    *out += "\r\nContent-Length: ";
    AppendNumber(response_.body.size(), out);
    if (!keep_alive) {
      *out += "\r\nConnection: close";
    } else if (parser_.http_major == 1 && parser_.http_minor == 0) {
      *out += "\r\nConnection: keep-alive";
    }
    *out += "\r\n";
    *out += response_.headers;
    *out += "\r\n";
    if (!head) *out += response_.body;
  }

  // The Date header's value (IMF-fixdate), formatted once a second.
  std::string_view Date() {
    const int64_t second = clock_->WallMs() / 1'000;
    if (second != date_second_) {
      date_second_ = second;
      const std::time_t time = static_cast<std::time_t>(second);
      std::tm parts;
      gmtime_r(&time, &parts);
      date_len_ = std::strftime(date_, sizeof(date_), "%a, %d %b %Y %H:%M:%S GMT", &parts);
    }
    return {date_, date_len_};
  }

  static const http_parser_settings kSettings;

  const Clock* const clock_;
  const HttpLimits& limits_;
  const std::unique_ptr<HttpHandler> handler_;
  http_parser parser_;
  const char* base_ = nullptr;  // the received bytes, during Answer
  std::string* out_ = nullptr;  // the answers, during Answer
  size_t parsed_ = 0;           // bytes of the received ones given to the parser
  size_t message_start_ = 0;    // where the request in progress starts in them
  Range url_, field_, value_;   // of the request in progress
  bool in_value_ = false;       // a header value is being received
  bool headers_complete_ = false;
  bool expect_continue_ = false;
  Refusal refusal_;        // set by a callback that stops the parser
  std::string body_;       // decoded (chunks joined)
  HttpResponse response_;  // reused
  int64_t date_second_ = -1;
  char date_[40] = {};
  size_t date_len_ = 0;
};

const http_parser_settings HttpSession::kSettings = [] {
  http_parser_settings settings;
  http_parser_settings_init(&settings);
  settings.on_message_begin = &HttpSession::OnMessageBegin;
  settings.on_url = &HttpSession::OnUrl;
  settings.on_header_field = &HttpSession::OnHeaderField;
  settings.on_header_value = &HttpSession::OnHeaderValue;
  settings.on_headers_complete = &HttpSession::OnHeadersComplete;
  settings.on_body = &HttpSession::OnBody;
  settings.on_message_complete = &HttpSession::OnMessageComplete;
  return settings;
}();

}  // namespace

void HttpResponse::AddHeader(std::string_view name, std::string_view value) {
  headers += name;
  headers += ": ";
  headers += value;
  headers += "\r\n";
}

void HttpResponse::Clear() {
  status = 200;
  content_type = "application/json";
  headers.clear();
  body.clear();
}

std::string_view HttpReason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Content Too Large";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

void SetJsonError(int status, std::string_view message, HttpResponse* response) {
  response->status = status;
  response->content_type = "application/json";
  response->body = nlohmann::json{{"error", message}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  response->body += '\n';
}

std::unique_ptr<StreamSession> HttpFront::NewSession(const SessionContext& context) {
  return std::make_unique<HttpSession>(context, limits_, NewHandler(context));
}

std::string HttpFront::TooManyConnections() const {
  return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         "Content-Length: 34\r\nConnection: close\r\n\r\n{\"error\":\"too many connections\"}\r\n";
}

}  // namespace tally
