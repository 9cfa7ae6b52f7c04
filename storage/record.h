// How one KeySnapshot is encoded: a record, a (key, value) pair of byte
// strings. Records travel inside runs (storage/run.h), not as RocksDB keys.
//
// Key:   'k' | algorithm (1 byte) | window_ms (8 bytes, big-endian) | key bytes
// Value: format (1 byte, kRecordFormat) | expires_at_ms (8 bytes, little-endian)
//        | payload, integers as LEB128 varints:
//   fixed window, sliding counter: window_index, then for the current and
//     the previous window: slot count, then (node, count) per slot
//   sliding log: node count, then per node: node, stamp count, then
//     (at_ms, cost) per stamp
//   token bucket: capacity, base slice, base debt, node count, then per
//     node: node (increasing), slice count (at most kBucketMaxSlices), the
//     counts (node/common/bucket_slices.h), then the node's heard debt and
//     its time (node/engine/key_state.h). Format 1 held a level and a
//     refill time instead: such a record is read as a full bucket.
// expires_at_ms comes first and at a fixed offset so that a reader skips an
// expired record without decoding the rest.
//
// Thread safety: stateless functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "node/common/key_snapshot.h"
#include "node/common/status.h"

namespace tally::storage {

inline constexpr char kRecordPrefix = 'k';
inline constexpr uint8_t kRecordFormat = 2;        // what this version writes
inline constexpr uint8_t kRecordFormatBefore = 1;  // read: counters and logs as in 2

std::string EncodeRecordKey(const KeySnapshot& snapshot);
std::string EncodeRecordValue(const KeySnapshot& snapshot);
// The same, appended to *out (so that a caller can reuse one buffer).
void AppendRecordKey(const KeySnapshot& snapshot, std::string* out);
void AppendRecordValue(const KeySnapshot& snapshot, std::string* out);

// Corruption, naming what is wrong, for anything that is not a record this
// version or the one before wrote (wrong prefix, unknown format or algorithm, bad lengths,
// trailing bytes).
Status DecodeRecord(std::string_view key, std::string_view value, KeySnapshot* snapshot);

// The expiry stamped in a record value (format 1 or 2); nullopt when the
// value is too short or of an unknown format.
std::optional<int64_t> RecordExpiresAtMs(std::string_view value);

// The user's key (1 to kMaxKeyBytes bytes, any bytes) inside a record key;
// nullopt when `key` is not one (prefix, algorithm or size), without decoding
// the rest of the record.
std::optional<std::string_view> RecordUserKey(std::string_view key);

}  // namespace tally::storage
