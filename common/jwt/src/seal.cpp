#include "wisp/jwt/seal.hpp"

#include <memory>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "openssl_util.hpp"
#include "wisp/fsutil/read_file.hpp"
#include "wisp/jwt/base64url.hpp"

namespace wisp::jwt {
namespace {

constexpr unsigned char kVersion = 0x01;
constexpr size_t kNonce = 12;
constexpr size_t kTag = 16;

struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherCtxPtr = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\n' || s.front() == '\r' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

Kek::~Kek() { OPENSSL_cleanse(key_.data(), key_.size()); }

absl::StatusOr<Kek> Kek::FromText(std::string_view text) {
  Kek kek;
  if (text.size() == kSize) {
    std::copy(text.begin(), text.end(), kek.key_.begin());
    return kek;
  }
  const std::string_view t = Trim(text);
  if (t.size() == 2 * kSize) {
    bool ok = true;
    for (size_t i = 0; i < kSize && ok; ++i) {
      const int hi = HexValue(t[2 * i]);
      const int lo = HexValue(t[2 * i + 1]);
      ok = hi >= 0 && lo >= 0;
      kek.key_[i] = static_cast<unsigned char>((hi << 4) | lo);
    }
    if (ok) return kek;
  }
  if (auto raw = Base64Decode(t); raw.ok() && raw->size() == kSize) {
    std::copy(raw->begin(), raw->end(), kek.key_.begin());
    OPENSSL_cleanse(raw->data(), raw->size());
    return kek;
  }
  return absl::InvalidArgumentError(
      "key-encryption key must be 32 bytes (raw, 64 hex characters or base64)");
}

absl::StatusOr<Kek> Kek::FromFile(const std::string& path) {
  auto read = fsutil::ReadFile(path, /*max_bytes=*/4096);
  if (!read.ok()) {
    return absl::Status(read.status().code(),
                        "key-encryption-key file " + std::string(read.status().message()));
  }
  std::string text = *std::move(read);
  auto kek = FromText(text);
  OPENSSL_cleanse(text.data(), text.size());
  if (!kek.ok()) {
    return absl::InvalidArgumentError("key-encryption-key file " + path + ": " +
                                      std::string(kek.status().message()));
  }
  return kek;
}

Kek Kek::Random() {
  Kek kek;
  RAND_bytes(kek.key_.data(), static_cast<int>(kek.key_.size()));
  return kek;
}

std::string Kek::Id() const {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(key_.data(), key_.size(), md);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 8; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

absl::StatusOr<std::string> Seal(const Kek& kek, std::string_view plaintext, std::string_view aad) {
  std::string out(1 + kNonce + plaintext.size() + kTag, '\0');
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  o[0] = kVersion;
  if (RAND_bytes(o + 1, kNonce) != 1) return internal::OpenSslError("RAND_bytes");
  CipherCtxPtr ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  if (!ctx ||
      EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, kek.bytes().data(), o + 1) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len,
                        reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), o + 1 + kNonce, &len,
                        reinterpret_cast<const unsigned char*>(plaintext.data()),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), o + 1 + kNonce + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTag,
                          o + 1 + kNonce + plaintext.size()) != 1) {
    return internal::OpenSslError("AES-256-GCM seal");
  }
  return out;
}

absl::StatusOr<std::string> Open(const Kek& kek, std::string_view sealed, std::string_view aad) {
  if (sealed.size() < 1 + kNonce + kTag) return absl::InvalidArgumentError("sealed blob too short");
  const auto* s = reinterpret_cast<const unsigned char*>(sealed.data());
  if (s[0] != kVersion) return absl::InvalidArgumentError("sealed blob has an unknown version");
  const size_t ct_len = sealed.size() - 1 - kNonce - kTag;
  std::string out(ct_len, '\0');
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  CipherCtxPtr ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  unsigned char tag[kTag];
  std::copy(s + 1 + kNonce + ct_len, s + sealed.size(), tag);
  if (!ctx ||
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, kek.bytes().data(), s + 1) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len,
                        reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), o, &len, s + 1 + kNonce, static_cast<int>(ct_len)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTag, tag) != 1) {
    return internal::OpenSslError("AES-256-GCM open");
  }
  if (EVP_DecryptFinal_ex(ctx.get(), o + len, &len) != 1) {
    ERR_clear_error();
    OPENSSL_cleanse(out.data(), out.size());
    return absl::PermissionDeniedError(
        "sealed key does not open: wrong key-encryption key or modified data");
  }
  return out;
}

}  // namespace wisp::jwt
