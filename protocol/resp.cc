#include "protocol/resp.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace tally::protocol {
namespace {

// A reply line (simple string, error, length) longer than this without its
// CRLF is not a reply a client could be waiting for.
constexpr size_t kMaxReplyLineBytes = 64 * 1024;
// A command's length lines: a marker, at most 20 digits and a sign.
constexpr size_t kMaxCommandLineBytes = 32;

void AppendLength(char marker, int64_t length, std::string* out) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof(digits), length);
  out->push_back(marker);
  out->append(digits, result.ptr);
  out->append("\r\n");
}

// Text of a simple string or error: one line, whatever the caller passed.
void AppendLine(char marker, std::string_view text, std::string* out) {
  out->push_back(marker);
  const size_t start = out->size();
  out->append(text);
  std::replace_if(
      out->begin() + static_cast<std::ptrdiff_t>(start), out->end(),
      [](char c) { return c == '\r' || c == '\n'; }, ' ');
  out->append("\r\n");
}

std::string Hex(char byte) {
  constexpr char kDigits[] = "0123456789abcdef";
  const auto bits = static_cast<unsigned char>(byte);
  return {kDigits[bits >> 4], kDigits[bits & 15]};
}

// Reads commands and replies from the front of `received`; pos() is where
// the last complete value ended.
class Parser {
 public:
  using State = RespParse::State;

  explicit Parser(std::string_view received) : received_(received) {}

  // A command: an array of bulk strings within `limits`.
  State Command(const RespCommandLimits& limits, std::vector<std::string_view>* args) {
    args->clear();
    // An empty line between commands, which redis-cli --pipe sends before
    // its closing ECHO (Redis reads it as an empty inline command).
    if (received_.substr(pos_, 2) == "\r\n") {
      pos_ += 2;
      return State::kComplete;
    }
    int64_t count = 0;
    if (const State state = LengthLine('*', "array", &count); state != State::kComplete)
      return state;
    if (count > static_cast<int64_t>(limits.max_args) || count < -1) {
      return Invalid("invalid multibulk length " + std::to_string(count) + " (at most " +
                     std::to_string(limits.max_args) + " arguments)");
    }
    for (int64_t i = 0; i < count; ++i) {
      int64_t length = 0;
      if (const State state = LengthLine('$', "bulk string", &length); state != State::kComplete)
        return state;
      if (length < 0 || length > static_cast<int64_t>(limits.max_bulk_bytes)) {
        return Invalid("invalid bulk length " + std::to_string(length) + " (at most " +
                       std::to_string(limits.max_bulk_bytes) + " bytes)");
      }
      std::string_view arg;
      if (const State state = BulkBody(static_cast<size_t>(length), &arg);
          state != State::kComplete)
        return state;
      args->push_back(arg);
    }
    return State::kComplete;
  }

  State Value(RespValue* value, int depth) {
    if (depth > kMaxNesting)
      return Invalid("arrays nested deeper than " + std::to_string(kMaxNesting));
    std::string_view line;
    if (const auto state = Line(kMaxReplyLineBytes, &line); state != State::kComplete) return state;
    const char marker = line.front();
    line.remove_prefix(1);
    switch (marker) {
      case '+':
        *value = RespValue{RespValue::Type::kSimpleString, 0, line, {}};
        return State::kComplete;
      case '-': *value = RespValue{RespValue::Type::kError, 0, line, {}}; return State::kComplete;
      case ':': {
        int64_t integer = 0;
        if (!ParseInteger(line, &integer)) return Invalid("bad integer reply");
        *value = RespValue{RespValue::Type::kInteger, integer, {}, {}};
        return State::kComplete;
      }
      case '$': return Bulk(line, value);
      case '*': return Array(line, value, depth);
      default: return Invalid(std::string("unknown reply type byte 0x") + Hex(marker));
    }
  }

  size_t pos() const { return pos_; }
  size_t wanted() const { return wanted_; }
  std::string TakeError() { return std::move(error_); }

 private:
  // The next CRLF-terminated line, without its CRLF; never empty.
  State Line(size_t max_bytes, std::string_view* line) {
    const std::string_view rest = received_.substr(pos_);
    const size_t end = rest.substr(0, max_bytes + 2).find("\r\n");
    if (end == std::string_view::npos) {
      if (rest.size() >= max_bytes + 2) return Invalid("line without CRLF");
      return NeedMore(1);
    }
    if (end == 0) return Invalid("empty line");
    *line = rest.substr(0, end);
    pos_ += end + 2;
    return State::kComplete;
  }

  // A command's line "<marker><decimal>": the marker is checked as soon as
  // it arrives, so that an inline command is refused at its first byte.
  State LengthLine(char marker, const char* what, int64_t* length) {
    if (pos_ == received_.size()) return NeedMore(1);
    if (received_[pos_] != marker) {
      const char got = received_[pos_];
      return Invalid(
          std::string("expected '") + marker + "' (" + what + "), got " +
          (got >= 0x20 && got < 0x7f ? std::string("'") + got + "'" : "byte 0x" + Hex(got)) +
          (marker == '*' ? ": only arrays of bulk strings are commands" : ""));
    }
    std::string_view line;
    if (const State state = Line(kMaxCommandLineBytes, &line); state != State::kComplete)
      return state;
    if (!ParseInteger(line.substr(1), length)) {
      return Invalid(std::string("invalid ") + what + " length");
    }
    return State::kComplete;
  }

  // `bytes` bytes and their CRLF.
  State BulkBody(size_t bytes, std::string_view* body) {
    if (received_.size() - pos_ < bytes + 2) return NeedMore(bytes + 2 - (received_.size() - pos_));
    if (received_.substr(pos_ + bytes, 2) != "\r\n") return Invalid("bulk string without CRLF");
    *body = received_.substr(pos_, bytes);
    pos_ += bytes + 2;
    return State::kComplete;
  }

  State Bulk(std::string_view length_text, RespValue* value) {
    int64_t length = 0;
    if (!ParseInteger(length_text, &length) || length < -1 || length > kMaxBulkBytes) {
      return Invalid("bad bulk string length");
    }
    if (length == -1) {
      *value = RespValue{RespValue::Type::kNilBulk, 0, {}, {}};
      return State::kComplete;
    }
    std::string_view body;
    if (const State state = BulkBody(static_cast<size_t>(length), &body); state != State::kComplete)
      return state;
    *value = RespValue{RespValue::Type::kBulkString, 0, body, {}};
    return State::kComplete;
  }

  State Array(std::string_view count_text, RespValue* value, int depth) {
    int64_t count = 0;
    if (!ParseInteger(count_text, &count) || count < -1 || count > kMaxArrayElements) {
      return Invalid("bad array length");
    }
    if (count == -1) {
      *value = RespValue{RespValue::Type::kNilArray, 0, {}, {}};
      return State::kComplete;
    }
    RespValue array{RespValue::Type::kArray, 0, {}, {}};
    // Each element takes at least 3 bytes: reserve only what could be here.
    array.elements.reserve(
        std::min<size_t>(static_cast<size_t>(count), (received_.size() - pos_) / 3));
    for (int64_t i = 0; i < count; ++i) {
      RespValue element;
      if (const auto state = Value(&element, depth + 1); state != State::kComplete) return state;
      array.elements.push_back(std::move(element));
    }
    *value = std::move(array);
    return State::kComplete;
  }

  static bool ParseInteger(std::string_view text, int64_t* integer) {
    const auto result = std::from_chars(text.data(), text.data() + text.size(), *integer);
    return !text.empty() && result.ec == std::errc() && result.ptr == text.data() + text.size();
  }

  State NeedMore(size_t bytes) {
    wanted_ = bytes;
    return State::kNeedMore;
  }

  State Invalid(std::string message) {
    error_ = std::move(message);
    return State::kInvalid;
  }

  const std::string_view received_;
  size_t pos_ = 0;
  size_t wanted_ = 0;
  std::string error_;
};

}  // namespace

void AppendCommand(std::span<const std::string_view> args, std::string* out) {
  AppendArrayHeader(args.size(), out);
  for (const std::string_view arg : args) AppendBulkString(arg, out);
}

void AppendSimpleString(std::string_view text, std::string* out) { AppendLine('+', text, out); }

void AppendError(std::string_view text, std::string* out) { AppendLine('-', text, out); }

void AppendInteger(int64_t value, std::string* out) { AppendLength(':', value, out); }

void AppendBulkString(std::string_view bytes, std::string* out) {
  AppendLength('$', static_cast<int64_t>(bytes.size()), out);
  out->append(bytes);
  out->append("\r\n");
}

void AppendArrayHeader(size_t elements, std::string* out) {
  AppendLength('*', static_cast<int64_t>(elements), out);
}

void AppendNull(int resp_version, std::string* out) {
  out->append(resp_version >= 3 ? "_\r\n" : "$-1\r\n");
}

void AppendMapHeader(size_t pairs, int resp_version, std::string* out) {
  if (resp_version >= 3) {
    AppendLength('%', static_cast<int64_t>(pairs), out);
  } else {
    AppendArrayHeader(2 * pairs, out);
  }
}

RespCommandParse ParseCommand(std::string_view received, const RespCommandLimits& limits,
                              std::vector<std::string_view>* args) {
  Parser parser(received);
  RespCommandParse parse;
  switch (parser.Command(limits, args)) {
    case RespParse::State::kNeedMore:
      parse.state = RespCommandParse::State::kNeedMore;
      parse.wanted_bytes = parser.wanted();
      break;
    case RespParse::State::kComplete:
      parse.state = RespCommandParse::State::kComplete;
      parse.consumed_bytes = parser.pos();
      break;
    case RespParse::State::kInvalid:
      parse.state = RespCommandParse::State::kInvalid;
      parse.error_message = parser.TakeError();
      break;
  }
  return parse;
}

RespParse ParseReply(std::string_view received, RespValue* value) {
  Parser parser(received);
  RespParse parse;
  parse.state = parser.Value(value, 0);
  if (parse.state == RespParse::State::kComplete) parse.consumed_bytes = parser.pos();
  if (parse.state == RespParse::State::kInvalid) parse.error_message = parser.TakeError();
  return parse;
}

std::span<std::byte> RespReader::writable(size_t min_bytes) {
  if (begin_ == end_) begin_ = end_ = 0;
  if (bytes_.size() - end_ < min_bytes && begin_ > 0) {
    std::memmove(bytes_.data(), bytes_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (bytes_.size() - end_ < min_bytes)
    bytes_.resize(std::max(bytes_.size() * 2, end_ + min_bytes));
  return std::as_writable_bytes(std::span(bytes_).subspan(end_));
}

RespParse RespReader::Next(RespValue* value) {
  RespParse parse = ParseReply(std::string_view(bytes_.data() + begin_, end_ - begin_), value);
  if (parse.state == RespParse::State::kComplete) begin_ += parse.consumed_bytes;
  return parse;
}

}  // namespace tally::protocol
