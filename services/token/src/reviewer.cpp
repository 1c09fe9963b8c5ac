#include "reviewer.hpp"

namespace wisp::token {

Reviewer::Reviewer(const KeyManager& keys, Clock& clock, TokenMetrics& metrics, Options options)
    : keys_(keys), clock_(clock), metrics_(metrics), options_(std::move(options)) {}

absl::StatusOr<jwt::Verified> Reviewer::Verify(std::string_view token,
                                               const std::vector<std::string>& audiences) const {
  const KeySnapshotPtr snap = keys_.Current();
  jwt::VerifyOptions opts;
  opts.issuer = options_.issuer;
  opts.audiences = audiences;
  opts.now_unix = clock_.NowUnixSeconds();
  opts.leeway = options_.leeway;
  WISP_ASSIGN_OR_RETURN(jwt::Verified v, jwt::Verify(token, snap->public_keys, opts));
  if (const KeyInfo* info = snap->Info(v.kid); info != nullptr && info->state == KeyState::kNext) {
    // Published ahead of use: wisp-token has signed nothing with it yet.
    return absl::UnauthenticatedError("token claims to be signed by key " + v.kid +
                                      ", which is published but has not signed yet");
  }
  if (const KeyInfo* info = snap->Info(v.kid); info != nullptr && info->retired_unix != 0) {
    const int64_t iat = v.claims.value("iat", int64_t{0});
    if (iat > info->retired_unix + options_.leeway.count()) {
      return absl::UnauthenticatedError("token claims to be signed by key " + v.kid +
                                        " after that key was retired");
    }
  }
  return v;
}

absl::StatusOr<v1::Subject> SubjectFromClaims(const nlohmann::json& claims) {
  constexpr std::string_view kPrefix = "system:serviceaccount:";
  const std::string sub = claims.value("sub", "");
  if (sub.rfind(kPrefix, 0) != 0) {
    return absl::InvalidArgumentError("sub is not a Kubernetes service account");
  }
  const std::string rest = sub.substr(kPrefix.size());
  const size_t colon = rest.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size() ||
      rest.find(':', colon + 1) != std::string::npos) {
    return absl::InvalidArgumentError("sub is not system:serviceaccount:<namespace>:<name>");
  }
  v1::Subject s;
  s.set_namespace_(rest.substr(0, colon));
  s.set_service_account(rest.substr(colon + 1));
  if (auto k = claims.find("kubernetes.io"); k != claims.end() && k->is_object()) {
    if (auto sa = k->find("serviceaccount"); sa != k->end() && sa->is_object()) {
      s.set_service_account_uid(sa->value("uid", ""));
    }
    if (auto pod = k->find("pod"); pod != k->end() && pod->is_object()) {
      s.set_pod_name(pod->value("name", ""));
      s.set_pod_uid(pod->value("uid", ""));
    }
    if (auto node = k->find("node"); node != k->end() && node->is_object()) {
      s.set_node_name(node->value("name", ""));
    }
  }
  return s;
}

v1::ReviewResponse Reviewer::Review(const v1::ReviewRequest& req) const {
  v1::ReviewResponse resp;
  std::vector<std::string> auds(req.audiences().begin(), req.audiences().end());
  auto v = Verify(req.token(), auds);
  if (!v.ok()) {
    metrics_.Review("unauthenticated").Increment();
    resp.set_authenticated(false);
    resp.set_error(std::string(v.status().message()));
    return resp;
  }
  metrics_.Review("authenticated").Increment();
  resp.set_authenticated(true);
  if (auto s = SubjectFromClaims(v->claims); s.ok()) *resp.mutable_subject() = std::move(*s);
  for (const auto& a : jwt::Audiences(v->claims)) resp.add_audiences(a);
  resp.set_expiration_unix(v->claims.value("exp", int64_t{0}));
  resp.set_issuer(v->claims.value("iss", ""));
  resp.set_key_id(v->kid);
  return resp;
}

}  // namespace wisp::token
