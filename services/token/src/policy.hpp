#pragma once
// The token policy: which audiences each namespace may request, how long tokens may live, which
// external issuers the STS trusts, and which subjects may exchange for which audiences and scopes.
//
// YAML shape (every key optional):
//   maxExpirationSeconds: 86400        # cap for issued tokens (requests above are capped, as
//                                      # kube-apiserver's --service-account-max-token-expiration)
//   defaultAudiences: [wisp]           # used when a request names no audience
//   namespaces:                        # "*" applies to namespaces not listed
//     ml: {audiences: [vault, sts.amazonaws.com], maxExpirationSeconds: 3600}
//   exchange:
//     accessTokenLifetimeSeconds: 3600
//     subjectAudiences: [wisp-sts]     # a wisp-issued subject token must carry one of these
//     rules:
//       - {namespace: ml, serviceAccounts: [loader], audiences: [storage.wisp.dev],
//          scopes: [https://www.googleapis.com/auth/cloud-platform]}
//   trustedIssuers:                    # each with jwksFile or jwksUrl (not both)
//     - {issuer: https://kubernetes.default.svc, jwksFile: /etc/wisp/cluster-jwks.json,
//        audiences: [wisp-sts]}
//     - {issuer: https://idp.example, jwksUrl: https://idp.example/keys,
//        jwksCaFile: /etc/wisp/idp-ca.pem,   # optional; default: the system trust store
//        jwksRefreshSeconds: 300,             # optional; >= 10, default 300
//        audiences: [wisp-sts]}
//   issue:
//     requirePodProof: false           # true: every wisp.v1.token.issue must carry the kubelet's
//                                      # token for the pod (IssueRequest.pod_proof), see below
//     podProofAudience: wisp           # the audience that token must carry (CSIDriver
//                                      # tokenRequests[].audience)
//     podProofIssuers:                 # trustedIssuers whose tokens prove a pod (the cluster's
//       - https://kubernetes.default.svc  # kube-apiserver); required with requirePodProof
//
// A namespace that is not listed (and no "*") may not request any audience: deny by default.
// Without a policy file wisp-token uses Default(): any namespace may request any audience (as
// kube-apiserver's TokenRequest allows), and no exchange is allowed.
// "*" in serviceAccounts, audiences or scopes matches anything.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(Policy policy, Policy::FromFile("/etc/wisp/token-policy.yaml"));
//   const NamespacePolicy* ns = policy.ForNamespace("ml");
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wisp/jwt/jws.hpp"
#include "wisp/status/status.hpp"

namespace wisp::token {

inline constexpr int64_t kDefaultExpirationSeconds = 3600;
inline constexpr int64_t kMinExpirationSeconds = 600;
inline constexpr int64_t kMaxExpirationSeconds = int64_t{1} << 32;

struct NamespacePolicy {
  std::vector<std::string> audiences;
  int64_t max_expiration_seconds = 0;  // 0 = the global cap
};

struct ExchangeRule {
  std::string namespace_name;  // "*" = any
  std::vector<std::string> service_accounts;
  std::vector<std::string> audiences;
  std::vector<std::string> scopes;
};

class RemoteJwks;

struct TrustedIssuer {
  std::string issuer;
  std::string jwks_file;
  std::string jwks_url;  // https:// only; fetched by RemoteJwks (see policy_store.hpp)
  std::string jwks_ca_file;
  // Sent as the bearer token of each JWKS fetch, re-read every time (kubelet rotates a projected
  // token): what the cluster's own issuer needs, whose /openid/v1/jwks only authenticated
  // service accounts may read (ClusterRole system:service-account-issuer-discovery).
  std::string jwks_bearer_token_file;
  int64_t jwks_refresh_seconds = 300;
  std::vector<std::string> audiences;  // the subject token must carry one of them
  jwt::KeySet keys;                    // loaded from jwks_file
  std::shared_ptr<RemoteJwks> remote;  // for jwks_url; attached by AttachRemoteJwks
};

// wisp.v1.token.issue's proof of pod identity (docs/security.md, G3): the node gateway forwards the
// kubelet's own token for the pod, and wisp-token issues for that pod only (pod_proof.hpp).
struct PodProofPolicy {
  bool required = false;
  std::string audience = "wisp";
  std::vector<std::string> issuers;  // each names a trustedIssuers entry
};

struct Policy {
  int64_t max_expiration_seconds = 86400;
  std::vector<std::string> default_audiences;
  std::map<std::string, NamespacePolicy, std::less<>> namespaces;
  int64_t access_token_lifetime_seconds = 3600;
  std::vector<std::string> subject_audiences;
  std::vector<ExchangeRule> exchange_rules;
  std::vector<TrustedIssuer> trusted_issuers;
  PodProofPolicy pod_proof;

  // InvalidArgument naming the YAML key (e.g. "namespaces.ml.audiences") on a bad value.
  static absl::StatusOr<Policy> FromYaml(std::string_view yaml);
  static absl::StatusOr<Policy> FromFile(const std::string& path);
  static Policy Default();

  const NamespacePolicy* ForNamespace(std::string_view ns) const;
  // The longest lifetime any token signed by wisp may have (issued, exchanged, or an upload token,
  // whose limit kUploadTokenMaxSeconds is wisp-token's, not the policy's): how long a retired key
  // must stay in the JWKS.
  int64_t LongestTokenSeconds() const;
};

// True when `value` is in `allowed` or `allowed` holds "*".
bool Matches(const std::vector<std::string>& allowed, std::string_view value);

}  // namespace wisp::token
