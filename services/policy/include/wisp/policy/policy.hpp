#pragma once
// wisp-policy's configuration: which rules run and the values they use, read from a YAML file.
//
// Contract:
//   - ParsePolicyYaml accepts the documented keys only (config.example.yaml lists them all); an
//     unknown key, a wrong type or a bad value is InvalidArgument naming the key
//     ("tokenSidecar.nativeSidecar: \"maybe\" is not one of auto, on, off").
//   - Defaults (an empty file) are the upstream ones: every rule on, sidecar 250m/256Mi/5Gi,
//     native sidecar auto (>= 1.29), token volume only for hostNetwork pods, audience "wisp",
//     3600 s tokens, 24 h maximum lifetime, no audience restriction, no KubeVirt alpha gates.
//   - AllowedAudiences: the namespace's list, else the "*" list, else nullptr (unrestricted).
//
// Example:
//   WISP_ASSIGN_OR_RETURN(policy::Policy p, policy::LoadPolicyFile("/etc/wisp/policy.yaml"));
//   if (!policy::AudienceAllowed(p, "ml", "sts.amazonaws.com")) ...
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "wisp/status/status.hpp"

namespace wisp::policy {

enum class NativeSidecarMode { kAuto, kOn, kOff };
enum class TokenVolumeFor { kHostNetwork, kAll };

struct SidecarResources {
  std::string cpu_request = "250m";
  std::string cpu_limit = "250m";
  std::string memory_request = "256Mi";
  std::string memory_limit = "256Mi";
  std::string ephemeral_storage_request = "5Gi";
  std::string ephemeral_storage_limit = "5Gi";
};

struct RuleSwitches {
  bool token_sidecar = true;        // a: sidecar + wisp-sa-token for annotated pods
  bool vmi_token_volumes = true;    // b: VMI token requests (validate + the annotating mutate)
  bool virt_launcher = true;        // c: virt-launcher pods from their copied annotations
  bool data_volumes = true;         // d: CDI DataVolumes
  bool pvc_sources = true;          // e: PVCs, wisp.dev and CDI VolumeImportSources
  bool pod_token_audiences = true;  // f: projected token audiences vs the namespace allow-list
  bool identity_presets = true;     // g: SDK wiring presets and wisp.dev/tokens (issue 25)
};

// Rule g's settings (identityPresets in the file): the defaults of each preset, as the upstream
// webhooks have them (amazon-eks-pod-identity-webhook's flags, azure-workload-identity's
// constants, Google's STS). A lifetime left at its default is capped at maxTokenLifetime.
struct IdentityPresets {
  // eks.amazonaws.com/role-arn (ServiceAccount or pod) selects aws, and the pod label
  // azure.workload.identity/use=true selects azure, as the upstream webhooks do. Off when they
  // run beside wisp and should keep those pods.
  bool upstream_annotations = true;
  // The csi.wisp.dev volumes' tokenSource: "wisp" (wisp-token issues, wisp's issuer) or "kubelet"
  // (the API server's token; the CSIDriver must list the audience in tokenRequests).
  std::string token_source = "wisp";
  std::string aws_audience = "sts.amazonaws.com";
  std::string aws_region;  // AWS_REGION and AWS_DEFAULT_REGION when set
  bool aws_sts_regional_endpoints = false;
  int64_t aws_expiration_seconds = 86400;
  std::string azure_audience = "api://AzureADTokenExchange";
  std::string azure_tenant_id;  // when the ServiceAccount names none
  std::string azure_authority_host = "https://login.microsoftonline.com/";
  int64_t azure_expiration_seconds = 3600;
  std::string gcp_token_url = "https://sts.googleapis.com/v1/token";
  int64_t gcp_expiration_seconds = 3600;
  std::string generic_audience = "wisp";
  int64_t generic_expiration_seconds = 3600;
};

// KubeVirt feature gates the VMI rules follow (KubeVirt's own CR is out of wisp's reach, so the
// operator states them here). Both are alpha upstream and off by default.
struct FeatureGates {
  bool container_path_volumes = false;    // ContainerPathVolumes (VEP 165)
  bool virtiofs_storage_volumes = false;  // EnableVirtioFsStorageVolumes (PVC/DV filesystems)
};

struct Policy {
  RuleSwitches rules;
  FeatureGates feature_gates;
  // Namespace (or "*" for every other namespace) -> audiences its tokens may carry.
  std::map<std::string, std::vector<std::string>> audiences;
  // Longest token lifetime any rule admits; Kubernetes' own 2^32 s limit always applies too.
  int64_t max_token_lifetime_seconds = 86400;
  std::string sidecar_image = "ghcr.io/wisp-dev/wisp-sidecar:0.1.0";
  std::string sidecar_sts_url;  // passed as --sts-url when set
  // PEM CA bundle that verifies the gateway's STS certificate, read from tokenSidecar.stsCaFile
  // when the policy is loaded; handed to the sidecar as env WISP_STS_CA_PEM (--ca-pem).
  std::string sidecar_sts_ca_pem;
  // When set: --metrics-address=0.0.0.0:<port> and a containerPort "metrics" on the sidecar.
  int sidecar_metrics_port = 0;
  SidecarResources sidecar_resources;
  NativeSidecarMode native_sidecar = NativeSidecarMode::kAuto;
  TokenVolumeFor token_volume_for = TokenVolumeFor::kHostNetwork;
  std::string token_audience = "wisp";  // wisp-sa-token audience without identityProvider
  int64_t token_expiration_seconds = 3600;
  IdentityPresets presets;
};

absl::StatusOr<Policy> ParsePolicyYaml(std::string_view yaml);
absl::StatusOr<Policy> LoadPolicyFile(const std::string& path);

// nullptr when the namespace is unrestricted.
const std::vector<std::string>* AllowedAudiences(const Policy& policy, std::string_view ns);
// An empty audience means the API server's own audiences and is always allowed.
bool AudienceAllowed(const Policy& policy, std::string_view ns, std::string_view audience);

std::string_view NativeSidecarModeName(NativeSidecarMode mode);
std::string_view TokenVolumeForName(TokenVolumeFor mode);

}  // namespace wisp::policy
