#include "pod_proof.hpp"

#include <algorithm>
#include <optional>

#include "trusted_issuer.hpp"

namespace wisp::token {
namespace {

absl::Status Denied(std::string why) { return absl::PermissionDeniedError("pod_proof: " + why); }

// The string at claims[a][b][c...], or nullopt when a level is missing or not an object/string.
std::optional<std::string> StringAt(const nlohmann::json& claims,
                                    std::initializer_list<const char*> path) {
  const nlohmann::json* at = &claims;
  for (const char* key : path) {
    if (!at->is_object()) return std::nullopt;
    auto it = at->find(key);
    if (it == at->end()) return std::nullopt;
    at = &*it;
  }
  if (!at->is_string()) return std::nullopt;
  return at->get<std::string>();
}

absl::Status Mismatch(std::string_view claim, std::string_view got, std::string_view field,
                      std::string_view want) {
  return Denied(std::string(claim) + " \"" + std::string(got) + "\" does not match " +
                std::string(field) + " \"" + std::string(want) + "\"");
}

}  // namespace

absl::Status CheckPodProof(const v1::IssueRequest& req, const Policy& policy, int64_t now_unix,
                           std::chrono::seconds leeway) {
  const PodProofPolicy& pp = policy.pod_proof;
  if (!pp.required) return absl::OkStatus();
  const v1::Subject& s = req.subject();
  if (req.pod_proof().empty()) {
    return Denied(
        "required (issue.requirePodProof): send the kubelet's token for the pod, "
        "audience \"" +
        pp.audience + "\"");
  }
  if (s.pod_name().empty() || s.pod_uid().empty()) {
    return absl::PermissionDeniedError(
        "subject.pod_name and subject.pod_uid: required with issue.requirePodProof (tokens are "
        "issued for proven pods only)");
  }
  auto decoded = jwt::Decode(req.pod_proof());
  if (!decoded.ok()) return Denied(std::string(decoded.status().message()));
  const std::string iss = StringAt(decoded->claims, {"iss"}).value_or("");
  const TrustedIssuer* trusted = FindTrustedIssuer(policy, iss);
  if (trusted == nullptr ||
      std::find(pp.issuers.begin(), pp.issuers.end(), iss) == pp.issuers.end()) {
    return Denied("issuer \"" + iss + "\" is not one of issue.podProofIssuers");
  }
  auto verified =
      VerifyTrusted(*trusted, req.pod_proof(), *decoded, {pp.audience}, now_unix, leeway);
  if (!verified.ok()) {
    if (verified.status().code() == absl::StatusCode::kUnavailable) return verified.status();
    return Denied(std::string(verified.status().message()));
  }
  const nlohmann::json& c = verified->claims;

  const std::string want_sub =
      "system:serviceaccount:" + s.namespace_() + ":" + s.service_account();
  const std::string sub = StringAt(c, {"sub"}).value_or("");
  if (sub != want_sub) {
    return Mismatch("sub", sub, "subject.namespace/service_account", want_sub);
  }
  const auto pod_name = StringAt(c, {"kubernetes.io", "pod", "name"});
  const auto pod_uid = StringAt(c, {"kubernetes.io", "pod", "uid"});
  if (!pod_name || !pod_uid) {
    return Denied("kubernetes.io.pod is missing: not a pod-bound token");
  }
  if (*pod_name != s.pod_name()) {
    return Mismatch("kubernetes.io.pod.name", *pod_name, "subject.pod_name", s.pod_name());
  }
  if (*pod_uid != s.pod_uid()) {
    return Mismatch("kubernetes.io.pod.uid", *pod_uid, "subject.pod_uid", s.pod_uid());
  }
  if (auto node = StringAt(c, {"kubernetes.io", "node", "name"}); node && *node != s.node_name()) {
    return Mismatch("kubernetes.io.node.name", *node, "subject.node_name", s.node_name());
  }
  if (auto sa_uid = StringAt(c, {"kubernetes.io", "serviceaccount", "uid"});
      sa_uid && !s.service_account_uid().empty() && *sa_uid != s.service_account_uid()) {
    return Mismatch("kubernetes.io.serviceaccount.uid", *sa_uid, "subject.service_account_uid",
                    s.service_account_uid());
  }
  return absl::OkStatus();
}

}  // namespace wisp::token
