// Rules d and e: CDI DataVolumes, PersistentVolumeClaims with dataSourceRef, and wisp.dev and CDI
// VolumeImportSources. Their writes say what to populate (wisp_sources); PolicyService applies them
// for committed objects only (EvaluateCommitted), never at admission.
#include <cctype>
#include <optional>
#include <set>

#include "rules_internal.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/formats/image_formats.hpp"
#include "wisp/k8s/http_source.hpp"
#include "wisp/k8s/objects.hpp"
#include "wisp/k8s/quantity.hpp"

namespace wisp::policy {
namespace {

using internal::Deny;
using internal::Outcome;
using k8s::Json;

const std::set<std::string>& AccessModes() {
  static const std::set<std::string> kModes = {"ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce",
                                               "ReadWriteOncePod"};
  return kModes;
}

std::string UnsupportedAccessMode(const std::string& mode) {
  return "Unsupported value: " + k8s::Quote(mode) +
         ": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", "
         "\"ReadWriteOncePod\"";
}

// CDI's external-population reference checks; `what` is "DataSourceRef" or "DataSource".
void ValidateRef(const Json& ref, const std::string& what, std::vector<std::string>& causes) {
  if (what == "DataSourceRef" && !k8s::GetString(ref, {"namespace"}).empty()) {
    causes.push_back("Invalid value: DataSourceRef namespace not supported");
  }
  if (k8s::GetString(ref, {"name"}).empty()) causes.push_back("Required value: " + what + " name");
  std::string kind = k8s::GetString(ref, {"kind"});
  if (kind.empty()) causes.push_back("Required value: " + what + " kind");
  if (k8s::GetString(ref, {"apiGroup"}).empty() && kind != "PersistentVolumeClaim") {
    causes.push_back("Required value: " + what +
                     " apiGroup when kind is not "
                     "'PersistentVolumeClaim'");
  }
}

std::string RefKey(const Json& ref) {
  return k8s::GetString(ref, {"apiGroup"}) + "/" + k8s::GetString(ref, {"kind"}) + "/" +
         k8s::GetString(ref, {"name"});
}

bool IsHttpUrl(const std::string& url) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (url.rfind(scheme, 0) == 0 && url.size() > scheme.size() && url[scheme.size()] != '/') {
      return true;
    }
  }
  return false;
}

// Fills a PopulationSource from a CDI-style source object ({http|blank|pvc|upload: ...}).
// Returns false (with a warning) for source kinds wisp-populator does not import.
bool FillSource(const Json& source, v1::PopulationSource* out, std::vector<std::string>& warnings) {
  if (const Json* http = k8s::Find(source, {"http"})) {
    auto* h = out->mutable_http();
    h->set_url(k8s::GetString(*http, {"url"}));
    std::vector<std::string> checked;  // the callers have refused what wisp does not apply
    k8s::HttpSourceExtras extras = k8s::ReadHttpSource(*http, "spec.source.http", checked);
    h->set_cert_config_map(extras.cert_config_map);
    for (auto& [name, value] : extras.headers) (*h->mutable_headers())[name] = value;
    std::string sha = k8s::GetString(*http, {"sha256"});
    if (!sha.empty()) out->set_sha256(sha);
    return true;
  }
  if (k8s::Find(source, {"blank"}) != nullptr) {
    out->mutable_blank();
    return true;
  }
  if (const Json* pvc = k8s::Find(source, {"pvc"})) {
    auto* c = out->mutable_clone();
    c->set_namespace_(k8s::GetString(*pvc, {"namespace"}));
    c->set_name(k8s::GetString(*pvc, {"name"}));
    return true;
  }
  if (k8s::Find(source, {"upload"}) != nullptr) {
    out->mutable_upload();
    return true;
  }
  std::string kind = source.is_object() && !source.empty() ? source.begin().key() : "";
  warnings.push_back("wisp: wisp-populator does not import source type " + k8s::Quote(kind) +
                     "; no population record written");
  return false;
}

void FillTarget(const Json& spec, v1::PopulationRecord* record, std::vector<std::string>& causes,
                const std::string& fld) {
  std::string storage = k8s::GetString(spec, {"resources", "requests", "storage"});
  if (!storage.empty()) {
    auto q = k8s::ParseQuantity(storage);
    if (!q.ok()) {
      causes.push_back(fld + ".resources.requests.storage: " + std::string(q.status().message()));
    } else {
      record->set_capacity_bytes(q->Bytes());
    }
  }
  for (const auto& m : k8s::GetArray(spec, {"accessModes"})) {
    if (m.is_string()) record->add_access_modes(m.get<std::string>());
  }
  record->set_volume_mode(k8s::GetString(spec, {"volumeMode"}));
  record->set_storage_class_name(k8s::GetString(spec, {"storageClassName"}));
}

// CDI: a DataVolume's spec may not change, except the checkpoints of a multi-stage (vddk or
// imageio) import. Returns the denial message, if any.
std::optional<std::string> SpecChanged(const AdmissionInput& in, const Json& spec) {
  if (!in.old_object.is_object()) return std::nullopt;  // nothing to compare with
  const Json* old_found = k8s::Find(in.old_object, {"spec"});
  Json old_spec = old_found != nullptr ? *old_found : Json::object();
  Json new_spec = spec;
  const Json* source = k8s::Find(spec, {"source"});
  const bool multi_stage =
      source != nullptr && !k8s::GetArray(spec, {"checkpoints"}).empty() &&
      (k8s::Find(*source, {"vddk"}) != nullptr || k8s::Find(*source, {"imageio"}) != nullptr);
  if (multi_stage) {
    for (Json* s : {&old_spec, &new_spec}) {
      if (s->is_object()) {
        s->erase("checkpoints");
        s->erase("finalCheckpoint");
      }
    }
  }
  if (old_spec == new_spec) return std::nullopt;
  return "Cannot update DataVolume Spec";
}

// CDI's "Destination PVC %s/%s already exists": a PVC of the DataVolume's name that neither
// carries cdi.kubevirt.io/storage.populatedFor=<dv> nor has a DataVolume as controller owner
// cannot be adopted. nullopt: go on validating.
std::optional<Verdict> DestinationPvcCheck(const AdmissionInput& in, const RecordLookup& lookup) {
  constexpr std::string_view kRule = kRuleDataVolumes;
  const std::string ns = in.Namespace();
  std::string name = in.call.name();
  if (name.empty()) name = k8s::GetString(in.object, {"metadata", "name"});
  if (name.empty()) return std::nullopt;  // generateName: the PVC name is not known yet
  auto raw = lookup(bus::buckets::kSources, SourceRecordKey(ns, "PersistentVolumeClaim", name));
  if (!raw.ok()) {
    Verdict v = Outcome(kRule, kOutcomeError);
    v.error = Annotate(raw.status(), "looking up PersistentVolumeClaim " + ns + "/" + name);
    return v;
  }
  if (!raw->has_value()) return std::nullopt;
  v1::PopulationRecord pvc;
  if (!pvc.ParseFromString(**raw)) {
    Verdict v = Outcome(kRule, kOutcomeError);
    v.error = absl::DataLossError("the record of PersistentVolumeClaim " + ns + "/" + name +
                                  " is unreadable");
    return v;
  }
  if (pvc.populated_for() == name || pvc.controller_kind() == "DataVolume") return std::nullopt;
  return Deny(kRule, {"Destination PVC " + ns + "/" + name + " already exists"}, 422, "Invalid");
}

Verdict Record(std::string_view rule, const AdmissionInput& in, v1::PopulationRecord& record) {
  Verdict v = Outcome(rule, kOutcomeAllowed);
  record.set_namespace_(in.Namespace());
  record.set_name(in.Name());
  record.set_uid(k8s::GetString(in.object, {"metadata", "uid"}));
  record.set_admitted_unix(in.now_unix);
  v.writes.push_back({std::string(bus::buckets::kSources),
                      SourceRecordKey(record.namespace_(), record.kind(), record.name()),
                      record.SerializeAsString(), false});
  v.audit_annotations["population-record"] =
      SourceRecordKey(record.namespace_(), record.kind(), record.name());
  return v;
}

}  // namespace

Verdict EvaluateDataVolume(const AdmissionInput& in, const Policy& policy,
                           const RecordLookup& lookup) {
  constexpr std::string_view kRule = kRuleDataVolumes;
  if (!policy.rules.data_volumes) return Outcome(kRule, kOutcomeDisabled);
  if (!in.Is("cdi.kubevirt.io", "DataVolume")) return Outcome(kRule, kOutcomeSkipped);
  const std::string op = in.call.operation();
  if (op == "DELETE") {
    Verdict v = Outcome(kRule, kOutcomeAllowed);
    v.writes.push_back({std::string(bus::buckets::kSources),
                        SourceRecordKey(in.Namespace(), "DataVolume", in.Name()), "", true});
    return v;
  }
  if (op != "CREATE" && op != "UPDATE") return Outcome(kRule, kOutcomeSkipped);
  const Json* spec = k8s::Find(in.object, {"spec"});
  static const Json kEmpty = Json::object();
  if (spec == nullptr || !spec->is_object()) spec = &kEmpty;
  if (op == "UPDATE") {
    if (auto denied = SpecChanged(in, *spec)) return Deny(kRule, {*denied}, 422, "Invalid");
  }
  if (op == "CREATE" && lookup && !in.committed) {
    // CDI looks the target PVC up before validating the spec. wisp's PVC records follow the
    // PVCs the apiserver stored (the gateway watches them), so "exists" means what it says.
    // A committed DataVolume owns its PVC by then: the check is admission's alone.
    std::optional<Verdict> pvc_check = DestinationPvcCheck(in, lookup);
    if (pvc_check) return *std::move(pvc_check);
  }
  const Json* pvc = k8s::Find(*spec, {"pvc"});
  const Json* storage = k8s::Find(*spec, {"storage"});
  std::vector<std::string> causes;
  if (pvc == nullptr && storage == nullptr) {
    return Deny(kRule, {"Missing Data volume PVC"}, 422, "Invalid");
  }
  if (pvc != nullptr && storage != nullptr) {
    return Deny(kRule, {"Duplicate storage definition, both target storage and target pvc defined"},
                422, "Invalid");
  }
  const Json& target = pvc != nullptr ? *pvc : *storage;
  const Json& modes = k8s::GetArray(target, {"accessModes"});
  if (pvc != nullptr) {
    if (modes.empty()) {
      causes.push_back("Required value: at least 1 access mode is required");
    } else if (modes.size() > 1) {
      causes.push_back("PVC multiple accessModes");
    }
  }
  for (const auto& m : modes) {
    std::string mode = m.is_string() ? m.get<std::string>() : m.dump();
    if (AccessModes().count(mode) == 0) causes.push_back(UnsupportedAccessMode(mode));
  }
  if (!causes.empty()) return Deny(kRule, causes, 422, "Invalid");

  const Json* source = k8s::Find(*spec, {"source"});
  const Json* source_ref = k8s::Find(*spec, {"sourceRef"});
  const Json* data_source = k8s::Find(target, {"dataSource"});
  const Json* data_source_ref = k8s::Find(target, {"dataSourceRef"});
  const std::string tf = pvc != nullptr ? "spec.pvc" : "spec.storage";
  v1::PopulationRecord record;
  record.set_kind("DataVolume");
  record.set_content_type(k8s::GetString(*spec, {"contentType"}, "kubevirt"));
  FillTarget(target, &record, causes, tf);

  if (data_source != nullptr || data_source_ref != nullptr) {
    if (source != nullptr || source_ref != nullptr) {
      return Deny(kRule, {"External population is incompatible with Source and SourceRef"}, 422,
                  "Invalid");
    }
    // CDI compares a TypedLocalObjectReference with a TypedObjectReference with DeepEqual, two
    // different Go types, so any DataVolume that sets both is refused. wisp keeps the same limit.
    if (data_source != nullptr && data_source_ref != nullptr) {
      return Deny(kRule, {"DataSourceRef and DataSource must match"}, 422, "Invalid");
    }
    if (data_source_ref != nullptr) {
      ValidateRef(*data_source_ref, "DataSourceRef", causes);
    } else {
      ValidateRef(*data_source, "DataSource", causes);
    }
    if (!causes.empty()) return Deny(kRule, causes, 422, "Invalid");
    if (op != "CREATE") return Outcome(kRule, kOutcomeAllowed);
    record.set_data_source_ref(
        RefKey(data_source_ref != nullptr ? *data_source_ref : *data_source));
    return Record(kRule, in, record);
  }
  if ((source == nullptr) == (source_ref == nullptr)) {
    return Deny(kRule,
                {"Data volume should have either Source or SourceRef, or be externally populated"},
                422, "Invalid");
  }
  if (source_ref != nullptr) {
    std::string kind = k8s::GetString(*source_ref, {"kind"});
    if (kind != "DataSource") {
      return Deny(
          kRule,
          {"Unsupported sourceRef kind " + kind + ", currently only DataSource is supported"}, 422,
          "Invalid");
    }
    Verdict v = Outcome(kRule, kOutcomeAllowed);
    v.warnings.push_back(
        "wisp: a sourceRef DataVolume is resolved by CDI; no population record "
        "written");
    return v;
  }
  if (!source->is_object() || source->size() != 1) {
    causes.push_back("spec.source must have exactly one source type set");
  } else if (const Json* spvc = k8s::Find(*source, {"pvc"})) {
    if (k8s::GetString(*spvc, {"namespace"}).empty() || k8s::GetString(*spvc, {"name"}).empty()) {
      causes.push_back("spec.source.pvc source PVC is not valid");
    }
  } else if (const Json* snap = k8s::Find(*source, {"snapshot"})) {
    if (k8s::GetString(*snap, {"namespace"}).empty() || k8s::GetString(*snap, {"name"}).empty()) {
      causes.push_back("spec.source.snapshot source snapshot is not valid");
    }
  } else if (const Json* http = k8s::Find(*source, {"http"})) {
    std::string url = k8s::GetString(*http, {"url"});
    if (!IsHttpUrl(url)) {
      causes.push_back("spec.source.http.url: Invalid value: " + k8s::Quote(url) +
                       ": must be an http:// or https:// URL");
    }
    k8s::ReadHttpSource(*http, "spec.source.http", causes);
  }
  if (!causes.empty()) return Deny(kRule, causes, 422, "Invalid");
  if (op != "CREATE") return Outcome(kRule, kOutcomeAllowed);
  std::vector<std::string> warnings;
  if (!FillSource(*source, record.mutable_source(), warnings)) {
    Verdict v = Outcome(kRule, kOutcomeAllowed);
    v.warnings = warnings;
    return v;
  }
  return Record(kRule, in, record);
}

Verdict EvaluateVolumeImportSource(const AdmissionInput& in, const Policy& policy) {
  constexpr std::string_view kRule = kRulePvcSources;
  if (!policy.rules.pvc_sources) return Outcome(kRule, kOutcomeDisabled);
  if (!in.Is(kWispGroup, "VolumeImportSource")) return Outcome(kRule, kOutcomeSkipped);
  const std::string op = in.call.operation();
  if (op == "DELETE") {
    Verdict v = Outcome(kRule, kOutcomeAllowed);
    v.writes.push_back({std::string(bus::buckets::kSources),
                        SourceRecordKey(in.Namespace(), "VolumeImportSource", in.Name()), "",
                        true});
    return v;
  }
  if (op != "CREATE" && op != "UPDATE") return Outcome(kRule, kOutcomeSkipped);
  if (op == "UPDATE") {
    const Json* old_spec = k8s::Find(in.old_object, {"spec"});
    const Json* new_spec = k8s::Find(in.object, {"spec"});
    if ((old_spec == nullptr) != (new_spec == nullptr) ||
        (old_spec != nullptr && *old_spec != *new_spec)) {
      return Deny(kRule, {"Cannot update VolumeImportSource Spec"}, 422, "Invalid");
    }
    return Outcome(kRule, kOutcomeAllowed);
  }
  std::vector<std::string> causes;
  const Json* source = k8s::Find(in.object, {"spec", "source"});
  static const std::set<std::string> kTypes = {"http", "blank", "pvc", "upload"};
  size_t count = 0;
  if (source != nullptr && source->is_object()) {
    for (auto it = source->begin(); it != source->end(); ++it) {
      if (kTypes.count(it.key()) == 0) {
        causes.push_back("spec.source." + it.key() +
                         ": Unsupported value: supported values: "
                         "\"http\", \"blank\", \"pvc\", \"upload\"");
      }
      ++count;
    }
  }
  if (count != 1) {
    causes.push_back(
        "spec.source: exactly one import source (http, blank, pvc or upload) is required");
  }
  if (const Json* http = source != nullptr ? k8s::Find(*source, {"http"}) : nullptr) {
    std::string url = k8s::GetString(*http, {"url"});
    if (!IsHttpUrl(url)) {
      causes.push_back("spec.source.http.url: Invalid value: " + k8s::Quote(url) +
                       ": must be an http:// or https:// URL");
    }
    std::string sha = k8s::GetString(*http, {"sha256"});
    if (!sha.empty() &&
        (sha.size() != 64 || sha.find_first_not_of("0123456789abcdef") != std::string::npos)) {
      causes.push_back("spec.source.http.sha256: Invalid value: " + k8s::Quote(sha) +
                       ": must be 64 lower-case hexadecimal characters");
    }
    k8s::ReadHttpSource(*http, "spec.source.http", causes);
  }
  if (const Json* spvc = source != nullptr ? k8s::Find(*source, {"pvc"}) : nullptr) {
    if (k8s::GetString(*spvc, {"name"}).empty()) {
      causes.push_back("spec.source.pvc.name: Required value");
    }
    std::string sns = k8s::GetString(*spvc, {"namespace"});
    if (!sns.empty() && sns != in.Namespace()) {
      causes.push_back("spec.source.pvc.namespace: Invalid value: " + k8s::Quote(sns) +
                       ": cross-namespace clone not supported");
    }
  }
  std::string format = k8s::GetString(in.object, {"spec", "format"});
  if (!format.empty() && !formats::IsDiskFormat(format)) {
    causes.push_back("spec.format: Unsupported value: " + k8s::Quote(format) +
                     ": supported values: " + formats::QuotedList());
  }
  if (!causes.empty()) return Deny(kRule, causes, 422, "Invalid");
  v1::PopulationRecord record;
  record.set_kind("VolumeImportSource");
  record.set_content_type(k8s::GetString(in.object, {"spec", "contentType"}, "kubevirt"));
  std::vector<std::string> warnings;
  FillSource(*source, record.mutable_source(), warnings);
  if (record.source().has_clone() && record.source().clone().namespace_().empty()) {
    record.mutable_source()->mutable_clone()->set_namespace_(in.Namespace());
  }
  record.mutable_source()->set_format(format);
  return Record(kRule, in, record);
}

// CDI's checksum, "algorithm:hash": wisp verifies sha256 only. Returns the lower-case hex digest,
// or appends the cause.
std::string CdiChecksum(const std::string& checksum, std::vector<std::string>& causes) {
  constexpr std::string_view kField = "spec.source.http.checksum: ";
  const size_t colon = checksum.find(':');
  const std::string algorithm = colon == std::string::npos ? "" : checksum.substr(0, colon);
  if (algorithm == "md5" || algorithm == "sha1" || algorithm == "sha512") {
    causes.push_back(std::string(kField) + "Unsupported value: " + k8s::Quote(checksum) +
                     ": wisp verifies sha256 checksums (sha256:<64 hexadecimal characters>)");
    return "";
  }
  std::string hex = colon == std::string::npos ? "" : checksum.substr(colon + 1);
  for (char& c : hex) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (algorithm != "sha256" || hex.size() != 64 ||
      hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    causes.push_back(std::string(kField) + "Invalid value: " + k8s::Quote(checksum) +
                     ": must be sha256:<64 hexadecimal characters>");
    return "";
  }
  return hex;
}

Verdict EvaluateCdiVolumeImportSource(const AdmissionInput& in, const Policy& policy) {
  constexpr std::string_view kRule = kRulePvcSources;
  if (!policy.rules.pvc_sources) return Outcome(kRule, kOutcomeDisabled);
  if (!in.Is(kCdiGroup, "VolumeImportSource")) return Outcome(kRule, kOutcomeSkipped);
  const std::string op = in.call.operation();
  const std::string record_kind(kCdiImportSourceRecordKind);
  if (op == "DELETE") {
    Verdict v = Outcome(kRule, kOutcomeAllowed);
    v.writes.push_back({std::string(bus::buckets::kSources),
                        SourceRecordKey(in.Namespace(), record_kind, in.Name()), "", true});
    return v;
  }
  if (op != "CREATE" && op != "UPDATE") return Outcome(kRule, kOutcomeSkipped);
  // CDI lets a multi-stage import's checkpoints change; its source is checked as on CREATE.
  std::vector<std::string> causes;
  const Json* source = k8s::Find(in.object, {"spec", "source"});
  size_t count = 0;
  if (source != nullptr && source->is_object()) {
    for (auto it = source->begin(); it != source->end(); ++it) {
      if (it.key() != "http" && it.key() != "blank") {
        causes.push_back("spec.source." + it.key() +
                         ": Unsupported value: wisp imports http and blank sources");
      }
      ++count;
    }
  }
  if (count == 0) {
    causes.push_back("spec.source: Required value: wisp imports http and blank sources");
  } else if (count > 1) {
    causes.push_back("spec.source: Invalid value: exactly one source type must be set");
  }
  std::string sha256;
  if (const Json* http = source != nullptr ? k8s::Find(*source, {"http"}) : nullptr) {
    std::string url = k8s::GetString(*http, {"url"});
    if (!IsHttpUrl(url)) {
      causes.push_back("spec.source.http.url: Invalid value: " + k8s::Quote(url) +
                       ": must be an http:// or https:// URL");
    }
    std::string checksum = k8s::GetString(*http, {"checksum"});
    if (!checksum.empty()) sha256 = CdiChecksum(checksum, causes);
    k8s::ReadHttpSource(*http, "spec.source.http", causes);
  }
  const std::string content_type = k8s::GetString(in.object, {"spec", "contentType"}, "kubevirt");
  if (content_type != "kubevirt") {
    causes.push_back("spec.contentType: Unsupported value: " + k8s::Quote(content_type) +
                     ": wisp imports disk images (\"kubevirt\")");
  }
  if (!causes.empty()) return Deny(kRule, causes, 422, "Invalid");
  if (op != "CREATE") return Outcome(kRule, kOutcomeAllowed);
  v1::PopulationRecord record;
  record.set_kind(record_kind);
  record.set_content_type(content_type);
  std::vector<std::string> warnings;
  FillSource(*source, record.mutable_source(), warnings);
  record.mutable_source()->set_sha256(sha256);
  return Record(kRule, in, record);
}

Verdict EvaluatePvc(const AdmissionInput& in, const Policy& policy, const RecordLookup& lookup) {
  constexpr std::string_view kRule = kRulePvcSources;
  if (!policy.rules.pvc_sources) return Outcome(kRule, kOutcomeDisabled);
  if (!in.Is("", "PersistentVolumeClaim")) return Outcome(kRule, kOutcomeSkipped);
  const std::string op = in.call.operation();
  const std::string ns = in.Namespace();
  if (op == "DELETE") {
    Verdict v = Outcome(kRule, kOutcomeAllowed);
    v.writes.push_back({std::string(bus::buckets::kSources),
                        SourceRecordKey(ns, "PersistentVolumeClaim", in.Name()), "", true});
    return v;
  }
  if (op != "CREATE") return Outcome(kRule, kOutcomeSkipped);
  static const Json kEmpty = Json::object();
  const Json* spec = k8s::Find(in.object, {"spec"});
  if (spec == nullptr) spec = &kEmpty;
  // Every committed PVC is recorded (without a source unless it references a wisp.dev or CDI
  // VolumeImportSource), so a later DataVolume of the same name meets CDI's "Destination PVC
  // already exists" check. A record without source or dataSourceRef is ignored by the populator.
  v1::PopulationRecord record;
  record.set_kind("PersistentVolumeClaim");
  record.set_populated_for(k8s::FindAnnotation(in.object, kPopulatedForAnnotation).value_or(""));
  for (const auto& owner : k8s::GetArray(in.object, {"metadata", "ownerReferences"})) {
    if (k8s::GetBool(owner, {"controller"}))
      record.set_controller_kind(k8s::GetString(owner, {"kind"}));
  }
  std::vector<std::string> ignored;  // the API server has already parsed the quantities
  const Json* ref = k8s::Find(*spec, {"dataSourceRef"});
  std::string fld = "spec.dataSourceRef";
  if (ref == nullptr) {
    ref = k8s::Find(*spec, {"dataSource"});
    fld = "spec.dataSource";
  }
  auto record_plain = [&]() {
    FillTarget(*spec, &record, ignored, "spec");
    Verdict v = Record(kRule, in, record);
    v.audit_annotations.clear();  // nothing to populate; the record only marks the name as taken
    return v;
  };
  if (ref == nullptr) {
    const std::string target = k8s::FindAnnotation(in.object, kPrimeForAnnotation).value_or("");
    if (target.empty()) return record_plain();
    // A prime PVC: the source is the target PVC's, as recorded when the target was stored (the
    // gateway sends a namespace's PVCs in the order the apiserver stored them). Without that
    // record nothing is written: the populator then answers "no population record ... retry"
    // rather than making the prime blank.
    auto raw = lookup(bus::buckets::kSources, SourceRecordKey(ns, "PersistentVolumeClaim", target));
    if (!raw.ok()) {
      Verdict v = Outcome(kRule, kOutcomeError);
      v.error = Annotate(raw.status(), "looking up PVC " + ns + "/" + target);
      return v;
    }
    v1::PopulationRecord target_record;
    if (!raw->has_value() || !target_record.ParseFromString(**raw) ||
        (target_record.source().kind_case() == v1::PopulationSource::KIND_NOT_SET &&
         target_record.data_source_ref().empty())) {
      Verdict v = Outcome(kRule, kOutcomeAllowed);
      v.warnings.push_back("wisp: PVC " + ns + "/" + target + ", which prime PVC " + ns + "/" +
                           in.Name() + " populates, has no wisp data source");
      return v;
    }
    *record.mutable_source() = target_record.source();
    record.set_content_type(target_record.content_type());
    record.set_data_source_ref(target_record.data_source_ref());
    record.set_populated_for(target);
    std::vector<std::string> causes;
    FillTarget(*spec, &record, causes, "spec");
    if (!causes.empty()) return Deny(kRule, causes, 422, "Invalid");
    return Record(kRule, in, record);
  }
  std::string ref_ns = k8s::GetString(*ref, {"namespace"});
  if (!ref_ns.empty()) {
    return Deny(kRule, {fld + ".namespace: Invalid value: DataSourceRef namespace not supported"},
                422, "Invalid");
  }
  const std::string group = k8s::GetString(*ref, {"apiGroup"});
  std::string kind = k8s::GetString(*ref, {"kind"});
  std::string name = k8s::GetString(*ref, {"name"});
  // CDI's VolumeImportSource is served as wisp's is; CDI's other kinds (VolumeUploadSource,
  // VolumeCloneSource, ...) and other groups are other populators' business.
  const bool cdi_source = group == kCdiGroup && kind == "VolumeImportSource";
  if (group != kWispGroup && !cdi_source) return record_plain();
  if (kind != "VolumeImportSource") {
    return Deny(kRule,
                {fld + ".kind: Unsupported value: " + k8s::Quote(kind) +
                 ": supported values: \"VolumeImportSource\""},
                422, "Invalid");
  }
  if (name.empty()) return Deny(kRule, {fld + ".name: Required value"}, 422, "Invalid");
  const std::string what =
      (cdi_source ? "cdi.kubevirt.io VolumeImportSource " : "VolumeImportSource ") + ns + "/" +
      name;
  auto raw = lookup(bus::buckets::kSources, SourceRecordKey(ns, RecordKind(group, kind), name));
  if (!raw.ok()) {
    Verdict v = Outcome(kRule, kOutcomeError);
    v.error = Annotate(raw.status(), "looking up " + what);
    return v;
  }
  if (!raw->has_value()) {
    // As Kubernetes does (KEP 1495): a PVC may name its data source before the source exists;
    // the populator waits for it. The record keeps the reference alone; wisp-populator resolves
    // the source when the volume is created.
    record.set_data_source_ref(RefKey(*ref));
    std::vector<std::string> causes;
    FillTarget(*spec, &record, causes, "spec");
    if (!causes.empty()) return Deny(kRule, causes, 422, "Invalid");
    Verdict v = Record(kRule, in, record);
    if (!in.committed) {
      v.warnings.push_back("wisp: " + what +
                           " does not exist yet; the volume is populated once it does");
    }
    return v;
  }
  v1::PopulationRecord source;
  if (!source.ParseFromString(**raw)) {
    Verdict v = Outcome(kRule, kOutcomeError);
    v.error = absl::DataLossError("the record of " + what + " is unreadable");
    return v;
  }
  std::vector<std::string> causes;
  *record.mutable_source() = source.source();
  record.set_content_type(source.content_type());
  record.set_data_source_ref(RefKey(*ref));
  FillTarget(*spec, &record, causes, "spec");
  if (!causes.empty()) return Deny(kRule, causes, 422, "Invalid");
  return Record(kRule, in, record);
}

}  // namespace wisp::policy
