#include "wisp/policy/policy_service.hpp"

#include <chrono>
#include <optional>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/k8s/json.hpp"
#include "wisp/k8s/objects.hpp"
#include "wisp/log/log.hpp"

namespace wisp::policy {

PolicyMetrics::PolicyMetrics(prometheus::Registry& registry)
    : decisions(prometheus::BuildCounter()
                    .Name("wisp_policy_rule_decisions_total")
                    .Help("Admission rule decisions by rule and outcome")
                    .Register(registry)),
      invalid_requests(prometheus::BuildCounter()
                           .Name("wisp_policy_invalid_requests_total")
                           .Help("Policy requests refused as malformed, by endpoint")
                           .Register(registry)),
      record_writes(prometheus::BuildCounter()
                        .Name("wisp_policy_record_writes_total")
                        .Help("KV record writes by bucket and result (ok|error)")
                        .Register(registry)),
      committed_objects(prometheus::BuildCounter()
                            .Name("wisp_policy_committed_objects_total")
                            .Help("Committed objects received on wisp.v1.policy.record, by kind, "
                                  "event and result (recorded|unchanged|refused|error)")
                            .Register(registry)) {}

void PolicyMetrics::Decision(const std::string& rule, const std::string& outcome) {
  std::string key;
  key.reserve(rule.size() + outcome.size() + 1);
  key.append(rule).append("/").append(outcome);
  prometheus::Counter* counter;
  {
    std::lock_guard lock(mu_);
    auto it = decision_children_.find(key);
    if (it == decision_children_.end()) {
      it = decision_children_
               .emplace(std::move(key), &decisions.Add({{"rule", rule}, {"outcome", outcome}}))
               .first;
    }
    counter = it->second;
  }
  counter->Increment();
}

PolicyService::PolicyService(bus::KeyValue& sources, Policy policy, Clock& clock,
                             PolicyMetrics& metrics)
    : sources_(sources),
      clock_(clock),
      metrics_(metrics),
      policy_(std::make_shared<const Policy>(std::move(policy))) {}

void PolicyService::SetPolicy(Policy policy) {
  auto next = std::make_shared<const Policy>(std::move(policy));
  std::lock_guard<std::mutex> lock(mu_);
  policy_ = std::move(next);
}

absl::Status PolicyService::AddEndpoints(bus::Service& service, int loop_connections) {
  const bus::EndpointOptions options{.loop_connections = loop_connections};
  WISP_RETURN_IF_ERROR(service.AddEndpoint(
      "mutate", bus::subjects::kPolicyMutate, bus::queues::kPolicy,
      [this](const bus::Request& r) { return Mutate(r); }, options));
  WISP_RETURN_IF_ERROR(service.AddEndpoint(
      "validate", bus::subjects::kPolicyValidate, bus::queues::kPolicy,
      [this](const bus::Request& r) { return Validate(r); }, options));
  // Watch events are few next to admissions: the shared connection carries them.
  return service.AddEndpoint("record", bus::subjects::kPolicyRecord, bus::queues::kPolicy,
                             [this](const bus::Request& r) { return Record(r); });
}

bus::Reply PolicyService::Mutate(const bus::Request& request) { return Serve(request, true); }
bus::Reply PolicyService::Validate(const bus::Request& request) { return Serve(request, false); }

bus::KeyValue* PolicyService::Bucket(std::string_view name) {
  if (name == bus::buckets::kSources) return &sources_;
  return nullptr;
}

absl::StatusOr<int> PolicyService::Apply(const std::vector<KvWrite>& writes,
                                         const std::string& uid) {
  int changed = 0;
  for (const auto& w : writes) {
    bus::KeyValue* kv = Bucket(w.bucket);
    if (kv == nullptr) return absl::InternalError("no bucket " + w.bucket);
    auto current = kv->Get(w.key);
    if (!current.ok() && !absl::IsNotFound(current.status())) {
      return absl::UnavailableError("reading " + w.bucket + "/" + w.key + ": " +
                                    std::string(current.status().message()));
    }
    std::optional<v1::PopulationRecord> stored;
    if (current.ok()) {
      v1::PopulationRecord r;
      if (r.ParseFromString(current->value)) stored = std::move(r);
    }
    if (w.erase) {
      if (!current.ok()) continue;  // nothing to erase
      // Another object of the same name (created after this one was deleted) owns the record.
      if (stored && !stored->uid().empty() && !uid.empty() && stored->uid() != uid) continue;
    } else if (stored) {
      v1::PopulationRecord next;
      if (next.ParseFromString(w.value)) {
        next.set_admitted_unix(stored->admitted_unix());
        if (next.SerializeAsString() == stored->SerializeAsString()) continue;  // unchanged
      }
    }
    absl::Status st = w.erase ? kv->Delete(w.key) : kv->Put(w.key, w.value).status();
    if (w.erase && absl::IsNotFound(st)) st = absl::OkStatus();
    metrics_.record_writes.Add({{"bucket", w.bucket}, {"result", st.ok() ? "ok" : "error"}})
        .Increment();
    if (!st.ok()) {
      return absl::UnavailableError("recording " + w.bucket + "/" + w.key + ": " +
                                    std::string(st.message()));
    }
    ++changed;
  }
  return changed;
}

std::shared_ptr<const Policy> PolicyService::CurrentPolicy() {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_;
}

RecordLookup PolicyService::Lookup() {
  return [this](std::string_view bucket,
                std::string_view key) -> absl::StatusOr<std::optional<std::string>> {
    bus::KeyValue* kv = Bucket(bucket);
    if (kv == nullptr) return absl::InternalError("no bucket " + std::string(bucket));
    auto entry = kv->Get(key);
    if (absl::IsNotFound(entry.status())) return std::optional<std::string>();
    if (!entry.ok()) return entry.status();
    return std::optional<std::string>(entry->value);
  };
}

absl::StatusOr<v1::CommitResult> PolicyService::Sweep(const v1::CommittedObject& synced) {
  static const auto logger = log::Get("policy");
  WISP_ASSIGN_OR_RETURN(k8s::Json names, k8s::ParseJson(synced.object_json(), "object_json"));
  if (!names.is_array()) {
    return absl::InvalidArgumentError("object_json: SYNCED carries an array of names");
  }
  std::vector<std::string> live;
  live.reserve(names.size());
  for (const auto& n : names) {
    if (!n.is_string()) {
      return absl::InvalidArgumentError("object_json: SYNCED names must be strings");
    }
    live.push_back(n.get<std::string>());
  }
  auto keys = sources_.Keys();
  if (!keys.ok()) {
    return absl::UnavailableError("listing " + sources_.bucket() + ": " +
                                  std::string(keys.status().message()));
  }
  WISP_ASSIGN_OR_RETURN(std::vector<std::string> stale,
                        StaleRecordKeys(synced.kind(), live, *keys));
  v1::CommitResult result;
  for (const auto& key : stale) {
    absl::Status st = sources_.Delete(key);
    if (absl::IsNotFound(st)) continue;
    metrics_.record_writes
        .Add({{"bucket", sources_.bucket()}, {"result", st.ok() ? "ok" : "error"}})
        .Increment();
    if (!st.ok()) {
      return absl::UnavailableError("deleting " + sources_.bucket() + "/" + key + ": " +
                                    std::string(st.message()));
    }
    SPDLOG_LOGGER_INFO(logger, "record {} deleted: its {} no longer exists", key,
                       synced.kind().kind());
    result.set_writes(result.writes() + 1);
  }
  return result;
}

absl::StatusOr<v1::CommitResult> PolicyService::Commit(const v1::CommittedObject& object) {
  static const auto logger = log::Get("policy");
  std::shared_ptr<const Policy> policy = CurrentPolicy();
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(clock_.Now().time_since_epoch()).count();
  auto counted = [&](std::string_view result) {
    metrics_.committed_objects
        .Add({{"kind", object.kind().kind()},
              {"event", object.event()},
              {"result", std::string(result)}})
        .Increment();
  };
  if (object.event() == "SYNCED") {
    auto deleted = Sweep(object);
    counted(deleted.ok() ? (deleted->writes() > 0 ? "recorded" : "unchanged") : "error");
    return deleted;
  }
  auto outcome = EvaluateCommitted(object, *policy, Lookup(), now);
  if (!outcome.ok()) {
    counted("error");
    return outcome.status();
  }
  for (const auto& [rule, result] : outcome->rule_outcomes) metrics_.Decision(rule, result);
  if (!outcome->error.ok()) {
    counted("error");
    return absl::UnavailableError(std::string(outcome->error.message()));
  }
  auto changed = Apply(outcome->writes, outcome->uid);
  if (!changed.ok()) {
    counted("error");
    return changed.status();
  }
  v1::CommitResult result;
  result.set_writes(*changed);
  if (!outcome->refused.empty()) {
    result.set_refused(outcome->refused);
    counted("refused");
    SPDLOG_LOGGER_WARN(logger, "stored {} {}/{} is refused by the rules, its record is gone: {}",
                       object.kind().kind(), object.namespace_(), object.name(), outcome->refused);
  } else {
    counted(*changed > 0 ? "recorded" : "unchanged");
  }
  return result;
}

absl::StatusOr<v1::AdmissionVerdict> PolicyService::Decide(v1::AdmissionCall call, bool mutate) {
  std::shared_ptr<const Policy> policy = CurrentPolicy();
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(clock_.Now().time_since_epoch()).count();
  // A pod's tree is left unbuilt unless a rule needs it: the pod rules read its facts, and only
  // the virt-launcher rule asks for the tree (see EvaluateMutate).
  WISP_ASSIGN_OR_RETURN(
      AdmissionInput in,
      AdmissionInput::FromCall(std::move(call), now, AdmissionInput::PodTree::kDefer));
  RecordLookup lookup = Lookup();
  Verdict verdict = mutate ? EvaluateMutate(std::move(in), *policy, lookup)
                           : EvaluateValidate(in, *policy, lookup);
  for (const auto& [rule, outcome] : verdict.rule_outcomes) metrics_.Decision(rule, outcome);
  if (!verdict.error.ok()) return absl::UnavailableError(std::string(verdict.error.message()));
  // Nothing is recorded here: the apiserver may still refuse what the rules allowed. Records
  // follow the committed object (Commit).
  return ToProto(verdict);
}

bus::Reply PolicyService::Record(const bus::Request& request) {
  static const auto logger = log::Get("policy");
  auto object = bus::ParseBody<v1::CommittedObject>(request);
  if (!object.ok()) {
    metrics_.invalid_requests.Add({{"endpoint", "record"}}).Increment();
    return bus::Reply::Error(object.status());
  }
  auto result = Commit(*object);
  if (!result.ok()) {
    if (absl::IsInvalidArgument(result.status())) {
      metrics_.invalid_requests.Add({{"endpoint", "record"}}).Increment();
    }
    SPDLOG_LOGGER_WARN(logger, "record {} {} {}/{}: {}", object->event(), object->kind().kind(),
                       object->namespace_(), object->name(),
                       std::string(result.status().message()));
    return bus::Reply::Error(result.status());
  }
  SPDLOG_LOGGER_DEBUG(logger, "record {} {} {}/{}: {} write(s)", object->event(),
                      object->kind().kind(), object->namespace_(), object->name(),
                      result->writes());
  return bus::ProtoReply(*result);
}

bus::Reply PolicyService::Serve(const bus::Request& request, bool mutate) {
  static const auto logger = log::Get("policy");
  const std::string endpoint = mutate ? "mutate" : "validate";
  auto call = bus::ParseBody<v1::AdmissionCall>(request);
  if (!call.ok()) {
    metrics_.invalid_requests.Add({{"endpoint", endpoint}}).Increment();
    return bus::Reply::Error(call.status());
  }
  log::ScopedRequestId rid(call->uid());
  if (request.Expired()) {
    return bus::Reply::Error(absl::DeadlineExceededError("deadline passed before evaluation"));
  }
  // What the log lines name: the call itself moves into the rules (a copy of the object costs
  // more than these).
  const std::string kind = call->kind().kind();
  const std::string ns = call->namespace_();
  const std::string name = call->name();
  auto verdict = Decide(*std::move(call), mutate);
  if (!verdict.ok()) {
    if (absl::IsInvalidArgument(verdict.status())) {
      metrics_.invalid_requests.Add({{"endpoint", endpoint}}).Increment();
    }
    SPDLOG_LOGGER_WARN(logger, "{} {} {}/{}: {}", endpoint, kind, ns, name,
                       std::string(verdict.status().message()));
    return bus::Reply::Error(verdict.status());
  }
  SPDLOG_LOGGER_DEBUG(logger, "{} {} {}/{}: allowed={} patch={}B", endpoint, kind, ns, name,
                      verdict->allowed(), verdict->patch().size());
  return bus::ProtoReply(*verdict);
}

}  // namespace wisp::policy
