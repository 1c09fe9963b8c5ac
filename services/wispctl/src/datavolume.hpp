#pragma once
// wispctl datavolume upload: uploads a local image into a CDI DataVolume with spec.source.upload,
// on a cluster where wisp's DataVolume controller runs (docs/operations.md, "Upload an image").
//
//   kubectl create -f upload-dv.yaml            # spec.source.upload: {}
//   wispctl datavolume upload vms/fedora ./fedora.qcow2
//
// Steps: read the DataVolume from the apiserver (--kubeconfig, else $KUBECONFIG, else in-cluster,
// else ~/.kube/config: `get datavolumes` is the only Kubernetes right it needs), wait (--wait)
// until it is UploadReady and carries the id of its upload volume (the wisp.dev/upload-volume-id
// annotation that wisp's DataVolume controller writes), then upload exactly as `wispctl volume
// upload` does (an upload token from wisp-token over NATS, an HTTPS PUT to the gateway), then wait
// (--wait) until the DataVolume is Succeeded: its PVC bound to the uploaded volume. Exit 0 then; 1
// when the upload or the DataVolume failed or the wait ran out; 2 for a bad argument.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wisp/status/status.hpp"

namespace wisp::wispctl {

int RunDataVolume(const std::vector<std::string>& args);

// The wisp volume id an upload into DataVolume `dv` goes to. FailedPrecondition when it is not an
// upload DataVolume, or Succeeded or Failed already; Unavailable (wait and look again) while it
// is not UploadReady with the annotation yet. Messages name the DataVolume and say why.
absl::StatusOr<std::string> UploadVolumeOf(const nlohmann::json& dv);

// "NAMESPACE/NAME", or NAME in `default_namespace`; InvalidArgument for anything else.
absl::StatusOr<std::pair<std::string, std::string>> ParseNamespacedName(
    const std::string& ref, const std::string& default_namespace);

}  // namespace wisp::wispctl
