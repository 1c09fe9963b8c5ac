#pragma once
// AES-256-GCM sealing of private keys under a key-encryption key (KEK).
//
// Contract:
//   - The KEK file holds 32 bytes: raw, or 64 hex characters, or standard base64; surrounding
//     whitespace is ignored. Anything else is InvalidArgument naming the file (never its content).
//   - Seal() output: version byte 0x01, 12-byte random nonce,
//     ciphertext, 16-byte tag. `aad` (for example the key id) is authenticated, not encrypted, so a
//     sealed blob cannot be moved to another key id.
//   - Open() returns PermissionDenied when the tag does not verify (wrong KEK, other aad, or a
//     modified blob), InvalidArgument when the blob is too short or of another version.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(jwt::Kek kek, jwt::Kek::FromFile("/etc/wisp/kek"));
//   WISP_ASSIGN_OR_RETURN(std::string sealed, jwt::Seal(kek, pem, kid));
//   WISP_ASSIGN_OR_RETURN(std::string pem2, jwt::Open(kek, sealed, kid));
#include <array>
#include <string>
#include <string_view>

#include "wisp/status/status.hpp"

namespace wisp::jwt {

class Kek {
 public:
  static constexpr size_t kSize = 32;
  static absl::StatusOr<Kek> FromFile(const std::string& path);
  // Raw 32 bytes, 64 hex characters, or base64 of 32 bytes.
  static absl::StatusOr<Kek> FromText(std::string_view text);
  static Kek Random();
  ~Kek();
  Kek(const Kek&) = default;
  Kek& operator=(const Kek&) = default;

  const std::array<unsigned char, kSize>& bytes() const { return key_; }
  // A short public identifier of this KEK (first 8 bytes of SHA-256 over it, hex), so stored
  // blobs can say which KEK sealed them without revealing it.
  std::string Id() const;

 private:
  Kek() = default;
  std::array<unsigned char, kSize> key_{};
};

absl::StatusOr<std::string> Seal(const Kek& kek, std::string_view plaintext, std::string_view aad);
absl::StatusOr<std::string> Open(const Kek& kek, std::string_view sealed, std::string_view aad);

}  // namespace wisp::jwt
