// Helpers of the storage tests (storage_test.cc, storage_damage_test.cc,
// later ones): snapshots of every shape, a Store opened or read
// whole, and RocksDB written or read directly, beside Store.
//
// Thread safety: none needed; each test uses its own directory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include "node/common/clock.h"
#include "node/common/key_snapshot.h"
#include "node/common/varint.h"
#include "storage/run.h"
#include "storage/store.h"

namespace tally::testing {

inline constexpr int64_t kStartMs = 1'700'000'040'000;  // a whole minute

inline KeySnapshot Snapshot(std::string key, Algorithm algorithm, uint64_t window_ms) {
  KeySnapshot snapshot;
  snapshot.key = std::move(key);
  snapshot.algorithm = algorithm;
  snapshot.window_ms = window_ms;
  return snapshot;
}

inline KeySnapshot Counting(std::string key, Algorithm algorithm, uint64_t window_ms,
                            int64_t window_index, std::vector<GCounter::Slot> current,
                            std::vector<GCounter::Slot> previous) {
  KeySnapshot snapshot = Snapshot(std::move(key), algorithm, window_ms);
  snapshot.counts.window_index = window_index;
  for (const auto& [node, count] : current) snapshot.counts.current.MergeSlot(node, count);
  for (const auto& [node, count] : previous) snapshot.counts.previous.MergeSlot(node, count);
  return snapshot;
}

inline KeySnapshot Log(std::string key, uint64_t window_ms, std::vector<NodeStamps> log) {
  KeySnapshot snapshot = Snapshot(std::move(key), Algorithm::kSlidingWindowLog, window_ms);
  snapshot.log = std::move(log);
  return snapshot;
}

// A bucket holding `cost` admitted by node 1 at at_ms, and 3 by node 2 a slice earlier; node
// 1 heard all of it at at_ms.
inline KeySnapshot Bucket(std::string key, uint64_t window_ms, uint64_t cost, int64_t at_ms) {
  KeySnapshot snapshot = Snapshot(std::move(key), Algorithm::kTokenBucket, window_ms);
  const int64_t slice = BucketSliceAt(window_ms, at_ms);
  snapshot.bucket.capacity = kMaxLimit;
  snapshot.bucket.base_slice = BucketBaseFor(slice);
  snapshot.bucket.base_debt = cost * window_ms;
  AddToBucket(snapshot.bucket, 1, slice, cost);
  AddToBucket(snapshot.bucket, 2, slice - 1, 3);
  snapshot.bucket_heard_debt = (2 * cost + 3) * window_ms;
  snapshot.bucket_heard_at_ms = at_ms;
  return snapshot;
}

// One snapshot of every shape, all live at now_ms, a few of them at extremes.
inline std::vector<KeySnapshot> Samples(int64_t now_ms) {
  const std::string binary("a\0b\xff\x80\n\x01", 7);
  std::vector<LogStamp> stamps;
  for (int i = 0; i < 5'000; ++i) stamps.push_back({now_ms - 5'000 + i, 1 + uint64_t(i) % 3});
  return {
      Counting("fixed", Algorithm::kFixedWindow, 1'000, now_ms / 1'000,
               {{1, 5}, {7, 300}, {UINT64_MAX, UINT64_MAX}}, {}),
      Counting(binary, Algorithm::kSlidingWindowCounter, 60'000, now_ms / 60'000,
               {{2, 1}, {3, uint64_t{1} << 40}}, {{1, 99}, {2, 7}, {1'000'000'007, 1}}),
      Counting(std::string(kMaxKeyBytes, '\xfe'), Algorithm::kSlidingWindowCounter, 1, now_ms,
               {{1, 1}}, {{1, 2}}),  // window_index ~1.7e12
      Counting("month", Algorithm::kFixedWindow, kMaxWindowMs, now_ms / kMaxWindowMs, {{9, 1}}, {}),
      Log("log", 10'000, {{1, stamps}}),
      Log(binary, 1'000, {{1, {{now_ms, 1'000'000'000}}}, {UINT64_MAX, {{now_ms - 9, 1}}}}),
      Bucket("bucket", 4'000, 20, now_ms),
      Bucket(std::string(kMaxKeyBytes, '\0'), kMaxWindowMs, kMaxLimit, now_ms - 1),
  };
}

// Every field of a snapshot as text, for comparing snapshots and reading a mismatch.
// (KeySnapshot::operator== does not compile: LogStamp in node/decide.h has no operator==.)
inline std::string Describe(const KeySnapshot& s) {
  std::ostringstream out;
  out << AlgorithmName(s.algorithm) << " window " << s.window_ms << " key " << std::hex;
  for (const char c : s.key) out << int(static_cast<unsigned char>(c)) << '.';
  out << std::dec << " index " << s.counts.window_index << " current";
  for (const auto& slot : s.counts.current.slots()) out << ' ' << slot.node << ':' << slot.count;
  out << " previous";
  for (const auto& slot : s.counts.previous.slots()) out << ' ' << slot.node << ':' << slot.count;
  out << " log";
  for (const NodeStamps& node : s.log) {
    out << ' ' << node.node << ':';
    for (const LogStamp& stamp : node.stamps) out << ' ' << stamp.at_ms << ':' << stamp.cost;
  }
  out << " bucket " << s.bucket.capacity << ' ' << s.bucket.base_slice << ' ' << s.bucket.base_debt
      << " heard " << s.bucket_heard_debt << '@' << s.bucket_heard_at_ms;
  for (const NodeSlices& node : s.bucket.nodes) {
    out << ' ' << node.node << ':';
    for (uint32_t count : node.counts) out << ' ' << count;
  }
  return out.str();
}

inline std::vector<std::string> DescribeAll(const std::vector<KeySnapshot>& snapshots) {
  std::vector<std::string> described;
  for (const KeySnapshot& snapshot : snapshots) described.push_back(Describe(snapshot));
  std::sort(described.begin(), described.end());
  return described;
}

// actual and expected hold the same snapshots, in any order.
inline void CheckSame(const std::vector<KeySnapshot>& actual,
                      const std::vector<KeySnapshot>& expected) {
  const std::vector<std::string> got = DescribeAll(actual), want = DescribeAll(expected);
  CHECK(got.size() == want.size());
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) CHECK(got[i] == want[i]);
}

inline std::unique_ptr<storage::Store> OpenStore(const std::string& path, const Clock* clock) {
  std::unique_ptr<storage::Store> store;
  const Status status = storage::Store::Open(storage::Store::Options{path, false, clock}, &store);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return store;
}

// Writes the snapshots as one run (a checkpoint when `checkpoint`).
inline Status WriteRun(storage::Store& store, std::span<const KeySnapshot> snapshots,
                       bool checkpoint = false) {
  std::unique_ptr<storage::Store::Run> run;
  if (Status status = store.BeginRun(checkpoint, &run); !status.ok()) return status;
  for (const KeySnapshot& snapshot : snapshots) run->Add(snapshot);
  return store.Commit(run.get());
}

// Every snapshot Load hands over, in the order it does.
inline std::vector<KeySnapshot> LoadAll(storage::Store& store, storage::Store::LoadStats* stats) {
  std::vector<KeySnapshot> loaded;
  const Status status = store.Load(
      [&](const KeySnapshot& snapshot) {
        loaded.push_back(snapshot);
        return Status::OK();
      },
      stats);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return loaded;
}

// Puts key/value pairs with RocksDB itself, not through Store (which must be closed).
inline void RawPut(const std::string& path,
                   const std::vector<std::pair<std::string, std::string>>& kvs) {
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status open = rocksdb::DB::Open(options, path, &raw);
  REQUIRE_MESSAGE(open.ok(), open.ToString());
  const std::unique_ptr<rocksdb::DB> db(raw);
  for (const auto& [key, value] : kvs) REQUIRE(db->Put(rocksdb::WriteOptions(), key, value).ok());
}

// The value RocksDB holds under `key` (Store must be closed).
inline std::string RawGet(const std::string& path, const std::string& key) {
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status open = rocksdb::DB::Open(rocksdb::Options(), path, &raw);
  REQUIRE_MESSAGE(open.ok(), open.ToString());
  const std::unique_ptr<rocksdb::DB> db(raw);
  std::string value;
  const rocksdb::Status read = db->Get(rocksdb::ReadOptions(), key, &value);
  REQUIRE_MESSAGE(read.ok(), read.ToString());
  return value;
}

// A run part of format 1, as versions before format 2 framed them, holding the given records.
inline std::string RawPartOfFormat1(
    const std::vector<std::pair<std::string, std::string>>& records) {
  std::string part(1, static_cast<char>(storage::kRunFormatUnsized));
  for (const auto& [key, value] : records) {
    PutVarint(key.size(), &part);
    part += key;
    PutVarint(value.size(), &part);
    part += value;
  }
  return part;
}

}  // namespace tally::testing
