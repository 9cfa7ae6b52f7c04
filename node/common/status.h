// Status: the result of an operation at a module boundary (leveldb style).
//
// An OK status holds no allocation, so returning it on the hot path is free.
// Any other status carries a code and a human-readable message.
//
// Thread safety: a Status is a value; distinct objects may be used from
// different threads without synchronisation.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace tally {

class [[nodiscard]] Status {
 public:
  enum class Code : unsigned char {
    kOk = 0,
    kInvalidArgument = 1,    // the caller sent something that can never succeed
    kResourceExhausted = 2,  // a configured cap (keys, connections, sizes) was hit
    kNotFound = 3,
    kCorruption = 4,
    kIOError = 5,
    kUnavailable = 6,
  };

  Status() = default;  // OK
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(Code::kInvalidArgument, msg);
  }
  static Status ResourceExhausted(std::string_view msg) {
    return Status(Code::kResourceExhausted, msg);
  }
  static Status NotFound(std::string_view msg) { return Status(Code::kNotFound, msg); }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, msg); }
  static Status IOError(std::string_view msg) { return Status(Code::kIOError, msg); }
  static Status Unavailable(std::string_view msg) { return Status(Code::kUnavailable, msg); }

  bool ok() const { return state_ == nullptr; }
  Code code() const { return state_ ? state_->code : Code::kOk; }
  // The message alone, without the code name; empty for OK.
  std::string_view message() const;
  // "OK" or "<code name>: <message>".
  std::string ToString() const;

 private:
  struct State {
    Code code;
    std::string message;
  };
  Status(Code code, std::string_view msg);

  std::unique_ptr<State> state_;  // null means OK
};

std::string_view CodeName(Status::Code code);

}  // namespace tally
