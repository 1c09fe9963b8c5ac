#pragma once
// Verifying a token against one of the policy's trusted external issuers (trustedIssuers[]): the
// STS's subject tokens (exchanger.hpp) and the kubelet's pod proofs on wisp.v1.token.issue
// (pod_proof.hpp) go through the same code.
//
// Contract:
//   - The token must be signed by a key of the issuer's JWKS (file, or URL), carry iss = the
//     issuer, one of `audiences`, and be within exp/nbf (with `leeway`).
//   - jwksUrl issuers: a kid the cached set lacks (the issuer rotated), or a set never fetched
//     yet, triggers one rate-limited refetch before the token is refused. Unavailable when the
//     set has never been fetched; Unauthenticated with the reason on any other refusal.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(jwt::Decoded d, jwt::Decode(token));
//   const TrustedIssuer* t = FindTrustedIssuer(policy, d.claims.value("iss", ""));
//   WISP_ASSIGN_OR_RETURN(jwt::Verified v, VerifyTrusted(*t, token, d, {"wisp"}, now, 60s));
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "policy.hpp"
#include "wisp/jwt/jws.hpp"

namespace wisp::token {

// The trustedIssuers entry for `iss`, or nullptr.
const TrustedIssuer* FindTrustedIssuer(const Policy& policy, std::string_view iss);

absl::StatusOr<jwt::Verified> VerifyTrusted(const TrustedIssuer& issuer, std::string_view token,
                                            const jwt::Decoded& decoded,
                                            const std::vector<std::string>& audiences,
                                            int64_t now_unix, std::chrono::seconds leeway);

}  // namespace wisp::token
