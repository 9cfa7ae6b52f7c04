#include "storage/run.h"

#include "storage/record.h"
#include "node/common/varint.h"

namespace tally::storage {
namespace {

constexpr size_t kRunKeyBytes = 1 + 8 + 4;

// Reads a varint size and that many bytes from the front of *in.
bool GetSized(std::string_view* in, std::string_view* bytes) {
  uint64_t size = 0;
  if (!GetVarint(in, &size) || size > in->size()) return false;
  *bytes = in->substr(0, size);
  in->remove_prefix(size);
  return true;
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
  PutVarint(scratch_.size(), &part_);
  part_ += scratch_;
  scratch_.clear();
  AppendRecordValue(snapshot, &scratch_);
  PutVarint(scratch_.size(), &part_);
  part_ += scratch_;
  ++records_;
}

void PartBuilder::Clear() {
  part_.assign(1, static_cast<char>(kRunFormat));
  records_ = 0;
}

Status ForEachRecord(std::string_view part,
                     const std::function<void(std::string_view, std::string_view)>& on_record) {
  if (part.empty() || static_cast<uint8_t>(part[0]) != kRunFormat) {
    return Status::Corruption("run part of unknown format");
  }
  part.remove_prefix(1);
  while (!part.empty()) {
    std::string_view key, value;
    if (!GetSized(&part, &key) || !GetSized(&part, &value)) {
      return Status::Corruption("run part breaks off inside a record");
    }
    on_record(key, value);
  }
  return Status::OK();
}

}  // namespace tally::storage
