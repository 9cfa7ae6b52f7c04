// RESP2, the Redis protocol, as much of it as the load generator needs:
// encode a command, and parse the replies that come back.
//
// Replies are parsed incrementally from the bytes received so far: a reply
// that has not fully arrived is kNeedMore and nothing is consumed. Input is
// not trusted: lengths and nesting are bounded, and nothing is allocated in
// proportion to a length the peer claims before the bytes have arrived.
//
// Ownership: string_views in a parsed RespValue point into the parsed bytes
// (for RespReader: its buffer) and are valid until those bytes change (for
// RespReader: the next writable() call).
//
// Thread safety: the functions are stateless; a RespReader is owned by one
// connection and used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tally::cluster {

// Appends the command as an array of bulk strings, which is how clients send
// commands: *<n>\r\n then $<len>\r\n<arg>\r\n per argument.
void AppendCommand(std::span<const std::string_view> args, std::string* out);

struct RespValue {
  enum class Type : uint8_t {
    kSimpleString,  // +OK
    kError,         // -ERR message (text holds "ERR message")
    kInteger,       // :42
    kBulkString,    // $3 abc
    kNilBulk,       // $-1
    kArray,         // *2 ...
    kNilArray,      // *-1
  };
  Type type = Type::kNilBulk;
  int64_t integer = 0;              // kInteger
  std::string_view text;            // kSimpleString, kError, kBulkString
  std::vector<RespValue> elements;  // kArray
};

struct RespParse {
  enum class State { kNeedMore, kComplete, kInvalid };
  State state = State::kNeedMore;
  size_t consumed_bytes = 0;  // kComplete: the reply's length
  std::string error_message;  // kInvalid: what is wrong
};

inline constexpr int kMaxNesting = 8;
inline constexpr int64_t kMaxBulkBytes = 512 * 1024 * 1024;  // Redis's own cap
inline constexpr int64_t kMaxArrayElements = 1 << 20;

// Parses the reply at the front of `received` into *value.
RespParse ParseReply(std::string_view received, RespValue* value);

// A receive buffer for one connection that yields replies one at a time.
class RespReader {
 public:
  // Room to receive into, at least `min_bytes` (compacts, then grows).
  std::span<std::byte> writable(size_t min_bytes = 4096);
  void Commit(size_t received_bytes) { end_ += received_bytes; }

  // Parses the next reply; on kComplete consumes it.
  RespParse Next(RespValue* value);

 private:
  std::vector<char> bytes_ = std::vector<char>(16 * 1024);
  size_t begin_ = 0;  // first unparsed byte
  size_t end_ = 0;    // one past the last received byte
};

}  // namespace tally::cluster
