// Engine benchmark: ns per check for each algorithm on 1, 10k and 1M keys,
// with one and two threads, and bytes of memory per key, side by side in one
// run. Prints Google Benchmark's table, then a summary table; pass
// --benchmark_out=FILE --benchmark_out_format=json for JSON.
//
// Keys are visited in a shuffled order, so at 1M keys almost every check
// misses the CPU caches, as a busy node's would. The clock is the real
// system clock; limits are high enough that every check is admitted.
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "node/engine/limiter.h"

namespace tally {
namespace {

constexpr Algorithm kAlgorithms[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                                     Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket};
constexpr size_t kKeyCounts[] = {1, 10'000, 1'000'000};

size_t HeapBytesInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

LimitSpec SpecFor(Algorithm algorithm) { return LimitSpec{algorithm, kMaxLimit, 60'000}; }

// One limiter pre-filled with `key_count` keys, and what they cost in memory.
// Built on first use, so a filtered run builds only what it measures.
struct Setup {
  Algorithm algorithm;
  size_t key_count;
  std::once_flag built;
  std::vector<std::string> keys;  // in the shuffled visiting order
  std::unique_ptr<Limiter> limiter;
  double bytes_per_key = 0;
};

void Build(Setup* setup) {
  const Algorithm algorithm = setup->algorithm;
  const size_t key_count = setup->key_count;
  setup->keys.reserve(key_count);
  for (size_t i = 0; i < key_count; ++i) setup->keys.push_back("user:" + std::to_string(i));
  std::shuffle(setup->keys.begin(), setup->keys.end(), std::mt19937_64(42));
  const size_t before = HeapBytesInUse();
  setup->limiter = std::make_unique<Limiter>(Limiter::Options{1, 2 * key_count + 16});
  Decision decision;
  for (const std::string& key : setup->keys) {
    if (!setup->limiter->Check(key, SpecFor(algorithm), 1, &decision).ok()) std::abort();
  }
  setup->bytes_per_key = static_cast<double>(HeapBytesInUse() - before) / key_count;
}

void BM_Check(benchmark::State& state, Setup* setup, Algorithm algorithm) {
  std::call_once(setup->built, Build, setup);
  const LimitSpec spec = SpecFor(algorithm);
  const size_t key_count = setup->keys.size();
  size_t next = key_count * static_cast<size_t>(state.thread_index()) / 2;
  Decision decision;
  for (auto _ : state) {
    Status status = setup->limiter->Check(setup->keys[next], spec, 1, &decision);
    benchmark::DoNotOptimize(status);
    benchmark::DoNotOptimize(decision);
    if (++next == key_count) next = 0;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["bytes_per_key"] =
      benchmark::Counter(setup->bytes_per_key, benchmark::Counter::kAvgThreads);
}

// The same checks through CheckBatch, kBatchSize at a time (as the daemon
// serves a request's batch); time is reported per check.
constexpr size_t kBatchSize = 64;

void BM_CheckBatch(benchmark::State& state, Setup* setup, Algorithm algorithm) {
  std::call_once(setup->built, Build, setup);
  const size_t key_count = setup->keys.size();
  size_t next = key_count * static_cast<size_t>(state.thread_index()) / 2;
  std::vector<Limiter::CheckRequest> requests(kBatchSize);
  std::vector<Limiter::CheckResult> results(kBatchSize);
  for (auto _ : state) {
    for (Limiter::CheckRequest& request : requests) {
      request = {setup->keys[next], SpecFor(algorithm), 1};
      if (++next == key_count) next = 0;
    }
    setup->limiter->CheckBatch(requests, results);
    benchmark::DoNotOptimize(results.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatchSize);
  state.counters["bytes_per_key"] =
      benchmark::Counter(setup->bytes_per_key, benchmark::Counter::kAvgThreads);
}

// Collects the runs and prints one row per (algorithm, keys) at the end.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
      Row& row = rows_[run.run_name.function_name];
      const double ns_per_check = 1e9 / run.counters.at("items_per_second").value;
      (run.threads == 1 ? row.ns_one_thread : row.ns_two_threads) = ns_per_check;
      row.bytes_per_key = run.counters.at("bytes_per_key").value;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%-42s %14s %14s %14s\n", "<api>/<algorithm>/keys:<n>", "ns/check 1thr",
                "ns/check 2thr", "bytes/key");
    for (const auto& [name, row] : rows_) {
      std::printf("%-42s %14.1f %14.1f %14.1f\n", name.c_str(), row.ns_one_thread,
                  row.ns_two_threads, row.bytes_per_key);
    }
    std::printf("(2 threads: aggregate time per check, i.e. 1e9 / total checks per second)\n");
  }

 private:
  struct Row {
    double ns_one_thread = 0, ns_two_threads = 0, bytes_per_key = 0;
  };
  std::map<std::string, Row> rows_;
};

}  // namespace
}  // namespace tally

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::vector<std::unique_ptr<tally::Setup>> setups;
  for (tally::Algorithm algorithm : tally::kAlgorithms) {
    for (size_t key_count : tally::kKeyCounts) {
      setups.push_back(std::make_unique<tally::Setup>());
      setups.back()->algorithm = algorithm;
      setups.back()->key_count = key_count;
      const std::string name =
          std::string(tally::AlgorithmName(algorithm)) + "/keys:" + std::to_string(key_count);
      for (auto [prefix, function] :
           {std::pair{"check/", &tally::BM_Check}, std::pair{"batch64/", &tally::BM_CheckBatch}}) {
        benchmark::RegisterBenchmark((prefix + name).c_str(), function, setups.back().get(),
                                     algorithm)
            ->Threads(1)
            ->Threads(2)
            ->UseRealTime();
      }
    }
  }
  tally::SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
