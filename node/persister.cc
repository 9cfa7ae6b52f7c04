#include "node/persister.h"

#include <spdlog/spdlog.h>

#include <vector>

namespace tally {

Persister::Persister(const Options& options, Limiter* limiter, storage::Store* store,
                     const Clock* clock)
    : options_(options), limiter_(limiter), store_(store), clock_(clock) {}

Persister::~Persister() { Stop(); }

void Persister::Start() {
  flush_thread_ = std::thread([this] {
    Every(options_.flush_interval_ms, [this] { Flush(); });
  });
  if (options_.compaction_interval_ms > 0) {  // its own thread: a long compaction delays no flush
    compaction_thread_ = std::thread([this] {
      Every(options_.compaction_interval_ms, [this] {
        if (Status status = store_->CompactExpired(); !status.ok()) {
          spdlog::warn("compaction failed: {}", status.ToString());
        }
      });
    });
  }
}

Status Persister::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread* thread : {&flush_thread_, &compaction_thread_}) {
    if (thread->joinable()) thread->join();
  }
  return Flush();
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
  std::vector<KeySnapshot> changes;
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
  const Status status = store_->Write(changes);
  if (!status.ok()) {
    for (KeySnapshot& change : changes) {
      pending_[{change.algorithm, change.window_ms, change.key}] = std::move(change);
    }
  }
  std::lock_guard<std::mutex> stats_lock(stats_mu_);
  stats_.pending_keys = pending_.size();
  if (status.ok()) {
    ++stats_.flushes;
    stats_.keys_written += changes.size();
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
