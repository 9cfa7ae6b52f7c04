// Fuzzes the gossip port: the frames a peer sends, as node/gossip's session
// reads them. Before the seal check every frame is scanned and decoded as a
// PeerMessage; the state a sealed message carries is then decoded key by key
// and merged into the engine, as it is after a seal verifies.
#include <cstddef>
#include <cstdint>

#include "protocol/codec.h"
#include "protocol/frame_buffer.h"
#include "protocol/peer_codec.h"
#include "tests/fuzz/fuzz_engine.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tally::fuzz::FuzzEngine engine(/*replicate=*/true);
  tally::protocol::FrameLimits limits;
  limits.max_frame_bytes = 256 << 10;

  tally::fuzz::FuzzInput input(data, size);
  const tally::NodeId sender = 2 + input.Byte() % 4;
  const std::span<const std::byte> stream = input.Rest();
  tally::protocol::FrameBuffer buffer;
  const std::span<std::byte> room = buffer.writable(stream.size());
  std::copy(stream.begin(), stream.end(), room.begin());
  buffer.Commit(stream.size());
  for (;;) {
    const std::span<const std::byte> received = buffer.readable();
    const tally::protocol::FrameScan scan = tally::protocol::ScanFrame(received, limits);
    if (scan.state != tally::protocol::FrameScan::State::kComplete) break;
    tally::protocol::PeerMessage message;
    if (tally::protocol::DecodePeerMessage(received.first(scan.frame_bytes), limits, &message)
            .ok() &&
        message.kind == tally::protocol::PeerMessageKind::kState) {
      for (const tally::protocol::PeerClassView& view : message.classes) {
        uint64_t keys = 0;
        static_cast<void>(tally::protocol::DecodePeerClass(
            view, sender,
            [](const tally::KeySnapshot& snapshot) {
              static_cast<void>(
                  engine.limiter.Merge(snapshot));  // a refusal is an outcome, not a bug
            },
            &keys));
      }
    }
    buffer.Consume(scan.frame_bytes);
  }
  return 0;
}
