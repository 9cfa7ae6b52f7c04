// CompactKey: an owned byte string in 24 bytes, for the engine's key tables.
//
// Keys of up to 23 bytes live inline (no allocation); longer ones on the
// heap. The empty key marks a free table slot (ValidateKey rejects empty
// keys, so a live entry never has one).
//
// It also carries kMarkCount flags for its owner, in bits the size byte does
// not use: the engine marks an entry changed with them, at no cost in memory.
// Assign and Clear keep the marks; a move carries them (and a moved-from or
// default key has none).
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

  bool empty() const { return size_tag() == 0; }
  std::string_view view() const {
    return size_tag() == kHeapTag ? std::string_view(heap_data(), heap_size())
                                  : std::string_view(bytes_, size_tag());
  }

  static constexpr int kMarkCount = 3;
  // mark: 0 .. kMarkCount - 1.
  bool marked(int mark) const { return (tag() & MarkBit(mark)) != 0; }
  void set_marked(int mark, bool on) {
    set_tag(on ? tag() | MarkBit(mark) : tag() & ~MarkBit(mark));
  }

 private:
  // bytes_[0..22] hold an inline key; bytes_[23] is the tag: its low 5 bits
  // are the inline size or kHeapTag, its top 3 bits the marks. A heap key keeps
  // its pointer in bytes_[0..7] and its size in bytes_[8..11].
  static constexpr size_t kInlineCapacity = 23;
  static constexpr uint8_t kSizeMask = 0x1F;
  static constexpr uint8_t kHeapTag = kSizeMask;
  static constexpr uint8_t MarkBit(int mark) { return static_cast<uint8_t>(0x20 << mark); }

  uint8_t tag() const { return static_cast<uint8_t>(bytes_[kInlineCapacity]); }
  uint8_t size_tag() const { return tag() & kSizeMask; }
  void set_tag(int tag) { bytes_[kInlineCapacity] = static_cast<char>(tag); }
  // Sets the size part of the tag; the marks stay.
  void set_size_tag(uint8_t size_tag) { set_tag((tag() & ~kSizeMask) | size_tag); }
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
