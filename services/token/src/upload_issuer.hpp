#pragma once
// Upload tokens (wisp.v1.token.upload): a short-lived JWT that lets its bearer PUT the bytes of one
// volume to the gateway. The claims are wisp/jwt/upload.hpp's; the signature is the Issuer's
// (same keys as every wisp token, so the gateway verifies it with the JWKS it already caches).
//
// Contract:
//   - volume_id is required and must look like a wisp volume id ([A-Za-z0-9_-], at most 64);
//     name and namespace are copied into the claim for the record (at most 253 characters).
//   - expiration_seconds: 0 means 300; otherwise 60..3600 (InvalidArgument naming the field).
//     The gateway checks the token when the PUT starts; an upload that runs longer is not cut.
//   - wisp-token does not look the volume up (it has no access to wisp_volumes): the gateway
//     answers 404/409 for a volume that does not exist or is no upload target.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(v1::UploadTokenResponse r, IssueUploadToken(issuer, request));
#include "issuer.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::token {

inline constexpr int64_t kUploadTokenDefaultSeconds = 300;
inline constexpr int64_t kUploadTokenMinSeconds = 60;
inline constexpr int64_t kUploadTokenMaxSeconds = 3600;

absl::StatusOr<v1::UploadTokenResponse> IssueUploadToken(const Issuer& issuer,
                                                         const v1::UploadTokenRequest& request);

}  // namespace wisp::token
