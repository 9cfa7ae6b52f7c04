// ReceiveBuffer: the bytes received on one connection, bounded. It is a
// protocol::FrameBuffer (8-byte aligned frames, growing only as bytes
// arrive) whose growth beyond kInitialBytes is charged to a BufferBudget
// that all connections of a port share, and it knows when the first byte
// of the frame in progress arrived, for a deadline on whole frames.
//
// Thread safety: a ReceiveBuffer belongs to its connection's thread (or
// strand). A BufferBudget may be shared by any number of threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "node/common/clock.h"
#include "node/common/status.h"
#include "protocol/frame_buffer.h"

namespace tally {

// Bytes that receive buffers may hold together beyond their initial size.
class BufferBudget {
 public:
  explicit BufferBudget(size_t max_bytes) : max_bytes_(max_bytes) {}
  BufferBudget(const BufferBudget&) = delete;
  BufferBudget& operator=(const BufferBudget&) = delete;

  // Takes `bytes` if the total stays within max_bytes; false, and nothing
  // taken, otherwise.
  bool TryTake(size_t bytes);
  void Give(size_t bytes) { used_bytes_.fetch_sub(bytes, std::memory_order_relaxed); }

  size_t used_bytes() const { return used_bytes_.load(std::memory_order_relaxed); }
  size_t max_bytes() const { return max_bytes_; }

 private:
  const size_t max_bytes_;
  std::atomic<size_t> used_bytes_{0};
};

class ReceiveBuffer {
 public:
  // Every connection holds this much at least (not charged to the budget).
  static constexpr size_t kInitialBytes = 16 * 1024;

  // budget and clock are not owned and must outlive the buffer.
  ReceiveBuffer(BufferBudget* budget, const Clock* clock) : budget_(budget), clock_(clock) {}
  ~ReceiveBuffer() { budget_->Give(charged_bytes()); }
  ReceiveBuffer(const ReceiveBuffer&) = delete;
  ReceiveBuffer& operator=(const ReceiveBuffer&) = delete;

  // The bytes received and not yet consumed; they start at a frame boundary.
  std::span<const std::byte> readable() const { return buffer_.readable(); }

  // Room to receive at least min_bytes into, in *room. ResourceExhausted,
  // and nothing changed, when the buffer would have to grow by more than
  // the budget has left.
  Status Writable(size_t min_bytes, std::span<std::byte>* room);
  // `bytes` were received into the room.
  void Commit(size_t bytes);
  // Drops whole requests from the front: a multiple of 8 bytes for tally's
  // protocol, whose frames are decoded in place; any size for a front that
  // needs no alignment (HTTP). Consume requests as soon as they are
  // complete: what follows them is taken to have arrived with the latest bytes.
  void Consume(size_t frame_bytes);
  // Back to kInitialBytes, giving the growth back, when empty and large.
  void ShrinkIfIdle();
  // Drops everything received and returns to kInitialBytes.
  void Clear();

  // Clock::MonotonicMs() when the first byte of the frame in progress
  // arrived; -1 when no byte of an incomplete frame is buffered.
  int64_t frame_started_ms() const { return frame_started_ms_; }
  size_t capacity_bytes() const { return buffer_.capacity_bytes(); }

 private:
  size_t charged_bytes() const { return buffer_.capacity_bytes() - kInitialBytes; }

  BufferBudget* const budget_;
  const Clock* const clock_;
  protocol::FrameBuffer buffer_{kInitialBytes};
  int64_t frame_started_ms_ = -1;
  int64_t last_commit_ms_ = -1;  // when the latest bytes arrived
};

}  // namespace tally
