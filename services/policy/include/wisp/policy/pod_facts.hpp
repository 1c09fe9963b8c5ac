#pragma once
// What the pod rules (the token sidecar, the token audiences) read of a Pod, taken from its JSON
// text in one pass over simdjson's DOM. wisp-policy then needs no nlohmann tree of the pod:
// building that tree cost more than the token-sidecar rule itself.
//
// Contract:
//   - ReadPodFacts accepts exactly what k8s::ParseJson accepts, and fails with its messages
//     (InvalidArgument naming `what`); a root that is not an object is InvalidArgument
//     "<what> is not an object".
//   - Members are read with k8s/objects.hpp's semantics: one that is missing or of the wrong type
//     reads as absent ("" / nullopt / false), and a later duplicate key wins, as in nlohmann's
//     tree. Where a rule must edit a member, its Shape says whether it is there as the type the
//     edit expects, missing, or something else.
//   - Volumes and containers keep the pod's order, so a rule can address them by index.
//   - Only what the rules read is kept; the rest of the pod is validated and skipped.
//
// Example:
//   WISP_ASSIGN_OR_RETURN(PodFacts pod, ReadPodFacts(call.object_json(), "object_json"));
//   if (const std::string* v = pod.Annotation("wisp.dev/token-sidecar")) ...
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wisp/status/status.hpp"

namespace wisp::policy {

struct PodFacts {
  // A member as found: absent, of the type expected (object or array), or of another type.
  enum class Shape : uint8_t { kAbsent, kExpected, kOther };
  using Strings = std::vector<std::pair<std::string, std::string>>;

  struct Mount {
    std::string name;
    std::string mount_path;
  };
  struct Container {
    bool is_object = false;
    std::string name;
    std::string image;
    std::optional<int64_t> run_as_user;   // securityContext.runAsUser
    std::optional<int64_t> run_as_group;  // securityContext.runAsGroup
    Shape volume_mounts_shape = Shape::kAbsent;
    std::vector<Mount> volume_mounts;
    Shape env_shape = Shape::kAbsent;
    std::vector<std::string> env_names;  // "" for an entry without a string name
  };
  // A projected source with a serviceAccountToken member (of any value).
  struct ProjectedToken {
    size_t source_index = 0;                    // in projected.sources
    std::string audience;                       // serviceAccountToken.audience
    std::optional<int64_t> expiration_seconds;  // serviceAccountToken.expirationSeconds
  };
  struct Volume {
    size_t index = 0;  // in spec.volumes
    std::string name;
    bool empty_dir = false;  // has an emptyDir member (of any value)
    std::vector<ProjectedToken> projected_tokens;
    std::string csi_driver;              // csi.driver
    std::string identity_provider;       // csi.volumeAttributes.identityProvider
    std::string csi_audience;            // csi.volumeAttributes.audience
    std::string csi_expiration_seconds;  // csi.volumeAttributes.expirationSeconds
  };

  std::string namespace_name;           // metadata.namespace
  std::string service_account_name;     // spec.serviceAccountName ("" when not set)
  std::optional<int64_t> run_as_user;   // spec.securityContext.runAsUser
  std::optional<int64_t> run_as_group;  // spec.securityContext.runAsGroup
  Strings annotations;                  // string-valued members of metadata.annotations
  Strings labels;                       // string-valued members of metadata.labels
  Shape spec_shape = Shape::kAbsent;
  bool host_network = false;
  Shape containers_shape = Shape::kAbsent;
  std::vector<Container> containers;
  Shape init_containers_shape = Shape::kAbsent;
  std::vector<Container> init_containers;
  Shape volumes_shape = Shape::kAbsent;
  std::vector<Volume> volumes;  // object elements only (others have nothing to read)

  const std::string* Annotation(std::string_view key) const;
  const std::string* Label(std::string_view key) const;
  bool HasVolume(std::string_view name) const;
};

absl::StatusOr<PodFacts> ReadPodFacts(std::string_view json, std::string_view what);

}  // namespace wisp::policy
