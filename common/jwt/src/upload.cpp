#include "wisp/jwt/upload.hpp"

namespace wisp::jwt {

nlohmann::json UploadClaims(const UploadGrant& grant) {
  nlohmann::json claims;
  claims["sub"] = std::string(kUploadSubjectPrefix) + grant.volume_id;
  claims["aud"] = nlohmann::json::array({kUploadAudience});
  claims[kUploadClaim] = {
      {"volume_id", grant.volume_id}, {"name", grant.name}, {"namespace", grant.namespace_}};
  return claims;
}

absl::StatusOr<UploadGrant> UploadGrantFromClaims(const nlohmann::json& claims) {
  auto it = claims.find(kUploadClaim);
  if (it == claims.end() || !it->is_object()) {
    return absl::UnauthenticatedError(std::string("token has no \"") + kUploadClaim +
                                      "\" claim: not an upload token");
  }
  UploadGrant grant;
  auto str = [&](const char* key) -> std::string {
    auto f = it->find(key);
    return f != it->end() && f->is_string() ? f->get<std::string>() : std::string();
  };
  grant.volume_id = str("volume_id");
  grant.name = str("name");
  grant.namespace_ = str("namespace");
  if (grant.volume_id.empty()) {
    return absl::UnauthenticatedError(std::string("token claim \"") + kUploadClaim +
                                      "\" names no volume_id");
  }
  auto sub = claims.find("sub");
  if (sub == claims.end() || !sub->is_string() ||
      sub->get<std::string>() != kUploadSubjectPrefix + grant.volume_id) {
    return absl::UnauthenticatedError(std::string("token sub does not match its \"") +
                                      kUploadClaim + "\" claim");
  }
  return grant;
}

}  // namespace wisp::jwt
