#include "storage/run.h"

#include <optional>

#include "node/common/varint.h"
#include "storage/record.h"

namespace tally::storage {
namespace {

constexpr size_t kRunKeyBytes = 1 + 8 + 4;
constexpr size_t kCountBytes = 4;
constexpr size_t kHeaderBytes = 1 + kCountBytes;  // format 2: format byte and record count
constexpr size_t kMaxVarintBytes = 10;

// Reads a varint size and that many bytes from the front of *in.
bool GetSized(std::string_view* in, std::string_view* bytes) {
  uint64_t size = 0;
  if (!GetVarint(in, &size) || size > in->size()) return false;
  *bytes = in->substr(0, size);
  in->remove_prefix(size);
  return true;
}

Status Unframed(uint64_t unframed, std::string_view what) {
  if (unframed == 0) return Status::OK();
  return Status::Corruption(std::to_string(unframed) +
                            " records of a run part could not be framed: " + std::string(what));
}

// Reads the record at the front of *in (format 2) into *key and *value: true
// when it frames (its size within *in, its key size within it) and looks like
// a record; *in then begins after it.
bool NextRecord(std::string_view* in, std::string_view* key, std::string_view* value) {
  std::string_view rest = *in, record;
  if (!GetSized(&rest, &record) || !GetSized(&record, key) || !RecordUserKey(*key) ||
      !RecordExpiresAtMs(record)) {
    return false;
  }
  *value = record;
  *in = rest;
  return true;
}

// Whether whole records begin at the front of `records`: kResyncRecords of
// them, or all up to its end when fewer (so also when it is empty).
bool RecordsBegin(std::string_view records) {
  std::string_view key, value;
  for (int i = 0; i < kResyncRecords && !records.empty(); ++i) {
    if (!NextRecord(&records, &key, &value)) return false;
  }
  return true;
}

// The record key of the damaged record that `damaged` (the bytes up to where
// records begin again) holds, when it can still be read: after a record size
// of any length (it may be what is damaged), a key size, a key and a value
// that decode as one record filling the rest. A damaged key size, or more
// than one record lost, leaves it unread.
std::optional<std::string_view> DamagedRecordKey(std::string_view damaged) {
  KeySnapshot snapshot;
  for (size_t size_bytes = 1; size_bytes <= kMaxVarintBytes && size_bytes < damaged.size();
       ++size_bytes) {
    std::string_view value = damaged.substr(size_bytes), key;
    if (GetSized(&value, &key) && RecordUserKey(key) && RecordExpiresAtMs(value) &&
        DecodeRecord(key, value, &snapshot).ok()) {
      return key;
    }
  }
  return std::nullopt;
}

// The first place at or after `from` where records begin again.
size_t Resync(std::string_view records, size_t from) {
  while (!RecordsBegin(records.substr(from))) ++from;  // true at the end, at the latest
  return from;
}

// Where records do not frame at `at`, records are looked for from the next
// byte on; a record that frames but does not decode may have a record size
// damaged to a larger one that still fits, swallowing the records after it,
// so they are looked for from the start of its value. Each search starts
// after the one before ended, and what is read again after one lies inside a
// single record, so the part is read in time linear in its size.
Status ForEachSizedRecord(std::string_view records, uint64_t count, const RecordCallback& on_record,
                          const LostKeyCallback& on_lost, uint64_t* unframed) {
  uint64_t read = 0, damaged = 0;
  size_t at = 0;  // where the next record begins
  while (at < records.size()) {
    std::string_view rest = records.substr(at), key, value;
    if (NextRecord(&rest, &key, &value)) {
      ++read;
      at = records.size() - rest.size();
      if (!on_record(key, value)) {
        at = Resync(records, static_cast<size_t>(value.data() - records.data()));
      }
      continue;
    }
    ++damaged;
    const size_t resume = Resync(records, at + 1);
    if (on_lost) {
      if (const auto lost = DamagedRecordKey(records.substr(at, resume - at))) on_lost(*lost);
    }
    at = resume;
  }
  // The count says how many records the damage cost, unless it is damaged
  // too: each record takes bytes, and no more were read than it says.
  *unframed = count <= records.size() && count >= read ? count - read : damaged;
  if (damaged == 0) return Unframed(*unframed, "the part holds fewer records than its count");
  return Unframed(*unframed, std::to_string(damaged) +
                                 " places where a record size or key size is damaged; the "
                                 "records after each were read from where they begin again");
}

Status ForEachUnsizedRecord(std::string_view records, const RecordCallback& on_record,
                            uint64_t* unframed) {
  while (!records.empty()) {
    std::string_view key, value;
    if (!GetSized(&records, &key) || !GetSized(&records, &value)) {
      *unframed = 1;  // the rest of the part is lost too; format 1 does not say how many
      return Unframed(1, "a format 1 part breaks off, losing an unknown number of records after");
    }
    static_cast<void>(on_record(key, value));
  }
  return Status::OK();
}

}  // namespace

std::string RunKey(uint64_t sequence, uint32_t part) {
  std::string key(1, kRunPrefix);
  PutBigEndian(sequence, 8, &key);
  PutBigEndian(part, 4, &key);
  return key;
}

bool ParseRunKey(std::string_view key, uint64_t* sequence, uint32_t* part) {
  if (key.size() != kRunKeyBytes || key[0] != kRunPrefix) return false;
  *sequence = GetBigEndian(key.substr(1, 8));
  *part = static_cast<uint32_t>(GetBigEndian(key.substr(9, 4)));
  return true;
}

void PartBuilder::Add(const KeySnapshot& snapshot) {
  scratch_.clear();
  AppendRecordKey(snapshot, &scratch_);
  const size_t key_bytes = scratch_.size();
  AppendRecordValue(snapshot, &scratch_);
  std::string key_size;
  PutVarint(key_bytes, &key_size);
  PutVarint(key_size.size() + scratch_.size(), &part_);
  part_ += key_size;
  part_ += scratch_;
  std::string count;
  PutBigEndian(++records_, kCountBytes, &count);
  part_.replace(1, kCountBytes, count);
}

void PartBuilder::Clear() {
  part_.assign(1, static_cast<char>(kRunFormat));
  part_.append(kCountBytes, '\0');
  records_ = 0;
}

Status ForEachRecord(std::string_view part, const RecordCallback& on_record, uint64_t* unframed,
                     const LostKeyCallback& on_lost) {
  *unframed = 0;
  const uint8_t format = part.empty() ? 0 : static_cast<uint8_t>(part[0]);
  if (format == kRunFormat && part.size() >= kHeaderBytes) {
    return ForEachSizedRecord(part.substr(kHeaderBytes), GetBigEndian(part.substr(1, kCountBytes)),
                              on_record, on_lost, unframed);
  }
  if (format == kRunFormatUnsized) return ForEachUnsizedRecord(part.substr(1), on_record, unframed);
  *unframed = 1;  // how many records it held is not known
  return Status::Corruption("run part of unknown format " + std::to_string(format));
}

}  // namespace tally::storage
