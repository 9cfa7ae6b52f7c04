// StartupProgress: what tallyd tells while it starts and stops, in three
// places at once: the Readiness (/readyz, tally_ready), the log, and
// systemd through sd_notify(3) (libsystemd).
//
// While not ready, each step says what the node waits for and how far it
// is: "restoring counters: 3.1M of ~8.0M records read", "recovering:
// waiting for the full sync of 2 of 4 live peers". Progress of a long step
// is logged and sent at most once per kReportEveryMs; systemd gets
// STATUS=<the same text> and EXTEND_TIMEOUT_USEC, which keeps its start
// timeout (TimeoutStartSec) from killing a node that is still making
// progress: each report extends it by kExtendTimeoutMs from then, so a node
// that stops reporting is still timed out. Ready() sends READY=1 and
// Stopping() STOPPING=1. Without systemd (NOTIFY_SOCKET unset) sd_notify
// does nothing.
//
// Thread safety: one thread at a time (tallyd's main thread, then the
// server's worker 0 for Stopping). The Readiness is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "node/common/clock.h"
#include "node/common/readiness.h"

namespace tally::bin {

class StartupProgress {
 public:
  static constexpr int64_t kReportEveryMs = 1'000;
  static constexpr int64_t kExtendTimeoutMs = 30'000;

  // readiness and clock must outlive this.
  StartupProgress(Readiness* readiness, const Clock* clock);

  // A new step: reported at once.
  void Step(const std::string& waiting_for);
  // Progress of the restore: `records` read of about `estimated_records`.
  void Restoring(uint64_t records, uint64_t estimated_records);
  // Progress of the recovery (Gossip::WaitForRecovery).
  void Recovering(bool joined, size_t peers_synced, size_t peers_alive);
  void Ready();
  void Stopping();

 private:
  // Reports `text` if the last report is kReportEveryMs old (or `now`).
  void Report(const std::string& text, bool now);

  Readiness* const readiness_;
  const Clock* const clock_;
  int64_t last_report_ms_ = 0;
  bool reported_ = false;
};

// "3.1M", "812k", "17": a count for people.
std::string ShortCount(uint64_t count);

}  // namespace tally::bin
