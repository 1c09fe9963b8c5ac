#pragma once
// sha256 of the source bytes exactly as served (before decompression), and a ByteSource tap that
// feeds it and counts bytes read.
//
//   Sha256 sha;
//   HashingSource tap(body, &sha);          // pull from tap instead of body
//   ... ; if (sha.HexDigest() != want) fail;
#include <openssl/evp.h>

#include <string>
#include <string_view>

#include "byte_source.hpp"

namespace wisp::populator {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const uint8_t* data, size_t n);
  // Lower-case hex; the object is finished afterwards.
  std::string HexDigest();

 private:
  EVP_MD_CTX* ctx_;
};

// A checksum from a user (StorageClass parameter, DataVolume): 64 hex digits, case-insensitive,
// optionally prefixed "sha256:". Returns the lower-case hex, or InvalidArgument naming `field`.
absl::StatusOr<std::string> NormalizeSha256(std::string_view value, std::string_view field);

class HashingSource final : public ByteSource {
 public:
  HashingSource(ByteSource& inner, Sha256* sha) : inner_(inner), sha_(sha) {}
  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) override {
    WISP_ASSIGN_OR_RETURN(size_t got, inner_.Read(buf, n));
    if (sha_ != nullptr) sha_->Update(buf, got);
    bytes_ += got;
    return got;
  }
  uint64_t bytes() const { return bytes_; }

 private:
  ByteSource& inner_;
  Sha256* sha_;
  uint64_t bytes_ = 0;
};

}  // namespace wisp::populator
