#include "cluster/history.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

namespace tally::cluster {
namespace {

// The decisions of one key's window, ordered by answer time, as lines.
std::string Excerpt(const std::vector<const Observed*>& window, size_t most_lines) {
  std::ostringstream out;
  const size_t shown = std::min(window.size(), most_lines);
  for (size_t i = 0; i < shown; ++i) {
    const Observed& o = *window[window.size() - shown + i];
    out << "    node " << o.node << " sent " << o.sent_ms << " answered " << o.answered_ms << " "
        << (o.allowed ? "allowed" : "denied") << "\n";
  }
  return out.str();
}

}  // namespace

void History::Record(Observed observed) {
  std::lock_guard lock(mutex_);
  observed_.push_back(std::move(observed));
}

std::vector<Observed> History::Sorted() const {
  std::lock_guard lock(mutex_);
  std::vector<Observed> sorted = observed_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Observed& a, const Observed& b) {
    return a.answered_ms < b.answered_ms;
  });
  return sorted;
}

std::string HistoryVerdict::Table() const {
  std::ostringstream out;
  out << "key window requests admitted central bound\n";
  for (const WindowVerdict& w : windows) {
    out << w.key << " " << w.window_index << " " << w.requests << " " << w.admitted << " "
        << w.central << " " << w.most << (w.ok ? "" : " VIOLATION") << "\n";
  }
  out << "admitted / central: mean " << mean_ratio << ", worst " << worst_ratio << "\n";
  return out.str();
}

std::vector<Observed> BySentWindow(std::vector<Observed> history, int64_t window_ms) {
  for (Observed& observed : history) observed.window_index = observed.sent_ms / window_ms;
  return history;
}

HistoryVerdict CheckFixedWindow(const std::vector<Observed>& history, const HistoryBound& bound,
                                uint64_t min_requests) {
  std::map<std::tuple<std::string, int64_t>, std::vector<const Observed*>> windows;
  for (const Observed& observed : history) {
    windows[{observed.key, observed.window_index}].push_back(&observed);
  }
  HistoryVerdict verdict;
  double ratio_sum = 0;
  size_t ratios = 0;
  for (const auto& [id, decisions] : windows) {
    WindowVerdict& w = verdict.windows.emplace_back();
    std::tie(w.key, w.window_index) = id;
    w.requests = decisions.size();
    for (const Observed* o : decisions) w.admitted += o->allowed ? 1 : 0;
    w.central = std::min(w.requests, bound.limit);
    const uint64_t stale_requests = static_cast<uint64_t>(static_cast<double>(w.requests) *
                                                          static_cast<double>(bound.staleness_ms) /
                                                          static_cast<double>(bound.window_ms));
    const uint64_t excess =
        std::min(stale_requests, (bound.deciders > 0 ? bound.deciders - 1 : 0) * bound.limit);
    w.most = bound.limit + excess;
    if (w.requests < min_requests) continue;
    if (w.central > 0) {
      const double ratio = static_cast<double>(w.admitted) / static_cast<double>(w.central);
      ratio_sum += ratio;
      ++ratios;
      verdict.worst_ratio = std::max(verdict.worst_ratio, ratio);
    }
    std::string broken;
    if (w.admitted > w.most) {
      broken = "admitted " + std::to_string(w.admitted) + " > the bound " + std::to_string(w.most);
    } else if (bound.floor && w.admitted < w.central) {
      broken = "admitted " + std::to_string(w.admitted) + " < " + std::to_string(w.central) +
               " that one central node admits (a denial under the limit)";
    }
    if (!broken.empty()) {
      w.ok = false;
      verdict.violations.push_back("key " + w.key + " window " + std::to_string(w.window_index) +
                                   " (" + std::to_string(w.requests) + " requests): " + broken +
                                   "; its last decisions:\n" + Excerpt(decisions, 12));
    }
  }
  verdict.mean_ratio = ratios > 0 ? ratio_sum / static_cast<double>(ratios) : 0;
  return verdict;
}

}  // namespace tally::cluster
