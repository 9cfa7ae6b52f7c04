// Tests of persistence: the record format (storage/record.h), the RocksDB
// store (storage/store.h) and the Persister (node/persist/persister.h) on a
// real store; damaged storage is in storage_damage_test.cc, full disks in
// storage_disk_test.cc. Each test works in its own temporary directory and on
// a ManualClock.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/common/key_snapshot.h"
#include "node/engine/limiter.h"
#include "node/persist/persister.h"
#include "storage/record.h"
#include "storage/run.h"
#include "storage/store.h"
#include "tests/storage/storage_test_util.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

namespace fs = std::filesystem;
using storage::Store;
using testing::Bucket;
using testing::CheckSame;
using testing::Counting;
using testing::Describe;
using testing::kStartMs;
using testing::LoadAll;
using testing::Log;
using testing::OpenStore;
using testing::RawPartOfFormat1;
using testing::RawPut;
using testing::Samples;
using testing::Snapshot;
using testing::TempDir;
using testing::WriteRun;

constexpr Algorithm kAlgorithms[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                                     Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket};

Status Decode(std::string_view key, std::string_view value) {
  KeySnapshot snapshot;
  return storage::DecodeRecord(key, value, &snapshot);
}

// Every algorithm's snapshot (odd keys, extremes) decodes back to itself; its expiry is stamped.
TEST_CASE("storage: records round-trip for every algorithm") {
  for (const KeySnapshot& snapshot : Samples(kStartMs)) {
    CAPTURE(Describe(snapshot).substr(0, 120));
    const std::string key = storage::EncodeRecordKey(snapshot);
    const std::string value = storage::EncodeRecordValue(snapshot);
    CHECK(key.size() == 10 + snapshot.key.size());
    CHECK(key[0] == storage::kRecordPrefix);
    KeySnapshot decoded;
    REQUIRE(storage::DecodeRecord(key, value, &decoded).ok());
    CHECK(Describe(decoded) == Describe(snapshot));
    CHECK(storage::RecordExpiresAtMs(value) == ExpiresAtMs(snapshot));
    CHECK(ExpiresAtMs(snapshot) > kStartMs);
  }
}

// Bad prefix, short key, unknown algorithm/format, cut, trailing bytes, huge counts: Corruption.
TEST_CASE("storage: DecodeRecord rejects garbage with Corruption") {
  const KeySnapshot bucket = Bucket("b", 1'000, 5, kStartMs);
  const std::string key = storage::EncodeRecordKey(bucket);
  const std::string value = storage::EncodeRecordValue(bucket);
  const std::string header = value.substr(0, 9);  // format byte and expiry
  REQUIRE(Decode(key, value).ok());
  KeySnapshot heard_before_epoch = bucket;
  heard_before_epoch.bucket_heard_at_ms = -1;
  auto with_byte = [](std::string s, size_t at, char byte) { return s.replace(at, 1, 1, byte); };
  const std::pair<std::string, std::string> garbage[] = {
      {with_byte(key, 0, storage::kMetaPrefix), value},        // wrong prefix
      {key.substr(0, 10), value},                              // no user key
      {key.substr(0, 5), value},                               // short key
      {"", value},                                             // empty key
      {with_byte(key, 1, kAlgorithmCount), value},             // unknown algorithm
      {with_byte(key, 1, '\xff'), value},                      // unknown algorithm
      {key, with_byte(value, 0, storage::kRecordFormat + 1)},  // unknown format
      {key, value.substr(0, 5)},                               // no room for the expiry
      {key, header + "\x05\x80"},                              // truncated varint
      {key, header + std::string(11, '\xff') + "\x01"},        // varint over 10 bytes
      {key, value + '\0'},                                     // trailing bytes
      {key, storage::EncodeRecordValue(heard_before_epoch)},   // a heard time out of range
      {with_byte(key, 1, char(Algorithm::kFixedWindow)), header + "\x01\x64\x01\x01"},  // 100 slots
      {with_byte(key, 1, char(Algorithm::kSlidingWindowLog)), header + "\x7f\x01\x01"},  // 127 logs
  };
  for (const auto& [bad_key, bad_value] : garbage) {
    CAPTURE(bad_key);
    CAPTURE(bad_value);
    const Status status = Decode(bad_key, bad_value);
    CHECK(status.code() == Status::Code::kCorruption);
    CHECK_FALSE(status.message().empty());
  }
  // Any strict prefix of a valid value of any algorithm is truncated.
  for (const KeySnapshot& snapshot : Samples(kStartMs)) {
    const std::string full = storage::EncodeRecordValue(snapshot);
    for (size_t size = 0; size < full.size(); size += 1 + size / 64) {
      CHECK(Decode(storage::EncodeRecordKey(snapshot), full.substr(0, size)).code() ==
            Status::Code::kCorruption);
    }
  }
}

std::string Varint(uint64_t value) {
  std::string out;
  for (; value >= 0x80; value >>= 7) out.push_back(static_cast<char>((value & 0x7F) | 0x80));
  return out + static_cast<char>(value);
}

// Records whose expiry overflows int64 (this version never writes them) are Corruption.
TEST_CASE("storage: DecodeRecord rejects records whose expiry overflows") {
  // Decoded, they make ExpiresAtMs overflow (undefined behaviour) in Limiter::Restore at Load.
  std::string header(1, static_cast<char>(storage::kRecordFormat));
  header.append(8, '\x7f');  // some expiry; overflowing records cannot carry the right one
  auto key = [](Algorithm algorithm) {
    return storage::EncodeRecordKey(Snapshot("k", algorithm, 1'000));
  };
  const uint64_t late = INT64_MAX - 10;
  const std::pair<std::string, std::string> records[] = {
      {key(Algorithm::kFixedWindow),  // window_index 2^62; current {1: 1}, previous {}
       header + Varint(uint64_t{1} << 62) + std::string("\x01\x01\x01\x00", 4)},
      {key(Algorithm::kSlidingWindowLog), header + "\x01" + Varint(late) + "\x01"},
      {key(Algorithm::kTokenBucket), header + "\x05" + Varint(late) + std::string(2, '\0')},
  };
  for (const auto& [record_key, value] : records) {
    CAPTURE(AlgorithmName(static_cast<Algorithm>(record_key[1])));
    CHECK(Decode(record_key, value).code() == Status::Code::kCorruption);
  }
}

// A bucket record of format 1 (one node's level, before buckets were replicated) reads as a
// full bucket, which a restore ignores; counting records of format 1 read as before.
TEST_CASE("storage: records of format 1 still decode") {
  std::string header(1, static_cast<char>(storage::kRecordFormatBefore));
  header.append(8, '\0');
  KeySnapshot decoded;
  const KeySnapshot bucket = Snapshot("b", Algorithm::kTokenBucket, 4'000);
  REQUIRE(storage::DecodeRecord(storage::EncodeRecordKey(bucket),
                                header + Varint(20 * 4'000) + Varint(kStartMs), &decoded)
              .ok());
  CHECK(decoded.bucket == BucketSlices());
  CHECK(decoded.bucket_heard_debt == KeySnapshot::kUnknownDebt);
  CHECK(ExpiresAtMs(decoded) <= kStartMs);
  const KeySnapshot counts = Counting("c", Algorithm::kFixedWindow, 1'000, 5, {{1, 2}}, {});
  std::string value = storage::EncodeRecordValue(counts);
  value[0] = static_cast<char>(storage::kRecordFormatBefore);
  REQUIRE(storage::DecodeRecord(storage::EncodeRecordKey(counts), value, &decoded).ok());
  CHECK(Describe(decoded) == Describe(counts));
}

// Random bytes and randomly changed records never crash DecodeRecord: OK or Corruption.
TEST_CASE("storage: DecodeRecord survives random bytes") {
  std::mt19937 rng(20240607);
  const std::vector<KeySnapshot> samples = Samples(kStartMs);
  auto random_bytes = [&](size_t size) {
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 4 == 0 ? rng() : rng() % 4);
    return bytes;
  };
  int accepted = 0;
  for (int round = 0; round < 4'000; ++round) {
    std::string key, value;
    if (round % 2 == 0) {
      key.assign(1, storage::kRecordPrefix);  // one rng() per statement: a fixed order
      key.push_back(static_cast<char>(rng() % 6));
      key += random_bytes(rng() % 20);
      value.assign(1, static_cast<char>(rng() % 3));
      value += random_bytes(rng() % 40);
    } else {
      const KeySnapshot& sample = samples[rng() % 3];  // small ones: changes land in the payload
      key = storage::EncodeRecordKey(sample);
      value = storage::EncodeRecordValue(sample);
      for (int change = 0; change < 1 + int(rng() % 3); ++change) {
        value[rng() % value.size()] = static_cast<char>(rng());
      }
      if (rng() % 4 == 0) value.resize(rng() % value.size());
    }
    const Status status = Decode(key, value);
    CHECK((status.ok() || status.code() == Status::Code::kCorruption));
    accepted += status.ok() ? 1 : 0;
  }
  CHECK(accepted > 0);  // the rounds reach the end of the decoder, not only its first checks
}

// Open creates a fresh dir; refuses a held dir, a path under a file, and databases not tally's.
TEST_CASE("storage: Open creates, and refuses what it must not take") {
  ManualClock clock(kStartMs);
  TempDir dir;
  std::unique_ptr<Store> first = OpenStore(dir.Path("fresh"), &clock);
  CHECK(fs::is_directory(dir.Path("fresh")));

  std::unique_ptr<Store> second;
  Status status = Store::Open(Store::Options{dir.Path("fresh"), false, &clock}, &second);
  CHECK(status.code() == Status::Code::kUnavailable);
  CHECK(status.message().find("another tallyd") != std::string_view::npos);
  CHECK(second == nullptr);

  std::ofstream(dir.Path("file")) << "not a directory";
  status = Store::Open(Store::Options{dir.Path("file/data"), false, &clock}, &second);
  CHECK_FALSE(status.ok());
  CHECK(status.message().find(dir.Path("file/data")) != std::string_view::npos);
  CHECK(second == nullptr);

  RawPut(dir.Path("foreign"), {{"hello", "world"}});
  status = Store::Open(Store::Options{dir.Path("foreign"), false, &clock}, &second);
  CHECK(status.code() == Status::Code::kCorruption);
  CHECK(status.message().find("not tally's") != std::string_view::npos);

  first.reset();  // a tally database whose format marker this version does not know
  RawPut(dir.Path("fresh"), {{std::string(1, storage::kMetaPrefix) + "format", "tally-99"}});
  status = Store::Open(Store::Options{dir.Path("fresh"), false, &clock}, &second);
  CHECK(status.code() == Status::Code::kCorruption);
  CHECK(second == nullptr);
}

// The node id is random and non-zero if not given, kept across reopens; another id is refused.
TEST_CASE("storage: LoadNodeId records one identity per directory") {
  ManualClock clock(kStartMs);
  TempDir dir;
  NodeId id = 0;
  REQUIRE(OpenStore(dir.Path("data"), &clock)->LoadNodeId(0, &id).ok());
  CHECK(id != 0);
  std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
  NodeId again = 0;
  REQUIRE(store->LoadNodeId(0, &again).ok());
  CHECK(again == id);
  CHECK(store->LoadNodeId(id + 1, &again).code() == Status::Code::kInvalidArgument);
  again = 0;
  CHECK(store->LoadNodeId(id, &again).ok());
  CHECK(again == id);

  NodeId chosen = 0;
  REQUIRE(OpenStore(dir.Path("other"), &clock)->LoadNodeId(42, &chosen).ok());
  CHECK(chosen == 42);
  CHECK(OpenStore(dir.Path("other"), &clock)->LoadNodeId(0, &chosen).ok());
  CHECK(chosen == 42);
}

// A directory reports a crash only when it began serving and never marked
// a stop: a new one does not, nor one stopped cleanly.
TEST_CASE("storage: BeginServing reports a crash unless MarkStopped came after it") {
  ManualClock clock(kStartMs);
  TempDir dir;
  bool crashed = true;
  REQUIRE(OpenStore(dir.Path("data"), &clock)->BeginServing(&crashed).ok());
  CHECK_FALSE(crashed);  // new
  {
    std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
    REQUIRE(store->BeginServing(&crashed).ok());
    CHECK(crashed);  // the last one never stopped
    REQUIRE(store->MarkStopped().ok());
  }
  REQUIRE(OpenStore(dir.Path("data"), &clock)->BeginServing(&crashed).ok());
  CHECK_FALSE(crashed);
  REQUIRE(OpenStore(dir.Path("data"), &clock)->BeginServing(&crashed).ok());
  CHECK(crashed);
}

// Written snapshots load back exactly after a reopen; expired ones are skipped and counted.
TEST_CASE("storage: Load returns what Write wrote and skips expired records") {
  ManualClock clock(kStartMs);
  TempDir dir;
  const std::vector<KeySnapshot> written = Samples(kStartMs);
  REQUIRE(WriteRun(*OpenStore(dir.Path("data"), &clock), written).ok());
  std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
  Store::LoadStats stats;
  CheckSame(LoadAll(*store, &stats), written);
  CHECK(stats.records == written.size());
  CHECK(stats.restored == written.size());

  clock.AdvanceMs(3'600'000);
  std::vector<KeySnapshot> live;
  std::copy_if(written.begin(), written.end(), std::back_inserter(live),
               [&](const KeySnapshot& s) { return ExpiresAtMs(s) > clock.WallMs(); });
  REQUIRE(!live.empty());
  REQUIRE(live.size() < written.size());
  CheckSame(LoadAll(*store, &stats), live);
  CHECK(stats.records == written.size());
  CHECK(stats.restored == live.size());
  CHECK(stats.expired == written.size() - live.size());
  CHECK(stats.corrupt == 0);
}

// A record that does not decode is skipped and counted, as is a part (of
// format 1) whose framing breaks off; the others are restored.
TEST_CASE("storage: Load skips and counts corrupt records") {
  ManualClock clock(kStartMs);
  TempDir dir;
  const std::vector<KeySnapshot> written = Samples(kStartMs);
  REQUIRE(WriteRun(*OpenStore(dir.Path("data"), &clock), written).ok());  // run 1
  const KeySnapshot unknown_algorithm = Bucket("x", 1'000, 1, kStartMs);
  std::string bad_key = storage::EncodeRecordKey(unknown_algorithm);
  bad_key[1] = 9;
  const KeySnapshot after_the_break = Bucket("after", 1'000, 1, kStartMs);
  std::string broken = RawPartOfFormat1(
      {{storage::EncodeRecordKey(after_the_break), storage::EncodeRecordValue(after_the_break)}});
  broken.resize(broken.size() - 3);
  RawPut(dir.Path("data"),
         {{storage::RunKey(2, 0),
           RawPartOfFormat1(
               {{storage::EncodeRecordKey(Bucket("garbage", 1'000, 1, kStartMs)), "not a record"},
                {bad_key, storage::EncodeRecordValue(unknown_algorithm)}})},
          {storage::RunKey(3, 0), broken},
          {storage::RunKey(4, 0), "\x07 a part of an unknown format"}});
  Store::LoadStats stats;
  CheckSame(LoadAll(*OpenStore(dir.Path("data"), &clock), &stats), written);
  CHECK(stats.records == written.size() + 2);
  CHECK(stats.corrupt == 4);
  CHECK(stats.restored == written.size());
}

// Load reads the newest checkpoint, then the later runs in order, so the
// latest state of a key wins; what came before the checkpoint is gone.
TEST_CASE("storage: Load reads the newest checkpoint and the runs after it") {
  ManualClock clock(kStartMs);
  TempDir dir;
  {
    std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
    const KeySnapshot first[] = {Bucket("a", 4'000, 1, kStartMs),
                                 Bucket("gone", 4'000, 1, kStartMs)};
    REQUIRE(WriteRun(*store, first).ok());
    const KeySnapshot checkpoint[] = {Bucket("a", 4'000, 2, kStartMs),
                                      Bucket("b", 4'000, 2, kStartMs)};
    REQUIRE(WriteRun(*store, checkpoint, /*checkpoint=*/true).ok());
    const KeySnapshot later[] = {Bucket("a", 4'000, 3, kStartMs)};
    REQUIRE(WriteRun(*store, later).ok());
  }
  std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
  const KeySnapshot next[] = {Bucket("a", 4'000, 4, kStartMs)};  // continues after run 3
  REQUIRE(WriteRun(*store, next).ok());
  Store::LoadStats stats;
  const std::vector<KeySnapshot> loaded = LoadAll(*store, &stats);
  REQUIRE(loaded.size() == 4);
  CHECK(stats.records == 4);
  CHECK(loaded[0].key == "a");
  CHECK(loaded[0].bucket.base_debt == 2 * 4'000);
  CHECK(loaded[1].key == "b");
  CHECK(loaded[2].bucket.base_debt == 3 * 4'000);
  CHECK(loaded[3].bucket.base_debt == 4 * 4'000);
}

// Load reports its progress after each part, with an estimate of all it will
// read that counts only the runs from the checkpoint on and is exact once
// the last part is read.
TEST_CASE("storage: Load reports its progress and estimates what it reads in all") {
  ManualClock clock(kStartMs);
  TempDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
  std::vector<KeySnapshot> batch;
  for (int i = 0; i < 100'000; ++i) {  // about 3 MB: several parts
    batch.push_back(Counting("key " + std::to_string(i), Algorithm::kFixedWindow, 60'000,
                             kStartMs / 60'000, {{1, 1}}, {}));
  }
  REQUIRE(WriteRun(*store, batch).ok());  // replaced by the checkpoint: not read
  REQUIRE(WriteRun(*store, batch, /*checkpoint=*/true).ok());
  REQUIRE(WriteRun(*store, std::span(batch).first(10)).ok());
  std::vector<Store::LoadProgress> reports;
  Store::LoadStats stats;
  REQUIRE(store
              ->Load([](const KeySnapshot&) { return Status::OK(); }, &stats,
                     [&](const Store::LoadProgress& now) { reports.push_back(now); })
              .ok());
  REQUIRE(stats.records == 100'010);
  REQUIRE(reports.size() >= 3);
  const uint64_t per_part = reports[0].records;
  for (const Store::LoadProgress& report : reports) {
    // Never below what is read; above the total by at most a part per run (the last parts
    // of the checkpoint and of the run after it are not full).
    CHECK(report.estimated_records >= report.records);
    CHECK(report.estimated_records <= stats.records + 2 * per_part);
  }
  CHECK(reports.back().records == stats.records);
  CHECK(reports.back().estimated_records == stats.records);
}

// A checkpoint is due once the runs after it outgrow it (and a minimum);
// writing one resets that.
TEST_CASE("storage: a checkpoint is due once later runs outgrow it") {
  ManualClock clock(kStartMs);
  TempDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
  std::vector<KeySnapshot> batch;
  for (int i = 0; i < 10'000; ++i) {
    batch.push_back(Counting("key " + std::to_string(i), Algorithm::kFixedWindow, 60'000,
                             kStartMs / 60'000, {{1, 1}}, {}));
  }
  uint64_t written_bytes = 0;
  while (!store->CheckpointDue()) {
    REQUIRE(WriteRun(*store, batch).ok());
    written_bytes += 10'000 * 30;  // about 30 bytes a record
  }
  CHECK(written_bytes >= Store::kMinCheckpointBytes / 2);
  REQUIRE(WriteRun(*store, batch, /*checkpoint=*/true).ok());
  CHECK_FALSE(store->CheckpointDue());
  REQUIRE(WriteRun(*store, batch).ok());
  CHECK_FALSE(store->CheckpointDue());
}

// A checkpoint of what lives replaces the runs before it: after Compact the
// disk has shrunk and Load reads only the checkpoint.
TEST_CASE("storage: a checkpoint frees what earlier runs held") {
  ManualClock clock(kStartMs);
  TempDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
  std::vector<KeySnapshot> batch;
  for (int i = 0; i < 20'000; ++i) {
    batch.push_back(Counting("short-lived key " + std::to_string(i), Algorithm::kFixedWindow, 1'000,
                             kStartMs / 1'000, {{1, uint64_t(i)}, {2, 3}}, {}));
    if (batch.size() == 1'000) {
      REQUIRE(WriteRun(*store, batch).ok());
      batch.clear();
    }
  }
  const KeySnapshot live = Counting("long-lived", Algorithm::kFixedWindow, kMaxWindowMs,
                                    kStartMs / kMaxWindowMs, {{1, 1}}, {});
  REQUIRE(store->Compact().ok());
  const uint64_t before = store->DiskBytes();
  clock.AdvanceMs(2'000);
  REQUIRE(WriteRun(*store, {&live, 1}, /*checkpoint=*/true).ok());
  REQUIRE(store->Compact().ok());
  const uint64_t after = store->DiskBytes();
  CAPTURE(before);
  CAPTURE(after);
  CHECK(after * 10 < before);
  Store::LoadStats stats;
  CheckSame(LoadAll(*store, &stats), {live});
  CHECK(stats.records == 1);
}

auto Tied(const Persister::Stats& s) {
  return std::tuple(s.flushes, s.keys_written, s.write_errors, s.unsaved);
}

// A limiter restored from the Persister's flush decides identically; an empty Flush writes nothing.
TEST_CASE("storage: persisted state restores into identical decisions") {
  ManualClock clock(kStartMs);
  TempDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
  NodeId id = 0;
  REQUIRE(store->LoadNodeId(0, &id).ok());
  Limiter original(Limiter::Options{id, 1'000, &clock, /*track_changes=*/true});
  const std::string keys[] = {"alice", "bob", std::string("c\0d", 3)};
  auto check_all = [&](Limiter& limiter, std::vector<Decision>* decisions) {
    for (const Algorithm algorithm : kAlgorithms) {
      for (const std::string& key : keys) {
        Decision decision;
        REQUIRE(limiter.Check(key, LimitSpec{algorithm, 10, 1'000}, 1, &decision).ok());
        if (decisions != nullptr) decisions->push_back(decision);
      }
    }
  };
  {
    Persister persister(Persister::Options{}, &original, store.get());
    for (int round = 0; round < 8; ++round, clock.AdvanceMs(97)) check_all(original, nullptr);
    REQUIRE(persister.Flush().ok());
    const Persister::Stats stats = persister.stats();
    CHECK(stats.flushes == 1);
    CHECK(stats.keys_written == std::size(kAlgorithms) * std::size(keys));
    CHECK(persister.Flush().ok());
    CHECK(Tied(persister.stats()) == Tied(stats));
  }
  store.reset();  // RocksDB's LOCK: close before reopening
  store = OpenStore(dir.Path("data"), &clock);
  Limiter restored(Limiter::Options{id, 1'000, &clock});
  Store::LoadStats load;
  REQUIRE(store->Load([&](const KeySnapshot& s) { return restored.Restore(s); }, &load).ok());
  CHECK(load.restored == std::size(kAlgorithms) * std::size(keys));
  CHECK(restored.key_count() == original.key_count());
  for (int round = 0; round < 12; ++round, clock.AdvanceMs(61)) {
    std::vector<Decision> expected, actual;
    check_all(original, &expected);
    check_all(restored, &actual);
    CHECK(actual == expected);
  }
}

// Stop writes a checkpoint of every live key: the next Load reads it alone,
// without the expired key an earlier flush wrote.
TEST_CASE("storage: Persister's Stop writes a checkpoint without expired keys") {
  ManualClock clock(kStartMs);
  TempDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
  Limiter limiter(Limiter::Options{1, 1'000, &clock, /*track_changes=*/true});
  Decision decision;
  REQUIRE(limiter.Check("short", LimitSpec{Algorithm::kFixedWindow, 5, 1'000}, 1, &decision).ok());
  REQUIRE(
      limiter.Check("long", LimitSpec{Algorithm::kFixedWindow, 5, 3'600'000}, 2, &decision).ok());
  Persister persister(Persister::Options{}, &limiter, store.get());
  REQUIRE(persister.Flush().ok());
  CHECK(persister.stats().checkpoints == 0);
  clock.AdvanceMs(2'000);
  REQUIRE(persister.Stop().ok());
  CHECK(persister.stats().flushes == 2);
  CHECK(persister.stats().checkpoints == 1);
  CHECK(persister.Stop().ok());  // a second Stop does nothing
  CHECK(persister.stats().flushes == 2);
  Store::LoadStats stats;
  const std::vector<KeySnapshot> loaded = LoadAll(*store, &stats);
  REQUIRE(loaded.size() == 1);
  CHECK(loaded[0].key == "long");
  CHECK(loaded[0].counts.current.Get(1) == 2);
  CHECK(stats.records == 1);
}

// A flush after an erase writes a checkpoint, so that the erased key leaves
// the disk (runs only add or raise state); the flush after it is a plain run.
TEST_CASE("storage: Persister checkpoints after an erase, which drops the key from disk") {
  ManualClock clock(kStartMs);
  TempDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
  Limiter limiter(Limiter::Options{1, 1'000, &clock, /*track_changes=*/true});
  const LimitSpec spec{Algorithm::kFixedWindow, 5, 3'600'000};
  Decision decision;
  REQUIRE(limiter.Check("reset", spec, 2, &decision).ok());
  REQUIRE(limiter.Check("kept", spec, 1, &decision).ok());
  Persister persister(Persister::Options{}, &limiter, store.get());
  REQUIRE(persister.Flush().ok());
  Store::LoadStats stats;
  CHECK(LoadAll(*store, &stats).size() == 2);
  REQUIRE(limiter.Erase("reset", spec).ok());
  REQUIRE(persister.Flush().ok());
  CHECK(persister.stats().checkpoints == 1);
  const std::vector<KeySnapshot> loaded = LoadAll(*store, &stats);
  REQUIRE(loaded.size() == 1);
  CHECK(loaded[0].key == "kept");
  REQUIRE(limiter.Check("kept", spec, 1, &decision).ok());
  REQUIRE(persister.Flush().ok());
  CHECK(persister.stats().checkpoints == 1);
  CHECK(persister.stats().flushes == 3);
}

// Peers' slots that merges alone changed are written by the first flush a
// peer flush interval after the last such write (the flushes between write
// this node's changes only), and Stop writes whatever waits.
TEST_CASE("storage: Persister writes peers' slots at their own pace, and all at Stop") {
  ManualClock clock(kStartMs);
  TempDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
  Limiter limiter(Limiter::Options{1, 1'000, &clock, /*track_changes=*/true});
  Persister::Options options;
  options.peer_flush_interval_ms = 10'000;
  options.clock = &clock;
  Persister persister(options, &limiter, store.get());
  const LimitSpec spec{Algorithm::kFixedWindow, 100, 3'600'000};
  const auto merge_peer = [&](uint64_t count) {
    KeySnapshot snapshot;
    snapshot.key = "k";
    snapshot.algorithm = spec.algorithm;
    snapshot.window_ms = spec.window_ms;
    snapshot.counts.window_index = kStartMs / 3'600'000;
    snapshot.counts.current.MergeSlot(2, count);
    REQUIRE(limiter.Merge(snapshot).ok());
  };
  const auto peer_slot_on_disk = [&] {
    Store::LoadStats stats;
    uint64_t slot = 0;
    for (const KeySnapshot& loaded : LoadAll(*store, &stats)) {
      slot = std::max(slot, loaded.counts.current.Get(2));
    }
    return slot;
  };
  merge_peer(3);
  clock.AdvanceMs(1'000);
  REQUIRE(persister.Flush().ok());
  CHECK(peer_slot_on_disk() == 0);
  clock.AdvanceMs(9'000);
  REQUIRE(persister.Flush().ok());
  CHECK(peer_slot_on_disk() == 3);
  merge_peer(4);
  clock.AdvanceMs(1'000);
  REQUIRE(persister.Flush().ok());
  CHECK(peer_slot_on_disk() == 3);
  // An admission here writes the key at once, with the peer's slot.
  Decision decision;
  REQUIRE(limiter.Check("k", spec, 1, &decision).ok());
  REQUIRE(persister.Flush().ok());
  CHECK(peer_slot_on_disk() == 4);
  merge_peer(6);
  REQUIRE(persister.Stop().ok());
  CHECK(peer_slot_on_disk() == 6);
}

}  // namespace
}  // namespace tally
