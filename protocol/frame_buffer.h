// FrameBuffer: bytes received on a connection, kept 8-byte aligned so that
// complete frames can be decoded in place (codec.h requires alignment).
//
// Frames are multiples of 8 bytes and are consumed whole, so every frame
// starts at an aligned offset. The buffer grows only as bytes arrive (never
// to a size a peer merely claims), and shrinks back when it empties.
//
// Thread safety: none; owned by one connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace tally::protocol {

class FrameBuffer {
 public:
  explicit FrameBuffer(size_t initial_bytes = 16 * 1024) : words_(initial_bytes / 8) {}

  // The bytes received and not yet consumed; starts at a frame boundary.
  std::span<const std::byte> readable() const {
    return {reinterpret_cast<const std::byte*>(words_.data()) + begin_, end_ - begin_};
  }
  // Room to receive into: at least `min_bytes` (moves unread bytes to the front
  // and grows, doubling, when needed).
  std::span<std::byte> writable(size_t min_bytes = 4096) {
    if (begin_ == end_) begin_ = end_ = 0;
    if (capacity_bytes() - end_ < min_bytes && begin_ > 0) {
      std::memmove(bytes(), bytes() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    const size_t grown = CapacityFor(min_bytes);
    if (grown > capacity_bytes()) words_.resize(grown / 8);
    return {bytes() + end_, capacity_bytes() - end_};
  }
  // The capacity writable(min_bytes) would leave: the current one, or twice,
  // four times... as much.
  size_t CapacityFor(size_t min_bytes) const {
    const size_t unread = end_ - begin_;
    size_t capacity = capacity_bytes();
    while (capacity - unread < min_bytes) capacity *= 2;
    return capacity;
  }
  // The memory the buffer holds.
  size_t capacity_bytes() const { return words_.size() * 8; }
  void Commit(size_t received) { end_ += received; }
  // Drops a whole frame from the front (a multiple of 8 bytes).
  void Consume(size_t frame_bytes) { begin_ += frame_bytes; }

  // Returns to the initial size, freeing the rest, if a large frame made it
  // grow and it is empty.
  void ShrinkIfIdle(size_t initial_bytes = 16 * 1024) {
    if (begin_ == end_ && capacity_bytes() > 4 * initial_bytes) {
      words_ = std::vector<uint64_t>(initial_bytes / 8);  // assign() would keep the memory
      begin_ = end_ = 0;
    }
  }

 private:
  std::byte* bytes() { return reinterpret_cast<std::byte*>(words_.data()); }

  std::vector<uint64_t> words_;
  size_t begin_ = 0;  // first unread byte
  size_t end_ = 0;    // one past the last received byte
};

}  // namespace tally::protocol
