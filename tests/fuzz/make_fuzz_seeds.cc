// Writes the fuzz targets' seed corpus (tests/fuzz/corpus/<target>/): valid
// inputs of every kind each decoder takes, made with the project's own
// encoders, so that fuzzing starts from deep inside the formats. Run it again
// when a format changes:
//   build/bin/tally-make-fuzz-seeds tests/fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "protocol/codec.h"
#include "protocol/peer_auth.h"
#include "protocol/peer_codec.h"
#include "storage/record.h"
#include "storage/run.h"

namespace {

namespace fs = std::filesystem;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

// A limiter holding a few keys of every algorithm, as several nodes made them.
std::vector<tally::KeySnapshot> Snapshots() {
  tally::ManualClock clock(1'700'000'000'000);
  tally::Limiter::Options options;
  options.clock = &clock;
  options.node_id = 7;
  options.replicate = true;
  tally::Limiter limiter(options);
  for (int algorithm = 0; algorithm < tally::kAlgorithmCount; ++algorithm) {
    const tally::LimitSpec spec{static_cast<tally::Algorithm>(algorithm), 10, 60'000};
    for (int i = 0; i < 3; ++i) {
      tally::Decision decision;
      static_cast<void>(limiter.Check("user:" + std::to_string(algorithm), spec, 1, &decision));
      clock.AdvanceMs(250);
    }
  }
  std::vector<tally::KeySnapshot> snapshots;
  limiter.CollectAll([&](const tally::KeySnapshot& snapshot) { snapshots.push_back(snapshot); });
  return snapshots;
}

void ClientFrames(const fs::path& dir) {
  tally::protocol::Request checks;
  checks.id = 1;
  for (int algorithm = 0; algorithm < tally::kAlgorithmCount; ++algorithm) {
    checks.checks.push_back(
        {"key", tally::LimitSpec{static_cast<tally::Algorithm>(algorithm), 5, 1'000}, 1});
  }
  std::string frames;
  tally::protocol::EncodeRequest(checks, &frames);
  tally::protocol::Request stats;
  stats.id = 2;
  stats.kind = tally::protocol::RequestKind::kStats;
  tally::protocol::EncodeRequest(stats, &frames);
  tally::protocol::Request policy;
  policy.id = 3;
  policy.kind = tally::protocol::RequestKind::kPolicyCheck;
  policy.policy_check.domain = "api";
  policy.policy_check.entries = {{"remote_address", "10.0.0.1"}, {"path", "/login"}};
  policy.policy_check.descriptor_sizes = {1, 1};
  tally::protocol::EncodeRequest(policy, &frames);
  // The first byte sets the first read's size (FuzzInput); 0xff reads 256 bytes.
  Write(dir, "pipelined", std::string(1, '\xff') + frames);
}

void PeerMessages(const fs::path& dir, const std::vector<tally::KeySnapshot>& snapshots) {
  std::string hello;
  tally::protocol::EncodeHello(9, std::string(tally::protocol::kNonceBytes, 'n'), true,
                               1'800'000'000'000, &hello);
  tally::protocol::EncodeSeal(1, std::string(tally::protocol::kMacBytes, 'm'), &hello);
  Write(dir, "hello", std::string(1, '\0') + hello);
  tally::protocol::PeerStateEncoder encoder(9, true, 64 << 10);
  std::vector<std::string> frames;
  for (const tally::KeySnapshot& snapshot : snapshots) encoder.Add(snapshot, &frames);
  encoder.Finish(&frames);
  std::string state;
  for (const std::string& frame : frames) state += frame;
  tally::protocol::EncodeSyncDone(&state);
  tally::protocol::EncodeHeartbeat(&state);
  Write(dir, "state", std::string(1, '\1') + state);
  // A delta whose counting keys carry the sender's denied costs.
  tally::protocol::PeerStateEncoder delta_encoder(9, false, 64 << 10);
  frames.clear();
  for (tally::KeySnapshot snapshot : snapshots) {
    snapshot.denied = {9, 3, 1};
    delta_encoder.Add(snapshot, &frames);
  }
  delta_encoder.Finish(&frames);
  std::string delta;
  for (const std::string& frame : frames) delta += frame;
  Write(dir, "delta-denied", std::string(1, '\1') + delta);
  std::vector<tally::protocol::MemberRecord> members(2);
  members[0].node_id = 9;
  members[0].address = "127.0.0.1:7421";
  members[1].node_id = 10;
  members[1].address = "127.0.0.1:7422";
  std::string member_frame;
  const std::vector<tally::CrashLoss> losses = {{9, 1'800'000'000'000, 1'799'999'999'000}};
  tally::protocol::EncodeMembers(members, losses, nullptr, &member_frame);
  Write(dir, "members", std::string(1, '\2') + member_frame);
  const tally::protocol::Probe probe{5, 9, 10, false, 1'800'000'000'000};
  std::string probe_frame;
  tally::protocol::EncodeMembers(members, {}, &probe, &probe_frame);
  Write(dir, "probe", std::string(1, '\2') + probe_frame);
  const tally::protocol::RangeDigest digests[] = {{0, 17}, {4095, 1ULL << 63}};
  std::string digests_frame;
  tally::protocol::EncodeDigests(1'800'000'000'000, digests, &digests_frame);
  Write(dir, "digests", std::string(1, '\2') + digests_frame);
  const uint32_t want[] = {3, 4095}, later[] = {7};
  std::string ranges_frame;
  tally::protocol::EncodeRanges(want, later, &ranges_frame);
  Write(dir, "ranges", std::string(1, '\2') + ranges_frame);
}

void StorageRecords(const fs::path& dir, const std::vector<tally::KeySnapshot>& snapshots) {
  tally::storage::PartBuilder part;
  int index = 0;
  for (const tally::KeySnapshot& snapshot : snapshots) {
    part.Add(snapshot);
    const std::string key = tally::storage::EncodeRecordKey(snapshot);
    // Byte 1 (odd): a single record; then the key's length, the key, the value.
    Write(dir, "record-" + std::to_string(index++),
          std::string(1, '\1') + std::string(1, static_cast<char>(key.size())) + key +
              tally::storage::EncodeRecordValue(snapshot));
  }
  Write(dir, "part", std::string(1, '\0') + part.part());
}

void PolicyFiles(const fs::path& dir) {
  Write(dir, "api.yaml", R"(domain: api
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: path
    value: /login
    rate_limit:
      unit: minute
      requests_per_unit: 5
      algorithm: token_bucket
    descriptors:
      - key: user
        rate_limit:
          unlimited: true
  - key: plan
    value: free
    shadow_mode: true
    rate_limit: {requests_per_unit: 50, window_ms: 1500, algorithm: sliding_counter}
)");
  Write(dir, "envoy_keys.yaml", R"(domain: api
descriptors:
  - key: files
    value: files/*/v*
    share_threshold: true
    value_to_metric: true
    quota_mode: true
    detailed_metric: true
    metadata: {name: svc, port: 80, on: yes, tags: [a, "1"], owner: {team: edge}}
    rate_limit: {unit: year, requests_per_unit: 1000}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 7, name: w, replaces: [{name: x}]}
)");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const fs::path corpus = argv[1];
  const std::vector<tally::KeySnapshot> snapshots = Snapshots();
  ClientFrames(corpus / "client_frames");
  PeerMessages(corpus / "peer_messages", snapshots);
  StorageRecords(corpus / "storage_records", snapshots);
  PolicyFiles(corpus / "policy_files");
  return 0;
}
