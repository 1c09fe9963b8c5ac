#pragma once
// The gateway's admission webhooks: POST /mutate and POST /validate.
//
// Routes (RegisterAdmissionRoutes):
//   POST /mutate    AdmissionReview admission.k8s.io/v1 -> wisp.v1.policy.mutate
//   POST /validate  AdmissionReview admission.k8s.io/v1 -> wisp.v1.policy.validate
//
// Contract:
//   - The answer is an AdmissionReview with the request's apiVersion and kind, response.uid =
//     request.uid, the policy's patch base64-encoded with patchType JSONPatch, its warnings, audit
//     annotations, and status {code, message} on a denial.
//   - HTTP 400 with {"error": "..."} naming the problem for: a Content-Type other than
//     application/json, a body that is not an AdmissionReview (bad JSON, no `request`, no uid...),
//     a kind wisp does not admit, a bad ?timeout=. HTTP 413 above 3 MiB. Nothing here throws.
//   - ?timeout= (kube-apiserver sends the webhook's timeoutSeconds, e.g. "10s") bounds the policy
//     call together with AdmissionOptions::max_timeout; the smaller wins and a margin is kept so
//     the answer leaves before kube-apiserver gives up.
//   - When the bus or wisp-policy does not answer in time (or answers an error), the failure mode
//     answers: closed -> allowed:false, status.code 500, message "wisp policy unavailable: <why>";
//     open -> allowed:true with the warning "wisp policy unavailable: <why>; admitted unchanged
//     (failure mode open)".
//   - No thread waits for wisp-policy: the routes are asynchronous (HandleAsync), so the requests
//   in
//     flight are bounded by the bus timeout, not by the HTTP server's threads.
//   - A Pod CREATE (either webhook) carries its ServiceAccount's annotations
//     (AdmissionCall.service_account_annotations, service_account_found) when
//     AdmissionOptions::service_accounts is set: from its cache, no I/O, or else from a live GET
//     off the I/O thread, whose time counts against the same budget. A ServiceAccount that does
//     not exist: found false, no annotations. A GET that fails: service_account_failure_mode
//     decides: open (default) sends the call without them and the answer carries the warning
//     "wisp: ServiceAccount <ns>/<name> could not be read (...); ...", closed answers
//     allowed:false, code 500, "wisp: ServiceAccount <ns>/<name> could not be read: <why>".
//   - Metrics: wisp_gateway_admission_requests_total{webhook,kind,outcome} with outcome
//     allowed|denied|error|fail_open|fail_closed, wisp_gateway_admission_duration_seconds{webhook}.
//
// Example (gateway wiring):
//   admission::AdmissionHandler admission(process.bus(), process.registry(),
//       {.failure_mode = admission::FailureMode::kClosed, .max_timeout = 10s,
//        .kubernetes_version = "1.30"});
//   admission::RegisterAdmissionRoutes(*https, admission);  // keep `admission` alive meanwhile
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "admission/service_accounts.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/http/server.hpp"
#include "wisp/k8s/admission_review.hpp"
#include "wisp/v1/admission.pb.h"

namespace wisp::gateway::admission {

enum class FailureMode { kClosed, kOpen };
// "closed" | "open"; InvalidArgument naming failure-mode otherwise.
absl::StatusOr<FailureMode> ParseFailureMode(std::string_view text);

struct AdmissionOptions {
  FailureMode failure_mode = FailureMode::kClosed;
  std::chrono::milliseconds max_timeout = std::chrono::seconds(10);
  std::string kubernetes_version = "1.29";  // AdmissionCall.server_version
  size_t max_body_bytes = 3 * 1024 * 1024;
  // Where a pod CREATE's ServiceAccount is read (not owned; must outlive the handler and every
  // answer in flight). nullptr: no API client, the calls carry no annotations.
  ServiceAccountSource* service_accounts = nullptr;
  // When the ServiceAccount cannot be read (the GET failed or timed out): open sends the call
  // without its annotations and adds a warning; closed answers as FailureMode::kClosed does.
  FailureMode service_account_failure_mode = FailureMode::kOpen;
};

struct AdmissionMetrics {
  explicit AdmissionMetrics(prometheus::Registry& registry);
  prometheus::Family<prometheus::Counter>& requests_total;
  prometheus::Family<prometheus::Histogram>& duration_seconds;
};

// The kinds wisp admits are wisp-policy's rule registry (wisp/policy/registry.hpp): a kind not
// listed there is answered 400 here, without a bus call.
// AdmissionReview request -> the bus message (objects as JSON text).
v1::AdmissionCall ToAdmissionCall(const k8s::AdmissionRequest& request,
                                  const std::string& server_version);

class AdmissionHandler {
 public:
  AdmissionHandler(bus::Requester& bus, prometheus::Registry& registry, AdmissionOptions options);

  // Answers through `done` once wisp-policy has (bus::Requester::RequestAsync), so no thread waits
  // for the bus; `done` runs on the calling thread for the answers that need no bus call, or on a
  // bus thread. What the HTTP routes use.
  void HandleAsync(const http::Request& request, bool mutate, http::Responder done);
  // The same, waiting for the answer (tests, tools).
  http::Response Handle(const http::Request& request, bool mutate);
  http::Response Mutate(const http::Request& request) { return Handle(request, true); }
  http::Response Validate(const http::Request& request) { return Handle(request, false); }

 private:
  // Options and metrics, shared with the bus callbacks still pending, so an answer that arrives
  // after the handler is gone (shutdown) touches nothing freed.
  struct State;
  struct Pending;
  // Puts `answer` into `call`. False when the answer has been given instead (a failed lookup
  // under service_account_failure_mode closed).
  static bool AddServiceAccount(State& st, const ServiceAccountAnswer& answer,
                                const std::string& ns, const std::string& name,
                                v1::AdmissionCall& call, Pending& pending, bool mutate,
                                std::chrono::steady_clock::time_point start,
                                const http::Responder& done);
  // Sends `call` to wisp-policy and answers through `done`, with the time left of `budget`.
  static void Send(const std::shared_ptr<State>& state, bus::Requester& bus, bool mutate,
                   std::chrono::steady_clock::time_point start,
                   std::chrono::milliseconds call_timeout, const v1::AdmissionCall& call,
                   std::shared_ptr<Pending> pending, http::Responder done);
  bus::Requester& bus_;
  std::shared_ptr<State> state_;
};

void RegisterAdmissionRoutes(http::Server& server, AdmissionHandler& handler);

}  // namespace wisp::gateway::admission
