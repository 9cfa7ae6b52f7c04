// FuzzInput: splits a fuzzer's bytes into the pieces a target feeds its
// decoder (read sizes, key/value splits), deterministically, so that every
// crash replays from its input file alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace tally::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return offset_ == size_; }
  // One byte (0 when none is left).
  uint8_t Byte() { return empty() ? 0 : data_[offset_++]; }
  // The next `bytes` bytes, or what is left.
  std::span<const std::byte> Take(size_t bytes) {
    const size_t taken = bytes < size_ - offset_ ? bytes : size_ - offset_;
    const auto* begin = reinterpret_cast<const std::byte*>(data_ + offset_);
    offset_ += taken;
    return {begin, taken};
  }
  std::string_view TakeText(size_t bytes) {
    const std::span<const std::byte> taken = Take(bytes);
    return {reinterpret_cast<const char*>(taken.data()), taken.size()};
  }
  std::span<const std::byte> Rest() { return Take(size_ - offset_); }

 private:
  const uint8_t* const data_;
  const size_t size_;
  size_t offset_ = 0;
};

}  // namespace tally::fuzz
