#include "cluster/populate_controller.hpp"

#include <algorithm>
#include <charconv>
#include <functional>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/k8s/objects.hpp"
#include "wisp/log/log.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::gateway::cluster {
namespace {

std::string KeyOf(const Json& object) {
  const std::string ns = k8s::GetString(object, {"metadata", "namespace"});
  const std::string name = k8s::GetString(object, {"metadata", "name"});
  return ns.empty() ? name : ns + "/" + name;
}

bool Tolerable(const absl::Status& status, bool already_exists_ok, bool not_found_ok) {
  if (status.ok()) return true;
  if (already_exists_ok && absl::IsAlreadyExists(status)) return true;
  if (not_found_ok && absl::IsNotFound(status)) return true;
  return false;
}

}  // namespace

// A local copy of one resource, telling the controller what changed.
class PopulateController::Cache final : public kube::ReflectorHandler {
 public:
  using OnChange = std::function<void(const Json& object)>;
  explicit Cache(OnChange on_change) : on_change_(std::move(on_change)) {}

  std::optional<Json> Get(const std::string& key) const {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return std::nullopt;
    return it->second;
  }
  std::vector<Json> All() const {
    std::lock_guard lock(mu_);
    std::vector<Json> out;
    out.reserve(objects_.size());
    for (const auto& [k, v] : objects_) out.push_back(v);
    return out;
  }
  bool synced() const { return synced_.load(); }
  // What this controller just wrote, ahead of the watch event that will bring it (which then
  // changes nothing), so the next look does not act on the older copy.
  void Remember(const Json& object) {
    std::lock_guard lock(mu_);
    const std::string key = KeyOf(object);
    objects_[key] = object;
    if (auto rv = NumericVersion(object)) remembered_[key] = *rv;
  }

  void OnAdd(const Json& object) override { Put(object); }
  void OnUpdate(const Json&, const Json& object) override { Put(object); }
  void OnDelete(const Json& object) override {
    {
      std::lock_guard lock(mu_);
      objects_.erase(KeyOf(object));
      remembered_.erase(KeyOf(object));
    }
    on_change_(object);
  }
  void OnSynced() override { synced_ = true; }

 private:
  void Put(const Json& object) {
    {
      std::lock_guard lock(mu_);
      const std::string key = KeyOf(object);
      // A watch event older than what this controller wrote (the watch is behind its own write)
      // must not bring the older copy back: the next look would act on it and write again.
      // resourceVersions are opaque in general, but every apiserver's are etcd revisions, so
      // they are compared only when both are numbers, and only against a remembered write.
      auto it = remembered_.find(key);
      if (it != remembered_.end()) {
        auto rv = NumericVersion(object);
        if (rv && *rv < it->second) return;
        remembered_.erase(it);
      }
      objects_[key] = object;
    }
    on_change_(object);
  }
  static std::optional<uint64_t> NumericVersion(const Json& object) {
    const std::string rv = k8s::GetString(object, {"metadata", "resourceVersion"});
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(rv.data(), rv.data() + rv.size(), value);
    if (rv.empty() || ec != std::errc() || end != rv.data() + rv.size()) return std::nullopt;
    return value;
  }

  OnChange on_change_;
  mutable std::mutex mu_;
  std::map<std::string, Json> objects_;
  std::map<std::string, uint64_t> remembered_;  // key -> resourceVersion this controller wrote
  std::atomic<bool> synced_{false};
};

PopulateController::PopulateController(kube::Client& client, bus::Requester& bus,
                                       prometheus::Registry& registry,
                                       PopulateControllerOptions options)
    : client_(client),
      bus_(bus),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : SystemClock::Instance()),
      logger_(log::Get("populate")),
      actions_(prometheus::BuildCounter()
                   .Name("wisp_gateway_populate_actions_total")
                   .Help("What the populator and DataVolume controllers did in the apiserver, by "
                         "controller, action and result (ok|error)")
                   .Register(registry)),
      progress_(prometheus::BuildCounter()
                    .Name("kubevirt_cdi_import_progress_total")
                    .Help("The progress, in percent, of a DataVolume's import while it runs "
                          "(CDI's importer metric), by the DataVolume's uid")
                    .Register(registry)) {
  pvcs_ = std::make_unique<Cache>([this](const Json& pvc) { EnqueueForPvc(pvc); });
  pvs_ = std::make_unique<Cache>([this](const Json& pv) { EnqueueForPv(pv); });
  classes_ = std::make_unique<Cache>([this](const Json&) { EnqueueAllPvcs(); });
  datavolumes_ = std::make_unique<Cache>([this](const Json& dv) { Enqueue("dv/" + KeyOf(dv)); });
  sources_ = std::make_unique<Cache>([this](const Json& vis) { Enqueue("dv/" + KeyOf(vis)); });

  auto add = [&](const kube::Resource& resource, Cache& cache) {
    kube::ReflectorOptions ro = options_.reflector;
    ro.name = "populate " + resource.plural;
    reflectors_.push_back(std::make_unique<kube::Reflector>(client_, resource, ro, cache));
  };
  add(kube::kPersistentVolumeClaims, *pvcs_);
  add(kube::kPersistentVolumes, *pvs_);
  add(kStorageClasses, *classes_);
  if (options_.datavolumes) {
    add(kube::kDataVolumes, *datavolumes_);
    add(kube::kVolumeImportSources, *sources_);
  }
}

PopulateController::~PopulateController() { Stop(); }

void PopulateController::Start() {
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  for (auto& r : reflectors_) r->Start();
  worker_ = std::thread([this] { Work(); });
}

void PopulateController::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& r : reflectors_) r->RequestStop();  // all at once, not in turn
  for (auto& r : reflectors_) r->Stop();
  if (worker_.joinable()) worker_.join();
}

bool PopulateController::Synced() const {
  if (!pvcs_->synced() || !pvs_->synced() || !classes_->synced()) return false;
  return !options_.datavolumes || (datavolumes_->synced() && sources_->synced());
}

void PopulateController::SetLeading(bool leading) {
  {
    std::lock_guard lock(mu_);
    leading_ = leading;
  }
  if (!leading) return;
  EnqueueAllPvcs();
  for (const Json& dv : datavolumes_->All()) Enqueue("dv/" + KeyOf(dv));
}

void PopulateController::Enqueue(const std::string& key, std::chrono::milliseconds delay) {
  {
    std::lock_guard lock(mu_);
    if (delay.count() > 0) {
      delayed_.emplace(std::chrono::steady_clock::now() + delay, key);
    } else {
      queued_.insert(key);
    }
  }
  cv_.notify_all();
}

void PopulateController::EnqueueForPvc(const Json& pvc) {
  const std::string ns = k8s::GetString(pvc, {"metadata", "namespace"});
  std::string name = k8s::GetString(pvc, {"metadata", "name"});
  if (std::string target = PrimeFor(pvc); !target.empty())
    name = target;
  else if (const Json* ref = k8s::Find(pvc, {"spec", "dataSourceRef"});
           ref == nullptr || !IsPopulatedKind(*ref)) {
    if (options_.datavolumes) Enqueue("dv/" + ns + "/" + name);
    return;
  }
  Enqueue("pvc/" + ns + "/" + name);
  if (options_.datavolumes) Enqueue("dv/" + ns + "/" + name);
}

void PopulateController::EnqueueForPv(const Json& pv) {
  const std::string ns = k8s::GetString(pv, {"spec", "claimRef", "namespace"});
  const std::string name = k8s::GetString(pv, {"spec", "claimRef", "name"});
  if (ns.empty() || name.empty()) return;
  if (name.rfind(kPrimePrefix, 0) == 0) {
    if (auto prime = pvcs_->Get(ns + "/" + name)) {
      EnqueueForPvc(*prime);
      return;
    }
  }
  if (auto pvc = pvcs_->Get(ns + "/" + name)) EnqueueForPvc(*pvc);
}

void PopulateController::EnqueueAllPvcs() {
  for (const Json& pvc : pvcs_->All()) {
    if (const Json* ref = k8s::Find(pvc, {"spec", "dataSourceRef"});
        ref != nullptr && IsPopulatedKind(*ref)) {
      Enqueue("pvc/" + KeyOf(pvc));
    }
  }
}

void PopulateController::Work() {
  while (true) {
    std::string key;
    {
      std::unique_lock lock(mu_);
      while (true) {
        if (stopping_) return;
        const auto now = std::chrono::steady_clock::now();
        while (!delayed_.empty() && delayed_.begin()->first <= now) {
          queued_.insert(delayed_.begin()->second);
          delayed_.erase(delayed_.begin());
        }
        if (!queued_.empty() && leading_ && Synced()) break;
        if (!delayed_.empty()) {
          cv_.wait_until(lock,
                         std::min(delayed_.begin()->first, now + std::chrono::milliseconds(200)));
        } else {
          cv_.wait_for(lock, std::chrono::milliseconds(200));
        }
      }
      key = *queued_.begin();
      queued_.erase(queued_.begin());
    }
    // "<controller>/<namespace>/<name>"
    const size_t a = key.find('/');
    const size_t b = key.find('/', a + 1);
    const std::string kind = key.substr(0, a);
    const std::string ns = key.substr(a + 1, b - a - 1);
    const std::string name = key.substr(b + 1);
    std::chrono::milliseconds requeue_after{0};
    absl::Status status = kind == "pvc" ? ReconcilePvc(ns, name, requeue_after)
                                        : ReconcileDataVolume(ns, name, requeue_after);
    if (status.ok()) {
      backoff_.erase(key);
      if (requeue_after.count() > 0) Enqueue(key, requeue_after);
      continue;
    }
    auto& backoff = backoff_[key];
    backoff = backoff.count() == 0 ? options_.initial_backoff
                                   : std::min(backoff * 2, options_.max_backoff);
    SPDLOG_LOGGER_WARN(logger_, "{}: {}; again in {} ms", key, std::string(status.message()),
                       backoff.count());
    Enqueue(key, backoff);
  }
}

void PopulateController::Count(const char* controller, std::string_view action,
                               const absl::Status& result) {
  actions_
      .Add({{"controller", controller},
            {"action", std::string(action)},
            {"result", result.ok() ? "ok" : "error"}})
      .Increment();
}

absl::Status PopulateController::ReconcilePvc(const std::string& ns, const std::string& name,
                                              std::chrono::milliseconds& requeue_after) {
  if (!options_.populator) return absl::OkStatus();
  auto pvc = pvcs_->Get(ns + "/" + name);
  if (!pvc) return absl::OkStatus();  // gone: its prime is owned by it (the garbage collector)
  PvcView view;
  view.pvc = &*pvc;
  const std::string class_name = k8s::GetString(*pvc, {"spec", "storageClassName"});
  auto storage_class = classes_->Get(class_name);
  if (storage_class) view.storage_class = &*storage_class;
  auto prime = pvcs_->Get(ns + "/" + PrimeName(k8s::GetString(*pvc, {"metadata", "uid"})));
  if (prime) view.prime = &*prime;
  std::optional<Json> pv;
  if (prime) {
    if (auto pv_name = k8s::GetString(*prime, {"spec", "volumeName"}); !pv_name.empty()) {
      pv = pvs_->Get(pv_name);
      if (pv) view.prime_pv = &*pv;
    }
  }
  PvcPlan plan = PlanPvc(view, options_.plan);
  absl::Status status;
  switch (plan.step) {
    case PvcStep::kCreatePrime: {
      auto created = client_.Create(kube::kPersistentVolumeClaims, ns, plan.object);
      status = created.status();
      if (created.ok()) {
        SPDLOG_LOGGER_INFO(logger_, "PVC {}/{}: created prime PVC {} to populate it", ns, name,
                           plan.name);
        const Json& ref = (*pvc)["spec"]["dataSourceRef"];
        PostEvent("populator", *pvc, "v1", "PersistentVolumeClaim",
                  {"Normal", "Populating",
                   "Populating from " + k8s::GetString(ref, {"apiGroup"}) + " " +
                       k8s::GetString(ref, {"kind"}) + " " + k8s::GetString(ref, {"name"}) +
                       " through prime PVC " + plan.name});
      }
      status = Tolerable(status, true, false) ? absl::OkStatus() : status;
      break;
    }
    case PvcStep::kRebind: {
      auto patched = client_.Patch(kube::kPersistentVolumes, "", plan.name, plan.object, {});
      status = patched.status();
      if (patched.ok()) {
        SPDLOG_LOGGER_INFO(logger_, "PVC {}/{}: populated; PersistentVolume {} handed to it", ns,
                           name, plan.name);
        PostEvent("populator", *pvc, "v1", "PersistentVolumeClaim",
                  {"Normal", "Populated",
                   "Populated; PersistentVolume " + plan.name + " is handed to the PVC"});
      }
      break;
    }
    case PvcStep::kDeletePrime: {
      kube::DeleteOptions del;
      del.uid = k8s::GetString(*prime, {"metadata", "uid"});
      status = client_.Delete(kube::kPersistentVolumeClaims, ns, plan.name, del);
      if (status.ok()) {
        SPDLOG_LOGGER_INFO(logger_, "PVC {}/{}: prime PVC {} deleted", ns, name, plan.name);
      }
      status = Tolerable(status, false, true) ? absl::OkStatus() : status;
      break;
    }
    case PvcStep::kWaitForPrime: {
      // CreateVolume answers a failed import with an error that only the prime's events show:
      // say it on the user's PVC, once per message, and look again every few seconds.
      requeue_after = std::max(options_.poll_interval, std::chrono::milliseconds(5000));
      auto volume = LookUpVolume(*prime);
      if (!volume || volume->phase != "FAILED") return absl::OkStatus();
      const std::string key = k8s::GetString(*prime, {"metadata", "uid"}) + "\n" + volume->message;
      if (!failures_reported_.insert(key).second) return absl::OkStatus();
      PostEvent("populator", *pvc, "v1", "PersistentVolumeClaim",
                {"Warning", "PopulationFailed", volume->message});
      return absl::OkStatus();
    }
    default:
      return absl::OkStatus();
  }
  Count("populator", PvcStepName(plan.step), status);
  if (!status.ok()) return Annotate(status, std::string(PvcStepName(plan.step)));
  return absl::OkStatus();
}

void PopulateController::PostEvent(const char* controller, const Json& object,
                                   std::string_view api_version, std::string_view kind,
                                   const EventToPost& e) {
  const std::string ns = k8s::GetString(object, {"metadata", "namespace"});
  const std::string name = k8s::GetString(object, {"metadata", "name"});
  const std::string now = Rfc3339(clock_.NowUnixSeconds());
  Json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"generateName", name + "."}, {"namespace", ns}}},
                {"involvedObject",
                 {{"apiVersion", api_version},
                  {"kind", kind},
                  {"namespace", ns},
                  {"name", name},
                  {"uid", k8s::GetString(object, {"metadata", "uid"})},
                  {"resourceVersion", k8s::GetString(object, {"metadata", "resourceVersion"})}}},
                {"type", e.type},
                {"reason", e.reason},
                {"message", e.message},
                {"source", {{"component", std::string("wisp-") + controller + "-controller"}}},
                {"firstTimestamp", now},
                {"lastTimestamp", now},
                {"count", 1}};
  auto posted = client_.Create(kube::kEvents, ns, event);
  Count(controller, "event", posted.status());
  if (!posted.ok()) {
    // An event is not worth a retry of the whole reconcile.
    SPDLOG_LOGGER_WARN(logger_, "{} {}/{}: event {} not posted: {}", kind, ns, name, e.reason,
                       std::string(posted.status().message()));
  }
}

std::optional<VolumeView> PopulateController::LookUpVolume(const Json& prime) {
  v1::GetVolumeRequest get;
  get.set_name(options_.volume_name_prefix + "-" + k8s::GetString(prime, {"metadata", "uid"}));
  auto reply =
      bus::Call<v1::GetVolumeResponse>(bus_, bus::subjects::kVolumeGet, get, options_.bus_timeout);
  if (!reply.ok() || reply->volume().volume_id().empty()) return std::nullopt;
  VolumeView view;
  view.phase = v1::VolumePhase_Name(reply->volume().phase());
  view.progress = reply->volume().progress();
  view.message = reply->volume().message();
  view.volume_id = reply->volume().volume_id();
  return view;
}

void PopulateController::SetProgress(const std::string& owner_uid, const std::string& progress) {
  auto it = progress_series_.find(owner_uid);
  if (progress.empty()) {
    if (it != progress_series_.end()) {
      progress_.Remove(it->second);
      progress_series_.erase(it);
    }
    return;
  }
  double percent = 0;
  try {
    percent = std::stod(progress);
  } catch (...) {
    return;  // "N/A"
  }
  if (it == progress_series_.end()) {
    it = progress_series_.emplace(owner_uid, &progress_.Add({{"ownerUID", owner_uid}})).first;
  }
  if (percent > it->second->Value()) it->second->Increment(percent - it->second->Value());
}

absl::Status PopulateController::ReconcileDataVolume(const std::string& ns, const std::string& name,
                                                     std::chrono::milliseconds& requeue_after) {
  auto dv = datavolumes_->Get(ns + "/" + name);
  if (!dv) return absl::OkStatus();
  const std::string dv_uid = k8s::GetString(*dv, {"metadata", "uid"});
  DataVolumeView view;
  view.dv = &*dv;
  auto pvc = pvcs_->Get(ns + "/" + name);
  // Only a PVC this DataVolume owns is its own; another of its name is CDI's "already exists".
  if (pvc) {
    bool owned = false;
    for (const auto& owner : k8s::GetArray(*pvc, {"metadata", "ownerReferences"})) {
      if (k8s::GetString(owner, {"uid"}) == dv_uid) owned = true;
    }
    if (!owned) {
      SPDLOG_LOGGER_WARN(logger_,
                         "DataVolume {}/{}: PVC {} exists and is not the DataVolume's; left alone",
                         ns, name, name);
      return absl::OkStatus();
    }
    view.pvc = &*pvc;
  }
  auto source = sources_->Get(ns + "/" + name);
  if (source) view.source = &*source;
  std::optional<Json> storage_class, prime;
  if (pvc) {
    storage_class = classes_->Get(k8s::GetString(*pvc, {"spec", "storageClassName"}));
    if (storage_class) view.storage_class = &*storage_class;
    prime = pvcs_->Get(ns + "/" + PrimeName(k8s::GetString(*pvc, {"metadata", "uid"})));
    if (prime) view.prime = &*prime;
    PvcView pv_view{view.pvc, view.storage_class, view.prime, nullptr};
    view.pvc_plan_message = PlanPvc(pv_view, options_.plan).message;
    if (prime) view.volume = LookUpVolume(*prime);
  }
  DataVolumePlan plan = PlanDataVolume(view, options_.plan, Rfc3339(clock_.NowUnixSeconds()));

  if (plan.create_source) {
    auto created = client_.Create(kube::kVolumeImportSources, ns, *plan.create_source);
    absl::Status s = Tolerable(created.status(), true, false) ? absl::OkStatus() : created.status();
    Count("datavolume", "create-source", s);
    if (!s.ok()) return Annotate(s, "creating VolumeImportSource " + ns + "/" + name);
  }
  if (plan.create_pvc) {
    auto created = client_.Create(kube::kPersistentVolumeClaims, ns, *plan.create_pvc);
    absl::Status s = Tolerable(created.status(), true, false) ? absl::OkStatus() : created.status();
    Count("datavolume", "create-pvc", s);
    if (!s.ok()) return Annotate(s, "creating PVC " + ns + "/" + name);
    if (created.ok()) {
      SPDLOG_LOGGER_INFO(logger_, "DataVolume {}/{}: created its PVC", ns, name);
    }
  }
  if (plan.annotate) {
    // Metadata goes through the object itself (a status patch ignores it).
    auto patched = client_.Patch(kube::kDataVolumes, ns, name, *plan.annotate, {});
    Count("datavolume", "annotate", patched.status());
    if (!patched.ok()) return Annotate(patched.status(), "annotating the upload volume");
    SPDLOG_LOGGER_INFO(logger_, "DataVolume {}/{}: uploads go to volume {}", ns, name,
                       k8s::FindAnnotation(*patched, kUploadVolumeAnnotation).value_or(""));
    datavolumes_->Remember(*patched);
  }
  if (plan.status) {
    kube::PatchOptions po;
    po.subresource = "status";
    auto patched = client_.Patch(kube::kDataVolumes, ns, name, Json{{"status", *plan.status}}, po);
    Count("datavolume", "status", patched.status());
    if (!patched.ok()) return Annotate(patched.status(), "writing the status");
    datavolumes_->Remember(*patched);
  }
  for (const EventToPost& e : plan.events) {
    PostEvent("datavolume", *dv, "cdi.kubevirt.io/v1beta1", "DataVolume", e);
  }
  if (plan.phase == "ImportInProgress" || plan.phase == "ImportScheduled") {
    SetProgress(dv_uid, plan.status ? plan.status->value("progress", "")
                                    : k8s::GetString(*dv, {"status", "progress"}));
    requeue_after = options_.poll_interval;
  } else if (plan.phase == "UploadScheduled" || plan.phase == "UploadReady") {
    // An upload may be awaited for hours: look every upload_poll_interval while it is awaited,
    // every poll_interval until the upload target exists and while the bytes arrive (progress).
    SetProgress(dv_uid, "");
    const bool awaited = view.volume && view.volume->phase == "UPLOAD_READY";
    requeue_after = awaited ? options_.upload_poll_interval : options_.poll_interval;
  } else {
    SetProgress(dv_uid, "");
  }
  return absl::OkStatus();
}

}  // namespace wisp::gateway::cluster
