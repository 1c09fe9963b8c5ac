#pragma once
// Upload tokens: what wisp-token signs for wisp.v1.token.upload and what the gateway checks before
// it accepts a byte on PUT /v1/upload/<volume>. One definition for both sides.
//
// Contract:
//   - aud = kUploadAudience ("wisp-upload"), sub = "wisp:upload:<volume_id>", and the claim
//     kUploadClaim = {"volume_id": "v-...", "name": "...", "namespace": "..."}; iss/exp/iat/nbf/jti
//     are added by the signer. A token is good for exactly one volume id.
//   - UploadGrantFromClaims() refuses (Unauthenticated, naming the claim) claims without the
//     upload claim or whose sub does not match it, so an ordinary service-account token that
//     happens to carry the "wisp-upload" audience is no upload token.
//
// Example:
//   nlohmann::json claims = jwt::UploadClaims({.volume_id = id, .name = "cirros"});
//   ... sign; later, after jwt::Verify(token, keys, {.audiences = {jwt::kUploadAudience}}):
//   WISP_ASSIGN_OR_RETURN(jwt::UploadGrant grant, jwt::UploadGrantFromClaims(verified.claims));
#include <string>

#include <nlohmann/json.hpp>

#include "wisp/status/status.hpp"

namespace wisp::jwt {

inline constexpr char kUploadAudience[] = "wisp-upload";
inline constexpr char kUploadClaim[] = "wisp.dev/upload";
inline constexpr char kUploadSubjectPrefix[] = "wisp:upload:";

struct UploadGrant {
  std::string volume_id;
  std::string name;
  std::string namespace_;
};

// The claims of an upload token for `grant` (without the signer's iss/exp/iat/nbf/jti).
nlohmann::json UploadClaims(const UploadGrant& grant);
absl::StatusOr<UploadGrant> UploadGrantFromClaims(const nlohmann::json& claims);

}  // namespace wisp::jwt
