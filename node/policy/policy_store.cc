#include "node/policy/policy_store.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

#include <spdlog/spdlog.h>

#include "node/common/front_counters.h"
#include "node/policy/policy_yaml.h"

namespace tally {

Status PolicyStore::Open(const Options& options, std::unique_ptr<PolicyStore>* store) {
  std::unique_ptr<PolicyStore> opened(new PolicyStore(options));
  opened->watched_ = opened->Fingerprint();  // before reading: a change during the load is seen
  if (Status loaded = opened->Load(/*log_unchanged=*/false); !loaded.ok()) return loaded;
  *store = std::move(opened);
  return Status::OK();
}

PolicyStore::~PolicyStore() { Stop(); }

std::shared_ptr<const PolicySet> PolicyStore::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

Status PolicyStore::Reload() { return Load(/*log_unchanged=*/true); }

Status PolicyStore::Load(bool log_unchanged) {
  std::lock_guard<std::mutex> reload_lock(reload_mu_);
  const int64_t started_ms = options_.clock->MonotonicMs();
  auto set = std::make_shared<PolicySet>();
  Status status = LoadPolicyDir(options_.dir, set.get(), {.merge_domains = options_.merge_domains});
  const int64_t took_ms = options_.clock->MonotonicMs() - started_ms;
  std::lock_guard<std::mutex> lock(mu_);
  if (!status.ok()) {
    ++stats_.reload_failures;
    if (current_ != nullptr) {
      spdlog::error("policy reload refused, keeping the previous policies: {}", status.message());
    }
    return status;
  }
  if (current_ != nullptr && current_->fingerprint() == set->fingerprint()) {
    if (log_unchanged) spdlog::info("policies reloaded from {}: nothing changed", options_.dir);
    return Status::OK();
  }
  AssignDomainSlots(set.get());
  set->SetRuleCounters(rule_counters_);
  spdlog::info("policies loaded from {}: {} domains, {} limits in {} ms", options_.dir,
               set->domain_count(), set->rule_count(), took_ms);
  stats_.reloads++;
  stats_.domains = set->domain_count();
  stats_.rules = set->rule_count();
  stats_.last_reload_ms = took_ms;
  current_ = std::move(set);
  return Status::OK();
}

void PolicyStore::AssignDomainSlots(PolicySet* set) {
  if (slot_names_.empty()) slot_names_.resize(FrontCounters::kNoDomain + 1);
  for (const std::string& domain : set->DomainNames()) {
    auto slot = std::find(slot_names_.begin(), slot_names_.end(), domain);
    if (slot == slot_names_.end() && slot_names_.size() < FrontCounters::kOtherDomain) {
      slot = slot_names_.insert(slot_names_.end(), domain);
    }
    if (slot != slot_names_.end()) {
      set->SetDomainSlot(domain, static_cast<size_t>(slot - slot_names_.begin()));
    }
  }
}

std::vector<std::string> PolicyStore::DomainSlotNames() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names = slot_names_;
  names.resize(FrontCounters::kDomainSlots);
  return names;
}

std::vector<std::pair<std::string, FrontCounters::Outcomes>> PolicyStore::RuleSeries() const {
  return rule_counters_->Read();
}

std::string PolicyStore::Fingerprint() const {
  std::vector<std::string> lines;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.dir, ec)) {
    std::error_code entry_ec;
    const auto size = entry.file_size(entry_ec);
    const auto mtime = entry.last_write_time(entry_ec).time_since_epoch().count();
    lines.push_back(entry.path().filename().string() + " " + std::to_string(size) + " " +
                    std::to_string(mtime));
  }
  std::sort(lines.begin(), lines.end());
  std::string fingerprint = ec ? "unreadable: " + ec.message() : "";
  for (const std::string& line : lines) fingerprint += line + "\n";
  return fingerprint;
}

void PolicyStore::Start() {
  watcher_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tally-policy");
    std::unique_lock<std::mutex> lock(mu_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(options_.poll_interval_ms),
                           [this] { return stop_; })) {
      lock.unlock();
      if (std::string now = Fingerprint(); now != watched_) {
        watched_ = std::move(now);
        static_cast<void>(Load(/*log_unchanged=*/false));  // Load logs a refusal
      }
      lock.lock();
    }
  });
}

void PolicyStore::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

PolicyStore::Stats PolicyStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace tally
