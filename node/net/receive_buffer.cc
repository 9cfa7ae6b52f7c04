#include "node/net/receive_buffer.h"

#include <string>

namespace tally {

bool BufferBudget::TryTake(size_t bytes) {
  size_t used = used_bytes_.load(std::memory_order_relaxed);
  do {
    if (bytes > max_bytes_ - used) return false;
  } while (!used_bytes_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

Status ReceiveBuffer::Writable(size_t min_bytes, std::span<std::byte>* room) {
  const size_t growth = buffer_.CapacityFor(min_bytes) - buffer_.capacity_bytes();
  if (growth > 0 && !budget_->TryTake(growth)) {
    return Status::ResourceExhausted(
        "the receive buffers of all connections are at their limit of " +
        std::to_string(budget_->max_bytes()) + " bytes");
  }
  *room = buffer_.writable(min_bytes);
  return Status::OK();
}

void ReceiveBuffer::Commit(size_t bytes) {
  if (bytes == 0) return;
  last_commit_ms_ = clock_->MonotonicMs();
  if (buffer_.readable().empty()) frame_started_ms_ = last_commit_ms_;
  buffer_.Commit(bytes);
}

void ReceiveBuffer::Consume(size_t frame_bytes) {
  buffer_.Consume(frame_bytes);
  // What follows a frame completed by the latest bytes arrived with them.
  frame_started_ms_ = buffer_.readable().empty() ? -1 : last_commit_ms_;
}

void ReceiveBuffer::ShrinkIfIdle() {
  const size_t charged = charged_bytes();
  buffer_.ShrinkIfIdle(kInitialBytes);
  budget_->Give(charged - charged_bytes());
}

void ReceiveBuffer::Clear() {
  budget_->Give(charged_bytes());
  buffer_ = protocol::FrameBuffer(kInitialBytes);
  frame_started_ms_ = -1;
}

}  // namespace tally
