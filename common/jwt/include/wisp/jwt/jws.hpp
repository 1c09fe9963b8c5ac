#pragma once
// JWTs in JWS compact serialization (RFC 7515/7519): signing, key sets, verification.
//
// Contract:
//   - Sign() writes the header {"alg","kid","typ":"JWT"} and the payload as given (already JSON).
//   - Verify() accepts only RS256 and ES256, and only when the header's alg matches the type of the
//     key its kid names: "alg":"none", HS256 signed with a public key as the HMAC secret, RS/ES
//     swaps, unknown kids and bad signatures are all refused with Unauthenticated and a message
//     naming what failed. Malformed tokens are Unauthenticated too (the caller cannot fix them).
//   - Time claims: exp is required (unless VerifyOptions::require_exp is false); nbf and iat, when
//     present, must be numbers; exp/nbf are compared with the leeway.
//   - aud may be a string or an array of strings.
//
// Example:
//   std::string token = jwt::Sign(key, R"({"sub":"x","exp":1900000000})").value();
//   jwt::KeySet keys;
//   keys.Add(key.public_key());
//   auto claims = jwt::Verify(token, keys, {.issuer = "https://wisp", .audiences = {"vault"},
//                                           .now_unix = clock.NowUnixSeconds()});
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wisp/jwt/key.hpp"
#include "wisp/status/status.hpp"

namespace wisp::jwt {

// header.payload.signature for `payload_json` (a JSON object, serialized by the caller).
absl::StatusOr<std::string> Sign(const PrivateKey& key, std::string_view payload_json);

// The parts of a compact JWS, decoded but not verified.
struct Decoded {
  nlohmann::json header;
  nlohmann::json claims;
  std::string alg;
  std::string kid;
  std::string_view signing_input;  // points into the token passed to Decode
  std::string signature;
};
// Unauthenticated when the token is not three base64url parts with JSON object header/payload.
absl::StatusOr<Decoded> Decode(std::string_view token);

// Public keys by kid.
class KeySet {
 public:
  void Add(PublicKey key);
  const PublicKey* Find(std::string_view kid) const;
  bool empty() const { return keys_.empty(); }
  size_t size() const { return keys_.size(); }
  const std::map<std::string, PublicKey, std::less<>>& keys() const { return keys_; }

  // {"keys":[...]} with every key's public JWK, in kid order.
  nlohmann::json ToJwks() const;
  // Parses a JWKS document. Keys that are not RS256/ES256 signing keys (other kty, use "enc") are
  // skipped; a malformed RSA/EC key is InvalidArgument naming its index.
  static absl::StatusOr<KeySet> FromJwks(std::string_view jwks_json);

 private:
  std::map<std::string, PublicKey, std::less<>> keys_;
};

struct VerifyOptions {
  std::string issuer;                  // when non-empty, iss must equal it
  std::vector<std::string> audiences;  // when non-empty, aud must contain at least one
  int64_t now_unix = 0;
  std::chrono::seconds leeway{0};
  bool require_exp = true;
};

struct Verified {
  nlohmann::json claims;
  std::string kid;
  Algorithm alg = Algorithm::kRS256;
};

absl::StatusOr<Verified> Verify(std::string_view token, const KeySet& keys,
                                const VerifyOptions& options);

// The "aud" claim as a list (string or array; anything else gives an empty list).
std::vector<std::string> Audiences(const nlohmann::json& claims);

}  // namespace wisp::jwt
