// Tests of Store and Persister on a disk that fills up (storage/store.h,
// node/persist/persister.h). Each runs on a small tmpfs, in a child process
// (this binary re-executed for the one test case), so that a crash fails the
// test and the tmpfs is always unmounted; mounting needs root, and without it
// the tests are skipped with a message. They use a ManualClock.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <sys/wait.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/persist/persister.h"
#include "storage/store.h"
#include "tests/storage/storage_test_util.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmpfs.h"

namespace tally {
namespace {

namespace fs = std::filesystem;
using storage::Store;
using testing::FillDisk;
using testing::FillerPath;
using testing::kStartMs;
using testing::LoadAll;
using testing::TempDir;
using testing::TmpfsMount;

constexpr const char* kTmpfsEnv = "TALLY_STORAGE_TEST_TMPFS";

// In the test: mounts a tmpfs of `size` and runs this binary again for the
// test case `test_name` (no quote in it: it goes through the shell), with
// the mount's path in kTmpfsEnv; checks that it passed. In that child: runs
// scenario(path).
void OnTmpfs(const char* test_name, const std::string& size,
             const std::function<void(const std::string& path)>& scenario) {
  if (const char* path = std::getenv(kTmpfsEnv)) return scenario(path);
  TempDir dir;
  const TmpfsMount mount(dir.Path("mnt"), "size=" + size);
  if (!mount.mounted()) {
    MESSAGE("skipped: cannot mount a tmpfs: " << mount.error());
    return;
  }
  const int status = std::system((std::string(kTmpfsEnv) + "='" + dir.Path("mnt") + "' '" +
                                  fs::read_symlink("/proc/self/exe").string() + "' --test-case='" +
                                  test_name + "'")
                                     .c_str());
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0),
                "the child run failed or crashed (wait status " << status << "): see its output");
  CHECK(fs::exists(dir.Path("mnt/data/CURRENT")));  // the child did run the scenario
}

// Small enough for a tmpfs of a few MiB: 512 KiB kept free, a 1 MiB reserve.
Store::Options SmallDiskOptions(const std::string& path, const Clock* clock) {
  Store::Options options{path, false, clock};
  options.min_free_bytes = 512 << 10;
  options.reserve_bytes = 1 << 20;
  return options;
}

std::unique_ptr<Store> OpenSmall(const std::string& path, const Clock* clock) {
  std::unique_ptr<Store> store;
  const Status status = Store::Open(SmallDiskOptions(path, clock), &store);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return store;
}

// Checks `key` (fixed window, an hour) at `cost`.
void Admit(Limiter& limiter, const std::string& key, uint64_t cost) {
  Decision decision;
  REQUIRE(limiter.Check(key, LimitSpec{Algorithm::kFixedWindow, 1'000, 3'600'000}, cost, &decision)
              .ok());
  REQUIRE(decision.allowed);
}

// Each key and the count this node holds for it, sorted by key.
std::vector<std::pair<std::string, uint64_t>> CountsOf(const std::vector<KeySnapshot>& snapshots) {
  std::vector<std::pair<std::string, uint64_t>> counts;
  for (const KeySnapshot& s : snapshots) counts.emplace_back(s.key, s.counts.current.Get(1));
  std::sort(counts.begin(), counts.end());
  return counts;
}

constexpr const char* kNoRoomTest = "storage: Open refuses a disk that leaves no room to persist";

// On 40 MiB, RocksDB's own files leave less than the 32 MiB kept free: Open refuses, saying so.
TEST_CASE(kNoRoomTest) {
  OnTmpfs(kNoRoomTest, "40m", [](const std::string& path) {
    ManualClock clock(kStartMs);
    std::unique_ptr<Store> store;
    const Status refused = Store::Open(Store::Options{path + "/data", false, &clock}, &store);
    CHECK(refused.code() == Status::Code::kIOError);
    CHECK_MESSAGE(refused.message().find("no room to persist") != std::string_view::npos,
                  refused.ToString());
    CHECK(store == nullptr);
    // With less kept free the same disk will do, and the reserve is made.
    store = OpenSmall(path + "/data", &clock);
    CHECK(fs::file_size(path + "/data/" + Store::kReserveFile) == 1u << 20);
  });
}

// Fills the disk with runs (refused at commit) or a filler file (refused at
// BeginRun), then checks that the Persister is degraded, and writes
// everything once the tmpfs has grown.
void FullDiskScenario(const std::string& path, bool refused_at_commit) {
  ManualClock clock(kStartMs);
  std::unique_ptr<Store> store = OpenSmall(path + "/data", &clock);
  Limiter limiter(Limiter::Options{1, 1'000'000, &clock, /*track_changes=*/true});
  auto persister = std::make_unique<Persister>(Persister::Options{}, &limiter, store.get());
  if (!refused_at_commit) REQUIRE(FillDisk(path, 256 << 10));  // below the 512 KiB kept free
  std::vector<std::string> keys;
  Status flushed;
  for (int round = 0; round < 200 && flushed.ok(); ++round) {
    for (int i = 0; i < 200; ++i) {
      keys.push_back(std::string(200, 'x') + std::to_string(keys.size()));
      Admit(limiter, keys.back(), 1);
    }
    flushed = persister->Flush();
  }
  REQUIRE_MESSAGE(!flushed.ok(), "the disk never filled up");
  MESSAGE("full after " << keys.size() << " keys: " << flushed.ToString());
  CHECK(persister->stats().write_errors > 0);
  CHECK(persister->stats().degraded);
  CHECK(persister->stats().unsaved == refused_at_commit);

  REQUIRE(testing::ResizeTmpfs(path, "64m"));
  const uint64_t checkpoints = persister->stats().checkpoints;
  const Status retried = persister->Flush();
  CHECK_MESSAGE(retried.ok(), retried.ToString());
  CHECK_FALSE(persister->stats().unsaved);
  CHECK_FALSE(persister->stats().degraded);
  if (refused_at_commit) CHECK(persister->stats().checkpoints == checkpoints + 1);
  persister.reset();
  store.reset();
  Store::LoadStats stats;
  std::vector<std::string> loaded;
  for (const KeySnapshot& snapshot : LoadAll(*OpenSmall(path + "/data", &clock), &stats)) {
    loaded.push_back(snapshot.key);
  }
  std::sort(keys.begin(), keys.end());
  std::sort(loaded.begin(), loaded.end());
  CHECK(loaded == keys);
}

constexpr const char* kRefusedAtCommitTest =
    "storage: Persister retries a write refused at commit on a full disk";
constexpr const char* kRefusedAtBeginTest =
    "storage: Persister retries writes refused before collecting on a full disk";

// Runs fill the disk until one is refused at commit: degraded, and its changes unsaved until
// the checkpoint that the next flush writes once there is room.
TEST_CASE(kRefusedAtCommitTest) {
  OnTmpfs(kRefusedAtCommitTest, "4m",
          [](const std::string& path) { FullDiskScenario(path, /*refused_at_commit=*/true); });
}

// A disk below what is kept free refuses every run before it collects: degraded; once there is
// room, the next flush writes every change.
TEST_CASE(kRefusedAtBeginTest) {
  OnTmpfs(kRefusedAtBeginTest, "4m",
          [](const std::string& path) { FullDiskScenario(path, /*refused_at_commit=*/false); });
}

constexpr const char* kStopTest = "storage: Persister Stop writes what changed on a full disk";

// The disk fills to 100% after a flush; more admissions; Stop gives up the reserve and writes
// them, and once the disk has room again every count is back.
TEST_CASE(kStopTest) {
  OnTmpfs(kStopTest, "4m", [](const std::string& path) {
    ManualClock clock(kStartMs);
    const std::string data = path + "/data";
    std::unique_ptr<Store> store = OpenSmall(data, &clock);
    Limiter limiter(Limiter::Options{1, 1'000'000, &clock, /*track_changes=*/true});
    Persister persister(Persister::Options{}, &limiter, store.get());
    for (int i = 0; i < 100; ++i) Admit(limiter, "before-" + std::to_string(i), 1);
    REQUIRE(persister.Flush().ok());
    REQUIRE(FillDisk(path, 0));
    for (int i = 0; i < 100; ++i) {
      Admit(limiter, "before-" + std::to_string(i), 2);
      Admit(limiter, "after-" + std::to_string(i), 5);
    }
    CHECK_FALSE(persister.Flush().ok());
    CHECK(persister.stats().degraded);
    const Status stopped = persister.Stop();
    CHECK_MESSAGE(stopped.ok(), stopped.ToString());
    CHECK_FALSE(fs::exists(data + "/" + Store::kReserveFile));  // given up for the last writes
    store.reset();

    fs::remove(FillerPath(path));
    Store::LoadStats stats;
    std::vector<std::pair<std::string, uint64_t>> expected;
    for (int i = 0; i < 100; ++i) {
      expected.emplace_back("after-" + std::to_string(i), 5);
      expected.emplace_back("before-" + std::to_string(i), 3);
    }
    std::sort(expected.begin(), expected.end());
    store = OpenSmall(data, &clock);
    CHECK(CountsOf(LoadAll(*store, &stats)) == expected);
    CHECK(fs::exists(data + "/" + Store::kReserveFile));  // made again
  });
}

}  // namespace
}  // namespace tally
