#include "upload_issuer.hpp"

#include <cctype>

#include "wisp/jwt/upload.hpp"

namespace wisp::token {

absl::StatusOr<v1::UploadTokenResponse> IssueUploadToken(const Issuer& issuer,
                                                         const v1::UploadTokenRequest& request) {
  const std::string& id = request.volume_id();
  if (id.empty()) return absl::InvalidArgumentError("volume_id: required");
  if (id.size() > 64) return absl::InvalidArgumentError("volume_id: longer than 64 characters");
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) {
      return absl::InvalidArgumentError("volume_id: \"" + id + "\" is not a wisp volume id");
    }
  }
  if (request.name().size() > 253) {
    return absl::InvalidArgumentError("name: longer than 253 characters");
  }
  if (request.namespace_().size() > 253) {
    return absl::InvalidArgumentError("namespace: longer than 253 characters");
  }
  int64_t lifetime = request.expiration_seconds();
  if (lifetime == 0) lifetime = kUploadTokenDefaultSeconds;
  if (lifetime < kUploadTokenMinSeconds || lifetime > kUploadTokenMaxSeconds) {
    return absl::InvalidArgumentError(
        "expiration_seconds: " + std::to_string(request.expiration_seconds()) + " is outside " +
        std::to_string(kUploadTokenMinSeconds) + ".." + std::to_string(kUploadTokenMaxSeconds));
  }
  nlohmann::json claims = jwt::UploadClaims(
      {.volume_id = id, .name = request.name(), .namespace_ = request.namespace_()});
  WISP_ASSIGN_OR_RETURN(jwt::Algorithm alg, issuer.AlgorithmFor(""));
  WISP_ASSIGN_OR_RETURN(Signed token, issuer.SignClaims(std::move(claims), lifetime, alg));
  v1::UploadTokenResponse resp;
  resp.set_token(std::move(token.token));
  resp.set_expiration_unix(token.exp);
  return resp;
}

}  // namespace wisp::token
