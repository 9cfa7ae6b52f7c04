#include "storage/record.h"

#include <cstring>
#include <limits>

#include "node/common/varint.h"

namespace tally::storage {
namespace {

void PutCounter(const GCounter& counter, std::string* out) {
  PutVarint(counter.slots().size(), out);
  for (const GCounter::Slot& slot : counter.slots()) {
    PutVarint(slot.node, out);
    PutVarint(slot.count, out);
  }
}

bool GetCounter(std::string_view* in, GCounter* counter) {
  uint64_t slots = 0;
  if (!GetVarint(in, &slots) || slots > in->size()) return false;  // >= 2 bytes per slot
  for (uint64_t i = 0; i < slots; ++i) {
    uint64_t node = 0, count = 0;
    if (!GetVarint(in, &node) || !GetVarint(in, &count)) return false;
    counter->MergeSlot(node, count);
  }
  return true;
}

bool GetBucket(std::string_view* in, BucketSlices* bucket) {
  uint64_t base_slice = 0, nodes = 0;
  if (!GetVarint(in, &bucket->capacity) || !GetVarint(in, &base_slice) ||
      !GetVarint(in, &bucket->base_debt) || !GetVarint(in, &nodes) || nodes > in->size()) {
    return false;  // >= 2 bytes per node
  }
  bucket->base_slice = static_cast<int64_t>(base_slice);
  for (uint64_t n = 0; n < nodes; ++n) {
    NodeSlices& node = bucket->nodes.emplace_back();
    uint64_t slices = 0;
    if (!GetVarint(in, &node.node) || !GetVarint(in, &slices) ||
        slices > static_cast<uint64_t>(kBucketMaxSlices) ||
        (n > 0 && node.node <= bucket->nodes[n - 1].node)) {
      return false;
    }
    for (uint64_t i = 0; i < slices; ++i) {
      uint64_t count = 0;
      if (!GetVarint(in, &count) || count > std::numeric_limits<uint32_t>::max()) return false;
      node.counts.push_back(static_cast<uint32_t>(count));
    }
  }
  return true;
}

bool GetPayload(Algorithm algorithm, uint8_t format, std::string_view* in, KeySnapshot* snapshot) {
  uint64_t a = 0, b = 0;
  switch (algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter:
      if (!GetVarint(in, &a)) return false;
      snapshot->counts.window_index = static_cast<int64_t>(a);
      return GetCounter(in, &snapshot->counts.current) &&
             GetCounter(in, &snapshot->counts.previous);
    case Algorithm::kSlidingWindowLog: {
      uint64_t nodes = 0;
      if (!GetVarint(in, &nodes) || nodes > in->size()) return false;  // >= 2 bytes per node
      for (uint64_t n = 0; n < nodes; ++n) {
        NodeStamps& node = snapshot->log.emplace_back();
        uint64_t stamps = 0;
        if (!GetVarint(in, &node.node) || !GetVarint(in, &stamps) || stamps > in->size()) {
          return false;
        }
        for (uint64_t i = 0; i < stamps; ++i) {
          if (!GetVarint(in, &a) || !GetVarint(in, &b)) return false;
          node.stamps.push_back(LogStamp{static_cast<int64_t>(a), b});
        }
      }
      return true;
    }
    case Algorithm::kTokenBucket:
      // Format 1 held one node's level without its capacity: it cannot be
      // turned into a debt, so it is read as a full bucket.
      if (format == kRecordFormatBefore) return GetVarint(in, &a) && GetVarint(in, &b);
      if (!GetBucket(in, &snapshot->bucket) || !GetVarint(in, &snapshot->bucket_heard_debt) ||
          !GetVarint(in, &a)) {
        return false;
      }
      snapshot->bucket_heard_at_ms = static_cast<int64_t>(a);
      return true;
  }
  return false;
}

// Times for which the expiry (window end, last stamp or refill + window_ms)
// is representable. Wall times written by a node are far inside this range.
bool TimesFit(const KeySnapshot& snapshot) {
  const auto window_ms = static_cast<int64_t>(snapshot.window_ms);
  const int64_t latest_ms = std::numeric_limits<int64_t>::max() - 2 * window_ms;
  switch (snapshot.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter:
      return snapshot.counts.window_index >= 0 &&
             snapshot.counts.window_index <= latest_ms / window_ms;
    case Algorithm::kSlidingWindowLog:
      for (const NodeStamps& node : snapshot.log) {
        for (const LogStamp& stamp : node.stamps) {
          if (stamp.at_ms < 0 || stamp.at_ms > latest_ms) return false;
        }
      }
      return true;
    case Algorithm::kTokenBucket:
      return snapshot.bucket.base_slice >= 0 &&
             snapshot.bucket.base_slice <=
                 latest_ms / static_cast<int64_t>(BucketSliceMs(snapshot.window_ms)) &&
             snapshot.bucket_heard_at_ms >= 0 && snapshot.bucket_heard_at_ms <= latest_ms;
  }
  return false;
}

}  // namespace

std::string EncodeRecordKey(const KeySnapshot& snapshot) {
  std::string key;
  AppendRecordKey(snapshot, &key);
  return key;
}

std::string EncodeRecordValue(const KeySnapshot& snapshot) {
  std::string value;
  AppendRecordValue(snapshot, &value);
  return value;
}

void AppendRecordKey(const KeySnapshot& snapshot, std::string* key) {
  key->push_back(kRecordPrefix);
  key->push_back(static_cast<char>(snapshot.algorithm));
  PutBigEndian(snapshot.window_ms, 8, key);
  *key += snapshot.key;
}

void AppendRecordValue(const KeySnapshot& snapshot, std::string* out) {
  std::string& value = *out;
  value.push_back(static_cast<char>(kRecordFormat));
  PutFixed<int64_t>(ExpiresAtMs(snapshot), &value);
  switch (snapshot.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter:
      PutVarint(static_cast<uint64_t>(snapshot.counts.window_index), &value);
      PutCounter(snapshot.counts.current, &value);
      PutCounter(snapshot.counts.previous, &value);
      break;
    case Algorithm::kSlidingWindowLog:
      PutVarint(snapshot.log.size(), &value);
      for (const NodeStamps& node : snapshot.log) {
        PutVarint(node.node, &value);
        PutVarint(node.stamps.size(), &value);
        for (const LogStamp& stamp : node.stamps) {
          PutVarint(static_cast<uint64_t>(stamp.at_ms), &value);
          PutVarint(stamp.cost, &value);
        }
      }
      break;
    case Algorithm::kTokenBucket: {
      const BucketSlices& bucket = snapshot.bucket;
      PutVarint(bucket.capacity, &value);
      PutVarint(static_cast<uint64_t>(bucket.base_slice), &value);
      PutVarint(bucket.base_debt, &value);
      PutVarint(bucket.nodes.size(), &value);
      for (const NodeSlices& node : bucket.nodes) {
        PutVarint(node.node, &value);
        PutVarint(node.counts.size(), &value);
        for (uint32_t count : node.counts) PutVarint(count, &value);
      }
      PutVarint(snapshot.bucket_heard_debt, &value);
      PutVarint(static_cast<uint64_t>(snapshot.bucket_heard_at_ms), &value);
      break;
    }
  }
}

std::optional<int64_t> RecordExpiresAtMs(std::string_view value) {
  if (value.size() < 1 + sizeof(int64_t) ||
      (static_cast<uint8_t>(value[0]) != kRecordFormat &&
       static_cast<uint8_t>(value[0]) != kRecordFormatBefore)) {
    return std::nullopt;
  }
  int64_t expires_at_ms = 0;
  std::memcpy(&expires_at_ms, value.data() + 1, sizeof(expires_at_ms));
  return expires_at_ms;
}

std::optional<std::string_view> RecordUserKey(std::string_view key) {
  constexpr size_t kHeaderBytes = 1 + 1 + 8;  // prefix, algorithm, window_ms
  if (key.size() <= kHeaderBytes || key.size() > kHeaderBytes + kMaxKeyBytes ||
      key[0] != kRecordPrefix || static_cast<uint8_t>(key[1]) >= kAlgorithmCount) {
    return std::nullopt;
  }
  return key.substr(kHeaderBytes);
}

Status DecodeRecord(std::string_view key, std::string_view value, KeySnapshot* snapshot) {
  *snapshot = KeySnapshot();
  if (key.size() < 11 || key[0] != kRecordPrefix) {
    return Status::Corruption("not a record key");
  }
  const auto algorithm = static_cast<uint8_t>(key[1]);
  if (algorithm >= kAlgorithmCount) {
    return Status::Corruption("record of unknown algorithm " + std::to_string(algorithm));
  }
  snapshot->algorithm = static_cast<Algorithm>(algorithm);
  snapshot->window_ms = GetBigEndian(key.substr(2, 8));
  snapshot->key.assign(key.substr(10));
  if (!RecordExpiresAtMs(value)) {
    return Status::Corruption("record value of unknown format or too short");
  }
  const auto format = static_cast<uint8_t>(value[0]);
  std::string_view payload = value.substr(1 + sizeof(int64_t));
  if (!GetPayload(snapshot->algorithm, format, &payload, snapshot) || !payload.empty()) {
    return Status::Corruption("record value does not decode as its algorithm's state");
  }
  const bool legacy_bucket =
      format == kRecordFormatBefore && snapshot->algorithm == Algorithm::kTokenBucket;
  if (!ValidateKey(snapshot->key).ok() ||
      !ValidateSpec({snapshot->algorithm, 0, snapshot->window_ms}).ok() || !TimesFit(*snapshot) ||
      (!legacy_bucket && ExpiresAtMs(*snapshot) != *RecordExpiresAtMs(value))) {
    return Status::Corruption("record holds a key, window or time this version never writes");
  }
  return Status::OK();
}

}  // namespace tally::storage
