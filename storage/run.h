// Runs: how Store lays out its writes in RocksDB.
//
// Every Store write is one run, numbered by a sequence that only grows. Its
// records (storage/record.h) are packed into parts of about kPartBytes, so
// that RocksDB handles a few large values per write instead of one small
// value per key (its per-value cost dominated the write path):
//
// Key:   'r' | sequence (8 bytes, big-endian) | part (4 bytes, big-endian)
// Value: a format byte, then the records:
//   format 2 (kRunFormat, written): record count (4 bytes, big-endian), then
//     per record: varint record size | varint key size | key | value
//   format 1 (written by earlier versions, still read): per record:
//     varint key size | key | varint value size | value
// In format 2 a record is framed by its own size: damage inside it costs that
// record alone. Damage to a size itself loses the rest of the part, and the
// count says how many records that is. In format 1 there is no such count.
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
inline constexpr uint8_t kRunFormat = 2;
inline constexpr uint8_t kRunFormatUnsized = 1;  // format 1, read only
inline constexpr size_t kPartBytes = 1 << 20;

std::string RunKey(uint64_t sequence, uint32_t part);
// False when `key` is not a run key.
bool ParseRunKey(std::string_view key, uint64_t* sequence, uint32_t* part);

// Packs records into one part (format 2) at a time.
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
  std::string scratch_;  // one record's key and value; reused
  uint32_t records_ = 0;
};

// Calls on_record(key, value) for every record of a part (either format)
// whose framing is intact, in order, and sets *unframed to the number of
// records that could not be framed: one for a record whose key size does not
// fit in it; the rest of the part, from its record count, for a record size
// that does not fit in the part (one in format 1, which has no count).
// Corruption, saying what, when *unframed is not 0.
using RecordCallback = std::function<void(std::string_view key, std::string_view value)>;
Status ForEachRecord(std::string_view part, const RecordCallback& on_record, uint64_t* unframed);

}  // namespace tally::storage
