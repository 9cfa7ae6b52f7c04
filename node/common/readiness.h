// Readiness: whether a node may be sent checks yet and, until it may, what
// it waits for and how far it is ("restoring 3.1M of 8M keys", "waiting
// for 2 peers' full sync"). tallyd's start-up sets it as it goes; /readyz,
// the log and sd_notify read it.
//
// A node is ready once it listens, has restored its counters and, in a
// cluster, has finished its recovery: before that it would undercount.
//
// Thread safety: every method from any thread.
#pragma once

#include <mutex>
#include <string>

namespace tally {

class Readiness {
 public:
  // Not ready: `waiting_for` says what for, in words an operator reads.
  void SetWaiting(std::string waiting_for) {
    std::lock_guard lock(mutex_);
    ready_ = false;
    waiting_for_ = std::move(waiting_for);
  }
  void SetReady() {
    std::lock_guard lock(mutex_);
    ready_ = true;
    waiting_for_.clear();
  }

  bool ready() const {
    std::lock_guard lock(mutex_);
    return ready_;
  }
  // Empty when ready.
  std::string waiting_for() const {
    std::lock_guard lock(mutex_);
    return waiting_for_;
  }

 private:
  mutable std::mutex mutex_;
  bool ready_ = false;
  std::string waiting_for_ = "starting";
};

}  // namespace tally
