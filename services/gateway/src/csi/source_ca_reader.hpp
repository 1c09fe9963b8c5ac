#pragma once
// SourceCaReader: what the recorded import source of PVC <namespace>/<name> names in the
// apiserver and only the gateway can read: the CA bundle of its certConfigMap
// (cluster/source_ca.hpp implements it with the gateway's API client). nullopt: none. The CSI
// controller puts it in the wisp.v1.volume.create request (VolumeSpec.source_ca).
//
//   options.read_source_ca = [&kube](const std::string& ns, const std::string& pvc) {
//     return cluster::ReadSourceCa(kube, ns, pvc);
//   };
#include <functional>
#include <optional>
#include <string>

#include "wisp/status/status.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::gateway::csi {

using SourceCaReader = std::function<absl::StatusOr<std::optional<v1::SourceCa>>(
    const std::string& pvc_namespace, const std::string& pvc_name)>;

}  // namespace wisp::gateway::csi
