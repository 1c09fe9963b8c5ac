#pragma once
// Private helpers shared by the OpenSSL-backed sources of wisp::jwt.
#include <memory>
#include <string>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include "wisp/status/status.hpp"

namespace wisp::jwt::internal {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
struct BnFree {
  void operator()(BIGNUM* p) const { BN_free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree>;
using BnPtr = std::unique_ptr<BIGNUM, BnFree>;

// The last OpenSSL error as text (and clears the queue).
inline std::string LastError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

inline absl::Status OpenSslError(std::string_view what) {
  return absl::InternalError(std::string(what) + ": " + LastError());
}

}  // namespace wisp::jwt::internal
