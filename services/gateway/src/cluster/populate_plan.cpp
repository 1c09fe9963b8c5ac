#include "cluster/populate_plan.hpp"

#include <ctime>

#include "wisp/k8s/http_source.hpp"
#include "wisp/k8s/objects.hpp"

namespace wisp::gateway::cluster {
namespace {

constexpr std::string_view kWispGroup = "wisp.dev";
constexpr std::string_view kCdiGroup = "cdi.kubevirt.io";

const Json& Empty() {
  static const Json kEmpty = Json::object();
  return kEmpty;
}

const Json& At(const Json* object, std::initializer_list<std::string_view> path) {
  if (object == nullptr) return Empty();
  const Json* found = k8s::Find(*object, path);
  return found == nullptr ? Empty() : *found;
}

std::string Str(const Json* object, std::initializer_list<std::string_view> path) {
  return object == nullptr ? "" : k8s::GetString(*object, path);
}

bool IsBound(const Json& pvc) {
  return !k8s::GetString(pvc, {"spec", "volumeName"}).empty() &&
         k8s::GetString(pvc, {"status", "phase"}) == "Bound";
}

bool WaitsForConsumer(const Json& storage_class) {
  return k8s::GetString(storage_class, {"volumeBindingMode"}) == "WaitForFirstConsumer";
}

Json OwnerReference(const Json& owner, std::string_view api_version, std::string_view kind) {
  return {{"apiVersion", api_version},
          {"kind", kind},
          {"name", k8s::GetString(owner, {"metadata", "name"})},
          {"uid", k8s::GetString(owner, {"metadata", "uid"})},
          {"controller", true}};
}

Json BuildPrime(const Json& pvc, const Json& storage_class) {
  const std::string ns = k8s::GetString(pvc, {"metadata", "namespace"});
  const std::string name = k8s::GetString(pvc, {"metadata", "name"});
  Json prime = {{"apiVersion", "v1"}, {"kind", "PersistentVolumeClaim"}};
  prime["metadata"] = {
      {"name", PrimeName(k8s::GetString(pvc, {"metadata", "uid"}))},
      {"namespace", ns},
      {"labels", {{"app.kubernetes.io/managed-by", "wisp"}}},
      {"annotations", {{std::string(kPrimeForAnnotation), name}}},
      {"ownerReferences", Json::array({OwnerReference(pvc, "v1", "PersistentVolumeClaim")})}};
  if (auto node = k8s::FindAnnotation(pvc, kSelectedNodeAnnotation)) {
    prime["metadata"]["annotations"][std::string(kSelectedNodeAnnotation)] = *node;
  }
  Json spec = Json::object();
  for (const char* field : {"accessModes", "resources", "volumeMode"}) {
    if (const Json* v = k8s::Find(pvc, {"spec", field})) spec[field] = *v;
  }
  spec["storageClassName"] = k8s::GetString(storage_class, {"metadata", "name"});
  prime["spec"] = std::move(spec);
  return prime;
}

PvcPlan Plan(PvcStep step, std::string message = "") {
  PvcPlan plan;
  plan.step = step;
  plan.message = std::move(message);
  return plan;
}

}  // namespace

bool IsPopulatedKind(const Json& ref) {
  if (!ref.is_object() || k8s::GetString(ref, {"kind"}) != "VolumeImportSource" ||
      k8s::GetString(ref, {"name"}).empty()) {
    return false;
  }
  const std::string group = k8s::GetString(ref, {"apiGroup"});
  return group == kWispGroup || group == kCdiGroup;
}

std::string PrimeName(std::string_view pvc_uid) {
  return std::string(kPrimePrefix) + std::string(pvc_uid);
}

std::string PrimeFor(const Json& pvc) {
  return k8s::FindAnnotation(pvc, kPrimeForAnnotation).value_or("");
}

std::string_view PvcStepName(PvcStep step) {
  switch (step) {
    case PvcStep::kNotOurs:
      return "not-ours";
    case PvcStep::kWaitForClass:
      return "wait-for-class";
    case PvcStep::kWaitForNode:
      return "wait-for-node";
    case PvcStep::kCreatePrime:
      return "create-prime";
    case PvcStep::kWaitForPrime:
      return "wait-for-prime";
    case PvcStep::kRebind:
      return "rebind";
    case PvcStep::kWaitForBind:
      return "wait-for-bind";
    case PvcStep::kDeletePrime:
      return "delete-prime";
    case PvcStep::kDone:
      return "done";
  }
  return "unknown";
}

PvcPlan PlanPvc(const PvcView& view, const PlanOptions& options) {
  const Json& pvc = *view.pvc;
  if (!IsPopulatedKind(At(&pvc, {"spec", "dataSourceRef"}))) return Plan(PvcStep::kNotOurs);
  const std::string ns = k8s::GetString(pvc, {"metadata", "namespace"});
  const std::string name = k8s::GetString(pvc, {"metadata", "name"});
  const std::string uid = k8s::GetString(pvc, {"metadata", "uid"});
  const std::string class_name = k8s::GetString(pvc, {"spec", "storageClassName"});
  if (class_name.empty()) return Plan(PvcStep::kNotOurs);
  if (view.storage_class == nullptr) {
    return Plan(PvcStep::kWaitForClass, "StorageClass " + class_name + " does not exist");
  }
  if (k8s::GetString(*view.storage_class, {"provisioner"}) != options.driver_name) {
    return Plan(PvcStep::kNotOurs);
  }
  // Bound, or going: the prime has done its work (or must not outlive the PVC).
  const bool deleting = k8s::Find(pvc, {"metadata", "deletionTimestamp"}) != nullptr;
  if (IsBound(pvc) || deleting) {
    // A prime already going (its pvc-protection finalizer holds it a moment) is not deleted
    // again: once is enough, and each watch event of it would otherwise send another DELETE.
    if (view.prime != nullptr &&
        k8s::Find(*view.prime, {"metadata", "deletionTimestamp"}) == nullptr) {
      PvcPlan plan = Plan(PvcStep::kDeletePrime);
      plan.name = k8s::GetString(*view.prime, {"metadata", "name"});
      return plan;
    }
    return Plan(PvcStep::kDone);
  }
  if (view.prime == nullptr) {
    if (WaitsForConsumer(*view.storage_class) &&
        !k8s::FindAnnotation(pvc, kSelectedNodeAnnotation).has_value()) {
      return Plan(PvcStep::kWaitForNode,
                  "StorageClass " + class_name +
                      " waits for the first consumer: the volume is populated on the node of the "
                      "first pod that uses PVC " +
                      ns + "/" + name);
    }
    PvcPlan plan = Plan(PvcStep::kCreatePrime);
    plan.name = PrimeName(uid);
    plan.object = BuildPrime(pvc, *view.storage_class);
    return plan;
  }
  const std::string pv_name = k8s::GetString(*view.prime, {"spec", "volumeName"});
  if (pv_name.empty() || view.prime_pv == nullptr) {
    return Plan(PvcStep::kWaitForPrime, "populating PVC " + ns + "/" + name + " through " +
                                            k8s::GetString(*view.prime, {"metadata", "name"}));
  }
  if (k8s::GetString(*view.prime_pv, {"spec", "claimRef", "uid"}) == uid) {
    return Plan(PvcStep::kWaitForBind,
                "PersistentVolume " + pv_name + " is handed to PVC " + ns + "/" + name);
  }
  PvcPlan plan = Plan(PvcStep::kRebind);
  plan.name = pv_name;
  plan.object = {{"spec",
                  {{"claimRef",
                    {{"apiVersion", "v1"},
                     {"kind", "PersistentVolumeClaim"},
                     {"namespace", ns},
                     {"name", name},
                     {"uid", uid},
                     {"resourceVersion", nullptr},
                     {"fieldPath", nullptr}}}}}};
  return plan;
}

// ---- DataVolumes ----------------------------------------------------------------------------

namespace {

// The DataVolume's PVC spec: spec.pvc (a PVC spec) or spec.storage (the same fields, with
// access modes optional), and which of the two it came from.
std::pair<const Json*, std::string> TargetSpec(const Json& dv) {
  if (const Json* pvc = k8s::Find(dv, {"spec", "pvc"}); pvc != nullptr && pvc->is_object()) {
    return {pvc, "spec.pvc"};
  }
  if (const Json* st = k8s::Find(dv, {"spec", "storage"}); st != nullptr && st->is_object()) {
    return {st, "spec.storage"};
  }
  return {nullptr, ""};
}

struct SourceChoice {
  Json import_source;  // the VolumeImportSource's spec.source to create; null for a ref
  Json data_source_ref;
  std::string error;    // the DataVolume asks for something wisp does not serve
  bool upload = false;  // source.upload: the bytes come from a user, not from wisp-populator
};

SourceChoice ChooseSource(const Json& dv, const Json* target) {
  SourceChoice c;
  const std::string name = k8s::GetString(dv, {"metadata", "name"});
  if (target != nullptr) {
    if (const Json* ref = k8s::Find(*target, {"dataSourceRef"}); ref != nullptr) {
      c.data_source_ref = *ref;
      return c;
    }
  }
  const Json* source = k8s::Find(dv, {"spec", "source"});
  if (source == nullptr || !source->is_object() || source->empty()) {
    c.error =
        "spec.source: Required value: wisp serves source.http, source.blank, source.upload, or "
        "a dataSourceRef in spec.storage or spec.pvc";
    return c;
  }
  if (const Json* http = k8s::Find(*source, {"http"}); http != nullptr && http->is_object()) {
    // What wisp does not apply is refused here too, for a DataVolume that got in without
    // wisp-policy's admission: never imported without what it asked for.
    std::vector<std::string> causes;
    k8s::ReadHttpSource(*http, "spec.source.http", causes);
    if (!causes.empty()) {
      for (const auto& cause : causes) c.error += (c.error.empty() ? "" : "; ") + cause;
      return c;
    }
    Json out = {{"url", k8s::GetString(*http, {"url"})}};
    // Applied by the import: copied as CDI wrote them (wisp-policy reads them from the source).
    for (const char* field : {"certConfigMap", "extraHeaders"}) {
      if (const Json* v = k8s::Find(*http, {field}); v != nullptr && !v->empty()) out[field] = *v;
    }
    if (auto sha = k8s::GetString(*http, {"checksum"}); sha.rfind("sha256:", 0) == 0) {
      out["sha256"] = sha.substr(7);
    }
    c.import_source = {{"http", out}};
  } else if (k8s::Find(*source, {"blank"}) != nullptr) {
    c.import_source = {{"blank", Json::object()}};
  } else if (k8s::Find(*source, {"upload"}) != nullptr) {
    c.import_source = {{"upload", Json::object()}};
    c.upload = true;
  } else {
    c.error = "spec.source." + source->begin().key() +
              ": Unsupported value: wisp serves source.http, source.blank, source.upload, or a "
              "dataSourceRef in spec.storage or spec.pvc";
    return c;
  }
  c.data_source_ref = {{"apiGroup", kWispGroup}, {"kind", "VolumeImportSource"}, {"name", name}};
  return c;
}

Json BuildPvc(const Json& dv, const Json& target, const Json& data_source_ref) {
  const std::string ns = k8s::GetString(dv, {"metadata", "namespace"});
  const std::string name = k8s::GetString(dv, {"metadata", "name"});
  Json spec = Json::object();
  for (const char* field :
       {"accessModes", "resources", "storageClassName", "volumeMode", "selector"}) {
    if (const Json* v = k8s::Find(target, {field})) spec[field] = *v;
  }
  if (!spec.contains("accessModes")) spec["accessModes"] = Json::array({"ReadWriteOnce"});
  spec["dataSourceRef"] = data_source_ref;
  Json pvc = {{"apiVersion", "v1"}, {"kind", "PersistentVolumeClaim"}};
  pvc["metadata"] = {{"name", name},
                     {"namespace", ns},
                     {"labels", {{"app.kubernetes.io/managed-by", "wisp"}}},
                     {"annotations", {{"cdi.kubevirt.io/storage.populatedFor", name}}},
                     {"ownerReferences",
                      Json::array({OwnerReference(dv, "cdi.kubevirt.io/v1beta1", "DataVolume")})}};
  pvc["spec"] = std::move(spec);
  return pvc;
}

Json BuildSource(const Json& dv, const Json& source) {
  Json vis = {{"apiVersion", "wisp.dev/v1alpha1"}, {"kind", "VolumeImportSource"}};
  vis["metadata"] = {{"name", k8s::GetString(dv, {"metadata", "name"})},
                     {"namespace", k8s::GetString(dv, {"metadata", "namespace"})},
                     {"labels", {{"app.kubernetes.io/managed-by", "wisp"}}},
                     {"ownerReferences",
                      Json::array({OwnerReference(dv, "cdi.kubevirt.io/v1beta1", "DataVolume")})}};
  vis["spec"] = {{"source", source}};
  if (auto ct = k8s::GetString(dv, {"spec", "contentType"}); !ct.empty()) {
    vis["spec"]["contentType"] = ct;
  }
  return vis;
}

struct Condition {
  std::string type;
  std::string status;
  std::string reason;
  std::string message;
};

// The stored conditions with `wanted` merged in: a condition whose status, reason and message
// did not change keeps its times (so an unchanged DataVolume is not written again).
Json MergeConditions(const Json& stored, const std::vector<Condition>& wanted,
                     const std::string& now) {
  Json out = Json::array();
  for (const Condition& c : wanted) {
    Json next = {{"type", c.type},       {"status", c.status},        {"reason", c.reason},
                 {"message", c.message}, {"lastTransitionTime", now}, {"lastHeartbeatTime", now}};
    if (stored.is_array()) {
      for (const auto& s : stored) {
        if (k8s::GetString(s, {"type"}) != c.type) continue;
        if (k8s::GetString(s, {"status"}) == c.status &&
            k8s::GetString(s, {"reason"}) == c.reason &&
            k8s::GetString(s, {"message"}) == c.message) {
          next = s;
        } else if (k8s::GetString(s, {"status"}) == c.status) {
          // Same status, new words: the transition time stays.
          next["lastTransitionTime"] = k8s::GetString(s, {"lastTransitionTime"});
        }
      }
    }
    out.push_back(std::move(next));
  }
  return out;
}

}  // namespace

DataVolumePlan PlanDataVolume(const DataVolumeView& view, const PlanOptions& /*options*/,
                              const std::string& now) {
  const Json& dv = *view.dv;
  DataVolumePlan plan;
  const std::string name = k8s::GetString(dv, {"metadata", "name"});
  const Json& stored_status = At(&dv, {"status"});
  const std::string stored_phase = Str(&dv, {"status", "phase"});
  plan.phase = stored_phase;
  if (k8s::Find(dv, {"metadata", "deletionTimestamp"}) != nullptr) return plan;

  std::string phase;
  std::string progress = "N/A";
  std::vector<Condition> conditions;
  std::string failure;

  auto [target, target_field] = TargetSpec(dv);
  SourceChoice source = ChooseSource(dv, target);
  if (target == nullptr) {
    failure = "spec.storage: Required value: a DataVolume needs spec.storage or spec.pvc";
  } else if (!source.error.empty()) {
    failure = source.error;
  }

  if (failure.empty() && view.pvc == nullptr) {
    if (!source.import_source.is_null() && view.source == nullptr) {
      plan.create_source = BuildSource(dv, source.import_source);
    }
    plan.create_pvc = BuildPvc(dv, *target, source.data_source_ref);
  }

  const Json* pvc = view.pvc;
  if (!failure.empty()) {
    phase = "Failed";
    conditions = {{"Bound", "Unknown", "NoPVC", "No PVC for DataVolume " + name},
                  {"Ready", "False", "Error", failure},
                  {"Running", "False", "Error", failure}};
  } else if (pvc == nullptr) {
    phase = "Pending";
    conditions = {{"Bound", "Unknown", "Pending", "PVC " + name + " does not exist yet"},
                  {"Ready", "False", "", ""},
                  {"Running", "False", "", ""}};
  } else if (IsBound(*pvc)) {
    phase = "Succeeded";
    progress = "100.0%";
    conditions = {
        {"Bound", "True", "Bound", "PVC " + name + " Bound"},
        {"Ready", "True", "", ""},
        {"Running", "False", "Completed", source.upload ? "Upload Complete" : "Import Complete"}};
  } else {
    const Condition bound{"Bound", "False", "Pending", "PVC " + name + " Pending"};
    const bool waits_for_node =
        view.storage_class != nullptr && WaitsForConsumer(*view.storage_class) &&
        !k8s::FindAnnotation(*pvc, kSelectedNodeAnnotation).has_value() && view.prime == nullptr;
    if (waits_for_node) {
      phase = "PendingPopulation";
      conditions = {bound,
                    {"Ready", "False", "", ""},
                    {"Running", "False", "PendingPopulation", view.pvc_plan_message}};
    } else if (view.volume && view.volume->phase == "FAILED") {
      phase = "Failed";
      progress = view.volume->progress.empty() ? "N/A" : view.volume->progress;
      conditions = {bound,
                    {"Ready", "False", "Error", view.volume->message},
                    {"Running", "False", "Error", view.volume->message}};
    } else if (source.upload) {
      // CDI's upload DataVolumes: UploadScheduled until the upload target exists, then
      // UploadReady (its upload server pod runs) while the bytes are awaited and arrive.
      const std::string volume_phase = view.volume ? view.volume->phase : "";
      if (volume_phase == "UPLOAD_READY" || volume_phase == "UPLOAD_IN_PROGRESS" ||
          volume_phase == "SUCCEEDED") {
        phase = "UploadReady";
        progress = volume_phase == "SUCCEEDED"            ? "100.0%"
                   : volume_phase == "UPLOAD_IN_PROGRESS" ? view.volume->progress
                                                          : "N/A";
        if (progress.empty()) progress = "N/A";
        std::string why = view.volume->message;
        if (volume_phase == "SUCCEEDED") {
          why = "Upload complete; binding the volume";
        } else if (why.empty() || why.rfind("waiting for an upload", 0) == 0) {
          why = "waiting for an upload: wispctl datavolume upload " +
                k8s::GetString(dv, {"metadata", "namespace"}) + "/" + name + " FILE";
        }
        conditions = {bound,
                      {"Ready", "False", "TransferRunning", ""},
                      {"Running", "True", "Pod is running", why}};
      } else {
        phase = "UploadScheduled";
        std::string why = view.volume ? view.volume->message : view.pvc_plan_message;
        conditions = {bound, {"Ready", "False", "", ""}, {"Running", "False", "Pending", why}};
      }
    } else if (view.volume &&
               (view.volume->phase == "IMPORT_IN_PROGRESS" || view.volume->phase == "SUCCEEDED")) {
      phase = "ImportInProgress";
      progress = view.volume->phase == "SUCCEEDED" ? "100.0%" : view.volume->progress;
      if (progress.empty()) progress = "N/A";
      conditions = {bound,
                    {"Ready", "False", "TransferRunning", ""},
                    {"Running", "True", "Pod is running",
                     view.volume->phase == "SUCCEEDED" ? "Import complete; binding the volume"
                                                       : "Import in progress"}};
    } else {
      phase = "ImportScheduled";
      std::string why = view.volume ? view.volume->message : view.pvc_plan_message;
      conditions = {bound, {"Ready", "False", "", ""}, {"Running", "False", "Pending", why}};
    }
  }

  Json status = stored_status.is_object() ? stored_status : Json::object();
  status["phase"] = phase;
  status["progress"] = progress;
  status["claimName"] = name;
  status["conditions"] = MergeConditions(At(&dv, {"status", "conditions"}), conditions, now);
  if (status != stored_status) plan.status = std::move(status);
  plan.phase = phase;

  // Where an upload goes: the prime's volume, once wisp-populator has it.
  if (source.upload && view.volume && !view.volume->volume_id.empty() &&
      k8s::FindAnnotation(dv, kUploadVolumeAnnotation).value_or("") != view.volume->volume_id) {
    plan.annotate =
        Json{{"metadata",
              {{"annotations", {{std::string(kUploadVolumeAnnotation), view.volume->volume_id}}}}}};
  }

  if (phase != stored_phase) {
    if (phase == "UploadScheduled") {
      plan.events.push_back({"Normal", "UploadScheduled", "Upload into " + name + " scheduled"});
    } else if (phase == "UploadReady") {
      plan.events.push_back({"Normal", "UploadReady", "Upload into " + name + " ready"});
    } else if (phase == "Succeeded" && source.upload) {
      plan.events.push_back({"Normal", "UploadSucceeded", "Successfully uploaded into " + name});
    } else if (phase == "Failed" && source.upload) {
      plan.events.push_back({"Warning", "UploadFailed",
                             failure.empty() && view.volume ? view.volume->message : failure});
    } else if (phase == "ImportScheduled") {
      plan.events.push_back({"Normal", "ImportScheduled", "Import into " + name + " scheduled"});
    } else if (phase == "ImportInProgress") {
      plan.events.push_back({"Normal", "ImportInProgress", "Import into " + name + " in progress"});
    } else if (phase == "PendingPopulation") {
      plan.events.push_back({"Normal", "PendingPopulation", view.pvc_plan_message});
    } else if (phase == "Succeeded") {
      plan.events.push_back(
          {"Normal", "ImportSucceeded", "Successfully imported into PVC " + name});
    } else if (phase == "Failed") {
      plan.events.push_back(
          {"Warning", "Error", failure.empty() && view.volume ? view.volume->message : failure});
    }
  }
  // An upload that did not complete (bad image, checksum mismatch, client gone) sends the volume
  // back to UPLOAD_READY with the cause: say it once, as CDI's UploadFailed.
  if (source.upload && phase == "UploadReady" && view.volume &&
      view.volume->phase == "UPLOAD_READY" && view.volume->message.rfind("upload failed", 0) == 0) {
    std::string stored_running;
    for (const auto& c : k8s::GetArray(dv, {"status", "conditions"})) {
      if (k8s::GetString(c, {"type"}) == "Running") stored_running = k8s::GetString(c, {"message"});
    }
    if (stored_running != view.volume->message) {
      plan.events.push_back({"Warning", "UploadFailed", view.volume->message});
    }
  }
  return plan;
}

std::string Rfc3339(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace wisp::gateway::cluster
