// PeerAuth: the cluster secret's proof on every peer message (HMAC-SHA256,
// OpenSSL).
//
// A gossip connection opens with a hello each way, each carrying a fresh
// random nonce. Both ends derive the connection's key
//   K = HMAC(secret, "tally-peer-1" | dialler's nonce | acceptor's nonce)
// and every message after the dialler's hello is followed by a seal frame
// (PeerSeal: seq, mac) with mac = HMAC(K, seq as 8 bytes big-endian | the
// message's frame, byte for byte). The acceptor seals its hello with seq 0
// (so the dialler knows it talks to a member); the dialler's messages carry
// seq 1, 2, ... and the acceptor takes only the next one. So a node without
// the secret cannot write counts, and no message can be replayed or
// reordered, within a connection or into another one (whose nonces differ).
// What is not protected: confidentiality (state travels in clear), and a
// member's claims about its own node id (members are trusted).
//
// Thread safety: a PeerAuth is immutable after construction; Mac and Verify
// may be called from any thread (each copies the keyed state it only reads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

struct evp_mac_ctx_st;

namespace tally::protocol {

inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kMinSecretBytes = 16;

// kNonceBytes from the system's secure random source.
std::string RandomNonce();

// The engine's key hash seed for a cluster (Limiter::Options::key_hash_seed):
// HMAC(secret, "tally-key-hash-1"), its first 8 bytes. Alike on every member,
// unknown to whoever lacks the secret.
uint64_t KeyHashSeed(std::string_view secret);

class PeerAuth {
 public:
  PeerAuth(std::string_view secret, std::string_view dialler_nonce,
           std::string_view acceptor_nonce);

  std::string Mac(uint64_t seq, std::span<const std::byte> frame) const;
  // Constant-time comparison with the mac the frame should carry.
  bool Verify(uint64_t seq, std::span<const std::byte> frame, std::string_view mac) const;

 private:
  struct FreeContext {
    void operator()(evp_mac_ctx_st* context) const;
  };
  // HMAC-SHA256 keyed with K, never updated: each Mac starts from a copy, so
  // the digest is looked up and the key scheduled once per connection.
  std::unique_ptr<evp_mac_ctx_st, FreeContext> keyed_;
};

// Convenience for a frame held in a string.
inline std::span<const std::byte> FrameBytes(const std::string& frame) {
  return {reinterpret_cast<const std::byte*>(frame.data()), frame.size()};
}

}  // namespace tally::protocol
