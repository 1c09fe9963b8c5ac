#include "issuer.hpp"

#include <algorithm>

#include <openssl/rand.h>

namespace wisp::token {
namespace {

// Kubernetes object names used in sub: lower-case RFC 1123 subdomain characters.
bool ValidName(std::string_view s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
  });
}

}  // namespace

std::string NewUuid() {
  unsigned char b[16];
  RAND_bytes(b, sizeof(b));
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(kHex[b[i] >> 4]);
    out.push_back(kHex[b[i] & 15]);
  }
  return out;
}

Issuer::Issuer(const KeyManager& keys, const Policy& policy, Clock& clock, TokenMetrics& metrics,
               Options options)
    : keys_(keys),
      policy_(policy),
      clock_(clock),
      metrics_(metrics),
      options_(std::move(options)) {}

absl::StatusOr<jwt::Algorithm> Issuer::AlgorithmFor(std::string_view name) const {
  if (name.empty()) return options_.default_algorithm;
  auto alg = jwt::ParseAlgorithm(name);
  if (!alg.ok())
    return absl::InvalidArgumentError("algorithm: " + std::string(alg.status().message()));
  return alg;
}

absl::StatusOr<v1::IssueResponse> Issuer::Issue(const v1::IssueRequest& req) const {
  const auto fail = [&](std::string_view reason, absl::Status st) {
    metrics_.IssueError(reason).Increment();
    return st;
  };
  const auto& s = req.subject();
  if (!ValidName(s.namespace_(), 63)) {
    return fail("invalid_subject",
                absl::InvalidArgumentError("subject.namespace: must be a DNS label"));
  }
  if (!ValidName(s.service_account(), 253)) {
    return fail("invalid_subject",
                absl::InvalidArgumentError("subject.service_account: must be a DNS subdomain"));
  }
  int64_t exp_s = req.expiration_seconds();
  if (exp_s == 0) exp_s = kDefaultExpirationSeconds;
  if (exp_s < kMinExpirationSeconds) {
    return fail("invalid_expiration",
                absl::InvalidArgumentError(
                    "expirationSeconds: may not specify a duration less than 10 minutes"));
  }
  if (exp_s > kMaxExpirationSeconds) {
    return fail("invalid_expiration",
                absl::InvalidArgumentError(
                    "expirationSeconds: may not specify a duration larger than 2^32 seconds"));
  }
  const NamespacePolicy* ns = policy_.ForNamespace(s.namespace_());
  int64_t cap = policy_.max_expiration_seconds;
  if (ns != nullptr && ns->max_expiration_seconds > 0)
    cap = std::min(cap, ns->max_expiration_seconds);
  exp_s = std::min(exp_s, cap);

  std::vector<std::string> auds(req.audiences().begin(), req.audiences().end());
  if (auds.empty()) auds = policy_.default_audiences;
  if (auds.empty()) {
    return fail("invalid_audience",
                absl::InvalidArgumentError("audiences: none given and the policy has no default"));
  }
  for (const auto& a : auds) {
    if (a.empty()) {
      return fail("invalid_audience", absl::InvalidArgumentError("audiences: empty audience"));
    }
    const bool allowed = Matches(policy_.default_audiences, a) || (ns && Matches(ns->audiences, a));
    if (!allowed) {
      return fail("audience_not_allowed",
                  absl::PermissionDeniedError("audiences: \"" + a +
                                              "\" is not allowed for namespace " + s.namespace_()));
    }
  }
  auto alg = AlgorithmFor(req.algorithm());
  if (!alg.ok()) return fail("invalid_algorithm", alg.status());

  nlohmann::json k8s = {
      {"namespace", s.namespace_()},
      {"serviceaccount", {{"name", s.service_account()}, {"uid", s.service_account_uid()}}}};
  if (!s.pod_name().empty()) k8s["pod"] = {{"name", s.pod_name()}, {"uid", s.pod_uid()}};
  if (!s.node_name().empty()) k8s["node"] = {{"name", s.node_name()}};
  nlohmann::json claims = {
      {"sub", "system:serviceaccount:" + s.namespace_() + ":" + s.service_account()},
      {"aud", auds},
      {"kubernetes.io", std::move(k8s)}};
  auto signed_token = SignClaims(std::move(claims), exp_s, *alg);
  if (!signed_token.ok()) return fail("signing", signed_token.status());
  v1::IssueResponse resp;
  resp.set_token(std::move(signed_token->token));
  resp.set_expiration_unix(signed_token->exp);
  resp.set_issued_at_unix(signed_token->iat);
  resp.set_key_id(signed_token->kid);
  return resp;
}

absl::StatusOr<Signed> Issuer::SignClaims(nlohmann::json claims, int64_t lifetime_seconds,
                                          jwt::Algorithm alg) const {
  const KeySnapshotPtr snap = keys_.Current();
  const jwt::PrivateKey* key = snap->Active(alg);
  if (key == nullptr) {
    return absl::UnavailableError("no active " + std::string(jwt::AlgorithmName(alg)) +
                                  " signing key");
  }
  Signed out;
  out.iat = clock_.NowUnixSeconds();
  out.exp = out.iat + lifetime_seconds;
  out.kid = key->kid();
  claims["iss"] = options_.issuer;
  claims["iat"] = out.iat;
  claims["nbf"] = out.iat;
  claims["exp"] = out.exp;
  claims["jti"] = NewUuid();
  WISP_ASSIGN_OR_RETURN(out.token, jwt::Sign(*key, claims.dump()));
  metrics_.Issued(jwt::AlgorithmName(alg)).Increment();
  return out;
}

}  // namespace wisp::token
