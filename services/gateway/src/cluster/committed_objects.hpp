#pragma once
// The gateway's third door, the one wisp opens: it watches the apiserver for the objects wisp
// keeps records of (PersistentVolumeClaims, CDI DataVolumes, wisp.dev and CDI
// VolumeImportSources) and
// hands every stored state to wisp-policy on wisp.v1.policy.record, so that records follow what
// the apiserver committed and never what a webhook merely allowed (a ResourceQuota or storage may
// still refuse it after every webhook said yes).
//
// Contract:
//   - One kube::Reflector per watched kind, every namespace. Each reflector event becomes a
//     CommittedObject (ADDED, MODIFIED, DELETED) sent in the watch's order from the reflector's
//     thread; after each complete list (start, relist after 410 Gone) a SYNCED message names
//     every object of the kind, and wisp-policy deletes the records of objects that vanished
//     while nobody watched (a gateway restart does not leave ghosts).
//   - A send that fails (wisp-policy down or slow: Unavailable, DeadlineExceeded, no responders)
//     is retried with backoff (initial_backoff doubling to max_backoff) until it succeeds or
//     Stop(): the watch waits, nothing is skipped. An InvalidArgument answer is logged and
//     dropped: sending the same bytes again cannot help.
//   - A kind whose API is not served (its CRD not installed: the list fails NotFound) is retried
//     by its reflector's backoff, logged by it, while the other kinds go on.
//   - Stop() returns within the reflectors' stop bound plus one send timeout.
//   - Metrics: wisp_gateway_committed_objects_total{kind,event,result=sent|retried|dropped},
//     wisp_gateway_watch_synced{kind} (1 once a kind's first list has been sent); `kind` is
//     WatchedKind::Label() (CDI's VolumeImportSource: "VolumeImportSource.cdi.kubevirt.io").
//
// Example:
//   WISP_ASSIGN_OR_RETURN(kube::Config config, kube::LoadInCluster());
//   WISP_ASSIGN_OR_RETURN(kube::ClientPtr kube, kube::NewClient(config));
//   cluster::CommittedObjects watch(*kube, process.bus(), process.registry(), {});
//   watch.Start();
//   ...
//   watch.Stop();
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "wisp/bus/bus.hpp"
#include "wisp/kube/client.hpp"
#include "wisp/kube/reflector.hpp"
#include "wisp/v1/admission.pb.h"

namespace wisp::gateway::cluster {

// A kind wisp keeps records of: its API resource and its kind name.
struct WatchedKind {
  kube::Resource resource;
  std::string kind;
  std::string label;  // the metrics' kind label when `kind` alone is ambiguous; "" = kind

  const std::string& Label() const { return label.empty() ? kind : label; }
};
// PersistentVolumeClaims, cdi.kubevirt.io/v1beta1 DataVolumes, wisp.dev/v1alpha1 and
// cdi.kubevirt.io/v1beta1 VolumeImportSources (the kinds wisp-policy's KeepsRecords names).
const std::vector<WatchedKind>& RecordedKinds();

// One reflector event as the message wisp-policy reads. `event`: ADDED, MODIFIED or DELETED.
v1::CommittedObject ToCommitted(const WatchedKind& kind, std::string_view event,
                                const kube::Json& object);
// The SYNCED message for a kind: the "<namespace>/<name>" of every object in `objects`.
v1::CommittedObject ToSynced(const WatchedKind& kind, const std::vector<kube::Json>& objects);

struct CommittedObjectsOptions {
  std::chrono::milliseconds send_timeout{std::chrono::seconds(5)};
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(10)};
  kube::ReflectorOptions reflector;  // namespace_name, selectors and name are set per kind
  std::vector<WatchedKind> kinds = RecordedKinds();
};

class CommittedObjects {
 public:
  CommittedObjects(kube::Client& client, bus::Requester& bus, prometheus::Registry& registry,
                   CommittedObjectsOptions options);
  ~CommittedObjects();
  CommittedObjects(const CommittedObjects&) = delete;
  CommittedObjects& operator=(const CommittedObjects&) = delete;

  void Start();
  void Stop();
  // Every kind's first list has been sent (and answered).
  bool Synced() const;

  class Forwarder;

 private:
  kube::Client& client_;
  CommittedObjectsOptions options_;
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<Forwarder>> forwarders_;
  std::vector<std::unique_ptr<kube::Reflector>> reflectors_;
};

}  // namespace wisp::gateway::cluster
