#pragma once
// What the populator controller and the DataVolume controller do next, as pure functions of the
// objects the apiserver stored (and, for a DataVolume, the populator's volume status). No I/O:
// populate_controller.hpp reads the objects, asks these functions, and carries the answer out.
//
// The volume populator protocol (KEP 1495, as kubernetes-csi/lib-volume-populator and CDI's
// populators run it), for a PVC whose spec.dataSourceRef names a kind wisp populates (a wisp.dev
// VolumeImportSource, or CDI's own cdi.kubevirt.io one) and whose StorageClass is provisioned by
// wisp's CSI driver:
//   1. a StorageClass with volumeBindingMode WaitForFirstConsumer: wait until the scheduler chose
//      a node (annotation volume.kubernetes.io/selected-node on the PVC);
//   2. create the prime PVC "wisp-prime-<uid of the PVC>" in the PVC's namespace: the same access
//      modes, size, class and volume mode, no data source, the selected node copied, owned by the
//      PVC, and annotated wisp.dev/prime-for=<the PVC's name> (wisp-policy records it with the
//      PVC's source, so the populator knows what to import when CreateVolume names the prime);
//   3. external-provisioner provisions the prime through wisp's CSI driver; CreateVolume answers
//      only once the import has succeeded, so the prime's PV never holds partial data;
//   4. once the prime is bound to its PV: point the PV's claimRef at the user's PVC (the PV
//      controller then binds them);
//   5. once the user's PVC is bound (or deleted): delete the prime.
//
// A DataVolume (cdi.kubevirt.io/v1beta1):
//   - source.http / source.blank / source.upload: a wisp.dev VolumeImportSource of the
//     DataVolume's name carrying that source (http: url, a sha256 checksum, certConfigMap,
//     extraHeaders), then a PVC of the DataVolume's name whose dataSourceRef names it; an http
//     field wisp does not apply (k8s/http_source.hpp: secretRef, secretExtraHeaders,
//     insecureSkipVerify: true) fails the DataVolume naming it, and nothing is created;
//   - source.upload: the prime's volume waits for the bytes (wisp-populator's UPLOAD_READY); the
//     DataVolume is annotated wisp.dev/upload-volume-id=<the volume's id> (what `wispctl
//     datavolume upload` PUTs to) and goes UploadScheduled, UploadReady, Succeeded as CDI's
//     upload DataVolumes do; an upload that fails leaves it UploadReady with the cause in its
//     Running condition and a Warning UploadFailed event;
//   - spec.pvc|storage.dataSourceRef: a PVC of the DataVolume's name with that dataSourceRef and
//     nothing else of CDI's machinery;
//   - both owned by the DataVolume (controller: true): deleting it deletes them (the garbage
//     collector);
//   - status as CDI writes it: phase Pending, PendingPopulation, ImportScheduled,
//     ImportInProgress (UploadScheduled, UploadReady for an upload), Succeeded or Failed, progress
//     "45.30%", conditions Bound, Ready and Running, claimName; and an Event at each phase change.
//
// Example:
//   PvcPlan plan = PlanPvc({.pvc = &pvc, .storage_class = &sc, .prime = nullptr}, {});
//   if (plan.step == PvcStep::kCreatePrime) kube.Create(kube::kPersistentVolumeClaims, ns,
//   plan.object);
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace wisp::gateway::cluster {

using Json = nlohmann::json;

inline constexpr std::string_view kPrimeForAnnotation = "wisp.dev/prime-for";
inline constexpr std::string_view kSelectedNodeAnnotation = "volume.kubernetes.io/selected-node";
inline constexpr std::string_view kPrimePrefix = "wisp-prime-";
// On an upload DataVolume: the id of the wisp volume the upload goes to (PUT /v1/upload/<id>).
inline constexpr std::string_view kUploadVolumeAnnotation = "wisp.dev/upload-volume-id";

struct PlanOptions {
  std::string driver_name = "csi.wisp.dev";  // the StorageClass provisioner wisp serves
};

// True when `ref` (a dataSourceRef) names a kind wisp populates: a VolumeImportSource of
// wisp.dev or cdi.kubevirt.io.
bool IsPopulatedKind(const Json& ref);
// "wisp-prime-<uid>".
std::string PrimeName(std::string_view pvc_uid);
// The PVC a prime was made for (its wisp.dev/prime-for annotation), "" for any other PVC.
std::string PrimeFor(const Json& pvc);

enum class PvcStep {
  kNotOurs,       // no wisp data source, or another provisioner's class: nothing to do
  kWaitForClass,  // its StorageClass is not known (yet)
  kWaitForNode,   // WaitForFirstConsumer: no node chosen yet
  kCreatePrime,   // object: the prime PVC to create
  kWaitForPrime,  // the prime is being provisioned (the import runs meanwhile)
  kRebind,        // name: the PV; object: the merge patch pointing its claimRef at the PVC
  kWaitForBind,   // the PV points at the PVC; the PV controller binds them
  kDeletePrime,   // name: the prime to delete (the PVC is bound, or going)
  kDone,          // bound and no prime left
};
std::string_view PvcStepName(PvcStep step);

struct PvcView {
  const Json* pvc = nullptr;            // the user's PVC (required)
  const Json* storage_class = nullptr;  // its StorageClass, when known
  const Json* prime = nullptr;          // wisp-prime-<uid>, when it exists
  const Json* prime_pv = nullptr;       // the PV the prime's spec.volumeName names, when known
};

struct PvcPlan {
  PvcStep step = PvcStep::kNotOurs;
  std::string name;
  Json object;
  std::string message;  // why it waits, for logs and the DataVolume's conditions
};

PvcPlan PlanPvc(const PvcView& view, const PlanOptions& options);

// The populator's view of the volume behind a prime (wisp.v1.volume.get), as the DataVolume
// controller reads it.
struct VolumeView {
  std::string phase;     // VolumePhase name: PENDING, IMPORT_SCHEDULED, IMPORT_IN_PROGRESS, ...
  std::string progress;  // "45.30%" or "N/A"
  std::string message;
  std::string volume_id;  // "v-<hex>": where an upload goes
};

struct DataVolumeView {
  const Json* dv = nullptr;             // required
  const Json* pvc = nullptr;            // the PVC of the DataVolume's name
  const Json* source = nullptr;         // the VolumeImportSource of the DataVolume's name
  const Json* storage_class = nullptr;  // the PVC's StorageClass
  const Json* prime = nullptr;          // the PVC's prime
  std::optional<VolumeView> volume;     // the prime's volume, when the populator knows it
  std::string pvc_plan_message;         // PlanPvc's message for the PVC, when it waits
};

struct EventToPost {
  std::string type;  // Normal | Warning
  std::string reason;
  std::string message;
};

struct DataVolumePlan {
  std::optional<Json> create_source;  // a wisp.dev VolumeImportSource to create
  std::optional<Json> create_pvc;     // the PVC to create
  std::optional<Json> annotate;       // a merge patch of the DataVolume's metadata.annotations
  std::optional<Json> status;         // the new .status, when it differs from the stored one
  std::vector<EventToPost> events;
  std::string phase;  // the phase `status` carries (or the stored one)
};

// `now` is RFC 3339 (metav1.Time), written into the conditions that change.
DataVolumePlan PlanDataVolume(const DataVolumeView& view, const PlanOptions& options,
                              const std::string& now);

// RFC 3339 UTC with seconds, as metav1.Time marshals.
std::string Rfc3339(int64_t unix_seconds);

}  // namespace wisp::gateway::cluster
