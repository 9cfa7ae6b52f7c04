#include "cluster/resp.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace tally::cluster {
namespace {

// A line (simple string, error, length) longer than this without its CRLF is
// not a reply the load generator could be waiting for.
constexpr size_t kMaxLineBytes = 64 * 1024;

void AppendLength(char marker, size_t length, std::string* out) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof(digits), length);
  out->push_back(marker);
  out->append(digits, result.ptr);
  out->append("\r\n");
}

// Parses one reply at a time from the front of `received`; pos() is where
// the last complete reply ended.
class Parser {
 public:
  explicit Parser(std::string_view received) : received_(received) {}

  RespParse::State Value(RespValue* value, int depth) {
    if (depth > kMaxNesting)
      return Invalid("arrays nested deeper than " + std::to_string(kMaxNesting));
    std::string_view line;
    if (const auto state = Line(&line); state != RespParse::State::kComplete) return state;
    const char marker = line.front();
    line.remove_prefix(1);
    switch (marker) {
      case '+':
        *value = RespValue{RespValue::Type::kSimpleString, 0, line, {}};
        return RespParse::State::kComplete;
      case '-':
        *value = RespValue{RespValue::Type::kError, 0, line, {}};
        return RespParse::State::kComplete;
      case ':': {
        int64_t integer = 0;
        if (!ParseInteger(line, &integer)) return Invalid("bad integer reply");
        *value = RespValue{RespValue::Type::kInteger, integer, {}, {}};
        return RespParse::State::kComplete;
      }
      case '$': return Bulk(line, value);
      case '*': return Array(line, value, depth);
      default: return Invalid(std::string("unknown reply type byte 0x") + Hex(marker));
    }
  }

  size_t pos() const { return pos_; }
  std::string TakeError() { return std::move(error_); }

 private:
  // The next CRLF-terminated line, without its CRLF; never empty.
  RespParse::State Line(std::string_view* line) {
    const std::string_view rest = received_.substr(pos_);
    const size_t end = rest.find("\r\n");
    if (end == std::string_view::npos) {
      return rest.size() > kMaxLineBytes ? Invalid("line without CRLF")
                                         : RespParse::State::kNeedMore;
    }
    if (end == 0) return Invalid("empty line");
    *line = rest.substr(0, end);
    pos_ += end + 2;
    return RespParse::State::kComplete;
  }

  RespParse::State Bulk(std::string_view length_text, RespValue* value) {
    int64_t length = 0;
    if (!ParseInteger(length_text, &length) || length < -1 || length > kMaxBulkBytes) {
      return Invalid("bad bulk string length");
    }
    if (length == -1) {
      *value = RespValue{RespValue::Type::kNilBulk, 0, {}, {}};
      return RespParse::State::kComplete;
    }
    const auto bytes = static_cast<size_t>(length);
    if (received_.size() - pos_ < bytes + 2) return RespParse::State::kNeedMore;
    if (received_.substr(pos_ + bytes, 2) != "\r\n") return Invalid("bulk string without CRLF");
    *value = RespValue{RespValue::Type::kBulkString, 0, received_.substr(pos_, bytes), {}};
    pos_ += bytes + 2;
    return RespParse::State::kComplete;
  }

  RespParse::State Array(std::string_view count_text, RespValue* value, int depth) {
    int64_t count = 0;
    if (!ParseInteger(count_text, &count) || count < -1 || count > kMaxArrayElements) {
      return Invalid("bad array length");
    }
    if (count == -1) {
      *value = RespValue{RespValue::Type::kNilArray, 0, {}, {}};
      return RespParse::State::kComplete;
    }
    RespValue array{RespValue::Type::kArray, 0, {}, {}};
    // Each element takes at least 3 bytes: reserve only what could be here.
    array.elements.reserve(
        std::min<size_t>(static_cast<size_t>(count), (received_.size() - pos_) / 3));
    for (int64_t i = 0; i < count; ++i) {
      RespValue element;
      if (const auto state = Value(&element, depth + 1); state != RespParse::State::kComplete)
        return state;
      array.elements.push_back(std::move(element));
    }
    *value = std::move(array);
    return RespParse::State::kComplete;
  }

  static bool ParseInteger(std::string_view text, int64_t* integer) {
    const auto result = std::from_chars(text.data(), text.data() + text.size(), *integer);
    return result.ec == std::errc() && result.ptr == text.data() + text.size();
  }

  static std::string Hex(char byte) {
    constexpr char kDigits[] = "0123456789abcdef";
    const auto bits = static_cast<unsigned char>(byte);
    return {kDigits[bits >> 4], kDigits[bits & 15]};
  }

  RespParse::State Invalid(std::string message) {
    error_ = std::move(message);
    return RespParse::State::kInvalid;
  }

  const std::string_view received_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

void AppendCommand(std::span<const std::string_view> args, std::string* out) {
  AppendLength('*', args.size(), out);
  for (const std::string_view arg : args) {
    AppendLength('$', arg.size(), out);
    out->append(arg);
    out->append("\r\n");
  }
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

}  // namespace tally::cluster
