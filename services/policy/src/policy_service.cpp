#include "wisp/policy/policy_service.hpp"

#include <chrono>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
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
  return service.AddEndpoint(
      "validate", bus::subjects::kPolicyValidate, bus::queues::kPolicy,
      [this](const bus::Request& r) { return Validate(r); }, options);
}

bus::Reply PolicyService::Mutate(const bus::Request& request) { return Serve(request, true); }
bus::Reply PolicyService::Validate(const bus::Request& request) { return Serve(request, false); }

bus::KeyValue* PolicyService::Bucket(std::string_view name) {
  if (name == bus::buckets::kSources) return &sources_;
  return nullptr;
}

absl::Status PolicyService::Apply(const std::vector<KvWrite>& writes) {
  for (const auto& w : writes) {
    bus::KeyValue* kv = Bucket(w.bucket);
    if (kv == nullptr) return absl::InternalError("no bucket " + w.bucket);
    absl::Status st = w.erase ? kv->Delete(w.key) : kv->Put(w.key, w.value).status();
    if (w.erase && absl::IsNotFound(st)) st = absl::OkStatus();
    metrics_.record_writes.Add({{"bucket", w.bucket}, {"result", st.ok() ? "ok" : "error"}})
        .Increment();
    if (!st.ok()) {
      return absl::UnavailableError("recording " + w.bucket + "/" + w.key + ": " +
                                    std::string(st.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::AdmissionVerdict> PolicyService::Decide(v1::AdmissionCall call, bool mutate) {
  std::shared_ptr<const Policy> policy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    policy = policy_;
  }
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(clock_.Now().time_since_epoch()).count();
  // A pod's tree is left unbuilt unless a rule needs it: the pod rules read its facts, and only
  // the virt-launcher rule asks for the tree (see EvaluateMutate).
  const bool dry_run = call.dry_run();
  WISP_ASSIGN_OR_RETURN(
      AdmissionInput in,
      AdmissionInput::FromCall(std::move(call), now, AdmissionInput::PodTree::kDefer));
  RecordLookup lookup = [this](std::string_view bucket,
                               std::string_view key) -> absl::StatusOr<std::optional<std::string>> {
    bus::KeyValue* kv = Bucket(bucket);
    if (kv == nullptr) return absl::InternalError("no bucket " + std::string(bucket));
    auto entry = kv->Get(key);
    if (absl::IsNotFound(entry.status())) return std::optional<std::string>();
    if (!entry.ok()) return entry.status();
    return std::optional<std::string>(entry->value);
  };
  Verdict verdict = mutate ? EvaluateMutate(std::move(in), *policy, lookup)
                           : EvaluateValidate(in, *policy, lookup);
  for (const auto& [rule, outcome] : verdict.rule_outcomes) metrics_.Decision(rule, outcome);
  if (!verdict.error.ok()) return absl::UnavailableError(std::string(verdict.error.message()));
  if (verdict.allowed && !dry_run) WISP_RETURN_IF_ERROR(Apply(verdict.writes));
  return ToProto(verdict);
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
