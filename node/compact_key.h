// CompactKey: an owned byte string in 24 bytes, for the engine's key tables.
//
// Keys of up to 23 bytes live inline (no allocation); longer ones on the
// heap. The empty key marks a free table slot (ValidateKey rejects empty
// keys, so a live entry never has one).
//
// Thread safety: a value type; no internal synchronisation.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace tally {

class CompactKey {
 public:
  CompactKey() = default;
  explicit CompactKey(std::string_view key) { Assign(key); }
  ~CompactKey() { Clear(); }
  CompactKey(const CompactKey&) = delete;
  CompactKey& operator=(const CompactKey&) = delete;
  CompactKey(CompactKey&& other) noexcept;
  CompactKey& operator=(CompactKey&& other) noexcept;

  void Assign(std::string_view key);
  void Clear();

  bool empty() const { return tag() == 0; }
  std::string_view view() const {
    return tag() == kHeapTag ? std::string_view(heap_data(), heap_size())
                             : std::string_view(bytes_, tag());
  }

 private:
  // bytes_[0..22] hold an inline key; bytes_[23] is the tag. A heap key keeps
  // its pointer in bytes_[0..7] and its size in bytes_[8..11].
  static constexpr size_t kInlineCapacity = 23;
  static constexpr uint8_t kHeapTag = 0xFF;

  uint8_t tag() const { return static_cast<uint8_t>(bytes_[kInlineCapacity]); }
  void set_tag(uint8_t tag) { bytes_[kInlineCapacity] = static_cast<char>(tag); }
  char* heap_data() const {
    char* data;
    std::memcpy(&data, bytes_, sizeof(data));
    return data;
  }
  uint32_t heap_size() const {
    uint32_t size;
    std::memcpy(&size, bytes_ + sizeof(char*), sizeof(size));
    return size;
  }

  alignas(8) char bytes_[kInlineCapacity + 1] = {};
};

static_assert(sizeof(CompactKey) == 24);

}  // namespace tally
