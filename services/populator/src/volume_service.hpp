#pragma once
// VolumeService: wisp.v1.volume.create|get|delete|list, the populator's request side.
//
// Routing (how a request reaches the node that holds the bytes):
//   - Every populator instance serves the general subjects (queue group wisp-populator) and its
//     node's subjects, subjects::Node(<node>, "volume.create" | "volume.get" | "volume.delete" |
//     "volume.list"), with the same handlers.
//   - Volume state lives in KV (wisp_volumes), so create/get/list can be answered by any
//     instance. The bytes are only ever touched on their node: create publishes the population
//     job on subjects::PopulateJobs(spec.node), a JetStream work queue whose per-node durable
//     consumer only that node's instances pull from (JobRunner). A create without spec.node is
//     placed on the node of the instance that answers it.
//   - delete on the general subject marks the volume DELETING and, when the volume lives on
//     another node, forwards to subjects::Node(node, "volume.delete"); that node removes the
//     directory and the record. A node with no populator answers no one: Unavailable (retry),
//     except for a volume failed as node_lost (lost_nodes.hpp), whose record is removed at once.
//
// Sources, in order: an explicit spec.source (CSI content source / wispctl); else the admission
// record in wisp_sources for the PVC named by csi.storage.k8s.io/pvc/{namespace,name}
// ("<ns>.PersistentVolumeClaim.<pvc>", then "<ns>.DataVolume.<pvc>"; a record holding only a
// dataSourceRef to a wisp.dev or cdi.kubevirt.io VolumeImportSource reads that source's record,
// "<ns>.VolumeImportSource.<name>" or "<ns>.cdi.kubevirt.io.VolumeImportSource.<name>", and is
// Unavailable until it exists); else StorageClass
// parameters wisp.dev/source-url (+ wisp.dev/source-format, wisp.dev/sha256); else a blank volume.
// A PVC-named request with neither a record nor a StorageClass source answers Unavailable (the
// admission record may not be written yet; external-provisioner retries) unless the StorageClass
// says wisp.dev/source: blank.
//
// Create is idempotent by name: the same name with the same capacity and source answers the
// existing volume; a different capacity or source is AlreadyExists. Clones must stay in their
// namespace (cross-namespace refused, as CDI refuses a namespaced dataSourceRef) and land on the
// source's node.
//
//   VolumeService service(bus, volumes_kv, sources_kv, metrics, clock, config);
//   WISP_RETURN_IF_ERROR(service.Serve());
#include <chrono>
#include <string>
#include <vector>

#include "populator_metrics.hpp"
#include "volume_store.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/bus/service.hpp"
#include "wisp/status/clock.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::populator {

inline constexpr char kParamSourceUrl[] = "wisp.dev/source-url";
inline constexpr char kParamSourceFormat[] = "wisp.dev/source-format";
inline constexpr char kParamSha256[] = "wisp.dev/sha256";
inline constexpr char kParamSource[] = "wisp.dev/source";  // "blank" | "http"
inline constexpr char kParamPvcName[] = "csi.storage.k8s.io/pvc/name";
inline constexpr char kParamPvcNamespace[] = "csi.storage.k8s.io/pvc/namespace";

struct VolumeServiceConfig {
  std::string node_name;
  std::string volume_root;
  std::chrono::milliseconds forward_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds wait_poll{std::chrono::milliseconds(100)};
};

// Node names travel in NATS subjects: non-empty, no whitespace, no '*' or '>'.
absl::Status ValidateNodeName(std::string_view node, std::string_view field);
// Volume ids become directory names: [A-Za-z0-9_-]+ only.
absl::Status ValidateVolumeId(std::string_view id);

class VolumeService {
 public:
  VolumeService(bus::Bus& bus, bus::KeyValue& volumes, bus::KeyValue& sources,
                PopulatorMetrics& metrics, Clock& clock, VolumeServiceConfig config);
  ~VolumeService();

  // Serves the general and the node subjects: as endpoints of `micro` (NATS micro discovery and
  // the wisp_bus_requests_total metrics) when given, else as plain bus subscriptions.
  absl::Status Serve(bus::Service* micro = nullptr);
  // Stops serving (in-flight handlers finish).
  void Drain();

  bus::Reply HandleCreate(const bus::Request& request);
  bus::Reply HandleGet(const bus::Request& request);
  bus::Reply HandleDelete(const bus::Request& request, bool node_subject);
  bus::Reply HandleList(const bus::Request& request);

  absl::StatusOr<v1::VolumeStatus> Create(const v1::CreateVolumeRequest& request,
                                          const bus::Request* wait_for);
  // Fills spec.source from the record / parameters; validates it. Exposed for tests.
  absl::StatusOr<v1::VolumeSpec> ResolveSpec(v1::VolumeSpec spec);

  VolumeStore& store() { return store_; }

 private:
  absl::Status PublishJob(const v1::VolumeStatus& status, const v1::VolumeSpec& spec);
  absl::Status DeleteLocal(const std::string& id);

  bus::Bus& bus_;
  bus::KeyValue& sources_;
  PopulatorMetrics& metrics_;
  Clock& clock_;
  VolumeServiceConfig config_;
  VolumeStore store_;
  std::vector<bus::SubscriptionPtr> subs_;
};

}  // namespace wisp::populator
