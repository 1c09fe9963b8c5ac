// EvaluateCommitted: the records a committed object leaves. The validating rules of the object's
// kind run on it as stored; their writes are the records. Admission runs the same rules and
// applies nothing.
#include <array>
#include <set>
#include <string>
#include <utility>

#include "rules_internal.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/k8s/objects.hpp"

namespace wisp::policy {
namespace {

struct RecordedKind {
  std::string_view group;
  std::string_view kind;
  std::string_view record_kind;  // PopulationRecord.kind, the middle of the record's key
};
// The kinds wisp keeps records of. No record kind is another's followed by '.', so that
// StaleRecordKeys of one kind never takes another's keys for its own.
constexpr std::array kRecordedKinds{
    RecordedKind{"", "PersistentVolumeClaim", "PersistentVolumeClaim"},
    RecordedKind{kCdiGroup, "DataVolume", "DataVolume"},
    RecordedKind{kWispGroup, "VolumeImportSource", "VolumeImportSource"},
    RecordedKind{kCdiGroup, "VolumeImportSource", kCdiImportSourceRecordKind},
};

const RecordedKind* FindRecorded(std::string_view group, std::string_view kind) {
  for (const auto& k : kRecordedKinds) {
    if (group == k.group && kind == k.kind) return &k;
  }
  return nullptr;
}

}  // namespace

bool KeepsRecords(std::string_view group, std::string_view kind) {
  return FindRecorded(group, kind) != nullptr;
}

std::string RecordKind(std::string_view group, std::string_view kind) {
  const RecordedKind* k = FindRecorded(group, kind);
  return std::string(k != nullptr ? k->record_kind : kind);
}

absl::StatusOr<std::vector<std::string>> StaleRecordKeys(const v1::GroupVersionKind& kind,
                                                         const std::vector<std::string>& live,
                                                         const std::vector<std::string>& keys) {
  if (!KeepsRecords(kind.group(), kind.kind())) {
    return absl::InvalidArgumentError("kind: wisp keeps no records of \"" + kind.group() + "/" +
                                      kind.kind() + "\"");
  }
  std::set<std::string, std::less<>> names(live.begin(), live.end());
  std::vector<std::string> stale;
  const std::string infix = "." + RecordKind(kind.group(), kind.kind()) + ".";
  for (const auto& key : keys) {
    // "<namespace>.<Kind>.<name>": namespaces hold no '.', so the first '.' ends the namespace.
    const size_t dot = key.find('.');
    if (dot == std::string::npos || key.compare(dot, infix.size(), infix) != 0) continue;
    std::string ns_name = key.substr(0, dot) + "/" + key.substr(dot + infix.size());
    if (names.count(ns_name) == 0) stale.push_back(key);
  }
  return stale;
}

absl::StatusOr<CommitOutcome> EvaluateCommitted(const v1::CommittedObject& object,
                                                const Policy& policy, const RecordLookup& lookup,
                                                int64_t now_unix) {
  const std::string& event = object.event();
  if (event != "ADDED" && event != "MODIFIED" && event != "DELETED") {
    return absl::InvalidArgumentError("event: \"" + event +
                                      "\" is not one of ADDED, MODIFIED, DELETED");
  }
  if (!KeepsRecords(object.kind().group(), object.kind().kind())) {
    return absl::InvalidArgumentError(
        "kind: wisp keeps no records of \"" + object.kind().group() + "/" + object.kind().kind() +
        "\" (PersistentVolumeClaim, cdi.kubevirt.io/DataVolume, wisp.dev/VolumeImportSource, "
        "cdi.kubevirt.io/VolumeImportSource)");
  }
  if (object.name().empty()) return absl::InvalidArgumentError("name: required");
  if (object.namespace_().empty()) return absl::InvalidArgumentError("namespace: required");

  v1::AdmissionCall call;
  *call.mutable_kind() = object.kind();
  call.set_namespace_(object.namespace_());
  call.set_name(object.name());
  if (event == "DELETED") {
    call.set_operation("DELETE");
    call.set_old_object_json(object.object_json());
  } else {
    call.set_operation("CREATE");
    call.set_object_json(object.object_json());
  }
  WISP_ASSIGN_OR_RETURN(AdmissionInput in, AdmissionInput::FromCall(std::move(call), now_unix));
  in.committed = true;
  Verdict verdict = EvaluateValidate(in, policy, lookup);

  CommitOutcome out;
  out.uid = k8s::GetString(event == "DELETED" ? in.old_object : in.object, {"metadata", "uid"});
  out.rule_outcomes = std::move(verdict.rule_outcomes);
  out.error = verdict.error;
  if (!out.error.ok()) return out;
  if (verdict.allowed) {
    out.writes = std::move(verdict.writes);
    return out;
  }
  out.refused = verdict.message;
  out.writes.push_back(
      {std::string(bus::buckets::kSources),
       SourceRecordKey(object.namespace_(), RecordKind(object.kind().group(), object.kind().kind()),
                       object.name()),
       "", true});
  return out;
}

}  // namespace wisp::policy
