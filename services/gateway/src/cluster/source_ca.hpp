#pragma once
// The CA bundle of an http import source's certConfigMap (CDI's field, on a DataVolume, a CDI or
// wisp.dev VolumeImportSource), read from the apiserver for wisp-populator, which has no
// apiserver access. The gateway's CSI controller asks for it on CreateVolume, for the PVC that
// external-provisioner names (--extra-create-metadata: usually a prime PVC), and the
// wisp.v1.volume.create request carries it (VolumeSpec.source_ca). A CA bundle is not secret.
//
// Contract:
//   - The source is found as wisp-populator finds its record: the PVC (or, for a prime, the PVC
//     named by its wisp.dev/prime-for annotation); the VolumeImportSource its dataSourceRef names
//     (wisp.dev or cdi.kubevirt.io); without one, the DataVolume of the PVC's name.
//   - nullopt: no such object (the populator's records decide what to import), or its
//     spec.source.http names no certConfigMap.
//   - The bundle is CDI's importer's reading of the mounted ConfigMap: every value of data and
//     binaryData, in key order, keys starting with "." skipped, each ending in a newline.
//   - A named ConfigMap that does not exist is Unavailable ("... does not exist yet; retry"): the
//     import waits for it, as CDI's importer pod does. One without a PEM certificate is
//     FailedPrecondition. Both messages name the ConfigMap and the field that names it.
//   - Other apiserver errors are returned annotated (Forbidden: the gateway's RBAC).
//
// Example:
//   WISP_ASSIGN_OR_RETURN(std::optional<v1::SourceCa> ca, ReadSourceCa(*kube, "vms",
//   "wisp-prime-u1")); if (ca) *spec.mutable_source_ca() = *ca;
#include <optional>
#include <string>

#include "wisp/kube/client.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::gateway::cluster {

absl::StatusOr<std::optional<v1::SourceCa>> ReadSourceCa(kube::Client& client,
                                                         const std::string& ns,
                                                         const std::string& pvc_name);

// The CA bundle `config_map` holds, as CDI's importer reads it.
std::string CaBundle(const kube::Json& config_map);

}  // namespace wisp::gateway::cluster
