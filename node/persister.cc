#include "node/persister.h"

#include <spdlog/spdlog.h>

#include <vector>

namespace tally {

Persister::Persister(const Options& options, Limiter* limiter, storage::Store* store,
                     const Clock* clock)
    : options_(options), limiter_(limiter), store_(store), clock_(clock) {}

Persister::~Persister() { Stop(); }

void Persister::Start() { thread_ = std::thread([this] { Run(); }); }

Status Persister::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  return Flush();
}

void Persister::Run() {
  int64_t last_compaction_ms = clock_->MonotonicMs();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(options_.flush_interval_ms));
    if (stop_) break;
    lock.unlock();
    Flush();
    if (options_.compaction_interval_ms > 0 &&
        clock_->MonotonicMs() - last_compaction_ms >= options_.compaction_interval_ms) {
      last_compaction_ms = clock_->MonotonicMs();
      if (Status status = store_->CompactExpired(); !status.ok()) {
        spdlog::warn("compaction failed: {}", status.ToString());
      }
    }
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
