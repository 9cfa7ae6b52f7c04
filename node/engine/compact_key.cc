#include "node/engine/compact_key.h"

namespace tally {

CompactKey::CompactKey(CompactKey&& other) noexcept {
  std::memcpy(bytes_, other.bytes_, sizeof(bytes_));
  other.set_tag(0);
}

CompactKey& CompactKey::operator=(CompactKey&& other) noexcept {
  if (this != &other) {
    Clear();
    std::memcpy(bytes_, other.bytes_, sizeof(bytes_));
    other.set_tag(0);
  }
  return *this;
}

void CompactKey::Assign(std::string_view key) {
  Clear();
  if (key.size() <= kInlineCapacity) {
    std::memcpy(bytes_, key.data(), key.size());
    set_size_tag(static_cast<uint8_t>(key.size()));
    return;
  }
  char* data = new char[key.size()];
  std::memcpy(data, key.data(), key.size());
  const auto size = static_cast<uint32_t>(key.size());
  std::memcpy(bytes_, &data, sizeof(data));
  std::memcpy(bytes_ + sizeof(data), &size, sizeof(size));
  set_size_tag(kHeapTag);
}

void CompactKey::Clear() {
  if (size_tag() == kHeapTag) delete[] heap_data();
  set_size_tag(0);
}

}  // namespace tally
