#include "node/persister.h"

#include <pthread.h>

#include <spdlog/spdlog.h>

#include <vector>

namespace tally {

Persister::Persister(const Options& options, Limiter* limiter, storage::Store* store,
                     const Clock* clock)
    : options_(options), limiter_(limiter), store_(store), clock_(clock) {}

Persister::~Persister() { Stop(); }

void Persister::Start() {
  flush_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tally-flush");
    Every(options_.flush_interval_ms, [this] { Flush(); });
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
  return Checkpoint();
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
  if (store_->CheckpointDue()) return CheckpointLocked();
  std::vector<KeySnapshot>& changes = collected_;
  changes.clear();
  limiter_->CollectChanges(&changes);
  if (!pending_.empty()) {  // a write failed before: retry it, newest state winning
    for (KeySnapshot& change : changes) {
      pending_[{change.algorithm, change.window_ms, change.key}] = std::move(change);
    }
    changes.clear();
    for (auto& [id, snapshot] : pending_) changes.push_back(std::move(snapshot));
    pending_.clear();
  }
  if (changes.empty()) return Status::OK();
  return Finish(store_->Write(changes), &changes, /*checkpoint=*/false);
}

Status Persister::Checkpoint() {
  std::lock_guard<std::mutex> flush_lock(flush_mu_);
  return CheckpointLocked();
}

Status Persister::CheckpointLocked() {
  std::vector<KeySnapshot>& all = collected_;
  all.clear();
  limiter_->CollectAll(&all);  // newer than anything pending, which it replaces
  pending_.clear();
  return Finish(store_->WriteCheckpoint(all), &all, /*checkpoint=*/true);
}

Status Persister::Finish(const Status& status, std::vector<KeySnapshot>* snapshots,
                         bool checkpoint) {
  if (!status.ok()) {
    for (KeySnapshot& snapshot : *snapshots) {
      pending_[{snapshot.algorithm, snapshot.window_ms, snapshot.key}] = std::move(snapshot);
    }
  }
  std::lock_guard<std::mutex> stats_lock(stats_mu_);
  stats_.pending_keys = pending_.size();
  if (status.ok()) {
    ++stats_.flushes;
    stats_.checkpoints += checkpoint ? 1 : 0;
    stats_.keys_written += snapshots->size();
  } else if (stats_.write_errors++ % 100 == 0) {  // the first and every 100th failure
    spdlog::error("persisting {} keys failed ({} failures so far); serving from memory: {}",
                  pending_.size(), stats_.write_errors, status.ToString());
  }
  return status;
}

Persister::Stats Persister::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

}  // namespace tally
