// LEB128 varints and fixed-width integers, as storage/ and the peer protocol
// lay them out.
//
// Thread safety: stateless functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tally {

inline void PutVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Reads a varint from the front of *in. False when *in ends or it is over 10 bytes.
inline bool GetVarint(std::string_view* in, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    const auto byte = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// Little-endian (x86-64, aarch64): the byte order of the host.
template <typename T>
void PutFixed(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

// Big-endian: byte strings that compare as the numbers do (RocksDB key order).
inline void PutBigEndian(uint64_t value, int bytes, std::string* out) {
  for (int shift = 8 * (bytes - 1); shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>(value >> shift));
  }
}

inline uint64_t GetBigEndian(std::string_view bytes) {
  uint64_t value = 0;
  for (const char byte : bytes) value = value << 8 | static_cast<uint8_t>(byte);
  return value;
}

}  // namespace tally
