#pragma once
// PolicyService: serves wisp.v1.policy.mutate and wisp.v1.policy.validate (AdmissionCall ->
// AdmissionVerdict) by running the pure rules of rules.hpp, and wisp.v1.policy.record
// (CommittedObject -> CommitResult), which keeps the records of what the apiserver stored in KV.
//
// Contract:
//   - A body that is not an AdmissionCall (CommittedObject), or whose object JSON does not parse,
//     is answered InvalidArgument (counted in wisp_policy_invalid_requests_total). A denial is a
//     normal reply.
//   - Admission writes nothing. Records (PopulationRecord in wisp_sources) change only on
//     wisp.v1.policy.record: a put when the record differs from the stored one (admitted_unix
//     aside), so a watch's status-only MODIFIED events cost a read and no write; an erase only of
//     a record of the same object (uid), so a late DELETED of an older object of the same name
//     leaves its successor's record alone; SYNCED deletes the records of its kind that name no
//     listed object. The VM token rules keep no records.
//   - A failing record lookup or write is answered Unavailable: on admission the gateway's
//     failure mode (fail open / fail closed) decides, on record the sender retries; the rule never
//     guesses.
//   - A request whose deadline has passed is answered DeadlineExceeded before any rule runs.
//   - Every rule decision counts in wisp_policy_rule_decisions_total{rule,outcome}.
//   - SetPolicy() swaps the rules file atomically (in-flight calls finish with the old one).
//
// Example:
//   policy::PolicyMetrics metrics(registry);
//   policy::PolicyService service(*sources_kv, policy, clock, metrics);
//   WISP_RETURN_IF_ERROR(service.AddEndpoints(*micro));   // micro = bus::Service (wisp-policy)
//   // the gateway's watch, for each stored PersistentVolumeClaim, DataVolume, VolumeImportSource:
//   //   wisp.v1.policy.record CommittedObject{event: "ADDED", kind, namespace, name, object_json}
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include "wisp/policy/policy.hpp"
#include "wisp/policy/rules.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/bus/service.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::policy {

struct PolicyMetrics {
  explicit PolicyMetrics(prometheus::Registry& registry);
  void Decision(const std::string& rule, const std::string& outcome);

  prometheus::Family<prometheus::Counter>& decisions;         // wisp_policy_rule_decisions_total
  prometheus::Family<prometheus::Counter>& invalid_requests;  // wisp_policy_invalid_requests_total
  prometheus::Family<prometheus::Counter>& record_writes;     // wisp_policy_record_writes_total
  // wisp_policy_committed_objects_total{kind,event,result}: result recorded | unchanged | refused
  // | error.
  prometheus::Family<prometheus::Counter>& committed_objects;

 private:
  // Decision() children by "rule/outcome": a Family lookup builds and hashes the label set under
  // the family's lock, on every request otherwise.
  std::mutex mu_;
  std::map<std::string, prometheus::Counter*, std::less<>> decision_children_;
};

class PolicyService {
 public:
  PolicyService(bus::KeyValue& sources, Policy policy, Clock& clock, PolicyMetrics& metrics);

  // Adds the "mutate", "validate" and "record" endpoints (queue group wisp-policy) to the micro
  // service, each on `loop_connections` event-loop connections of its own when > 0 (Service's
  // EndpointOptions), else on the bus's shared connection.
  absl::Status AddEndpoints(bus::Service& service, int loop_connections = 0);

  bus::Reply Mutate(const bus::Request& request);
  bus::Reply Validate(const bus::Request& request);
  bus::Reply Record(const bus::Request& request);
  // The logic behind the endpoints, callable without a bus.
  absl::StatusOr<v1::AdmissionVerdict> Decide(v1::AdmissionCall call, bool mutate);
  absl::StatusOr<v1::CommitResult> Commit(const v1::CommittedObject& object);

  void SetPolicy(Policy policy);

 private:
  bus::Reply Serve(const bus::Request& request, bool mutate);
  // Applies a committed object's writes (see the contract); returns how many changed a record.
  absl::StatusOr<int> Apply(const std::vector<KvWrite>& writes, const std::string& uid);
  // SYNCED: deletes the records of the kind whose objects no longer exist.
  absl::StatusOr<v1::CommitResult> Sweep(const v1::CommittedObject& synced);
  std::shared_ptr<const Policy> CurrentPolicy();
  RecordLookup Lookup();
  bus::KeyValue* Bucket(std::string_view name);

  bus::KeyValue& sources_;
  Clock& clock_;
  PolicyMetrics& metrics_;
  std::mutex mu_;
  std::shared_ptr<const Policy> policy_;
};

}  // namespace wisp::policy
