#include "node/bin/startup_progress.h"

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/common/readiness.h"

namespace tally::bin {
namespace {

// Counts read as people read them.
TEST_CASE("startup progress: short counts") {
  CHECK(ShortCount(17) == "17");
  CHECK(ShortCount(9'999) == "9999");
  CHECK(ShortCount(812'345) == "812k");
  CHECK(ShortCount(3'140'000) == "3.1M");
}

// A step is reported at once; the progress within it at most once a second.
TEST_CASE("startup progress: the restore is reported at most once a second") {
  ManualClock clock(0, 5'000);
  Readiness readiness;
  StartupProgress progress(&readiness, &clock);
  progress.Step("restoring counters from /var/lib/tally");
  CHECK(readiness.waiting_for() == "restoring counters from /var/lib/tally");
  clock.AdvanceMs(500);
  progress.Restoring(1'000'000, 8'000'000);
  CHECK(readiness.waiting_for() == "restoring counters from /var/lib/tally");  // too soon
  clock.AdvanceMs(500);
  progress.Restoring(3'100'000, 8'000'000);
  CHECK(readiness.waiting_for() == "restoring counters: 3.1M of ~8.0M records read");
  clock.AdvanceMs(999);
  progress.Restoring(5'000'000, 8'000'000);
  CHECK(readiness.waiting_for() == "restoring counters: 3.1M of ~8.0M records read");
  // An estimate below what was read already says what was read.
  clock.AdvanceMs(1);
  progress.Restoring(9'000'000, 8'000'000);
  CHECK(readiness.waiting_for() == "restoring counters: 9.0M of ~9.0M records read");
  CHECK_FALSE(readiness.ready());
}

// The recovery says whether the node has joined and how many live peers' full syncs it waits for.
TEST_CASE("startup progress: the recovery, then ready, then stopping") {
  ManualClock clock(0, 5'000);
  Readiness readiness;
  StartupProgress progress(&readiness, &clock);
  progress.Recovering(/*joined=*/false, 0, 0);
  CHECK(readiness.waiting_for() == "joining: waiting for a seed to answer");
  clock.AdvanceMs(1'000);
  progress.Recovering(/*joined=*/true, 2, 4);
  CHECK(readiness.waiting_for() == "recovering: waiting for the full sync of 2 of 4 live peers");
  progress.Ready();
  CHECK(readiness.ready());
  CHECK(readiness.waiting_for().empty());
  progress.Stopping();
  CHECK_FALSE(readiness.ready());
  CHECK(readiness.waiting_for() == "stopping");
}

}  // namespace
}  // namespace tally::bin
