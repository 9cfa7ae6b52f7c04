// Persistence against real tallyd processes: restart, crash, a data directory
// in use or unusable, a full disk, memory-only mode and key churn.
//
// Windows are long (kLongWindowMs) so that the seconds a test takes never move
// an answer; the churn test is the exception, on purpose. Mount-based parts
// need root (CAP_SYS_ADMIN) and are skipped, with a message, without it.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <sys/mount.h>

#include "tests/support/must_check.h"
#include "tests/support/poll.h"
#include "tests/support/tallyd_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmpfs.h"

namespace tally {
namespace {

namespace fs = std::filesystem;
using protocol::Check;
using protocol::CheckOutcome;
using protocol::StatsReply;
using testing::FillDisk;
using testing::FillerPath;
using testing::MustCheck;
using testing::PollUntil;
using testing::TallydProcess;
using testing::TempDir;
using testing::TmpfsMount;

// Counting windows are aligned to the wall clock: with the longest window a
// boundary (which would change sliding-counter and fixed-window answers) falls
// inside a test run practically never, and a token bucket refills one token of
// a limit of 100 in 7 hours.
constexpr uint64_t kLongWindowMs = kMaxWindowMs;
constexpr Algorithm kAlgorithms[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowCounter,
                                     Algorithm::kSlidingWindowLog, Algorithm::kTokenBucket};

constexpr LimitSpec LongSpec(Algorithm algorithm, uint64_t limit) {
  return {algorithm, limit, kLongWindowMs};
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// One tallyd (on 127.0.0.1, port 0) and a client connected to it.
struct Node {
  explicit Node(const std::vector<std::string>& args) {
    const Status status = testing::StartTallyd(args, &process);
    REQUIRE_MESSAGE(status.ok(), status.ToString());
    client = Connect();
  }
  std::unique_ptr<protocol::Client> Connect() const {
    std::unique_ptr<protocol::Client> connected;
    const Status status = process->Connect(&connected);
    REQUIRE_MESSAGE(status.ok(), status.ToString());
    return connected;
  }
  StatsReply Stats() const {
    StatsReply stats;
    const Status status = client->Stats(&stats);
    REQUIRE_MESSAGE(status.ok(), status.ToString());
    return stats;
  }
  // The exit code (128 + signal when killed), -1 if it did not end within 10 s.
  int Stop(int signal_number) {
    client.reset();
    return process->SignalAndWait(signal_number, 10'000);
  }

  std::unique_ptr<TallydProcess> process;
  std::unique_ptr<protocol::Client> client;
};

// Runs a tallyd that should refuse to start. Returns its exit code (-1 if it
// was still running after 5 s, then killed), its log (stderr) in *log.
int RunRefusedTallyd(const std::vector<std::string>& args, std::string* log) {
  std::vector<std::string> argv = {"/bin/sh",   "-c",        "exec \"$0\" \"$@\" 2>&1",
                                   TALLYD_PATH, "--address", "127.0.0.1",
                                   "--port",    "0",         "--threads",
                                   "2"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunCommand(argv, log, 5'000);
}

// One limit: a key under a spec.
struct Limit {
  std::string key;
  LimitSpec spec;
};

// `count` limits named prefix0, prefix1, ..., cycling through the algorithms.
std::vector<Limit> LimitsOverAlgorithms(const std::string& prefix, size_t count, uint64_t limit) {
  std::vector<Limit> limits;
  for (size_t i = 0; i < count; ++i) {
    limits.push_back({prefix + std::to_string(i), LongSpec(kAlgorithms[i % 4], limit)});
  }
  return limits;
}

// One CheckBatch over `limits`, limits[i] with cost_of(i); the decisions in order.
std::vector<Decision> CheckAll(protocol::Client& client, const std::vector<Limit>& limits,
                               const std::function<uint64_t(size_t)>& cost_of) {
  std::vector<Check> checks;
  for (size_t i = 0; i < limits.size(); ++i) {
    checks.push_back({limits[i].key, limits[i].spec, cost_of(i)});
  }
  std::vector<CheckOutcome> outcomes;
  const Status status = client.CheckBatch(checks, &outcomes);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  REQUIRE(outcomes.size() == checks.size());
  std::vector<Decision> decisions;
  for (const CheckOutcome& outcome : outcomes) {
    REQUIRE_MESSAGE(outcome.error == protocol::ErrorCode::kOk, outcome.error_message);
    decisions.push_back(outcome.decision);
  }
  return decisions;
}

std::function<uint64_t(size_t)> Cost(uint64_t cost) {
  return [cost](size_t) { return cost; };
}

size_t CountAllowed(const std::vector<Decision>& decisions) {
  size_t allowed = 0;
  for (const Decision& decision : decisions) allowed += decision.allowed ? 1 : 0;
  return allowed;
}

// What a peek (cost 0) says remains, per limit.
std::vector<uint64_t> PeekRemaining(protocol::Client& client, const std::vector<Limit>& limits) {
  std::vector<uint64_t> remaining;
  for (const Decision& decision : CheckAll(client, limits, Cost(0))) {
    remaining.push_back(decision.remaining);
  }
  return remaining;
}

// How many of `actual` differ from expected(i); the first difference is logged.
size_t CountWrong(const std::vector<uint64_t>& actual,
                  const std::function<uint64_t(size_t)>& expected) {
  size_t wrong = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] != expected(i) && wrong++ == 0) {
      MESSAGE("first difference at " << i << ": " << actual[i] << " instead of " << expected(i));
    }
  }
  return wrong;
}

// Returns once every check acknowledged before the call is on disk.
// storage_flushes counts completed non-empty flushes, and one that completes
// after a stats read may have collected its changes before the last check; the
// flush thread is sequential, so a flush completing after a second read began
// after the first completed. A fresh marker key each round, checked after the
// read, makes sure a flush completes after it: read after the marker, the
// count could already hold the marker's flush, and no later flush would have
// anything to write.
void AwaitFlushOfAcknowledged(Node& node) {
  static int markers = 0;
  for (int round = 0; round < 2; ++round) {
    const std::string marker = "flush-marker-" + std::to_string(markers++);
    const uint64_t flushes = node.Stats().storage_flushes;
    MustCheck(*node.client, {marker, LongSpec(Algorithm::kFixedWindow, 10), 1});
    // Bounded generously: a flush is every 100 ms, but a loaded machine
    // (and the sanitizer build) can hold the flush thread back for seconds.
    REQUIRE(PollUntil([&] { return node.Stats().storage_flushes > flushes; }, 20'000));
  }
}

// After SIGTERM and a restart, 2,000 keys of all four algorithms peek exactly as before.
TEST_CASE("persistence: restart after a clean shutdown restores every key exactly") {
  // A clean shutdown loses nothing; the stats and the log report the restore.
  constexpr uint64_t kLimit = 100;
  TempDir dir;
  const std::vector<std::string> args = {"--data-dir", dir.Path("data")};
  const std::vector<Limit> limits = LimitsOverAlgorithms("restart-", 2'000, kLimit);
  const auto expected = [](size_t i) -> uint64_t { return kLimit - (i % 5 + 1) - i % 3; };
  std::vector<uint64_t> before;
  {
    Node node(args);
    CHECK(CountAllowed(CheckAll(*node.client, limits, [](size_t i) { return i % 5 + 1; })) ==
          limits.size());
    CHECK(CountAllowed(CheckAll(*node.client, limits, [](size_t i) { return i % 3; })) ==
          limits.size());
    before = PeekRemaining(*node.client, limits);
    CHECK(CountWrong(before, expected) == 0);
    CHECK(node.Stop(SIGTERM) == 0);
    CHECK(Contains(node.process->Log(), "final checkpoint written"));
  }
  Node node(args);
  const StatsReply stats = node.Stats();
  CHECK(stats.keys_restored == limits.size());
  CHECK(stats.keys == limits.size());
  const std::string log = node.process->Log();
  CHECK_MESSAGE(Contains(log, "restored 2000 keys from 2000 records in "), log);
  CHECK(CountWrong(PeekRemaining(*node.client, limits), [&](size_t i) { return before[i]; }) == 0);
}

// 1,000 keys in a checkpoint and again in a later run: the restart reports 1,000 keys, not 2,000.
TEST_CASE("persistence: keys restored counts distinct keys, not the records read") {
  TempDir dir;
  const std::vector<std::string> args = {"--data-dir", dir.Path("data"), "--flush-interval-ms",
                                         "20"};
  const std::vector<Limit> limits = LimitsOverAlgorithms("distinct-", 1'000, 100);
  {
    Node node(args);
    CHECK(CountAllowed(CheckAll(*node.client, limits, Cost(1))) == limits.size());
    CHECK(node.Stop(SIGTERM) == 0);  // the final checkpoint holds the 1,000 keys
  }
  {
    Node node(args);
    CHECK(CountAllowed(CheckAll(*node.client, limits, Cost(1))) == limits.size());
    AwaitFlushOfAcknowledged(node);  // a run holds them again, and two marker keys
    CHECK(node.Stop(SIGKILL) == 128 + SIGKILL);
  }
  Node node(args);
  const StatsReply stats = node.Stats();
  CHECK(stats.keys == limits.size() + 2);
  CHECK(stats.keys_restored == stats.keys);
  const std::string log = node.process->Log();
  CHECK_MESSAGE(Contains(log, "restored 1002 keys from 2002 records in "), log);
}

// SIGKILL keeps what a completed flush wrote and loses only the admissions after it.
TEST_CASE("persistence: a crash loses at most the admissions since the last flush") {
  // With a 60 s flush interval exactly the admissions after the flush are lost,
  // and the restarted node then admits exactly what the restored state allows,
  // never more than the limit minus the flushed admissions.
  constexpr uint64_t kLimit = 50, kFlushed = 20, kLost = 15;
  TempDir dir;
  const std::string data = dir.Path("data");
  const std::vector<Limit> limits = LimitsOverAlgorithms("crash-", 4, kLimit);
  const auto admit = [&](Node& node, uint64_t times) {
    for (uint64_t n = 0; n < times; ++n) {
      REQUIRE(CountAllowed(CheckAll(*node.client, limits, Cost(1))) == limits.size());
    }
  };
  {
    Node node({"--data-dir", data, "--flush-interval-ms", "50"});
    admit(node, kFlushed);
    AwaitFlushOfAcknowledged(node);
    CHECK(node.Stop(SIGKILL) == 128 + SIGKILL);
  }
  {
    Node node({"--data-dir", data, "--flush-interval-ms", "60000"});
    CHECK(CountWrong(PeekRemaining(*node.client, limits), Cost(kLimit - kFlushed)) == 0);
    admit(node, kLost);  // not flushed before the kill: the interval is a minute
    CHECK(node.Stop(SIGKILL) == 128 + SIGKILL);
  }
  Node node({"--data-dir", data});
  const std::vector<uint64_t> restored = PeekRemaining(*node.client, limits);
  for (size_t i = 0; i < limits.size(); ++i) {
    CAPTURE(limits[i].key);
    CHECK(restored[i] >= kLimit - kFlushed - kLost);  // the documented bound
    CHECK(restored[i] <= kLimit - kFlushed);
    CHECK(restored[i] == kLimit - kFlushed);  // exactly the unflushed ones are lost
    uint64_t admitted = 0;
    while (admitted <= kLimit &&
           MustCheck(*node.client, {limits[i].key, limits[i].spec, 1}).allowed) {
      ++admitted;
    }
    CHECK(admitted == restored[i]);
    CHECK(admitted <= kLimit - kFlushed);
  }
}

// A second tallyd on a data directory in use exits 1 saying why; the first keeps serving.
TEST_CASE("persistence: a data directory in use by another tallyd is refused") {
  // The first one's counts stay intact, also after its own restart.
  TempDir dir;
  const std::vector<std::string> args = {"--data-dir", dir.Path("data")};
  const Check check{"locked", LongSpec(Algorithm::kFixedWindow, 10), 1};
  {
    Node first(args);
    CHECK(MustCheck(*first.client, check).remaining == 9);
    std::string log;
    CHECK(RunRefusedTallyd(args, &log) == 1);
    CHECK_MESSAGE((Contains(log, "another tallyd") || Contains(log, "LOCK")), log);
    CHECK(MustCheck(*first.Connect(), check).remaining == 8);
    CHECK(first.Stop(SIGTERM) == 0);
  }
  Node restarted(args);
  CHECK(MustCheck(*restarted.client, check).remaining == 7);
}

// An unusable data directory stops tallyd before it listens: exit 1, a log line naming it.
TEST_CASE("persistence: an unusable data directory is refused at start") {
  // A path under a regular file, a directory whose CURRENT is not RocksDB's,
  // and a read-only file system.
  TempDir dir;
  const auto expect_refused = [](const std::string& data_dir) {
    CAPTURE(data_dir);
    std::string log;
    CHECK(RunRefusedTallyd({"--data-dir", data_dir}, &log) == 1);  // not a crash, not serving
    CHECK_MESSAGE((Contains(log, "not starting") && Contains(log, data_dir)), log);
  };
  std::ofstream(dir.Path("file")) << "a regular file\n";
  expect_refused(dir.Path("file") + "/data");

  fs::create_directories(dir.Path("foreign"));
  std::ofstream(dir.Path("foreign") + "/CURRENT") << "garbage\n";
  expect_refused(dir.Path("foreign"));

  const TmpfsMount read_only(dir.Path("read-only"), "size=1m", MS_RDONLY);
  if (!read_only.mounted()) {
    MESSAGE("read-only part skipped: cannot mount a tmpfs: " << read_only.error());
    return;
  }
  expect_refused(dir.Path("read-only"));
}

// 1,000 fixed-window keys of about 200 bytes, named after `round`.
std::vector<Limit> BigLimits(int round, uint64_t limit) {
  std::vector<Limit> limits;
  for (int i = 0; i < 1'000; ++i) {
    limits.push_back({std::string(190, 'f') + "-" + std::to_string(round) + "-" + std::to_string(i),
                      LongSpec(Algorithm::kFixedWindow, limit)});
  }
  return limits;
}

size_t CountLines(const std::string& log, const std::string& part) {
  size_t count = 0;
  for (size_t at = log.find(part); at != std::string::npos; at = log.find(part, at + 1)) ++count;
  return count;
}

// A disk too small to persist on (40 MiB: RocksDB's own files leave less than the 32 MiB kept
// free), and a full one holding a data directory: tallyd refuses to start, saying why.
TEST_CASE("persistence: tallyd refuses to start where it has no room to persist") {
  TempDir dir;
  const TmpfsMount small(dir.Path("small"), "size=40m");
  const TmpfsMount full(dir.Path("full"), "size=96m");
  if (!small.mounted() || !full.mounted()) {
    MESSAGE("skipped: cannot mount a tmpfs: " << small.error());
    return;
  }
  std::string log;
  CHECK(RunRefusedTallyd({"--data-dir", dir.Path("small/data")}, &log) == 1);
  CHECK_MESSAGE((Contains(log, "not starting") && Contains(log, "no room to persist")), log);

  {
    Node node({"--data-dir", dir.Path("full/data")});
    MustCheck(*node.client, {"held", LongSpec(Algorithm::kFixedWindow, 10), 1});
    CHECK(node.Stop(SIGTERM) == 0);
  }
  REQUIRE(FillDisk(dir.Path("full"), 0));
  CHECK(RunRefusedTallyd({"--data-dir", dir.Path("full/data")}, &log) == 1);
  CHECK_MESSAGE(Contains(log, "not starting"), log);
}

// The disk fills under a running node: it keeps serving from memory, says so in stats and in
// the log every second, logs when it persists again, and then a crash loses nothing.
TEST_CASE("persistence: a full disk degrades loudly, keeps serving, and recovers") {
  constexpr uint64_t kLimit = 10;
  TempDir dir;
  const TmpfsMount disk(dir.Path("disk"), "size=96m");  // before the node: unmounted after it
  if (!disk.mounted()) {
    MESSAGE("skipped: cannot mount a tmpfs: " << disk.error());
    return;
  }
  const std::vector<std::string> args = {"--data-dir", dir.Path("disk/data"), "--flush-interval-ms",
                                         "100"};
  const Check new_key{"after-disk-full", LongSpec(Algorithm::kFixedWindow, kLimit), 1};
  {
    Node node(args);
    INFO("tallyd log: " << node.process->Log());  // evaluated on failure only
    CHECK(CountAllowed(CheckAll(*node.client, BigLimits(0, kLimit), Cost(1))) == 1'000);
    AwaitFlushOfAcknowledged(node);
    REQUIRE(FillDisk(dir.Path("disk"), 1 << 20));  // below the 32 MiB kept free
    CHECK(CountAllowed(CheckAll(*node.client, BigLimits(1, kLimit), Cost(1))) == 1'000);
    REQUIRE(PollUntil([&] { return node.Stats().storage_degraded; }));
    CHECK(node.Stats().storage_write_errors > 0);

    auto fresh = node.Connect();
    CHECK(MustCheck(*fresh, new_key).remaining == kLimit - 1);
    CHECK(CountWrong(PeekRemaining(*fresh, BigLimits(0, kLimit)), Cost(kLimit - 1)) == 0);
    CHECK(PollUntil([&] { return CountLines(node.process->Log(), "persisting failed") >= 3; }));

    std::filesystem::remove(FillerPath(dir.Path("disk")));
    REQUIRE(PollUntil([&] { return !node.Stats().storage_degraded; }));
    CHECK(Contains(node.process->Log(), "persisting again"));
    AwaitFlushOfAcknowledged(node);
    CHECK(node.Stop(SIGKILL) == 128 + SIGKILL);
  }
  Node node(args);
  for (const int round : {0, 1}) {
    CAPTURE(round);
    CHECK(CountWrong(PeekRemaining(*node.client, BigLimits(round, kLimit)), Cost(kLimit - 1)) == 0);
  }
  CHECK(MustCheck(*node.client, new_key).remaining == kLimit - 2);
}

// SIGTERM while the disk is 100% full: tallyd writes what changed since it filled (5,000
// admissions), in the room it keeps for that, and exits 0; once there is room, all are back.
TEST_CASE("persistence: SIGTERM on a full disk loses nothing") {
  constexpr uint64_t kLimit = 1'000;
  TempDir dir;
  const TmpfsMount disk(dir.Path("disk"), "size=96m");
  if (!disk.mounted()) {
    MESSAGE("skipped: cannot mount a tmpfs: " << disk.error());
    return;
  }
  const std::vector<std::string> args = {"--data-dir", dir.Path("disk/data"), "--flush-interval-ms",
                                         "100"};
  const std::vector<Limit> before = LimitsOverAlgorithms("before-", 10, kLimit);
  const std::vector<Limit> after = LimitsOverAlgorithms("after-", 50, kLimit);
  {
    Node node(args);
    INFO("tallyd log: " << node.process->Log());
    CHECK(CountAllowed(CheckAll(*node.client, before, Cost(1))) == before.size());
    AwaitFlushOfAcknowledged(node);
    REQUIRE(FillDisk(dir.Path("disk"), 0));
    CHECK(CountAllowed(CheckAll(*node.client, after, Cost(100))) == after.size());
    REQUIRE(PollUntil([&] { return node.Stats().storage_write_errors > 0; }));
    CHECK(node.Stop(SIGTERM) == 0);
    CHECK(Contains(node.process->Log(), "final checkpoint"));
  }
  std::filesystem::remove(FillerPath(dir.Path("disk")));
  Node node(args);
  CHECK(CountWrong(PeekRemaining(*node.client, before), Cost(kLimit - 1)) == 0);
  CHECK(CountWrong(PeekRemaining(*node.client, after), Cost(kLimit - 100)) == 0);
}

// 64 random bytes inside the third of five runs in the write-ahead log: tallyd refuses to start,
// saying why; with --salvage-wal it restores the runs before the damage and logs what it lost.
TEST_CASE("persistence: a damaged write-ahead log refuses the start until --salvage-wal") {
  constexpr uint64_t kLimit = 10;
  constexpr int kRounds = 5;
  TempDir dir;
  const std::string data = dir.Path("data");
  const auto round_limits = [](int round) {
    std::vector<Limit> limits;
    for (int i = 0; i < 20; ++i) {
      limits.push_back({"wal-" + std::to_string(round) + "-" + std::to_string(i),
                        LongSpec(Algorithm::kFixedWindow, kLimit)});
    }
    return limits;
  };
  {
    Node node({"--data-dir", data, "--flush-interval-ms", "20"});
    for (int round = 1; round <= kRounds; ++round) {  // one round, one run (at least)
      CHECK(CountAllowed(CheckAll(*node.client, round_limits(round), Cost(1))) == 20);
      AwaitFlushOfAcknowledged(node);
    }
    CHECK(node.Stop(SIGKILL) == 128 + SIGKILL);  // the runs stay in the write-ahead log
  }
  bool damaged = false;
  for (const auto& file : fs::directory_iterator(data)) {
    if (file.path().extension() != ".log") continue;
    std::fstream wal(file.path(), std::ios::in | std::ios::out | std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(wal), std::istreambuf_iterator<char>()};
    const size_t at = bytes.find("wal-3-");
    if (at == std::string::npos) continue;
    std::string garbage(64, '\0');
    std::mt19937 rng(13);
    for (char& c : garbage) c = static_cast<char>(rng());
    wal.clear();
    wal.seekp(static_cast<std::streamoff>(at));
    wal.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
    damaged = wal.good();
  }
  REQUIRE(damaged);

  std::string log;
  CHECK(RunRefusedTallyd({"--data-dir", data}, &log) == 1);
  CHECK_MESSAGE((Contains(log, "not starting") && Contains(log, "write-ahead log") &&
                 Contains(log, "--salvage-wal")),
                log);

  const auto lost_in_round = [&](Node& node, int round) {
    const std::vector<uint64_t> remaining = PeekRemaining(*node.client, round_limits(round));
    return std::count(remaining.begin(), remaining.end(), kLimit);
  };
  {
    Node node({"--data-dir", data, "--salvage-wal"});
    INFO("tallyd log: " << node.process->Log());
    CHECK(lost_in_round(node, 1) == 0);
    CHECK(lost_in_round(node, 2) == 0);
    CHECK(lost_in_round(node, 3) == 20);  // RocksDB drops the rest of the log block: 4 and 5 too
    MESSAGE("keys lost in rounds 4 and 5: " << lost_in_round(node, 4) << " and "
                                            << lost_in_round(node, 5) << " of 20");
    CHECK(Contains(node.process->Log(), "dropping"));  // RocksDB's count of the bytes dropped
    CHECK(Contains(node.process->Log(), "salvaged: the newest run restored is run "));
    CHECK(node.Stop(SIGTERM) == 0);
  }
  Node node({"--data-dir", data});  // the salvage was for good: a plain start works
  CHECK(lost_in_round(node, 2) == 0);
  CHECK(lost_in_round(node, 3) == 20);
}

// --memory-only: a restart starts from fresh counts and no data directory is created.
TEST_CASE("persistence: memory-only restarts fresh and writes no data directory") {
  // tallyd refuses --data-dir beside --memory-only: look for the default one,
  // ./tally-data in the working directory the node inherits.
  const std::vector<std::string> args = {"--memory-only"};
  const Check check{"memory", LongSpec(Algorithm::kSlidingWindowCounter, 10), 3};
  {
    Node node(args);
    CHECK(MustCheck(*node.client, check).remaining == 7);
    CHECK(node.Stop(SIGTERM) == 0);
  }
  Node node(args);
  const StatsReply stats = node.Stats();
  CHECK(stats.keys == 0);
  CHECK(stats.keys_restored == 0);
  CHECK(stats.storage_flushes == 0);
  CHECK(stats.storage_disk_bytes == 0);
  CHECK(MustCheck(*node.client, check).remaining == 7);
  CHECK_FALSE(fs::exists("tally-data"));
}

// Churn over many short windows keeps the key count and the disk bytes bounded.
TEST_CASE("persistence: churn keeps keys and disk bounded") {
  // 40 rounds of 2,000 fresh keys, 100 ms apart, on 200 ms windows. A
  // fixed-window key is garbage once its window has passed, so keys and disk
  // must stay near a few windows' worth instead of growing with all 80,000.
  // Measured (Release and ASan): keys peak ~4,000; disk bytes peak 210-320 KB,
  // and reach ~4 MB with --compaction-interval-ms 0. The bounds, 12,000 keys
  // and 2 MiB, leave a wide margin and still catch records never dropped.
  constexpr int kRounds = 40;
  constexpr size_t kKeysPerRound = 2'000;
  Node node({"--flush-interval-ms", "20", "--compaction-interval-ms", "200"});
  const LimitSpec spec{Algorithm::kFixedWindow, 10, 200};
  uint64_t peak_keys = 0, peak_disk_bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < kRounds; ++round) {
    std::this_thread::sleep_until(start + std::chrono::milliseconds(100 * round));  // pacing
    std::vector<Limit> limits;
    for (size_t i = 0; i < kKeysPerRound; ++i) {
      limits.push_back({"churn-" + std::to_string(round) + "-" + std::to_string(i), spec});
    }
    CHECK(CountAllowed(CheckAll(*node.client, limits, Cost(1))) == kKeysPerRound);
    const StatsReply stats = node.Stats();
    peak_keys = std::max(peak_keys, stats.keys);
    peak_disk_bytes = std::max(peak_disk_bytes, stats.storage_disk_bytes);
  }
  const StatsReply stats = node.Stats();
  INFO("peak keys " << peak_keys << ", peak disk bytes " << peak_disk_bytes
                    << ", disk bytes at the end " << stats.storage_disk_bytes << ", keys written "
                    << stats.storage_keys_written);
  // Most keys reached the store, so the disk bound means something (a key may
  // expire before a flush collects it, e.g. behind a slow compaction: never written).
  CHECK(stats.storage_keys_written >= kRounds * kKeysPerRound / 2);
  CHECK(peak_keys <= 6 * kKeysPerRound);
  CHECK(peak_disk_bytes < 2u << 20);
  CHECK(stats.storage_disk_bytes < 2u << 20);
}

}  // namespace
}  // namespace tally
