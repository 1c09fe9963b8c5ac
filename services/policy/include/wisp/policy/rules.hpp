#pragma once
// wisp-policy's admission rules as pure functions: (object, policy) -> Verdict.
//
// Contract:
//   - No rule does I/O. Rules that need remembered state (a stored VolumeImportSource, a PVC's
//     name) read it through a RecordLookup; rules that remember something return KvWrite entries.
//     Only EvaluateCommitted's writes are applied: records follow what the apiserver stored, never
//     an admission (a later admission plugin or storage may still refuse it). The VM token rules
//     remember nothing: what the launcher pod needs travels on the objects themselves (the VMI's
//     wisp.dev/token.* annotations, which virt-controller copies onto the pod).
//   - A mutating rule returns the patch as RFC 6902 JSON text (the token-sidecar rule writes it
//     from the pod's facts; the VMI and virt-launcher rules dump a k8s::Diff and also return the
//     mutated object); running it again on its own output yields no patch (reinvocation-safe).
//   - A denial is a result (allowed=false, message, code), not an error. `error` is set only when
//     a lookup failed; the gateway's failure mode then answers.
//   - Messages reproduce the upstream texts (KubeVirt, Kubernetes, CDI, GCSFuse) where they exist.
//     Several causes are joined with ", " as KubeVirt's ToAdmissionResponse does.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(policy::AdmissionInput in, policy::AdmissionInput::FromCall(call));
//   policy::Verdict v = policy::EvaluateTokenSidecar(in, policy);
//   if (v.allowed) ... v.patch ...
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wisp/policy/pod_facts.hpp"
#include "wisp/policy/policy.hpp"
#include "wisp/k8s/json.hpp"
#include "wisp/v1/admission.pb.h"

namespace wisp::policy {

// Rule names (label `rule` of wisp_policy_rule_decisions_total).
inline constexpr std::string_view kRuleTokenSidecar = "token_sidecar";
inline constexpr std::string_view kRuleVmiTokenVolumes = "vmi_token_volumes";
inline constexpr std::string_view kRuleVmiTokenAnnotations = "vmi_token_annotations";
inline constexpr std::string_view kRuleVirtLauncher = "virt_launcher";
inline constexpr std::string_view kRuleDataVolumes = "data_volumes";
inline constexpr std::string_view kRulePvcSources = "pvc_sources";
inline constexpr std::string_view kRulePodTokenAudiences = "pod_token_audiences";
inline constexpr std::string_view kRuleIdentityPresets = "identity_presets";
// Outcomes (label `outcome`).
inline constexpr std::string_view kOutcomeAllowed = "allowed";  // looked, nothing to change
inline constexpr std::string_view kOutcomeMutated = "mutated";  // allowed with a patch
inline constexpr std::string_view kOutcomeDenied = "denied";
inline constexpr std::string_view kOutcomeSkipped = "skipped";    // not for this object
inline constexpr std::string_view kOutcomeDisabled = "disabled";  // switched off by policy
inline constexpr std::string_view kOutcomeError = "error";

// Names wisp injects and reads.
inline constexpr std::string_view kSidecarAnnotation = "wisp.dev/token-sidecar";
inline constexpr std::string_view kNativeSidecarAnnotation = "wisp.dev/enable-native-sidecar";
inline constexpr std::string_view kResourceAnnotationPrefix = "wisp.dev/sidecar-";
inline constexpr std::string_view kSidecarName = "wisp-sidecar";
inline constexpr std::string_view kSocketVolume = "wisp-token-socket";
inline constexpr std::string_view kSocketDir = "/var/run/wisp";
inline constexpr std::string_view kTokenUrlEnv = "WISP_TOKEN_URL";
inline constexpr std::string_view kTokenUrl = "unix:///var/run/wisp/token.sock";
inline constexpr std::string_view kTokenVolume = "wisp-sa-token";
inline constexpr std::string_view kTokenDir = "/var/run/wisp-sa-token";
// An empty read-only tmpfs over the API token's path in the sidecar: the sidecar never talks to
// the apiserver, and a mount at that path keeps the ServiceAccount admission plugin (re-run after
// wisp's patch) from adding kube-api-access to it, a change that would call wisp's webhook again
// (reinvocationPolicy IfNeeded).
inline constexpr std::string_view kNoApiTokenVolume = "wisp-no-api-token";
inline constexpr std::string_view kApiTokenDir = "/var/run/secrets/kubernetes.io/serviceaccount";
inline constexpr std::string_view kWispCsiDriver = "csi.wisp.dev";
inline constexpr std::string_view kWispGroup = "wisp.dev";
inline constexpr std::string_view kCdiGroup = "cdi.kubevirt.io";
// The kind part of the key of a CDI VolumeImportSource's record: apart from wisp.dev's
// "VolumeImportSource", so that two sources of one name in one namespace keep two records.
inline constexpr std::string_view kCdiImportSourceRecordKind = "cdi.kubevirt.io.VolumeImportSource";
inline constexpr std::string_view kVirtiofsSocketDir = "/var/run/kubevirt/virtiofs-containers";
inline constexpr std::string_view kVirtiofsVolume = "virtiofs-containers";
// A VM token request: annotation wisp.dev/token.<volume> on the VMI, value
// {"audience":"sts.amazonaws.com","expirationSeconds":3600,"path":"token"}, naming a containerPath
// volume (or, on a KubeVirt with VEP 94, written by rule b's mutating half from the volume's
// serviceAccountToken). virt-controller copies it onto the launcher pod, where rule c serves it.
inline constexpr std::string_view kTokenAnnotationPrefix = "wisp.dev/token.";
// Written by wisp (never by users) next to it: the containerPath volume's path, the compute
// container's mount point for the token (the pod alone does not say where the VMI wants it).
inline constexpr std::string_view kTokenMountAnnotationPrefix = "wisp.dev/token-mount.";
// The launcher pod's projected token volume for VMI volume <v>: wisp-token-<v>.
inline constexpr std::string_view kTokenVolumePrefix = "wisp-token-";
// What virt-controller's virtiofs container for a VEP 94 serviceAccount volume shares: the pod's
// API-audience token (pkg/virt-controller/services/virtiofs.go).
inline constexpr std::string_view kServiceAccountSharedDir =
    "/var/run/secrets/kubernetes.io/serviceaccount/";
// CDI: a PVC carrying this annotation with a DataVolume's name is that DataVolume's to adopt.
inline constexpr std::string_view kPopulatedForAnnotation = "cdi.kubevirt.io/storage.populatedFor";
// The populator controller's prime PVC (services/gateway/src/cluster/populate_plan.hpp) names the
// PVC it populates, in its own namespace: its record is that PVC's source, so the volume that
// external-provisioner creates for the prime is filled from it.
inline constexpr std::string_view kPrimeForAnnotation = "wisp.dev/prime-for";

// Rule g (identity presets and several tokens per pod), read on the pod and then on its
// ServiceAccount (AdmissionCall.service_account_annotations): wisp.dev/identity-preset names the
// preset (aws | azure | gcp | generic); wisp.dev/tokens is a JSON list of further tokens. On the
// pod only: wisp.dev/containers (the preset's allow-list) and wisp.dev/skip-containers.
inline constexpr std::string_view kPresetAnnotation = "wisp.dev/identity-preset";
inline constexpr std::string_view kTokensAnnotation = "wisp.dev/tokens";
inline constexpr std::string_view kContainersAnnotation = "wisp.dev/containers";
inline constexpr std::string_view kSkipContainersAnnotation = "wisp.dev/skip-containers";
inline constexpr std::string_view kAudienceAnnotation = "wisp.dev/audience";
inline constexpr std::string_view kTokenExpirationAnnotation = "wisp.dev/token-expiration";
inline constexpr std::string_view kGcpProviderAnnotation =
    "wisp.dev/gcp-workload-identity-provider";
inline constexpr std::string_view kGcpServiceAccountAnnotation = "wisp.dev/gcp-service-account";

struct KvWrite {
  std::string bucket;
  std::string key;
  std::string value;  // serialized proto (PopulationRecord)
  bool erase = false;
};

struct Verdict {
  bool allowed = true;
  std::string patch;                 // a JSON array of RFC 6902 operations; "" when none
  std::optional<k8s::Json> mutated;  // the object after the patch (the virt-launcher rule)
  std::vector<std::string> warnings;
  std::string message;
  int32_t code = 0;
  std::string reason;
  std::map<std::string, std::string> audit_annotations;
  std::map<std::string, std::string> rule_outcomes;
  std::vector<KvWrite> writes;
  absl::Status error = absl::OkStatus();
};

// Reads a KV record: nullopt when absent; an error Status when the store did not answer.
using RecordLookup = std::function<absl::StatusOr<std::optional<std::string>>(
    std::string_view bucket, std::string_view key)>;

struct AdmissionInput {
  // How FromCall reads a Pod's object: into `pod` and `object` both, or into `pod` alone, the
  // tree left to ParseObject() (wisp-policy: of the pod rules only the virt-launcher rule needs
  // the tree, and EvaluateMutate builds it then).
  enum class PodTree { kParse, kDefer };

  v1::AdmissionCall call;
  k8s::Json object;              // null for DELETE, and for a deferred Pod until ParseObject()
  k8s::Json old_object;          // null for CREATE
  std::optional<PodFacts> pod;   // a Pod's facts (for kind Pod with an object)
  bool object_deferred = false;  // `object` is still to be parsed from call.object_json()
  int64_t now_unix = 0;
  // The object is one the apiserver stored (EvaluateCommitted), not one under admission: checks
  // of what else exists (CDI's destination-PVC check) are admission's, and do not run.
  bool committed = false;

  // Reads the call's object JSON; InvalidArgument naming object_json/old_object_json. The whole
  // text is validated either way.
  static absl::StatusOr<AdmissionInput> FromCall(v1::AdmissionCall call, int64_t now_unix = 0,
                                                 PodTree tree = PodTree::kParse);
  // Builds a deferred `object` (nothing to do otherwise).
  absl::Status ParseObject();
  // The object's namespace: the call's, else metadata.namespace.
  std::string Namespace() const;
  std::string Name() const;
  bool Is(std::string_view group, std::string_view kind) const;
};

// Keys of the KV records (see PopulationRecord in admission.proto): "<ns>.<kind>.<name>", `kind`
// being RecordKind's.
std::string SourceRecordKey(std::string_view ns, std::string_view kind, std::string_view name);
// The kind a record of this object kind is kept under (PopulationRecord.kind): the kind itself,
// except cdi.kubevirt.io's VolumeImportSource (kCdiImportSourceRecordKind).
std::string RecordKind(std::string_view group, std::string_view kind);

// a. Token sidecar for pods annotated wisp.dev/token-sidecar (mutating).
Verdict EvaluateTokenSidecar(const AdmissionInput& in, const Policy& policy);
// b. VirtualMachineInstance token requests (wisp.dev/token.<volume> annotations on containerPath
// volumes; VEP 94 serviceAccountToken volumes) and VEP 165 containerPath volumes (validating, on
// CREATE and on an UPDATE that changes the spec; the token annotations may not change after
// CREATE). Writes nothing.
Verdict EvaluateVmiTokenVolumes(const AdmissionInput& in, const Policy& policy);
// b, mutating half (VMI CREATE): writes the wisp.dev/token.<volume> annotation of each VEP 94
// token volume and the wisp.dev/token-mount.<volume> annotation (the containerPath) of each
// containerPath token request, so that the launcher pod carries all rule c needs.
Verdict EvaluateVmiTokenAnnotations(const AdmissionInput& in, const Policy& policy);
// c. virt-launcher pods, from the pod alone (its copied wisp.dev/token.* annotations): the
// projected token wisp-token-<volume>, its compute mount at the containerPath, and the
// virtiofs-<volume> container KubeVirt's launcher-pod mutator would render for it, or virt-
// controller's VEP 94 container rewritten to serve it (mutating). A pod it cannot serve as asked
// is refused with the reason.
Verdict EvaluateVirtLauncher(const AdmissionInput& in, const Policy& policy);
// d. CDI DataVolumes (validating; records the population spec). `lookup` finds the PVC records of
// rule e for CDI's destination-PVC check (admission only); without one the check is skipped.
Verdict EvaluateDataVolume(const AdmissionInput& in, const Policy& policy,
                           const RecordLookup& lookup = RecordLookup());
// e. PersistentVolumeClaims, wisp.dev/v1alpha1 VolumeImportSources and CDI's own
// cdi.kubevirt.io/v1beta1 VolumeImportSources (validating; records). A PVC's dataSourceRef may
// name either VolumeImportSource; its record carries that source's. Of CDI's sources wisp imports
// http (with an optional sha256 checksum) and blank; registry, s3, gcs, imageio and vddk are
// refused naming the field, and so is contentType archive.
Verdict EvaluatePvc(const AdmissionInput& in, const Policy& policy, const RecordLookup& lookup);
Verdict EvaluateVolumeImportSource(const AdmissionInput& in, const Policy& policy);
Verdict EvaluateCdiVolumeImportSource(const AdmissionInput& in, const Policy& policy);
// g. SDK wiring presets and wisp.dev/tokens (mutating, pods on CREATE): each token an inline
// csi.wisp.dev volume (owner and mode for the containers' user, the gcp credential file written
// next to the token by the CSI node), mounted read-only into the chosen containers with the
// variables their SDK reads. Refuses bad input naming the annotation; no object is created.
Verdict EvaluateIdentityPresets(const AdmissionInput& in, const Policy& policy);
// Whether rule g must read the pod as the token-sidecar rule's patch left it.
bool IdentityPresetsNeedObject(const AdmissionInput& in, const Policy& policy);
// f. Any pod's projected serviceAccountToken audiences and lifetimes (validating).
Verdict EvaluatePodTokenAudiences(const AdmissionInput& in, const Policy& policy);

// Every rule that applies to the call on the mutate or validate path, combined: mutations are
// chained (each rule sees the previous one's output) and their patches concatenated; the first
// denial wins; warnings, audit annotations, outcomes and writes are merged.
// EvaluateMutate takes the input by value (move it in when it is not needed afterwards): when the
// virt-launcher rule runs after the token-sidecar rule mutated, it applies that patch to the
// object first, parsing a deferred object then.
Verdict EvaluateMutate(AdmissionInput in, const Policy& policy, const RecordLookup& lookup);
Verdict EvaluateValidate(const AdmissionInput& in, const Policy& policy,
                         const RecordLookup& lookup);

// Verdict -> the bus reply body.
v1::AdmissionVerdict ToProto(const Verdict& verdict);

// The records a committed object leaves (CommittedObject in admission.proto): the validating
// rules run on the object as stored (ADDED and MODIFIED as a CREATE, DELETED as a DELETE, with
// AdmissionInput::committed set), and their writes are what to apply. An object the rules refuse
// as stored gets its record deleted instead (writes = that erase), and `refused` says why. `error`
// as in Verdict (a lookup failed: try again). InvalidArgument for an unknown event or an object
// that does not parse.
struct CommitOutcome {
  std::vector<KvWrite> writes;
  std::string refused;
  std::string uid;  // the object's metadata.uid (DELETED: of its last state)
  std::map<std::string, std::string> rule_outcomes;
  absl::Status error = absl::OkStatus();
};
// SYNCED (CommittedObject): the keys among `keys` (of wisp_sources) that are records of `kind`
// and name none of `live` ("<namespace>/<name>"). InvalidArgument when `kind` keeps no records.
absl::StatusOr<std::vector<std::string>> StaleRecordKeys(const v1::GroupVersionKind& kind,
                                                         const std::vector<std::string>& live,
                                                         const std::vector<std::string>& keys);
// Whether wisp keeps records of this kind (PersistentVolumeClaim, cdi.kubevirt.io/DataVolume,
// wisp.dev/VolumeImportSource, cdi.kubevirt.io/VolumeImportSource): the kinds EvaluateCommitted
// takes and the gateway watches.
bool KeepsRecords(std::string_view group, std::string_view kind);
absl::StatusOr<CommitOutcome> EvaluateCommitted(const v1::CommittedObject& object,
                                                const Policy& policy, const RecordLookup& lookup,
                                                int64_t now_unix);

}  // namespace wisp::policy
