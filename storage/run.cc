#include "storage/run.h"

#include "node/common/varint.h"
#include "storage/record.h"

namespace tally::storage {
namespace {

constexpr size_t kRunKeyBytes = 1 + 8 + 4;
constexpr size_t kCountBytes = 4;
constexpr size_t kHeaderBytes = 1 + kCountBytes;  // format 2: format byte and record count

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

Status ForEachSizedRecord(std::string_view records, uint64_t count, const RecordCallback& on_record,
                          uint64_t* unframed) {
  const size_t bytes = records.size();
  uint64_t framed = 0;
  bool broken = false;
  while (!records.empty()) {
    std::string_view record, key;
    if (!GetSized(&records, &record)) {
      broken = true;
      break;
    }
    ++framed;
    if (GetSized(&record, &key)) {
      on_record(key, record);
    } else {
      ++*unframed;  // damage inside the record: the next one starts where its size says
    }
  }
  // Every record takes bytes: a larger count is itself damaged, and then
  // only the break is known to have cost a record.
  if (count <= bytes && count > framed) {
    *unframed += count - framed;
  } else if (broken) {
    ++*unframed;
  }
  if (broken) return Unframed(*unframed, "a record size runs past the part, losing the rest of it");
  if (count > framed) return Unframed(*unframed, "the part holds fewer records than its count");
  return Unframed(*unframed, "a key size runs past its record");
}

Status ForEachUnsizedRecord(std::string_view records, const RecordCallback& on_record,
                            uint64_t* unframed) {
  while (!records.empty()) {
    std::string_view key, value;
    if (!GetSized(&records, &key) || !GetSized(&records, &value)) {
      *unframed = 1;  // the rest of the part is lost too; format 1 does not say how many
      return Unframed(1, "a format 1 part breaks off, losing an unknown number of records after");
    }
    on_record(key, value);
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

Status ForEachRecord(std::string_view part, const RecordCallback& on_record, uint64_t* unframed) {
  *unframed = 0;
  const uint8_t format = part.empty() ? 0 : static_cast<uint8_t>(part[0]);
  if (format == kRunFormat && part.size() >= kHeaderBytes) {
    return ForEachSizedRecord(part.substr(kHeaderBytes), GetBigEndian(part.substr(1, kCountBytes)),
                              on_record, unframed);
  }
  if (format == kRunFormatUnsized) return ForEachUnsizedRecord(part.substr(1), on_record, unframed);
  *unframed = 1;  // how many records it held is not known
  return Status::Corruption("run part of unknown format " + std::to_string(format));
}

}  // namespace tally::storage
