// Rule f (pod token audiences) and the mutate/validate dispatch that combines the rules.
#include <optional>
#include <string>

#include "policy/src/rules_internal.hpp"
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
  // Each rule sees the object as the rules before it left it, and the patches are applied one
  // after the other, so together they are the patch (RFC 6902 applies operations in order). The
  // token-sidecar rule reads the pod's facts; only a pod the virt-launcher rule will look at
  // needs the object, with the first patch applied.
  Verdict total;
  std::string first_patch;
  {
    Verdict sidecar = EvaluateTokenSidecar(in, policy);
    first_patch = std::move(sidecar.patch);
    if (!Merge(total, std::move(sidecar))) return total;
  }
  if (policy.rules.virt_launcher && internal::IsVirtLauncherPod(in)) {
    absl::Status st = in.ParseObject();
    if (st.ok() && !first_patch.empty()) {
      auto patched = k8s::ApplyPatch(in.object, std::string_view(first_patch));
      if (patched.ok()) {
        in.object = *std::move(patched);
      } else {
        st = patched.status();
      }
    }
    if (!st.ok()) {
      total.rule_outcomes[std::string(kRuleVirtLauncher)] = std::string(kOutcomeError);
      total.error = absl::InternalError("virt-launcher pod: " + std::string(st.message()));
      return total;  // an error answers without a patch
    }
  }
  Verdict launcher_verdict = EvaluateVirtLauncher(in, policy, lookup);
  std::string second_patch = std::move(launcher_verdict.patch);
  std::optional<k8s::Json> object = std::move(launcher_verdict.mutated);
  if (!Merge(total, std::move(launcher_verdict))) return total;  // no patch with a denial or error
  total.patch = std::move(first_patch);
  AppendOperations(total.patch, second_patch);
  if (!second_patch.empty() && object) total.mutated = std::move(*object);
  return total;
}

Verdict EvaluateValidate(const AdmissionInput& in, const Policy& policy,
                         const RecordLookup& lookup) {
  Verdict total;
  if (in.Is("", "Pod")) {
    Merge(total, EvaluatePodTokenAudiences(in, policy));
  } else if (in.Is("kubevirt.io", "VirtualMachineInstance")) {
    Merge(total, EvaluateVmiTokenVolumes(in, policy));
  } else if (in.Is("cdi.kubevirt.io", "DataVolume")) {
    Merge(total, EvaluateDataVolume(in, policy, lookup));
  } else if (in.Is("", "PersistentVolumeClaim")) {
    Merge(total, EvaluatePvc(in, policy, lookup));
  } else if (in.Is(kWispGroup, "VolumeImportSource")) {
    Merge(total, EvaluateVolumeImportSource(in, policy));
  }
  return total;
}

}  // namespace wisp::policy
