#include "checksum.hpp"

#include <cctype>

namespace wisp::populator {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Update(const uint8_t* data, size_t n) {
  if (n > 0) EVP_DigestUpdate(ctx_, data, n);
}

std::string Sha256::HexDigest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_, md, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

absl::StatusOr<std::string> NormalizeSha256(std::string_view value, std::string_view field) {
  if (value.substr(0, 7) == "sha256:") value.remove_prefix(7);
  std::string out;
  for (char c : value) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(std::string(field) +
                                        ": sha256 must be 64 hexadecimal digits");
    }
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  if (out.size() != 64) {
    return absl::InvalidArgumentError(std::string(field) +
                                      ": sha256 must be 64 hexadecimal digits, got " +
                                      std::to_string(out.size()));
  }
  return out;
}

}  // namespace wisp::populator
