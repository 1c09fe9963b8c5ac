// Rule f (pod token audiences) and the mutate/validate paths that run the registry's rules.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "rules_internal.hpp"
#include "wisp/policy/registry.hpp"
#include "wisp/k8s/json_patch.hpp"
#include "wisp/k8s/objects.hpp"

namespace wisp::policy {

using internal::Deny;
using internal::Index;
using internal::Outcome;

Verdict EvaluatePodTokenAudiences(const AdmissionInput& in, const Policy& policy) {
  constexpr std::string_view kRule = kRulePodTokenAudiences;
  if (!policy.rules.pod_token_audiences) return Outcome(kRule, kOutcomeDisabled);
  if (!in.Is("", "Pod") || in.call.operation() != "CREATE" || !in.pod) {
    return Outcome(kRule, kOutcomeSkipped);
  }
  const std::string ns = in.Namespace();
  std::vector<std::string> causes;
  for (const auto& volume : in.pod->volumes) {
    const std::string vf = Index("spec.volumes", volume.index);
    for (const auto& token : volume.projected_tokens) {
      const std::string tf =
          Index(vf + ".projected.sources", token.source_index) + ".serviceAccountToken";
      if (!AudienceAllowed(policy, ns, token.audience)) {
        causes.push_back(internal::AudienceForbidden(tf + ".audience", token.audience, ns, policy));
      }
      if (token.expiration_seconds) {
        internal::ValidateLifetime(*token.expiration_seconds, tf + ".expirationSeconds", policy,
                                   causes);
      }
    }
    // wisp's own CSI token volumes carry the audience as a volume attribute.
    if (volume.csi_driver == kWispCsiDriver) {
      const std::string af = vf + ".csi.volumeAttributes";
      if (!AudienceAllowed(policy, ns, volume.csi_audience)) {
        causes.push_back(
            internal::AudienceForbidden(af + ".audience", volume.csi_audience, ns, policy));
      }
      const std::string& exp = volume.csi_expiration_seconds;
      if (!exp.empty()) {
        if (exp.size() > 12 || exp.find_first_not_of("0123456789") != std::string::npos) {
          causes.push_back(af + ".expirationSeconds: Invalid value: " + k8s::Quote(exp) +
                           ": must be a whole number of seconds");
        } else {
          internal::ValidateLifetime(std::stoll(exp), af + ".expirationSeconds", policy, causes);
        }
      }
    }
  }
  if (!causes.empty()) return Deny(kRule, causes, 403, "Forbidden");
  return Outcome(kRule, kOutcomeAllowed);
}

namespace {

// Folds one rule's verdict, but for its patch and object (EvaluateMutate chains those), into the
// combined one. Returns false once a denial or error ends it.
bool Merge(Verdict& total, Verdict&& part) {
  for (auto& [k, v] : part.rule_outcomes) total.rule_outcomes[k] = v;
  for (auto& w : part.warnings) total.warnings.push_back(std::move(w));
  if (!part.error.ok()) {
    total.error = part.error;
    return false;
  }
  if (!part.allowed) {
    total.allowed = false;
    total.message = std::move(part.message);
    total.code = part.code;
    total.reason = std::move(part.reason);
    total.audit_annotations.clear();
    total.writes.clear();
    total.mutated.reset();
    total.patch.clear();
    return false;
  }
  for (auto& [k, v] : part.audit_annotations) total.audit_annotations[k] = v;
  for (auto& w : part.writes) total.writes.push_back(std::move(w));
  if (!part.message.empty()) {
    total.message = total.message.empty() ? part.message : total.message + " " + part.message;
  }
  return true;
}

// Appends the operations of the JSON array `more` to the JSON array `patch` ("" is none).
void AppendOperations(std::string& patch, std::string_view more) {
  if (more.size() < 2) return;
  if (patch.size() < 2) {
    patch.assign(more);
    return;
  }
  patch.back() = ',';
  patch.append(more.substr(1));
}

}  // namespace

Verdict EvaluateMutate(AdmissionInput in, const Policy& policy, const RecordLookup& lookup) {
  // The kind's mutate rules (registry.cpp), in order. Each sees the object as the rules before it
  // left it, and the patches are applied one after the other, so together they are the patch
  // (RFC 6902 applies operations in order). Rules that read the pod's facts need no tree; only a
  // rule that asks for the object (the virt-launcher rule, for a virt-launcher pod) gets it, with
  // the earlier patches applied.
  Verdict total;
  const KindRules* kind = FindKind(in.call.kind().group(), in.call.kind().kind());
  if (kind == nullptr) return total;
  // Which annotations of the pod's ServiceAccount the gateway read from the apiserver (its keys:
  // the values are the ServiceAccount's to show), so the audit log says what a choice made per
  // ServiceAccount was made from, whether the pod was admitted, denied or not answered.
  std::string sa_keys;
  if (in.call.service_account_found()) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : in.call.service_account_annotations()) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    for (const auto& k : keys) sa_keys += (sa_keys.empty() ? "" : ",") + k;
    if (sa_keys.empty()) sa_keys = "(none)";
  }
  auto finish = [&sa_keys](Verdict& v) {
    if (!sa_keys.empty()) v.audit_annotations["serviceaccount-annotations"] = sa_keys;
  };
  std::string pending;  // patches not yet applied to in.object
  std::optional<k8s::Json> last_mutated;
  for (const Rule& rule : kind->mutate) {
    if (rule.needs_object != nullptr && rule.needs_object(in, policy)) {
      absl::Status st = in.ParseObject();
      if (st.ok() && !pending.empty()) {
        auto patched = k8s::ApplyPatch(in.object, std::string_view(pending));
        if (patched.ok()) {
          in.object = *std::move(patched);
          pending.clear();
        } else {
          st = patched.status();
        }
      }
      if (!st.ok()) {
        total.rule_outcomes[std::string(rule.name)] = std::string(kOutcomeError);
        total.error =
            absl::InternalError(std::string(rule.reads) + ": " + std::string(st.message()));
        total.patch.clear();
        total.mutated.reset();
        finish(total);
        return total;  // an error answers without a patch
      }
    }
    Verdict part = rule.evaluate(in, policy, lookup);
    std::string patch = std::move(part.patch);
    std::optional<k8s::Json> mutated = std::move(part.mutated);
    if (!Merge(total, std::move(part))) {  // no patch with a denial or an error
      total.patch.clear();
      total.mutated.reset();
      finish(total);
      return total;
    }
    if (patch.empty()) continue;
    AppendOperations(total.patch, patch);
    if (mutated) {
      if (&rule != &kind->mutate.back()) in.object = *mutated;  // later rules see its output
      pending.clear();
    } else {
      AppendOperations(pending, patch);
    }
    last_mutated = std::move(mutated);
  }
  if (last_mutated) total.mutated = std::move(*last_mutated);
  finish(total);
  return total;
}

Verdict EvaluateValidate(const AdmissionInput& in, const Policy& policy,
                         const RecordLookup& lookup) {
  Verdict total;
  const KindRules* kind = FindKind(in.call.kind().group(), in.call.kind().kind());
  if (kind == nullptr) return total;
  for (const Rule& rule : kind->validate) {
    if (!Merge(total, rule.evaluate(in, policy, lookup))) break;  // the first denial wins
  }
  return total;
}

}  // namespace wisp::policy
