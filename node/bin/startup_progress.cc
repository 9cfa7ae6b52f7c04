#include "node/bin/startup_progress.h"

#include <algorithm>
#include <cstdio>

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

namespace tally::bin {

std::string ShortCount(uint64_t count) {
  char text[32];
  if (count >= 1'000'000) {
    std::snprintf(text, sizeof(text), "%.1fM", static_cast<double>(count) / 1e6);
  } else if (count >= 10'000) {
    std::snprintf(text, sizeof(text), "%.0fk", static_cast<double>(count) / 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%llu", static_cast<unsigned long long>(count));
  }
  return text;
}

StartupProgress::StartupProgress(Readiness* readiness, const Clock* clock)
    : readiness_(readiness), clock_(clock) {}

void StartupProgress::Step(const std::string& waiting_for) { Report(waiting_for, true); }

void StartupProgress::Restoring(uint64_t records, uint64_t estimated_records) {
  Report("restoring counters: " + ShortCount(records) + " of ~" +
             ShortCount(std::max(records, estimated_records)) + " records read",
         false);
}

void StartupProgress::Recovering(bool joined, size_t peers_synced, size_t peers_alive) {
  if (!joined) {
    Report("joining: waiting for a seed to answer", false);
    return;
  }
  Report("recovering: waiting for the full sync of " + std::to_string(peers_alive - peers_synced) +
             " of " + std::to_string(peers_alive) + " live peers",
         false);
}

void StartupProgress::Report(const std::string& text, bool now) {
  const int64_t now_ms = clock_->MonotonicMs();
  if (!now && reported_ && now_ms - last_report_ms_ < kReportEveryMs) return;
  reported_ = true;
  last_report_ms_ = now_ms;
  readiness_->SetWaiting(text);
  spdlog::info("not ready: {}", text);
  sd_notifyf(0, "STATUS=%s\nEXTEND_TIMEOUT_USEC=%llu", text.c_str(),
             static_cast<unsigned long long>(kExtendTimeoutMs) * 1'000);
}

void StartupProgress::Ready() {
  readiness_->SetReady();
  spdlog::info("ready");
  sd_notify(0, "READY=1\nSTATUS=ready: serving");
}

void StartupProgress::Stopping() {
  readiness_->SetWaiting("stopping");
  sd_notify(0, "STOPPING=1\nSTATUS=stopping: draining connections");
}

}  // namespace tally::bin
