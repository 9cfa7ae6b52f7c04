// Engine benchmark: ns per check for each algorithm on 1, 10k and 1M keys,
// with one and two threads, and bytes of memory per key, side by side in one
// run; beside them ns per merged key-slot (a peer's delta of one key, as
// gossip merges it), one at a time and in batches, and the time of a cache
// line read at random (the floor under the 1M-key rows). Prints Google
// Benchmark's table, then a summary table and the batched merges' ratios to
// the batched checks, each also in random lines' time; pass
// --benchmark_out=FILE --benchmark_out_format=json for JSON.
// With --benchmark_repetitions=N the summary and the ratios take each
// benchmark's median; add --benchmark_enable_random_interleaving=true so that
// a shared machine's busy spells fall on the checks and the merges alike.
//
// Keys are visited in a shuffled order, so at 1M keys almost every check
// misses the CPU caches, as a busy node's would. The clock is the real
// system clock; limits are high enough that every check is admitted.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "node/engine/limiter.h"
#include "tests/bench/heap_bytes.h"

namespace tally {
namespace {

using bench::HeapBytesInUse;

constexpr Algorithm kAlgorithms[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                                     Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket};
constexpr size_t kKeyCounts[] = {1, 10'000, 1'000'000};

LimitSpec SpecFor(Algorithm algorithm) { return LimitSpec{algorithm, kMaxLimit, 60'000}; }

// Merges (below): a peer's state of a key, as gossip brings it. The peer is
// node 2; the window is an hour, so that a run stays within one.
constexpr NodeId kPeer = 2;
constexpr uint64_t kMergeWindowMs = 3'600'000;

LimitSpec MergeSpecFor(Algorithm algorithm) {
  return LimitSpec{algorithm, kMaxLimit, kMergeWindowMs};
}

// Refills *snapshot with the peer's state of `key` as of pass `round` at
// wall_ms: one key-slot (its slot of the current window; a bucket: its slices).
void FillDelta(Algorithm algorithm, const std::string& key, uint64_t round, int64_t wall_ms,
               KeySnapshot* snapshot) {
  snapshot->key.assign(key);
  snapshot->algorithm = algorithm;
  snapshot->window_ms = kMergeWindowMs;
  if (algorithm == Algorithm::kTokenBucket) {
    // The peer's slices from the base to now, its cost at the current slice.
    const int64_t slice = BucketSliceAt(kMergeWindowMs, wall_ms);
    BucketSlices& bucket = snapshot->bucket;
    bucket.capacity = kMaxLimit;
    bucket.base_slice = BucketBaseFor(slice);
    bucket.base_debt = 0;
    bucket.nodes.resize(1);
    bucket.nodes[0].node = kPeer;
    bucket.nodes[0].counts.assign(static_cast<size_t>(slice - bucket.base_slice + 1), 0);
    bucket.nodes[0].counts.back() = static_cast<uint32_t>(round);
    return;
  }
  snapshot->counts.window_index = wall_ms / static_cast<int64_t>(kMergeWindowMs);
  snapshot->counts.current.Clear();
  snapshot->counts.previous.Clear();
  snapshot->counts.current.MergeSlot(kPeer, round);
}

// One limiter pre-filled with `key_count` keys, and what they cost in memory.
// Built on first use, so a filtered run builds only what it measures.
struct Setup {
  Algorithm algorithm;
  size_t key_count;
  LimitSpec spec;          // of every key
  bool peer_slot = false;  // each key also holds the peer's slot (merged once)
  std::once_flag built;
  std::vector<std::string> keys;  // in the shuffled visiting order
  std::unique_ptr<Limiter> limiter;
  double bytes_per_key = 0;
};

void Build(Setup* setup) {
  const size_t key_count = setup->key_count;
  setup->keys.reserve(key_count);
  for (size_t i = 0; i < key_count; ++i) setup->keys.push_back("user:" + std::to_string(i));
  std::shuffle(setup->keys.begin(), setup->keys.end(), std::mt19937_64(42));
  const size_t before = HeapBytesInUse();
  setup->limiter = std::make_unique<Limiter>(Limiter::Options{1, 2 * key_count + 16});
  Decision decision;
  KeySnapshot snapshot;
  const int64_t wall_ms = SystemClock::Default()->WallMs();
  for (const std::string& key : setup->keys) {
    if (!setup->limiter->Check(key, setup->spec, 1, &decision).ok()) std::abort();
    if (!setup->peer_slot) continue;
    FillDelta(setup->algorithm, key, 1, wall_ms, &snapshot);
    if (!setup->limiter->Merge(snapshot).ok()) std::abort();
  }
  setup->bytes_per_key = static_cast<double>(HeapBytesInUse() - before) / key_count;
}

void BM_Check(benchmark::State& state, Setup* setup) {
  std::call_once(setup->built, Build, setup);
  const LimitSpec spec = setup->spec;
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

void BM_CheckBatch(benchmark::State& state, Setup* setup) {
  std::call_once(setup->built, Build, setup);
  const size_t key_count = setup->keys.size();
  size_t next = key_count * static_cast<size_t>(state.thread_index()) / 2;
  std::vector<Limiter::CheckRequest> requests(kBatchSize);
  std::vector<Limiter::CheckResult> results(kBatchSize);
  for (auto _ : state) {
    for (Limiter::CheckRequest& request : requests) {
      request = {setup->keys[next], setup->spec, 1};
      if (++next == key_count) next = 0;
    }
    setup->limiter->CheckBatch(requests, results);
    benchmark::DoNotOptimize(results.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatchSize);
  state.counters["bytes_per_key"] =
      benchmark::Counter(setup->bytes_per_key, benchmark::Counter::kAvgThreads);
}

// Merge: ns per key-slot, one peer's slot of a key as a gossip delta carries
// it, merged into a node that holds the key (checked here, and merged from the
// peer once before, so that the peer's slot exists: the steady state). Each
// pass over the keys raises the peer's count, so every merge changes state.

// Walks the keys from the thread's starting point, counting passes.
struct DeltaCursor {
  DeltaCursor(const Setup& setup, int thread_index)
      : keys(setup.keys), next(keys.size() * static_cast<size_t>(thread_index) / 2) {}
  const std::string& Next() {
    const std::string& key = keys[next];
    if (++next == keys.size()) {
      next = 0;
      ++round;
    }
    return key;
  }
  const std::vector<std::string>& keys;
  size_t next;
  uint64_t round = 2;  // pass 1 was Build's
};

void BM_Merge(benchmark::State& state, Setup* setup) {
  std::call_once(setup->built, Build, setup);
  DeltaCursor cursor(*setup, state.thread_index());
  KeySnapshot snapshot;
  int64_t wall_ms = 0;
  size_t merged = 0;
  for (auto _ : state) {
    if (merged++ % kBatchSize == 0) wall_ms = SystemClock::Default()->WallMs();
    FillDelta(setup->algorithm, cursor.Next(), cursor.round, wall_ms, &snapshot);
    Status status = setup->limiter->Merge(snapshot);
    benchmark::DoNotOptimize(status);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["bytes_per_key"] =
      benchmark::Counter(setup->bytes_per_key, benchmark::Counter::kAvgThreads);
}

// The same deltas through MergeBatch, `batch_size` at a time (as gossip
// merges a message); time is reported per key-slot. Building a batch's
// deltas is not timed (a batched check's time leaves out decoding its
// requests too); merge/ above times it with each merge (a pause per merge
// would cost more than the merge).
void BM_MergeBatch(benchmark::State& state, Setup* setup, size_t batch_size) {
  std::call_once(setup->built, Build, setup);
  DeltaCursor cursor(*setup, state.thread_index());
  std::vector<KeySnapshot> snapshots(batch_size);
  std::vector<Status> statuses(batch_size);
  for (auto _ : state) {
    state.PauseTiming();
    const int64_t wall_ms = SystemClock::Default()->WallMs();
    for (KeySnapshot& snapshot : snapshots) {
      FillDelta(setup->algorithm, cursor.Next(), cursor.round, wall_ms, &snapshot);
    }
    state.ResumeTiming();
    setup->limiter->MergeBatch(snapshots, statuses);
    benchmark::DoNotOptimize(statuses.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(batch_size));
  state.counters["bytes_per_key"] =
      benchmark::Counter(setup->bytes_per_key, benchmark::Counter::kAvgThreads);
}

// Anti-entropy's digests (Limiter::RangeDigests) of every range, once per
// interval at a new reference time: ns per key digested. Beside it, a full
// sync's collection of every key (CollectReplica), which reads the same state.
void BM_Digest(benchmark::State& state, Setup* setup) {
  std::call_once(setup->built, Build, setup);
  int64_t ref_ms = SystemClock::Default()->WallMs();
  const size_t ranges_per_shard = Limiter::range_count() / Limiter::shard_count();
  std::vector<uint64_t> digests(Limiter::range_count());
  for (auto _ : state) {
    ++ref_ms;  // a new interval: every range is computed again
    for (size_t shard = 0; shard < Limiter::shard_count(); ++shard) {
      const std::span<uint64_t> out(digests.data() + shard * ranges_per_shard, ranges_per_shard);
      benchmark::DoNotOptimize(setup->limiter->RangeDigests(shard, ref_ms, out));
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(setup->key_count));
  state.counters["bytes_per_key"] = setup->bytes_per_key;
}

void BM_CollectReplica(benchmark::State& state, Setup* setup) {
  std::call_once(setup->built, Build, setup);
  uint64_t collected = 0;
  for (auto _ : state) {
    for (size_t shard = 0; shard < Limiter::shard_count(); ++shard) {
      setup->limiter->CollectReplica(shard, [&](const KeySnapshot&) { ++collected; });
    }
  }
  benchmark::DoNotOptimize(collected);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(setup->key_count));
  state.counters["bytes_per_key"] = setup->bytes_per_key;
}

// The machine's floor under the 1M-key rows: ns per cache line read at random
// from kRandomBytes (beyond every cache, as 1M keys' state is), each read
// independent of the others and kLinesAhead lines prefetched ahead, so that as
// many misses are in flight as the core allows. A check or merge at 1M keys
// costs at least the random lines it reads times this (a merge reads more
// lines than a check: the entry's remote counts too).
constexpr size_t kRandomBytes = size_t{256} << 20;
constexpr size_t kLinesAhead = 16;
constexpr char kRandomLineRow[] = "randomline/mib:256";

void BM_RandomLine(benchmark::State& state) {
  constexpr size_t kLineWords = 64 / sizeof(uint64_t);
  std::vector<uint64_t> memory(kRandomBytes / sizeof(uint64_t), 1);
  constexpr size_t kOrderMask = (size_t{1} << 20) - 1;
  std::vector<uint32_t> order(kOrderMask + 1);  // word offsets of random lines, visited in turn
  std::mt19937_64 random(42);
  for (uint32_t& offset : order) {
    offset = static_cast<uint32_t>(random() % (memory.size() / kLineWords) * kLineWords);
  }
  constexpr size_t kLinesPerPass = 1024;
  size_t next = 0;
  uint64_t sum = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < kLinesPerPass; ++i) {
      __builtin_prefetch(&memory[order[(next + kLinesAhead) & kOrderMask]]);
      sum += memory[order[next]];
      next = (next + 1) & kOrderMask;
    }
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kLinesPerPass));
  state.counters["bytes_per_key"] = 0;
}

// Collects the runs and prints one row per (api, algorithm, keys) at the end,
// then each batched merge's time against the batched check's.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      // With --benchmark_repetitions, each row takes the repetitions' median.
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      if (run.error_occurred) continue;
      if (run.run_type == Run::RT_Iteration ? run.repetitions > 1 : !median) continue;
      Row& row = rows_[run.run_name.function_name];
      const double items_per_second = run.counters.at("items_per_second").value;
      const double ns_per_item = 1e9 / items_per_second;
      if (run.threads == 1) {
        row.ns_one_thread = ns_per_item;
        // CPU time: what the thread itself spent, on a machine shared with others.
        row.cpu_ns_one_thread = ns_per_item * run.GetAdjustedCPUTime() / run.GetAdjustedRealTime();
      } else {
        row.ns_two_threads = ns_per_item;
      }
      row.bytes_per_key = run.counters.at("bytes_per_key").value;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%-42s %12s %12s %12s %10s\n", "<api>/<algorithm>/keys:<n>", "ns/op 1thr",
                "cpu ns 1thr", "ns/op 2thr", "bytes/key");
    for (const auto& [name, row] : rows_) {
      std::printf("%-42s %12.1f %12.1f %12.1f %10.1f\n", name.c_str(), row.ns_one_thread,
                  row.cpu_ns_one_thread, row.ns_two_threads, row.bytes_per_key);
    }
    std::printf(
        "(op: a check for check/ and [peer-]batch64/, a key-slot for merge/ and mergebatch<n>/,\n"
        " a key for digest/ and collect/, a cache line read at random for randomline/;\n"
        " 2 threads: aggregate time per op, i.e. 1e9 / total ops per second; 0: not run)\n");
    // Each batched merge against the batched check, of the same keys' kind
    // (batch64/) and of keys that hold a peer's slot too (peer-batch64/).
    // And each in random lines' time (randomline/, when run): what a batched
    // merge and check cost in units of this machine's floor.
    const auto line = rows_.find(kRandomLineRow);
    const double line_ns = line == rows_.end() ? 0 : line->second.ns_one_thread;
    std::printf("\n%-42s %10s %10s %10s %10s %12s %12s\n", "batched merge / batched check",
                "ns ratio", "cpu ratio", "peer ns", "peer cpu", "merge lines", "check lines");
    for (const auto& [name, row] : rows_) {
      if (!name.starts_with("mergebatch")) continue;
      const std::string rest = name.substr(name.find('/'));
      const auto check = rows_.find("batch64" + rest);
      const auto peer_check = rows_.find("peer-batch64" + rest);
      const auto ratio = [&](auto found, double Row::*field) {
        return found == rows_.end() || found->second.*field == 0
                   ? 0
                   : row.*field / found->second.*field;
      };
      const auto in_lines = [&](double ns) { return line_ns == 0 ? 0 : ns / line_ns; };
      std::printf("%-42s %10.2f %10.2f %10.2f %10.2f %12.1f %12.1f\n", name.c_str(),
                  ratio(check, &Row::ns_one_thread), ratio(check, &Row::cpu_ns_one_thread),
                  ratio(peer_check, &Row::ns_one_thread),
                  ratio(peer_check, &Row::cpu_ns_one_thread), in_lines(row.ns_one_thread),
                  in_lines(check == rows_.end() ? 0 : check->second.ns_one_thread));
    }
  }

 private:
  struct Row {
    double ns_one_thread = 0, cpu_ns_one_thread = 0, ns_two_threads = 0, bytes_per_key = 0;
  };
  std::map<std::string, Row> rows_;
};

}  // namespace
}  // namespace tally

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::vector<std::unique_ptr<tally::Setup>> setups;
  const auto add_setup = [&](tally::Algorithm algorithm, size_t key_count, bool peer_slot) {
    setups.push_back(std::make_unique<tally::Setup>());
    tally::Setup* setup = setups.back().get();
    setup->algorithm = algorithm;
    setup->key_count = key_count;
    setup->peer_slot = peer_slot;
    setup->spec = peer_slot ? tally::MergeSpecFor(algorithm) : tally::SpecFor(algorithm);
    return setup;
  };
  for (tally::Algorithm algorithm : tally::kAlgorithms) {
    for (size_t key_count : tally::kKeyCounts) {
      tally::Setup* setup = add_setup(algorithm, key_count, false);
      const std::string name =
          std::string(tally::AlgorithmName(algorithm)) + "/keys:" + std::to_string(key_count);
      for (auto [prefix, function] :
           {std::pair{"check/", &tally::BM_Check}, std::pair{"batch64/", &tally::BM_CheckBatch}}) {
        benchmark::RegisterBenchmark((prefix + name).c_str(), function, setup)
            ->Threads(1)
            ->Threads(2)
            ->UseRealTime();
      }
    }
  }
  // Merges beside the checks, for the counting algorithms' common case and the
  // bucket, into keys that hold a peer's slot; and the batched check of such
  // keys (peer-batch64/), which reads the peer's slot too.
  for (tally::Algorithm algorithm :
       {tally::Algorithm::kSlidingWindowCounter, tally::Algorithm::kTokenBucket}) {
    for (size_t key_count : {size_t{10'000}, size_t{1'000'000}}) {
      tally::Setup* setup = add_setup(algorithm, key_count, true);
      const std::string name =
          std::string(tally::AlgorithmName(algorithm)) + "/keys:" + std::to_string(key_count);
      benchmark::RegisterBenchmark(("merge/" + name).c_str(), &tally::BM_Merge, setup)
          ->UseRealTime();
      // 64 as the checks' batches; 1024 as gossip merges (PeerSession::kMergeBatchKeys).
      for (size_t batch_size : {size_t{64}, size_t{1024}}) {
        benchmark::RegisterBenchmark(
            ("mergebatch" + std::to_string(batch_size) + "/" + name).c_str(), &tally::BM_MergeBatch,
            setup, batch_size)
            ->UseRealTime();
      }
      benchmark::RegisterBenchmark(("peer-batch64/" + name).c_str(), &tally::BM_CheckBatch, setup)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("digest/" + name).c_str(), &tally::BM_Digest, setup)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("collect/" + name).c_str(), &tally::BM_CollectReplica, setup)
          ->UseRealTime();
    }
  }
  benchmark::RegisterBenchmark(tally::kRandomLineRow, &tally::BM_RandomLine)->UseRealTime();
  tally::SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
