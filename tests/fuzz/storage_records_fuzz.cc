// Fuzzes what tallyd reads back from its database at start: a single record
// (key and value, as written by format 1) and a run part (format 2, many
// framed records), each decoded and restored into the engine, as
// storage/store.cc and tallyd do.
#include <cstddef>
#include <cstdint>
#include <string>

#include "storage/record.h"
#include "storage/run.h"
#include "tests/fuzz/fuzz_engine.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tally::fuzz::FuzzEngine engine;
  tally::fuzz::FuzzInput input(data, size);
  const bool as_part = input.Byte() % 2 == 0;
  if (as_part) {
    const std::string_view part = input.TakeText(size);
    uint64_t unframed = 0;
    static_cast<void>(tally::storage::ForEachRecord(
        part,
        [](std::string_view key, std::string_view value) {
          tally::KeySnapshot snapshot;
          if (!tally::storage::DecodeRecord(key, value, &snapshot).ok()) return false;
          static_cast<void>(engine.limiter.Restore(snapshot));
          return true;
        },
        &unframed, [](std::string_view) {}));
    return 0;
  }
  const std::string_view key = input.TakeText(input.Byte());
  const std::string_view value = input.TakeText(size);
  tally::KeySnapshot snapshot;
  if (tally::storage::DecodeRecord(key, value, &snapshot).ok()) {
    static_cast<void>(engine.limiter.Restore(snapshot));
  }
  uint64_t sequence = 0;
  uint32_t part_number = 0;
  static_cast<void>(tally::storage::ParseRunKey(key, &sequence, &part_number));
  return 0;
}
