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
// record alone. When a size itself is damaged (a key size running past its
// record, a longer varint that shifts what follows, a record size running
// past the part or over the records after it), the reader finds where whole
// records begin again (kResyncRecords of them frame and look like records) and
// goes on from there: the damage costs the records it covers (so a record
// size running past the part costs that record, not the rest of the part),
// and the count says how many those are. Bytes overwritten across several
// records, or two damaged places fewer than kResyncRecords records apart,
// cost every record from the first damage to where whole records begin again.
// In format 1 there is no count, nor a resync: damage loses the rest of the
// part.
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

// How many records in a row (or all up to the part's end, if fewer) must
// frame and look like records (a record key, a known value format) for the
// reader of a damaged format 2 part to take their start as a record's.
inline constexpr int kResyncRecords = 3;

// Calls on_record(key, value), in order, for every record of a part that
// frames (format 1) or frames and looks like a record (format 2), and sets
// *unframed to the number of records that could not be framed: in format 2
// what the part's record count says is missing (or, when the count is
// damaged too, one per damaged place), each damaged place resynchronized as
// above; in format 1 one, losing the rest of the part. on_record returns
// whether the record decodes (DecodeRecord; true when it was not looked at):
// in format 2 the records inside one that does not are looked for too (its
// size may be what is damaged). on_lost (if set) is called with the record
// key of each record that could not be framed when that key can still be read
// (only its record size damaged, say); the others' keys are not known.
// Corruption, saying what, when *unframed is not 0. Reads no byte outside
// `part`, whatever it holds, in time linear in its size.
using RecordCallback = std::function<bool(std::string_view key, std::string_view value)>;
using LostKeyCallback = std::function<void(std::string_view key)>;
Status ForEachRecord(std::string_view part, const RecordCallback& on_record, uint64_t* unframed,
                     const LostKeyCallback& on_lost = {});

}  // namespace tally::storage
