#pragma once
// Issuer: Kubernetes-shaped service-account tokens (wisp.v1.token.issue) and the signing of any
// wisp token (the Exchanger's access tokens go through SignClaims).
//
// Contract:
//   - Claims as kube-apiserver shapes them: iss, sub "system:serviceaccount:<ns>:<sa>", aud (list),
//     exp, iat, nbf (= iat), jti, and "kubernetes.io": {namespace, serviceaccount {name, uid},
//     pod {name, uid} (when bound to a pod), node {name} (when given)}.
//   - expirationSeconds: 0 means 3600; < 600 and > 2^32 are refused with Kubernetes' messages;
//     otherwise capped by the namespace's (then the global) maxExpirationSeconds, then shortened
//     by Options::lifetime_jitter (lifetime_jitter.hpp: up to its spread, never below 600 s), as
//     TokenRequest allows: a client reads the expiry from the answer, not from its request.
//   - Lifetime() applies the same jitter to a lifetime chosen elsewhere (the Exchanger's access
//     tokens, the policy's accessTokenLifetimeSeconds).
//   - Audiences: empty means the policy's defaultAudiences; every audience must be allowed for
//     the namespace (policy), else PermissionDenied naming it.
//   - With the policy's issue.requirePodProof, the request must carry the kubelet's token for the
//     pod it names (pod_proof.hpp), else PermissionDenied naming the field that does not match.
//   - Errors are InvalidArgument / PermissionDenied with a message naming the field; each counts
//     in wisp_token_issue_errors_total{reason}.
//   - IssueBatch (wisp.v1.token.issue_batch): 1 to kMaxBatch entries, else InvalidArgument naming
//     `requests`; each entry is issued or refused exactly as Issue would, its result in the same
//     place, so one bad entry costs only its own token.
//   - Thread-safe; no per-request key parsing (keys come from KeyManager's snapshot).
//
// Example:
//   Issuer issuer(keys, policy, clock, metrics, {.issuer = "https://wisp.example"});
//   WISP_ASSIGN_OR_RETURN(v1::IssueResponse resp, issuer.Issue(request));
#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "key_manager.hpp"
#include "lifetime_jitter.hpp"
#include "metrics.hpp"
#include "policy.hpp"
#include "policy_store.hpp"
#include "wisp/status/clock.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::token {

struct Signed {
  std::string token;
  std::string kid;
  int64_t iat = 0;
  int64_t exp = 0;
};

class Issuer {
 public:
  struct Options {
    std::string issuer;
    jwt::Algorithm default_algorithm = jwt::Algorithm::kRS256;
    // Clock skew allowed on the pod proof's exp/nbf (issue.requirePodProof).
    std::chrono::seconds leeway{60};
    // Shortens each lifetime by up to its spread (none by default; wisp-token's flag
    // --lifetime-jitter-percent sets kDefaultLifetimeJitterPercent).
    LifetimeJitter lifetime_jitter;
  };
  // A fixed policy (copied).
  Issuer(const KeyManager& keys, const Policy& policy, Clock& clock, TokenMetrics& metrics,
         Options options);
  // The policy in force in `policy` (hot reload): each request reads one snapshot.
  Issuer(const KeyManager& keys, const PolicyStore& policy, Clock& clock, TokenMetrics& metrics,
         Options options);

  static constexpr int kMaxBatch = 256;

  absl::StatusOr<v1::IssueResponse> Issue(const v1::IssueRequest& request) const;
  absl::StatusOr<v1::IssueBatchResponse> IssueBatch(const v1::IssueBatchRequest& request) const;
  // Adds iss, iat, nbf, exp (= iat + lifetime) and jti to `claims` and signs them.
  absl::StatusOr<Signed> SignClaims(nlohmann::json claims, int64_t lifetime_seconds,
                                    jwt::Algorithm alg) const;
  // `lifetime_seconds` (at least kMinExpirationSeconds) shortened by the lifetime jitter.
  int64_t Lifetime(int64_t lifetime_seconds) const;
  // The algorithm named by a request ("" = default).
  absl::StatusOr<jwt::Algorithm> AlgorithmFor(std::string_view name) const;

  const std::string& issuer() const { return options_.issuer; }

 private:
  const KeyManager& keys_;
  std::unique_ptr<PolicyStore> owned_policy_;
  const PolicyStore& policy_;
  Clock& clock_;
  TokenMetrics& metrics_;
  const Options options_;
};

// A random RFC 4122 version 4 UUID.
std::string NewUuid();

}  // namespace wisp::token
