#include "node/persist/persister.h"

#include <pthread.h>

#include <chrono>
#include <memory>

#include <spdlog/spdlog.h>

namespace tally {

Persister::Persister(const Options& options, Limiter* limiter, storage::Store* store)
    : options_(options),
      limiter_(limiter),
      store_(store),
      last_peer_write_ms_(options.clock->MonotonicMs()) {}

// Owners call Stop themselves to learn how the final checkpoint went; here it
// is only the last resort, and WriteRun has logged any failure.
Persister::~Persister() { static_cast<void>(Stop()); }

void Persister::Start() {
  flush_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tally-flush");
    Every(options_.flush_interval_ms, [this] { static_cast<void>(Flush()); });  // WriteRun logs
  });
  if (options_.compaction_interval_ms > 0) {  // its own thread: a long compaction delays no flush
    compaction_thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "tally-compact");
      Every(options_.compaction_interval_ms, [this] {
        Status status = Checkpoint();
        if (status.ok()) status = store_->Compact();
        if (!status.ok()) spdlog::warn("checkpoint and compaction failed: {}", status.ToString());
      });
    });
  }
}

Status Persister::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status::OK();
    stop_ = stopped_ = true;
  }
  wake_.notify_all();
  for (std::thread* thread : {&flush_thread_, &compaction_thread_}) {
    if (thread->joinable()) thread->join();
  }
  std::lock_guard<std::mutex> flush_lock(flush_mu_);
  const int64_t started_ms = options_.clock->MonotonicMs();
  store_->BeginLastWrites();
  last_writes_ = true;
  const bool covered_by_changes = !unsaved_;  // else only a checkpoint covers a failed write
  if (covered_by_changes) {
    if (Status status = WriteChangesLocked(true); !status.ok()) return status;
  }
  const Status checkpoint = CheckpointLocked();
  const int64_t elapsed_ms = options_.clock->MonotonicMs() - started_ms;
  if (checkpoint.ok()) {
    spdlog::info("final checkpoint written in {} ms", elapsed_ms);
  } else if (covered_by_changes) {
    spdlog::warn(
        "final checkpoint not written ({}); nothing is lost: what changed is on disk, "
        "and the next start reads the runs since the last checkpoint",
        checkpoint.ToString());
  } else {
    return checkpoint;
  }
  return store_->MarkStopped();
}

void Persister::Every(int64_t interval_ms, const std::function<void()>& work) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, std::chrono::milliseconds(interval_ms), [this] { return stop_; })) {
    lock.unlock();
    work();
    lock.lock();
  }
}

Status Persister::Flush() {
  std::lock_guard<std::mutex> flush_lock(flush_mu_);
  if (unsaved_ || limiter_->erasures() != erasures_checkpointed_ || store_->CheckpointDue()) {
    return CheckpointLocked();
  }
  const bool peers_due =
      options_.clock->MonotonicMs() - last_peer_write_ms_ >= options_.peer_flush_interval_ms;
  return WriteChangesLocked(peers_due);
}

Status Persister::WriteChangesLocked(bool with_peer_changes) {
  if (with_peer_changes) last_peer_write_ms_ = options_.clock->MonotonicMs();
  return WriteRun(false, [this, with_peer_changes](storage::Store::Run* run) {
    limiter_->CollectChanges([run](const KeySnapshot& snapshot) { run->Add(snapshot); },
                             with_peer_changes);
  });
}

Status Persister::Checkpoint() {
  std::lock_guard<std::mutex> flush_lock(flush_mu_);
  return CheckpointLocked();
}

Status Persister::CheckpointLocked() {
  const uint64_t erasures = limiter_->erasures();  // before collecting: a later erase is not in it
  last_peer_write_ms_ = options_.clock->MonotonicMs();  // a checkpoint takes every key
  const Status status = WriteRun(true, [this](storage::Store::Run* run) {
    limiter_->CollectAll([run](const KeySnapshot& snapshot) { run->Add(snapshot); });
  });
  if (status.ok()) erasures_checkpointed_ = erasures;
  return status;
}

Status Persister::WriteRun(bool checkpoint,
                           const std::function<void(storage::Store::Run*)>& collect) {
  std::unique_ptr<storage::Store::Run> run;
  Status status = store_->BeginRun(checkpoint, &run);  // fails before anything is collected
  if (status.ok()) {
    collect(run.get());
    if (!checkpoint && run->records() == 0) return Status::OK();  // nothing changed
    status = store_->Commit(run.get());
    // Collected changes are no longer marked: only a checkpoint can cover them now.
    unsaved_ = !status.ok();
  }
  std::lock_guard<std::mutex> stats_lock(stats_mu_);
  const bool was_degraded = stats_.degraded;
  stats_.unsaved = unsaved_;
  stats_.degraded = !status.ok();
  if (status.ok()) {
    ++stats_.flushes;
    stats_.checkpoints += checkpoint ? 1 : 0;
    stats_.keys_written += run->records();
  } else {
    ++stats_.write_errors;
  }
  LogOutcome(status, was_degraded);
  return status;
}

void Persister::LogOutcome(const Status& status, bool was_degraded) {
  const int64_t now_ms = options_.clock->MonotonicMs();
  if (status.ok()) {
    if (was_degraded) {
      spdlog::info("persisting again, after {} ms degraded; {} failed writes so far",
                   now_ms - failing_since_ms_, stats_.write_errors);
    }
    return;
  }
  if (last_writes_) return;  // Stop says what its failures mean
  if (!was_degraded) {
    failing_since_ms_ = now_ms;
  } else if (now_ms - failure_logged_ms_ < 1'000) {
    return;  // while degraded, a line a second at most
  }
  failure_logged_ms_ = now_ms;
  spdlog::error(
      "persisting failed ({} failed writes so far, degraded for {} ms): serving from "
      "memory, and a crash would lose what changed since the last write: {}",
      stats_.write_errors, now_ms - failing_since_ms_, status.ToString());
}

Persister::Stats Persister::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

}  // namespace tally
