#include "admission/admission_handler.hpp"

#include <algorithm>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/config/flags.hpp"
#include "wisp/log/log.hpp"
#include "wisp/metrics/metrics.hpp"

namespace wisp::gateway::admission {
namespace {

using Clock = std::chrono::steady_clock;

std::string_view Webhook(bool mutate) { return mutate ? "mutate" : "validate"; }

bool IsJson(std::string_view content_type) {
  // "application/json" optionally followed by parameters ("; charset=utf-8").
  std::string lower(content_type.substr(0, content_type.find(';')));
  lower.erase(std::remove(lower.begin(), lower.end(), ' '), lower.end());
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  return lower == "application/json";
}

}  // namespace

absl::StatusOr<FailureMode> ParseFailureMode(std::string_view text) {
  if (text == "closed") return FailureMode::kClosed;
  if (text == "open") return FailureMode::kOpen;
  return absl::InvalidArgumentError("failure-mode: \"" + std::string(text) +
                                    "\" is not one of closed, open");
}

AdmissionMetrics::AdmissionMetrics(prometheus::Registry& registry)
    : requests_total(prometheus::BuildCounter()
                         .Name("wisp_gateway_admission_requests_total")
                         .Help("AdmissionReview requests by webhook, kind and outcome")
                         .Register(registry)),
      duration_seconds(prometheus::BuildHistogram()
                           .Name("wisp_gateway_admission_duration_seconds")
                           .Help("Time to answer an AdmissionReview, by webhook")
                           .Register(registry)) {}

bool IsAdmittedKind(std::string_view group, std::string_view kind) {
  return (group.empty() && (kind == "Pod" || kind == "PersistentVolumeClaim")) ||
         (group == "kubevirt.io" && kind == "VirtualMachineInstance") ||
         (group == "cdi.kubevirt.io" && kind == "DataVolume") ||
         (group == "wisp.dev" && kind == "VolumeImportSource");
}

v1::AdmissionCall ToAdmissionCall(const k8s::AdmissionRequest& r,
                                  const std::string& server_version) {
  v1::AdmissionCall call;
  call.set_uid(r.uid);
  call.mutable_kind()->set_group(r.kind.group);
  call.mutable_kind()->set_version(r.kind.version);
  call.mutable_kind()->set_kind(r.kind.kind);
  call.mutable_resource()->set_group(r.resource.group);
  call.mutable_resource()->set_version(r.resource.version);
  call.mutable_resource()->set_kind(r.resource.resource);
  call.set_sub_resource(r.sub_resource);
  call.set_operation(r.operation);
  call.set_namespace_(r.namespace_);
  call.set_name(r.name);
  call.mutable_user()->set_username(r.user.username);
  call.mutable_user()->set_uid(r.user.uid);
  for (const auto& g : r.user.groups) call.mutable_user()->add_groups(g);
  if (!r.object.is_null()) call.set_object_json(r.object.dump());
  if (!r.old_object.is_null()) call.set_old_object_json(r.old_object.dump());
  call.set_dry_run(r.dry_run);
  call.set_server_version(server_version);
  return call;
}

AdmissionHandler::AdmissionHandler(bus::Requester& bus, prometheus::Registry& registry,
                                   AdmissionOptions options)
    : bus_(bus), options_(std::move(options)), metrics_(registry) {}

http::Response AdmissionHandler::Fail(std::string_view webhook, const std::string& kind, int status,
                                      const std::string& message) {
  metrics_.requests_total
      .Add({{"webhook", std::string(webhook)},
            {"kind", kind.empty() ? "unknown" : kind},
            {"outcome", "error"}})
      .Increment();
  return http::Response::Error(status, message);
}

http::Response AdmissionHandler::Handle(const http::Request& request, bool mutate) {
  static const auto logger = log::Get("admission");
  const auto start = Clock::now();
  const std::string_view webhook = Webhook(mutate);
  struct Timer {
    prometheus::Histogram& h;
    Clock::time_point start;
    ~Timer() { h.Observe(std::chrono::duration<double>(Clock::now() - start).count()); }
  } timer{
      metrics_.duration_seconds.Add({{"webhook", std::string(webhook)}}, metrics::LatencyBuckets()),
      start};

  std::string_view content_type = request.Header("content-type");
  if (!IsJson(content_type)) {
    return Fail(webhook, "", 400,
                "Content-Type \"" + std::string(content_type) + "\" is not application/json");
  }
  if (request.body.size() > options_.max_body_bytes) {
    return Fail(webhook, "", 413,
                "request body of " + std::to_string(request.body.size()) + " bytes exceeds " +
                    std::to_string(options_.max_body_bytes) + " bytes");
  }
  std::chrono::milliseconds budget = options_.max_timeout;
  if (auto t = request.Query("timeout")) {
    auto d = config::ParseDuration(*t);
    if (!d.ok() || d->count() <= 0) {
      return Fail(webhook, "", 400, "timeout \"" + *t + "\" is not a positive duration");
    }
    budget = std::min(budget, *d);
  }
  auto review = k8s::ParseAdmissionReview(request.body);
  if (!review.ok()) return Fail(webhook, "", 400, std::string(review.status().message()));
  const k8s::AdmissionRequest& r = review->request;
  const std::string kind = r.kind.kind;
  if (!IsAdmittedKind(r.kind.group, r.kind.kind)) {
    return Fail(webhook, kind, 400,
                "request.kind \"" + r.kind.ApiVersion() + ", Kind=" + r.kind.kind +
                    "\" is not admitted by wisp (v1 Pod, v1 PersistentVolumeClaim, kubevirt.io "
                    "VirtualMachineInstance, cdi.kubevirt.io DataVolume, wisp.dev "
                    "VolumeImportSource)");
  }
  log::ScopedRequestId rid(r.uid);
  // Keep a margin so the answer (fail-open/closed included) leaves before the caller's deadline.
  auto margin = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(100), budget / 10);
  auto call_timeout =
      std::max<std::chrono::milliseconds>(std::chrono::milliseconds(1), budget - margin);
  bus::Headers headers{{std::string(bus::kHeaderRequestId), r.uid}};
  auto verdict = bus::Call<v1::AdmissionVerdict>(
      bus_, mutate ? bus::subjects::kPolicyMutate : bus::subjects::kPolicyValidate,
      ToAdmissionCall(r, options_.kubernetes_version), call_timeout, headers);

  k8s::AdmissionResponse resp;
  resp.uid = r.uid;
  std::string outcome;
  if (!verdict.ok() && absl::IsInvalidArgument(verdict.status())) {
    return Fail(webhook, kind, 400, std::string(verdict.status().message()));
  }
  if (!verdict.ok()) {
    const std::string why =
        "wisp policy unavailable: " + std::string(StatusCodeName(verdict.status().code())) + ": " +
        std::string(verdict.status().message());
    SPDLOG_LOGGER_WARN(logger, "{} {} {}/{}: {}", webhook, kind, r.namespace_, r.name, why);
    if (options_.failure_mode == FailureMode::kOpen) {
      resp.allowed = true;
      resp.warnings.push_back(why + "; admitted unchanged (failure mode open)");
      outcome = "fail_open";
    } else {
      resp.allowed = false;
      resp.code = 500;
      resp.message = why;
      outcome = "fail_closed";
    }
  } else {
    resp.allowed = verdict->allowed();
    resp.patch = resp.allowed ? verdict->patch() : "";
    resp.warnings.assign(verdict->warnings().begin(), verdict->warnings().end());
    for (const auto& [k, v] : verdict->audit_annotations()) resp.audit_annotations[k] = v;
    if (!resp.allowed) {
      resp.message = verdict->message();
      resp.code = verdict->code() != 0 ? verdict->code() : 403;
      resp.reason = verdict->reason();
    }
    outcome = resp.allowed ? "allowed" : "denied";
    SPDLOG_LOGGER_DEBUG(logger, "{} {} {}/{}: {} patch={}B", webhook, kind, r.namespace_, r.name,
                        outcome, resp.patch.size());
  }
  metrics_.requests_total
      .Add({{"webhook", std::string(webhook)}, {"kind", kind}, {"outcome", outcome}})
      .Increment();
  return http::Response::Json(200, k8s::EncodeAdmissionReview(review->api_version, resp));
}

void RegisterAdmissionRoutes(http::Server& server, AdmissionHandler& handler) {
  server.Handle("POST", "/mutate",
                [&handler](const http::Request& r) { return handler.Mutate(r); });
  server.Handle("POST", "/validate",
                [&handler](const http::Request& r) { return handler.Validate(r); });
}

}  // namespace wisp::gateway::admission
