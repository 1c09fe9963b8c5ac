// The rule registry (wisp/policy/registry.hpp): add a rule to its kind's list here.
#include "wisp/policy/registry.hpp"

#include <array>

#include "rules_internal.hpp"

namespace wisp::policy {
namespace {

// Rules that take no lookup, in the registry's one signature.
template <Verdict (*F)(const AdmissionInput&, const Policy&)>
Verdict NoLookup(const AdmissionInput& in, const Policy& policy, const RecordLookup&) {
  return F(in, policy);
}

bool VirtLauncherNeedsObject(const AdmissionInput& in, const Policy& policy) {
  return policy.rules.virt_launcher && internal::IsVirtLauncherPod(in);
}

constexpr std::array kPodMutate{
    Rule{.name = kRuleTokenSidecar, .evaluate = NoLookup<EvaluateTokenSidecar>},
    Rule{.name = kRuleIdentityPresets,
         .evaluate = NoLookup<EvaluateIdentityPresets>,
         .needs_object = IdentityPresetsNeedObject,
         .reads = "pod"},
    Rule{.name = kRuleVirtLauncher,
         .evaluate = NoLookup<EvaluateVirtLauncher>,
         .needs_object = VirtLauncherNeedsObject,
         .reads = "virt-launcher pod"},
};
constexpr std::array kPodValidate{
    Rule{.name = kRulePodTokenAudiences, .evaluate = NoLookup<EvaluatePodTokenAudiences>}};
constexpr std::array kPvcValidate{Rule{.name = kRulePvcSources, .evaluate = EvaluatePvc}};
constexpr std::array kVmiMutate{
    Rule{.name = kRuleVmiTokenAnnotations, .evaluate = NoLookup<EvaluateVmiTokenAnnotations>}};
constexpr std::array kVmiValidate{
    Rule{.name = kRuleVmiTokenVolumes, .evaluate = NoLookup<EvaluateVmiTokenVolumes>}};
constexpr std::array kDataVolumeValidate{
    Rule{.name = kRuleDataVolumes, .evaluate = EvaluateDataVolume}};
constexpr std::array kImportSourceValidate{
    Rule{.name = kRulePvcSources, .evaluate = NoLookup<EvaluateVolumeImportSource>}};
constexpr std::array kCdiImportSourceValidate{
    Rule{.name = kRulePvcSources, .evaluate = NoLookup<EvaluateCdiVolumeImportSource>}};

constexpr std::array kKinds{
    KindRules{.group = "",
              .version = "v1",
              .kind = "Pod",
              .mutate = kPodMutate,
              .validate = kPodValidate},
    KindRules{
        .group = "", .version = "v1", .kind = "PersistentVolumeClaim", .validate = kPvcValidate},
    KindRules{.group = "kubevirt.io",
              .version = "v1",
              .kind = "VirtualMachineInstance",
              .mutate = kVmiMutate,
              .validate = kVmiValidate},
    KindRules{.group = "cdi.kubevirt.io",
              .version = "v1beta1",
              .kind = "DataVolume",
              .validate = kDataVolumeValidate},
    KindRules{.group = kWispGroup,
              .version = "v1alpha1",
              .kind = "VolumeImportSource",
              .validate = kImportSourceValidate},
    // No webhook sends CDI's VolumeImportSource: from a source alone wisp cannot tell whether a
    // wisp PVC will name it, and where CDI runs it imports the kinds wisp refuses (registry, s3).
    KindRules{.group = kCdiGroup,
              .version = "v1beta1",
              .kind = "VolumeImportSource",
              .validate = kCdiImportSourceValidate,
              .admitted = false},
};

}  // namespace

std::span<const KindRules> Kinds() { return kKinds; }

const KindRules* FindKind(std::string_view group, std::string_view kind) {
  for (const KindRules& k : kKinds) {
    if (k.group == group && k.kind == kind) return &k;
  }
  return nullptr;
}

bool IsAdmittedKind(std::string_view group, std::string_view kind) {
  const KindRules* k = FindKind(group, kind);
  return k != nullptr && k->admitted;
}

std::string AdmittedKindsText() {
  std::string text;
  for (const KindRules& k : kKinds) {
    if (!k.admitted) continue;
    if (!text.empty()) text += ", ";
    text.append(k.group.empty() ? k.version : k.group).append(" ").append(k.kind);
  }
  return text;
}

}  // namespace wisp::policy
