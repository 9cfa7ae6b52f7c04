#include "node/sim/workload.h"

#include <algorithm>
#include <cmath>

namespace tally::sim {
namespace {

constexpr double kZipfExponent = 1.1;
constexpr uint64_t kBurstFactor = 5;
constexpr int64_t kBurstSpreadMs = 20;

}  // namespace

const char* LoadKindName(LoadKind kind) {
  switch (kind) {
    case LoadKind::kOverload2x: return "overload 2x";
    case LoadKind::kOverload10x: return "overload 10x";
    case LoadKind::kBelow: return "below (0.5x)";
    case LoadKind::kBurst: return "burst (5x, fresh key)";
    case LoadKind::kFar: return "far (zipf)";
  }
  return "?";
}

Workload::Workload(const WorkloadOptions& options, Random* random)
    : options_(options), random_(random) {
  const double per_window_s = 1000.0 / static_cast<double>(options.window_ms);
  const double limit = static_cast<double>(options.limit);
  for (const Algorithm algorithm : options.algorithms) {
    const std::string name(AlgorithmName(algorithm));
    const LimitSpec near{algorithm, options.limit, static_cast<uint64_t>(options.window_ms)};
    const std::pair<LoadKind, double> near_loads[] = {
        {LoadKind::kOverload2x, 2}, {LoadKind::kOverload10x, 10}, {LoadKind::kBelow, 0.5}};
    for (const auto& [kind, demand] : near_loads) {
      streams_.push_back({keys_.size(), 1, demand * limit * per_window_s, 0});
      keys_.push_back({name + "/" + LoadKindName(kind), near, kind});
    }
    if (options.far_keys > 0) {
      streams_.push_back({keys_.size(), options.far_keys, options.far_rate_per_s, 0});
      const LimitSpec far{algorithm, options.far_limit,
                          static_cast<uint64_t>(options.far_window_ms)};
      for (size_t i = 0; i < options.far_keys; ++i) {
        keys_.push_back({name + "/far/" + std::to_string(i), far, LoadKind::kFar});
      }
    }
  }
  double sum = 0;
  for (size_t i = 1; i <= options.far_keys; ++i) {
    sum += 1.0 / std::pow(static_cast<double>(i), kZipfExponent);
    zipf_cdf_.push_back(sum);
  }
  for (double& p : zipf_cdf_) p /= sum;
  for (Stream& stream : streams_) {
    stream.next_ms = random_->ExponentialMs(1000.0 / stream.rate_per_s);
  }
  next_burst_ms_ = options.window_ms / 3;
}

size_t Workload::PickZipf(size_t count) {
  const double draw = random_->Unit();
  const auto it = std::lower_bound(zipf_cdf_.begin(), zipf_cdf_.end(), draw);
  return std::min(static_cast<size_t>(it - zipf_cdf_.begin()), count - 1);
}

std::vector<Request> Workload::Requests(int64_t from_ms, int64_t to_ms) {
  std::vector<Request> requests;
  for (Stream& stream : streams_) {
    while (stream.next_ms < to_ms) {
      if (stream.next_ms >= from_ms) {
        const size_t key = stream.count == 1 ? stream.first : stream.first + PickZipf(stream.count);
        requests.push_back({stream.next_ms, key});
      }
      stream.next_ms += random_->ExponentialMs(1000.0 / stream.rate_per_s);
    }
  }
  while (next_burst_ms_ < to_ms) {
    for (const Algorithm algorithm : options_.algorithms) {
      const size_t key = keys_.size();
      keys_.push_back({std::string(AlgorithmName(algorithm)) + "/burst/" + std::to_string(bursts_),
                       {algorithm, options_.limit, static_cast<uint64_t>(options_.window_ms)},
                       LoadKind::kBurst});
      for (uint64_t i = 0; i < kBurstFactor * options_.limit; ++i) {
        requests.push_back({next_burst_ms_ + random_->Between(0, kBurstSpreadMs), key});
      }
    }
    ++bursts_;
    next_burst_ms_ += 2 * options_.window_ms;
  }
  std::stable_sort(requests.begin(), requests.end(),
                   [](const Request& a, const Request& b) { return a.at_ms < b.at_ms; });
  return requests;
}

}  // namespace tally::sim
