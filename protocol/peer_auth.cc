#include "protocol/peer_auth.h"

#include <stdexcept>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

namespace tally::protocol {
namespace {

// HMAC-SHA256(key, part_1 | part_2 | part_3). OpenSSL failing here means a
// broken installation: that is no input error, so it throws.
std::string Hmac(std::string_view key, std::span<const std::string_view> parts) {
  static EVP_MAC* const hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (hmac == nullptr) throw std::runtime_error("OpenSSL has no HMAC");
  EVP_MAC_CTX* context = EVP_MAC_CTX_new(hmac);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  std::string mac(kMacBytes, '\0');
  size_t length = 0;
  bool ok = context != nullptr &&
            EVP_MAC_init(context, reinterpret_cast<const unsigned char*>(key.data()), key.size(),
                         params) == 1;
  for (std::string_view part : parts) {
    ok = ok && EVP_MAC_update(context, reinterpret_cast<const unsigned char*>(part.data()),
                              part.size()) == 1;
  }
  ok = ok && EVP_MAC_final(context, reinterpret_cast<unsigned char*>(mac.data()), &length,
                           mac.size()) == 1;
  EVP_MAC_CTX_free(context);
  if (!ok || length != kMacBytes) throw std::runtime_error("OpenSSL HMAC-SHA256 failed");
  return mac;
}

std::string SeqBytes(uint64_t seq) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i)
    bytes[static_cast<size_t>(i)] = static_cast<char>(seq >> (56 - 8 * i));
  return bytes;
}

}  // namespace

std::string RandomNonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) !=
      1) {
    throw std::runtime_error("OpenSSL RAND_bytes failed");
  }
  return nonce;
}

PeerAuth::PeerAuth(std::string_view secret, std::string_view dialler_nonce,
                   std::string_view acceptor_nonce) {
  const std::string_view parts[] = {"tally-peer-1", dialler_nonce, acceptor_nonce};
  key_ = Hmac(secret, parts);
}

std::string PeerAuth::Mac(uint64_t seq, std::span<const std::byte> frame) const {
  const std::string seq_bytes = SeqBytes(seq);
  const std::string_view parts[] = {seq_bytes,
                                    {reinterpret_cast<const char*>(frame.data()), frame.size()}};
  return Hmac(key_, parts);
}

bool PeerAuth::Verify(uint64_t seq, std::span<const std::byte> frame, std::string_view mac) const {
  if (mac.size() != kMacBytes) return false;
  const std::string expected = Mac(seq, frame);
  return CRYPTO_memcmp(expected.data(), mac.data(), kMacBytes) == 0;
}

}  // namespace tally::protocol
