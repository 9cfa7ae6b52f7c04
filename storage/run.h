// Runs: how Store lays out its writes in RocksDB.
//
// Every Store write is one run, numbered by a sequence that only grows. Its
// records (storage/record.h) are packed into parts of about kPartBytes, so
// that RocksDB handles a few large values per write instead of one small
// value per key (its per-value cost dominated the write path):
//
// Key:   'r' | sequence (8 bytes, big-endian) | part (4 bytes, big-endian)
// Value: kRunFormat (1 byte), then per record: varint key size | key |
//        varint value size | value
//
// Keys starting with 'm' hold metadata (format marker, node id, checkpoint).
//
// Thread safety: stateless functions; PartBuilder is a value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "node/common/key_snapshot.h"
#include "node/common/status.h"

namespace tally::storage {

inline constexpr char kRunPrefix = 'r';
inline constexpr char kMetaPrefix = 'm';
inline constexpr uint8_t kRunFormat = 1;
inline constexpr size_t kPartBytes = 1 << 20;

std::string RunKey(uint64_t sequence, uint32_t part);
// False when `key` is not a run key.
bool ParseRunKey(std::string_view key, uint64_t* sequence, uint32_t* part);

// Packs records into one part at a time.
class PartBuilder {
 public:
  PartBuilder() { Clear(); }
  void Add(const KeySnapshot& snapshot);
  // At least kPartBytes: time to store this part and Clear.
  bool full() const { return part_.size() >= kPartBytes; }
  bool empty() const { return records_ == 0; }
  const std::string& part() const { return part_; }
  void Clear();

 private:
  std::string part_;
  std::string scratch_;  // one record's key or value; reused
  size_t records_ = 0;
};

// Calls on_record(key, value) for every record of a part, in order.
// Corruption when the part's format byte or framing is broken; the records
// before the break have been delivered.
Status ForEachRecord(std::string_view part,
                     const std::function<void(std::string_view key, std::string_view value)>& on_record);

}  // namespace tally::storage
