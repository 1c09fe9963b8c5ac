#pragma once
// The populator controller and the DataVolume controller (populate_plan.hpp says what they do):
// wisp as a real Kubernetes volume populator. Runs in the gateway, the door to the apiserver
// (--controllers); the import itself stays in wisp-populator, reached over the bus.
//
// Contract:
//   - Reflectors (every namespace) keep local copies of PersistentVolumeClaims,
//     PersistentVolumes, StorageClasses, cdi.kubevirt.io DataVolumes and wisp.dev
//     VolumeImportSources. A change enqueues the keys it concerns ("pvc/<ns>/<name>" for a PVC
//     with a wisp data source, its prime, or the PV of either; "dv/<ns>/<name>" for a DataVolume,
//     its PVC or its VolumeImportSource); a StorageClass change enqueues every wisp PVC.
//   - One worker takes keys one at a time (a key queued twice is reconciled once) and carries out
//     PlanPvc / PlanDataVolume with the API client: creates (AlreadyExists is success: the copy
//     lags behind what this controller just wrote), merge patches (the PV's claimRef, the
//     DataVolume's status subresource), deletes with a uid precondition (NotFound is success),
//     and Events. A failed call requeues the key after a backoff (initial_backoff doubling to
//     max_backoff, reset by a success); a DataVolume still importing is requeued every
//     poll_interval to refresh its progress from wisp-populator (wisp.v1.volume.get of the
//     prime's volume, "<volume_name_prefix>-<uid of the prime>", as external-provisioner names
//     it).
//   - Nothing is done until every copy has had its first list (Synced()), nor while another
//     replica leads (SetLeading); Stop() returns within the reflectors' stop bound plus one API
//     call.
//   - Events: on the user's PVC, Populating (prime created), Populated (PV handed over) and
//     PopulationFailed (the import failed, once per message); on a DataVolume, its phases, and
//     UploadFailed when an upload did not complete.
//   - An upload DataVolume is annotated with its volume's id (kUploadVolumeAnnotation, a merge
//     patch of the object: metadata is not written through the status subresource); it is looked
//     at every poll_interval until the volume awaits the upload, then every upload_poll_interval
//     while it waits, and every poll_interval while the bytes arrive.
//   - Metrics: wisp_gateway_populate_actions_total{controller,action,result},
//     kubevirt_cdi_import_progress_total{ownerUID} (CDI's importer metric: the percentage of a
//     DataVolume's import, while it runs).
//
// Example:
//   cluster::PopulateController controllers(*kube, process.bus(), process.registry(), {});
//   controllers.Start();
//   ...
//   controllers.Stop();
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include "cluster/populate_plan.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/kube/client.hpp"
#include "wisp/kube/reflector.hpp"
#include "wisp/status/clock.hpp"

namespace spdlog {
class logger;
}  // namespace spdlog

namespace wisp::gateway::cluster {

inline const kube::Resource kStorageClasses{"storage.k8s.io", "v1", "storageclasses", false};

struct PopulateControllerOptions {
  PlanOptions plan;
  bool populator = true;                   // run the populator controller (PVCs)
  bool datavolumes = true;                 // run the DataVolume controller
  std::string volume_name_prefix = "pvc";  // external-provisioner's --volume-name-prefix
  std::chrono::milliseconds poll_interval{std::chrono::seconds(1)};
  // How often an upload DataVolume whose volume awaits the bytes is looked at (it may wait for
  // hours; its first upload shows within this long).
  std::chrono::milliseconds upload_poll_interval{std::chrono::seconds(5)};
  std::chrono::milliseconds bus_timeout{std::chrono::seconds(3)};
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(30)};
  kube::ReflectorOptions reflector;  // namespace_name, selectors and name are set per kind
  const Clock* clock = nullptr;      // nullptr: SystemClock (condition and event times)
};

class PopulateController {
 public:
  PopulateController(kube::Client& client, bus::Requester& bus, prometheus::Registry& registry,
                     PopulateControllerOptions options);
  ~PopulateController();
  PopulateController(const PopulateController&) = delete;
  PopulateController& operator=(const PopulateController&) = delete;

  void Start();
  void Stop();
  bool Synced() const;
  // Only a leading controller writes (kube::LeaderElector's on_change): while not leading the
  // copies stay current and the keys wait; becoming leader looks at every object again. A new
  // controller leads until told otherwise.
  void SetLeading(bool leading);

  class Cache;

 private:
  void Enqueue(const std::string& key, std::chrono::milliseconds delay = {});
  void EnqueueForPvc(const Json& pvc);
  void EnqueueForPv(const Json& pv);
  void EnqueueAllPvcs();
  void Work();
  // OK, or the error to back off on. `requeue_after`: set when the key wants another look.
  absl::Status ReconcilePvc(const std::string& ns, const std::string& name,
                            std::chrono::milliseconds& requeue_after);
  absl::Status ReconcileDataVolume(const std::string& ns, const std::string& name,
                                   std::chrono::milliseconds& requeue_after);
  std::optional<VolumeView> LookUpVolume(const Json& prime);
  void PostEvent(const char* controller, const Json& object, std::string_view api_version,
                 std::string_view kind, const EventToPost& event);
  void Count(const char* controller, std::string_view action, const absl::Status& result);
  void SetProgress(const std::string& owner_uid, const std::string& progress);

  kube::Client& client_;
  bus::Requester& bus_;
  PopulateControllerOptions options_;
  const Clock& clock_;
  std::shared_ptr<spdlog::logger> logger_;
  prometheus::Family<prometheus::Counter>& actions_;
  prometheus::Family<prometheus::Counter>& progress_;
  std::map<std::string, prometheus::Counter*> progress_series_;  // worker thread only

  std::unique_ptr<Cache> pvcs_, pvs_, classes_, datavolumes_, sources_;
  std::vector<std::unique_ptr<kube::Reflector>> reflectors_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> queued_;
  std::multimap<std::chrono::steady_clock::time_point, std::string> delayed_;
  std::map<std::string, std::chrono::milliseconds> backoff_;  // worker thread only
  std::set<std::string> failures_reported_;                   // worker thread only
  bool stopping_ = false;
  bool leading_ = true;
  std::thread worker_;
};

}  // namespace wisp::gateway::cluster
