#pragma once
// Signing keys for JWS: RSA-2048 (RS256) and P-256 (ES256) over OpenSSL 3.
//
// Contract:
//   - PrivateKey and PublicKey are cheap to copy (shared, immutable OpenSSL keys) and thread-safe:
//     Sign() may run on many threads at once. Signing reuses pre-initialised OpenSSL contexts from
//     a per-key pool, so no key is parsed and no algorithm fetched per signature.
//   - Signatures are in JWS form: RS256 = PKCS#1 v1.5 over SHA-256; ES256 = raw r||s, 64 bytes
//     (RFC 7518 section 3.4), never DER.
//   - kid is the RFC 7638 JWK thumbprint (SHA-256, base64url) unless a JWK read from outside named
//     its own kid.
//   - Public keys from outside (JWK) are checked: RSA at least 2048 bits, EC only P-256 with the
//     point on the curve; failures are InvalidArgument naming the JWK member.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(jwt::PrivateKey key, jwt::PrivateKey::Generate(jwt::Algorithm::kES256));
//   WISP_ASSIGN_OR_RETURN(std::string sig, key.Sign("header.payload"));
//   bool ok = key.public_key().Verify("header.payload", sig);
//   nlohmann::json jwk = key.public_key().Jwk();   // {"kty":"EC","crv":"P-256","x":..,"kid":..}
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "wisp/status/status.hpp"

namespace wisp::jwt {

enum class Algorithm { kRS256, kES256 };

// "RS256" / "ES256".
std::string_view AlgorithmName(Algorithm alg);
// InvalidArgument for anything but RS256 and ES256 (none, HS*, PS*, ... are refused here).
absl::StatusOr<Algorithm> ParseAlgorithm(std::string_view name);

// ECDSA signature forms: DER (what OpenSSL produces) <-> raw r||s with each half padded to
// `half_len` bytes (what JWS carries; 32 for P-256).
absl::StatusOr<std::string> EcdsaDerToRaw(std::string_view der, size_t half_len);
absl::StatusOr<std::string> EcdsaRawToDer(std::string_view raw);

class PublicKey {
 public:
  // A JWK object (kty RSA with n,e or kty EC with crv P-256, x, y). "alg", when present, must
  // agree.
  static absl::StatusOr<PublicKey> FromJwk(const nlohmann::json& jwk);
  // A PEM SubjectPublicKeyInfo or certificate-free "PUBLIC KEY" block.
  static absl::StatusOr<PublicKey> FromPem(std::string_view pem);

  Algorithm algorithm() const { return alg_; }
  // The kid tokens name this key by.
  const std::string& kid() const { return kid_; }
  // RFC 7638 thumbprint, base64url of SHA-256 over the required members in lexical order.
  std::string Thumbprint() const;
  // The public JWK: kty, alg, use "sig", kid, and n,e or crv,x,y.
  nlohmann::json Jwk() const;
  absl::StatusOr<std::string> ToPem() const;

  // True when `signature` (JWS form) is a valid signature of `signing_input`.
  bool Verify(std::string_view signing_input, std::string_view signature) const;

  struct Impl;  // opaque (the OpenSSL key and its cached JWK members)

 private:
  friend class PrivateKey;
  std::shared_ptr<const Impl> impl_;
  Algorithm alg_ = Algorithm::kRS256;
  std::string kid_;
};

class PrivateKey {
 public:
  // RSA-2048 for RS256, P-256 for ES256.
  static absl::StatusOr<PrivateKey> Generate(Algorithm alg);
  // An unencrypted PKCS#8 ("PRIVATE KEY") or traditional PEM block of an RSA (>= 2048) or P-256
  // key.
  static absl::StatusOr<PrivateKey> FromPem(std::string_view pem);

  Algorithm algorithm() const { return pub_.algorithm(); }
  const std::string& kid() const { return pub_.kid(); }
  const PublicKey& public_key() const { return pub_; }
  // Unencrypted PKCS#8 PEM. Secret: seal it before it leaves the process.
  absl::StatusOr<std::string> ToPem() const;

  // The JWS signature of `signing_input`. Thread-safe.
  absl::StatusOr<std::string> Sign(std::string_view signing_input) const;
  // base64url of the JWS header {"alg","kid","typ":"JWT"} this key signs under, made once per key
  // (jwt::Sign puts it in front of every token).
  const std::string& EncodedJwsHeader() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  PublicKey pub_;
};

}  // namespace wisp::jwt
