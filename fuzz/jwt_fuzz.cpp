// Fuzzes JWT decoding and verification (subject tokens arrive from anyone who can reach the STS
// endpoint) and JWKS parsing (a configured issuer's key set). Verify must refuse every token not
// signed by our keys: a forged token that verifies is a crash.
//
// Input: <token> or <token> NUL <JWKS JSON>.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "wisp/jwt/base64url.hpp"
#include "wisp/jwt/jws.hpp"
#include "wisp/jwt/key.hpp"

namespace jwt = wisp::jwt;

namespace {
// One RS256 and one ES256 key, made once; the fuzzer never sees their private halves.
const jwt::KeySet& OurKeys() {
  static const jwt::KeySet* keys = [] {
    auto* set = new jwt::KeySet();
    for (auto alg : {jwt::Algorithm::kRS256, jwt::Algorithm::kES256}) {
      auto key = jwt::PrivateKey::Generate(alg);
      if (!key.ok()) abort();
      set->Add(key->public_key());
    }
    return set;
  }();
  return *keys;
}
}  // namespace

// RSA key generation takes seconds on a loaded machine: do it before the per-input timeout runs.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)OurKeys();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view token = in;
  const size_t nul = in.find('\0');
  if (nul != std::string_view::npos) {
    token = in.substr(0, nul);
    auto keys = jwt::KeySet::FromJwks(in.substr(nul + 1));
    if (keys.ok()) {
      for (const auto& [kid, key] : keys->keys()) {
        (void)key.Thumbprint();
        (void)key.Jwk();
        (void)key.Verify(token, token);
      }
      (void)jwt::Verify(token, *keys, {.now_unix = 1'800'000'000});
    }
  }
  auto raw = jwt::Base64UrlDecode(token);
  if (raw.ok()) {
    auto again = jwt::Base64UrlDecode(jwt::Base64UrlEncode(*raw));
    if (!again.ok() || *again != *raw) abort();  // encode/decode must round-trip
  }
  (void)jwt::Base64Decode(token);
  auto decoded = jwt::Decode(token);
  if (decoded.ok()) (void)jwt::Audiences(decoded->claims);
  (void)jwt::EcdsaDerToRaw(token, 32);
  (void)jwt::EcdsaRawToDer(token);
  auto verified = jwt::Verify(token, OurKeys(), {.now_unix = 1'800'000'000, .require_exp = false});
  if (verified.ok()) abort();  // a token nobody signed with our keys verified
  return 0;
}
