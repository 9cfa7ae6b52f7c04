// Tests of damaged storage: a damaged block, a damaged or cut-short
// write-ahead log (storage/store.h), and run parts whose records are damaged,
// of either format (storage/run.h). Each test works in its own temporary
// directory and on a ManualClock.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/common/key_snapshot.h"
#include "node/common/varint.h"
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
using testing::kStartMs;
using testing::LoadAll;
using testing::OpenStore;
using testing::RawGet;
using testing::RawPartOfFormat1;
using testing::RawPut;
using testing::Samples;
using testing::TempDir;
using testing::WriteRun;

// A run numbered `sequence` of `count` token buckets named "run<sequence>-<i>",
// as one part framed by PartBuilder: the (key, value) pair Store writes.
std::pair<std::string, std::string> NumberedRun(uint64_t sequence, int count) {
  storage::PartBuilder builder;
  for (int i = 0; i < count; ++i) {
    const std::string key = "run" + std::to_string(sequence) + "-" + std::to_string(i);
    builder.Add(Bucket(key, 4'000, 1, kStartMs));
  }
  return {storage::RunKey(sequence, 0), builder.part()};
}

// The files in `directory` whose names end in `extension`.
std::vector<fs::path> FilesEndingIn(const std::string& directory, const std::string& extension) {
  std::vector<fs::path> files;
  for (const auto& file : fs::directory_iterator(directory)) {
    if (file.path().extension() == extension) files.push_back(file.path());
  }
  return files;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Writes `bytes` over the file's bytes from `offset` on.
void Overwrite(const fs::path& path, size_t offset, const std::string& bytes) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(offset));
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(file.good());
}

// The write-ahead log file of the database at `path` that holds `needle`, and where.
std::pair<fs::path, size_t> FindInWal(const std::string& path, const std::string& needle) {
  for (const fs::path& wal : FilesEndingIn(path, ".log")) {
    const size_t at = ReadFile(wal).find(needle);
    if (at != std::string::npos) return {wal, at};
  }
  FAIL("no write-ahead log in " << path << " holds the bytes looked for");
  return {};
}

// The keys of the snapshots, sorted.
std::vector<std::string> KeysOf(const std::vector<KeySnapshot>& snapshots) {
  std::vector<std::string> keys;
  for (const KeySnapshot& snapshot : snapshots) keys.push_back(snapshot.key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

// The keys NumberedRun puts in the runs numbered `sequences`, sorted.
std::vector<std::string> KeysOfRuns(std::initializer_list<uint64_t> sequences, int count) {
  std::vector<std::string> keys;
  for (const uint64_t sequence : sequences) {
    for (int i = 0; i < count; ++i) {
      keys.push_back("run" + std::to_string(sequence) + "-" + std::to_string(i));
    }
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

// A flipped byte in the block that holds the format marker: Open refuses, saying the database
// is damaged.
TEST_CASE("storage: Open reports a damaged block as damage, not as an unknown format") {
  ManualClock clock(kStartMs);
  TempDir dir;
  {
    std::unique_ptr<Store> store = OpenStore(dir.Path("data"), &clock);
    NodeId id = 0;
    REQUIRE(store->LoadNodeId(0, &id).ok());
  }  // closing flushes it all into one sorted file, whose first block holds the metadata
  const std::vector<fs::path> tables = FilesEndingIn(dir.Path("data"), ".sst");
  REQUIRE(tables.size() == 1);
  Overwrite(tables[0], 20, std::string(1, static_cast<char>(~ReadFile(tables[0])[20])));

  std::unique_ptr<Store> store;
  const Status status = Store::Open(Store::Options{dir.Path("data"), false, &clock}, &store);
  CHECK(status.code() == Status::Code::kCorruption);
  CHECK_MESSAGE(status.message().find("damaged") != std::string_view::npos, status.ToString());
  CHECK_MESSAGE(status.message().find("unknown format") == std::string_view::npos,
                status.ToString());
  CHECK(store == nullptr);
}

// Garbage inside the third of five runs in the write-ahead log: Open refuses, naming the
// damage; salvaging restores the four intact runs, and Load reports run 3 missing.
TEST_CASE("storage: a damaged write-ahead log is refused, and salvaged on request") {
  // RocksDB drops the rest of a log block (32 KiB) from a damaged record on:
  // with runs of ~40 KB, the next run begins in a block of its own.
  constexpr int kRecords = 1'000;
  ManualClock clock(kStartMs);
  TempDir dir;
  const std::string path = dir.Path("data");
  OpenStore(path, &clock);  // a tally database, closed: its memtable flushed
  std::vector<std::pair<std::string, std::string>> runs;
  for (uint64_t sequence = 1; sequence <= 5; ++sequence) {
    runs.push_back(NumberedRun(sequence, kRecords));
  }
  RawPut(path, runs);  // five batches; closing RocksDB leaves them in its write-ahead log
  const auto [wal, at] = FindInWal(path, storage::RunKey(3, 0));
  std::mt19937 rng(4);
  std::string garbage(64, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  Overwrite(wal, at + 100, garbage);  // inside the run's value

  std::unique_ptr<Store> store;
  const Status refused = Store::Open(Store::Options{path, false, &clock}, &store);
  CHECK(refused.code() == Status::Code::kCorruption);
  CHECK_MESSAGE(refused.message().find("write-ahead log") != std::string_view::npos,
                refused.ToString());
  CHECK_MESSAGE(refused.message().find("--salvage-wal") != std::string_view::npos,
                refused.ToString());
  CHECK(store == nullptr);

  Store::Options salvage{path, false, &clock};
  salvage.salvage_wal = true;
  const Status salvaged = Store::Open(salvage, &store);
  REQUIRE_MESSAGE(salvaged.ok(), salvaged.ToString());
  for (int open = 0; open < 2; ++open) {  // salvaged, then opened as usual: what is intact stays
    CAPTURE(open);
    Store::LoadStats stats;
    CHECK(KeysOf(LoadAll(*store, &stats)) == KeysOfRuns({1, 2, 4, 5}, kRecords));
    CHECK(stats.corrupt == 0);
    CHECK(stats.last_run == 5);
    CHECK(stats.missing_runs == std::vector<std::pair<uint64_t, uint64_t>>{{3, 3}});
    CHECK(store->wal_salvaged() == (open == 0));
    store.reset();
    store = OpenStore(path, &clock);
  }
}

// A write-ahead log whose last batch is cut short (a crash during a write) opens as
// usual: the complete runs load, the cut one is the flush that the crash lost.
TEST_CASE("storage: a write-ahead log cut short in its last batch opens") {
  ManualClock clock(kStartMs);
  TempDir dir;
  const std::string path = dir.Path("data");
  OpenStore(path, &clock);
  std::vector<std::pair<std::string, std::string>> runs;
  for (uint64_t sequence = 1; sequence <= 5; ++sequence) runs.push_back(NumberedRun(sequence, 20));
  RawPut(path, runs);
  const auto [wal, at] = FindInWal(path, storage::RunKey(5, 0));
  fs::resize_file(wal, at + 100);
  Store::LoadStats stats;
  CHECK(KeysOf(LoadAll(*OpenStore(path, &clock), &stats)) == KeysOfRuns({1, 2, 3, 4}, 20));
  CHECK(stats.last_run == 4);
  CHECK(stats.missing_runs.empty());
}

// A tally-2 directory (runs of format 1) loads whole, and Open marks it tally-4.
TEST_CASE("storage: Load reads runs of format 1 that earlier versions wrote") {
  ManualClock clock(kStartMs);
  TempDir dir;
  const std::vector<KeySnapshot> written = Samples(kStartMs);
  std::vector<std::pair<std::string, std::string>> records;
  for (const KeySnapshot& snapshot : written) {
    records.emplace_back(storage::EncodeRecordKey(snapshot), storage::EncodeRecordValue(snapshot));
  }
  const std::string format_key = std::string(1, storage::kMetaPrefix) + "format";
  RawPut(dir.Path("data"),
         {{format_key, "tally-2"}, {storage::RunKey(1, 0), RawPartOfFormat1(records)}});
  Store::LoadStats stats;
  CheckSame(LoadAll(*OpenStore(dir.Path("data"), &clock), &stats), written);
  CHECK(stats.corrupt == 0);
  CHECK(RawGet(dir.Path("data"), format_key) == "tally-4");
}

// Where a record's sizes are, counted back from its record key ('k', the algorithm and the
// window_ms come before the user's key): one byte each for the short records written here.
constexpr size_t kKeySizeBefore = 10 + 1;
constexpr size_t kRecordSizeBefore = 10 + 2;

// What a size byte is replaced with: any bytes (a longer varint moves the bytes after it).
using Replacement = std::function<std::string(char size)>;

// Replaces the byte `before` bytes before the user key `user_key` in part 0 of run 1 (one of
// the record's sizes) with what `replace` makes of it.
void ReplaceSize(const std::string& path, const std::string& user_key, size_t before,
                 const Replacement& replace) {
  std::string part = RawGet(path, storage::RunKey(1, 0));
  const size_t at = part.find(user_key);
  REQUIRE(at != std::string::npos);
  REQUIRE(at >= before);
  part.replace(at - before, 1, replace(part[at - before]));
  RawPut(path, {{storage::RunKey(1, 0), part}});
}

// The size as a varint, in place of any.
Replacement Varint(uint64_t size) {
  return [size](char) {
    std::string bytes;
    PutVarint(size, &bytes);
    return bytes;
  };
}

// The same size with its continuation bit set: in place, the varint runs into the next byte.
std::string Continued(char size) { return std::string(1, static_cast<char>(size | 0x80)); }

// kRecords fixed-window keys "key-1000" ... of 3 units each, as one run (one part).
constexpr size_t kRecords = 600;
std::vector<KeySnapshot> ThreeUnitsEach() {
  std::vector<KeySnapshot> written;
  for (size_t i = 0; i < kRecords; ++i) {
    written.push_back(Counting("key-" + std::to_string(1'000 + i), Algorithm::kFixedWindow, 4'000,
                               kStartMs / 4'000, {{1, 3}}, {}));
  }
  return written;
}

// The snapshots but those of the keys named.
std::vector<KeySnapshot> AllBut(std::vector<KeySnapshot> snapshots,
                                const std::vector<std::string>& keys) {
  std::erase_if(snapshots, [&](const KeySnapshot& snapshot) {
    return std::find(keys.begin(), keys.end(), snapshot.key) != keys.end();
  });
  return snapshots;
}

// One record's key size made huge (as an outside test did), in place (a continuation bit, so
// the varint runs into the key) or as a longer varint (which moves every record after it):
// that record alone is lost, every other key of the run is restored with its counts, and the
// lost record is reported as one whose key cannot be read.
TEST_CASE("storage: a huge key size costs its record alone, not the rest of the run") {
  ManualClock clock(kStartMs);
  const std::vector<KeySnapshot> written = ThreeUnitsEach();
  // In place, a longer varint, and the longest: 10 bytes.
  const Replacement huge[] = {Continued, Varint(uint64_t{1} << 40), Varint(UINT64_MAX)};
  for (size_t way = 0; way < std::size(huge); ++way) {
    for (const char* damaged : {"key-1000", "key-1002", "key-1300", "key-1599"}) {
      CAPTURE(way);
      CAPTURE(damaged);
      TempDir dir;
      REQUIRE(WriteRun(*OpenStore(dir.Path("data"), &clock), written).ok());
      ReplaceSize(dir.Path("data"), damaged, kKeySizeBefore, huge[way]);
      Store::LoadStats stats;
      CheckSame(LoadAll(*OpenStore(dir.Path("data"), &clock), &stats), AllBut(written, {damaged}));
      CHECK(stats.restored == kRecords - 1);
      CHECK(stats.corrupt == 1);
      CHECK(stats.corrupt_unnamed == 1);
      CHECK(stats.lost_keys.empty());
      CHECK(storage::DescribeLostKeys(stats) == "1 record whose key cannot be read");
    }
  }
}

// A record size that runs past the part (a huge varint, moving the records after it, or a
// continuation bit in place) or over the records after it (a larger size that still fits)
// used to lose the rest of the part; now the loader finds where whole records begin again:
// the records before and after are restored, and the damaged record, whose key is intact, is
// named.
TEST_CASE("storage: a damaged record size costs its record, and names its key") {
  ManualClock clock(kStartMs);
  const std::vector<KeySnapshot> written = ThreeUnitsEach();
  // Past the part and moving the records after it, past the part in place, over 19 records.
  const Replacement damaged[] = {Varint(uint64_t{1} << 40), Continued, Varint(700)};
  for (size_t way = 0; way < std::size(damaged); ++way) {
    CAPTURE(way);
    TempDir dir;
    REQUIRE(WriteRun(*OpenStore(dir.Path("data"), &clock), written).ok());
    ReplaceSize(dir.Path("data"), "key-1300", kRecordSizeBefore, damaged[way]);
    Store::LoadStats stats;
    CheckSame(LoadAll(*OpenStore(dir.Path("data"), &clock), &stats), AllBut(written, {"key-1300"}));
    CHECK(stats.corrupt == 1);
    CHECK(stats.corrupt_unnamed == 0);
    CHECK(stats.lost_keys == std::vector<std::string>{"key-1300"});
    CHECK(storage::DescribeLostKeys(stats) == "keys \"key-1300\"");
  }
}

// Damage that leaves nothing after it to frame again: the part cut inside record 500, whose
// size now runs past the part. The loader does not crash, restores the 500 records before it,
// and counts the 100 that the part's record count says are missing, their keys unknown.
TEST_CASE("storage: a part cut short restores the records before the cut") {
  ManualClock clock(kStartMs);
  const std::vector<KeySnapshot> written = ThreeUnitsEach();
  TempDir dir;
  REQUIRE(WriteRun(*OpenStore(dir.Path("data"), &clock), written).ok());
  std::string part = RawGet(dir.Path("data"), storage::RunKey(1, 0));
  part.resize(part.find("key-1500") + 4);              // in the key of record 500
  part[part.size() - 4 - kRecordSizeBefore] = '\x7f';  // its size now runs past the part
  RawPut(dir.Path("data"), {{storage::RunKey(1, 0), part}});
  Store::LoadStats stats;
  const std::vector<KeySnapshot> first(written.begin(), written.begin() + 500);
  CheckSame(LoadAll(*OpenStore(dir.Path("data"), &clock), &stats), first);
  CHECK(stats.corrupt == kRecords - 500);
  CHECK(stats.corrupt_unnamed == kRecords - 500);
}

// Two damaged records far apart cost those two; the keys the log names are escaped, and those
// beyond the first kLostKeysNamed are counted.
TEST_CASE("storage: each damaged record costs itself, and the log names what it can") {
  ManualClock clock(kStartMs);
  const std::vector<KeySnapshot> written = ThreeUnitsEach();
  TempDir dir;
  REQUIRE(WriteRun(*OpenStore(dir.Path("data"), &clock), written).ok());
  ReplaceSize(dir.Path("data"), "key-1100", kKeySizeBefore, Varint(uint64_t{1} << 40));
  ReplaceSize(dir.Path("data"), "key-1400", kRecordSizeBefore, Varint(uint64_t{1} << 40));
  Store::LoadStats stats;
  CheckSame(LoadAll(*OpenStore(dir.Path("data"), &clock), &stats),
            AllBut(written, {"key-1100", "key-1400"}));
  CHECK(stats.corrupt == 2);
  CHECK(storage::DescribeLostKeys(stats) == "keys \"key-1400\"; 1 record whose key cannot be read");

  Store::LoadStats many;
  many.corrupt = 9;
  many.corrupt_unnamed = 2;
  many.lost_keys = {"a", std::string("b\0\"\\\xff", 5), "c", "d", std::string(70, 'e')};
  CHECK(storage::DescribeLostKeys(many) ==
        "keys \"a\", \"b\\x00\\\"\\\\\\xff\", \"c\", \"d\", \"" + std::string(64, 'e') +
            "...\" and 2 more; 2 records whose key cannot be read");
  CHECK(storage::DescribeLostKeys(Store::LoadStats()).empty());
}

// Randomly changed parts of either format never crash ForEachRecord, and it never hands out
// more records than the part has bytes.
TEST_CASE("storage: ForEachRecord survives random changes to a part") {
  std::mt19937 rng(20260605);
  storage::PartBuilder builder;
  std::vector<std::pair<std::string, std::string>> records;
  for (const KeySnapshot& snapshot : Samples(kStartMs)) {
    builder.Add(snapshot);
    records.emplace_back(storage::EncodeRecordKey(snapshot), storage::EncodeRecordValue(snapshot));
  }
  const std::string parts[] = {builder.part(), RawPartOfFormat1(records)};
  for (int round = 0; round < 4'000; ++round) {
    std::string part = parts[round % 2];
    for (int change = 0; change < 1 + int(rng() % 4); ++change) {
      part[rng() % part.size()] = static_cast<char>(rng());
    }
    if (rng() % 4 == 0) part.resize(rng() % part.size());
    uint64_t delivered = 0, unframed = 0;
    const Status status = storage::ForEachRecord(
        part,
        [&](std::string_view, std::string_view) {
          ++delivered;
          return rng() % 2 == 0;  // decodes or not: both paths of the resync
        },
        &unframed, [](std::string_view) {});
    CHECK(status.ok() == (unframed == 0));
    CHECK(delivered <= part.size());
    CHECK(unframed <= std::max<size_t>(part.size(), 1));
  }
}

}  // namespace
}  // namespace tally
