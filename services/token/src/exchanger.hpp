#pragma once
// Exchanger: RFC 8693 token exchange (wisp.v1.token.exchange, behind the gateway's POST /v1/token).
//
// Contract:
//   - grant_type must be urn:ietf:params:oauth:grant-type:token-exchange (else
//     unsupported_grant_type); subject_token required (ASCII whitespace at its ends, as a file
//     written by `echo` has, is dropped; whitespace inside is invalid_grant) and subject_token_type
//     ...:jwt or
//     ...:id_token (else invalid_request); requested_token_type empty or ...:access_token (else
//     invalid_request); audience required (invalid_request).
//   - The subject token must verify against a trusted issuer: wisp's own keys (audience one of
//     exchange.subjectAudiences when that list is set) or a configured external issuer (its JWKS
//     file or URL, issuer URL and required audiences). A kid the URL's set lacks triggers one
//     rate-limited refetch (the issuer rotated) before the token is refused. Otherwise
//     invalid_grant.
//   - The subject (namespace, service account from sub) must match an exchange rule that allows the
//     audience (else invalid_target) and every requested scope (else invalid_scope).
//   - Success: an access token = a wisp-signed JWT {iss, sub, aud: audience, scope, exp, iat, nbf,
//     jti, wisp.dev/subject_issuer}, lifetime exchange.accessTokenLifetimeSeconds shortened by the
//     issuer's lifetime jitter (Issuer::Lifetime; expires_in says what it came to), token_type
//     Bearer, issued_token_type ...:access_token. Errors carry error, error_description and the
//     HTTP status (400; 500 for server_error). The verified subject comes back in `subject` so the
//     gateway can rate-limit by it.
//   - wisp_token_exchanges_total{outcome="ok"|<error code>}.
//
// Example:
//   Exchanger ex(reviewer, issuer, policy, clock, metrics);
//   v1::ExchangeResponse resp = ex.Exchange(request);
#include <string>

#include "issuer.hpp"
#include "metrics.hpp"
#include "policy.hpp"
#include "reviewer.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::token {

inline constexpr std::string_view kGrantTokenExchange =
    "urn:ietf:params:oauth:grant-type:token-exchange";
inline constexpr std::string_view kTokenTypeJwt = "urn:ietf:params:oauth:token-type:jwt";
inline constexpr std::string_view kTokenTypeIdToken = "urn:ietf:params:oauth:token-type:id_token";
inline constexpr std::string_view kTokenTypeAccessToken =
    "urn:ietf:params:oauth:token-type:access_token";

class Exchanger {
 public:
  // A fixed policy (copied).
  Exchanger(const Reviewer& reviewer, const Issuer& issuer, const Policy& policy, Clock& clock,
            TokenMetrics& metrics);
  // The policy in force in `policy` (hot reload): each exchange reads one snapshot.
  Exchanger(const Reviewer& reviewer, const Issuer& issuer, const PolicyStore& policy, Clock& clock,
            TokenMetrics& metrics);

  v1::ExchangeResponse Exchange(const v1::ExchangeRequest& request) const;

 private:
  absl::StatusOr<nlohmann::json> VerifySubject(std::string_view token, const Policy& policy) const;

  const Reviewer& reviewer_;
  const Issuer& issuer_;
  std::unique_ptr<PolicyStore> owned_policy_;
  const PolicyStore& policy_;
  Clock& clock_;
  TokenMetrics& metrics_;
};

}  // namespace wisp::token
