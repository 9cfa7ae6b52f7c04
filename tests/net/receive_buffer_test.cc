// ReceiveBuffer and BufferBudget: when a frame started, and what growth costs.
#include "node/net/receive_buffer.h"

#include <span>

#include <doctest/doctest.h>

#include "node/common/clock.h"

namespace tally {
namespace {

constexpr size_t kKiB = 1024;

// Received bytes (zeros: their content does not matter here).
void Receive(ReceiveBuffer* in, size_t bytes) {
  std::span<std::byte> room;
  REQUIRE(in->Writable(bytes, &room).ok());
  in->Commit(bytes);
}

// A frame is timed from its first byte, however many arrive after it; what
// follows a consumed frame is timed from the bytes it arrived with.
TEST_CASE("receive buffer: a frame is timed from its first byte") {
  ManualClock clock(/*wall_ms=*/0, /*monotonic_ms=*/1'000);
  BufferBudget budget(1 << 20);
  ReceiveBuffer in(&budget, &clock);
  CHECK(in.frame_started_ms() == -1);
  Receive(&in, 3);
  CHECK(in.frame_started_ms() == 1'000);
  clock.AdvanceMs(400);
  Receive(&in, 1);
  clock.AdvanceMs(400);
  Receive(&in, 12);  // 16 bytes: a frame of 8 and half of the next
  CHECK(in.frame_started_ms() == 1'000);
  in.Consume(8);
  CHECK(in.frame_started_ms() == 1'800);
  in.Consume(8);
  CHECK(in.frame_started_ms() == -1);
}

// Growth beyond the initial 16 KiB is charged to the shared budget, refused
// when more than what is left, and given back on shrinking and destruction.
TEST_CASE("receive buffer: growth is charged to the budget and given back") {
  ManualClock clock;
  BufferBudget budget(128 * kKiB);
  ReceiveBuffer a(&budget, &clock);
  Receive(&a, 100 * kKiB);  // 16 KiB doubled to 128 KiB
  CHECK(a.capacity_bytes() == 128 * kKiB);
  CHECK(budget.used_bytes() == 112 * kKiB);
  {
    ReceiveBuffer b(&budget, &clock);
    Receive(&b, 16 * kKiB);  // within its initial size: free
    std::span<std::byte> room;
    const Status refused = b.Writable(40 * kKiB, &room);  // 64 KiB more: 16 KiB are left
    CHECK(refused.code() == Status::Code::kResourceExhausted);
    CHECK(b.capacity_bytes() == 16 * kKiB);
    CHECK(budget.used_bytes() == 112 * kKiB);
    REQUIRE(b.Writable(16 * kKiB, &room).ok());  // exactly what is left
    CHECK(budget.used_bytes() == 128 * kKiB);
  }
  CHECK(budget.used_bytes() == 112 * kKiB);
  a.Consume(100 * kKiB);
  a.ShrinkIfIdle();
  CHECK(a.capacity_bytes() == ReceiveBuffer::kInitialBytes);
  CHECK(budget.used_bytes() == 0);
}

}  // namespace
}  // namespace tally
