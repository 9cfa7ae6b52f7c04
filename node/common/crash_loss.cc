#include "node/common/crash_loss.h"

#include "node/common/varint.h"

namespace tally {

std::string EncodeCrashLosses(std::span<const CrashLoss> losses) {
  std::string out;
  PutVarint(losses.size(), &out);
  for (const CrashLoss& loss : losses) {
    PutVarint(loss.node_id, &out);
    PutVarint(loss.incarnation, &out);
    PutVarint(static_cast<uint64_t>(loss.at_ms), &out);
  }
  return out;
}

bool DecodeCrashLosses(std::string_view bytes, std::vector<CrashLoss>* losses) {
  losses->clear();
  uint64_t count = 0;
  if (!GetVarint(&bytes, &count) || count > kMaxCrashLosses) return false;
  for (uint64_t i = 0; i < count; ++i) {
    CrashLoss loss;
    uint64_t at_ms = 0;
    if (!GetVarint(&bytes, &loss.node_id) || !GetVarint(&bytes, &loss.incarnation) ||
        !GetVarint(&bytes, &at_ms) || loss.node_id == 0 || at_ms > INT64_MAX) {
      losses->clear();
      return false;
    }
    loss.at_ms = static_cast<int64_t>(at_ms);
    losses->push_back(loss);
  }
  if (!bytes.empty()) losses->clear();
  return bytes.empty();
}

}  // namespace tally
