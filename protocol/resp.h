// RESP, the Redis protocol: the one codec that tally's RESP front
// (node/resp/) and the load generator's Redis client (cluster/) share.
//
//  - Commands, as every Redis client sends them: an array of bulk strings,
//    *<n>\r\n then $<len>\r\n<arg>\r\n per argument. AppendCommand encodes
//    one; ParseCommand reads one, strictly (below).
//  - Replies: the Append* encoders write RESP2, or RESP3 where the two
//    differ (null, map); ParseReply reads RESP2 replies.
//
// Why not hiredis's reader (libhiredis-dev 0.14 on Debian 12): it copies
// every byte into a buffer of its own, which the server's receive budget
// would not see, and it only hands a bulk string over once all of it has
// arrived, with no hook on its length line, so a client announcing a 512 MB
// argument is buffered up to 512 MB before anything can refuse it; 0.14 has
// no bound on array counts either (its default callbacks calloc the claimed
// count up front). Parsing commands in place is about 100 lines.
//
// Input is never trusted. Both parsers read in place from the bytes received
// so far; a command or reply that has not fully arrived is kNeedMore and
// nothing is consumed. Every length is checked against a limit when its line
// arrives, before its bytes do, and nothing is allocated in proportion to a
// claimed length. ParseCommand accepts nothing but an array of 1..max_args
// bulk strings of at most max_bulk_bytes each (or an empty line, which
// redis-cli --pipe sends): inline commands (a line not starting with '*'), nested arrays, other
// types, negative or oversized lengths and length lines that are not plain decimal numbers are
// kInvalid. After kInvalid the stream cannot be resynchronised: close the connection.
//
// Ownership: string_views in a parsed command or RespValue point into the
// parsed bytes (for RespReader: its buffer) and are valid until those bytes
// change (for RespReader: the next writable() call).
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

namespace tally::protocol {

// ---------------------------------------------------------------- encoding

// Appends the command as an array of bulk strings.
void AppendCommand(std::span<const std::string_view> args, std::string* out);

// Replies. `text` of a simple string or error must not hold CR or LF: they
// are replaced by spaces. An error's text starts with its code ("ERR ...").
void AppendSimpleString(std::string_view text, std::string* out);
void AppendError(std::string_view text, std::string* out);
void AppendInteger(int64_t value, std::string* out);
void AppendBulkString(std::string_view bytes, std::string* out);
void AppendArrayHeader(size_t elements, std::string* out);
// RESP3: _ ; RESP2: the nil bulk string $-1.
void AppendNull(int resp_version, std::string* out);
// A map of `pairs` key/value pairs follows (keys and values alternating).
// RESP3: %<pairs>; RESP2: an array of 2 * pairs elements, as Redis does.
void AppendMapHeader(size_t pairs, int resp_version, std::string* out);

// ---------------------------------------------------------------- commands

struct RespCommandLimits {
  size_t max_args = 1024;             // arguments, the command's name included
  size_t max_bulk_bytes = 64 * 1024;  // bytes of one argument
};

struct RespCommandParse {
  enum class State { kNeedMore, kComplete, kInvalid };
  State state = State::kNeedMore;
  // kComplete: the command's length in bytes. *0, *-1 and an empty line
  // (CRLF), which Redis ignores, are complete commands without arguments.
  size_t consumed_bytes = 0;
  // kNeedMore: at least this many more bytes are needed.
  size_t wanted_bytes = 0;
  std::string error_message;  // kInvalid: what is wrong, for the client
};

// Parses the command at the front of `received` into *args (cleared first;
// its memory is reused).
RespCommandParse ParseCommand(std::string_view received, const RespCommandLimits& limits,
                              std::vector<std::string_view>* args);

// ----------------------------------------------------------------- replies

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

}  // namespace tally::protocol
