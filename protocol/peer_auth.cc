#include "protocol/peer_auth.h"

#include <stdexcept>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

namespace tally::protocol {
namespace {

// OpenSSL failing here means a broken installation: that is no input error,
// so it throws.
void Require(bool ok) {
  if (!ok) throw std::runtime_error("OpenSSL HMAC-SHA256 failed");
}

// A new HMAC-SHA256 context keyed with `key`.
EVP_MAC_CTX* KeyedContext(std::string_view key) {
  static EVP_MAC* const hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (hmac == nullptr) throw std::runtime_error("OpenSSL has no HMAC");
  EVP_MAC_CTX* context = EVP_MAC_CTX_new(hmac);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  const bool ok = context != nullptr &&
                  EVP_MAC_init(context, reinterpret_cast<const unsigned char*>(key.data()),
                               key.size(), params) == 1;
  if (!ok) EVP_MAC_CTX_free(context);
  Require(ok);
  return context;
}

// The MAC of part_1 | part_2 | ... from `keyed` (left as it was).
std::string Finish(const EVP_MAC_CTX* keyed, std::span<const std::string_view> parts) {
  EVP_MAC_CTX* context = EVP_MAC_CTX_dup(keyed);
  std::string mac(kMacBytes, '\0');
  size_t length = 0;
  bool ok = context != nullptr;
  for (std::string_view part : parts) {
    ok = ok && EVP_MAC_update(context, reinterpret_cast<const unsigned char*>(part.data()),
                              part.size()) == 1;
  }
  ok = ok && EVP_MAC_final(context, reinterpret_cast<unsigned char*>(mac.data()), &length,
                           mac.size()) == 1;
  EVP_MAC_CTX_free(context);
  Require(ok && length == kMacBytes);
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

uint64_t KeyHashSeed(std::string_view secret) {
  const std::string_view parts[] = {"tally-key-hash-1"};
  const std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> keyed(KeyedContext(secret),
                                                                        &EVP_MAC_CTX_free);
  const std::string mac = Finish(keyed.get(), parts);
  uint64_t seed = 0;
  for (size_t i = 0; i < 8; ++i) seed = seed << 8 | static_cast<unsigned char>(mac[i]);
  return seed;
}

PeerAuth::PeerAuth(std::string_view secret, std::string_view dialler_nonce,
                   std::string_view acceptor_nonce) {
  const std::string_view parts[] = {"tally-peer-1", dialler_nonce, acceptor_nonce};
  const std::unique_ptr<EVP_MAC_CTX, FreeContext> with_secret(KeyedContext(secret));
  keyed_.reset(KeyedContext(Finish(with_secret.get(), parts)));
}

void PeerAuth::FreeContext::operator()(evp_mac_ctx_st* context) const { EVP_MAC_CTX_free(context); }

std::string PeerAuth::Mac(uint64_t seq, std::span<const std::byte> frame) const {
  const std::string seq_bytes = SeqBytes(seq);
  const std::string_view parts[] = {seq_bytes,
                                    {reinterpret_cast<const char*>(frame.data()), frame.size()}};
  return Finish(keyed_.get(), parts);
}

bool PeerAuth::Verify(uint64_t seq, std::span<const std::byte> frame, std::string_view mac) const {
  if (mac.size() != kMacBytes) return false;
  const std::string expected = Mac(seq, frame);
  return CRYPTO_memcmp(expected.data(), mac.data(), kMacBytes) == 0;
}

}  // namespace tally::protocol
