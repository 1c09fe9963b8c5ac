#include "admission/admission_handler.hpp"

#include <algorithm>
#include <future>
#include <map>
#include <memory>
#include <mutex>

#include "admission/review_call.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/config/flags.hpp"
#include "wisp/log/log.hpp"
#include "wisp/metrics/metrics.hpp"
#include "wisp/policy/registry.hpp"

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

struct AdmissionHandler::State {
  State(prometheus::Registry& registry, AdmissionOptions o)
      : options(std::move(o)), metrics(registry) {
    duration[0] =
        &metrics.duration_seconds.Add({{"webhook", "validate"}}, metrics::LatencyBuckets());
    duration[1] = &metrics.duration_seconds.Add({{"webhook", "mutate"}}, metrics::LatencyBuckets());
  }

  http::Response Fail(std::string_view webhook, const std::string& kind, int status,
                      const std::string& message) {
    // Not through the cache: `kind` may be anything a client sent.
    metrics.requests_total
        .Add({{"webhook", std::string(webhook)},
              {"kind", kind.empty() ? "unknown" : kind},
              {"outcome", "error"}})
        .Increment();
    return http::Response::Error(status, message);
  }

  // The counter for (webhook, kind, outcome) of an admitted kind, cached: a Family lookup hashes
  // the whole label set under the family's lock.
  prometheus::Counter& Requests(bool mutate, const std::string& kind, std::string_view outcome) {
    const std::string_view webhook = Webhook(mutate);
    std::string key;
    key.reserve(webhook.size() + kind.size() + outcome.size() + 2);
    key.append(webhook).append("/").append(kind).append("/").append(outcome);
    std::lock_guard lock(mu);
    auto it = requests.find(key);
    if (it != requests.end()) return *it->second;
    auto& counter = metrics.requests_total.Add(
        {{"webhook", std::string(webhook)}, {"kind", kind}, {"outcome", std::string(outcome)}});
    requests.emplace(std::move(key), &counter);
    return counter;
  }

  const AdmissionOptions options;
  AdmissionMetrics metrics;
  prometheus::Histogram* duration[2];  // [mutate]
  std::mutex mu;
  std::map<std::string, prometheus::Counter*, std::less<>> requests;  // "webhook/kind/outcome"
};

// What the answer needs once the policy replies; the request is gone by then.
struct AdmissionHandler::Pending {
  std::string api_version, uid, kind, namespace_, name;
  std::vector<std::string> warnings;  // the gateway's own, before wisp-policy's
};

bool AdmissionHandler::AddServiceAccount(State& st, const ServiceAccountAnswer& answer,
                                         const std::string& ns, const std::string& name,
                                         v1::AdmissionCall& call, Pending& pending, bool mutate,
                                         Clock::time_point start, const http::Responder& done) {
  static const auto logger = log::Get("admission");
  switch (answer.kind) {
    case ServiceAccountAnswer::Kind::kFound:
      call.set_service_account_found(true);
      if (answer.annotations) {
        call.mutable_service_account_annotations()->insert(answer.annotations->begin(),
                                                           answer.annotations->end());
      }
      return true;
    case ServiceAccountAnswer::Kind::kNotFound:
      return true;
    case ServiceAccountAnswer::Kind::kError:
      break;
  }
  const std::string what = "wisp: ServiceAccount " + ns + "/" + name + " could not be read";
  SPDLOG_LOGGER_WARN(logger, "{} Pod {}/{}: {}: {}", Webhook(mutate), pending.namespace_,
                     pending.name, what, answer.error);
  if (st.options.service_account_failure_mode == FailureMode::kOpen) {
    pending.warnings.push_back(what + " (" + answer.error +
                               "); the pod is admitted as it asks, without identity chosen by "
                               "its ServiceAccount's annotations");
    return true;
  }
  k8s::AdmissionResponse resp;
  resp.uid = pending.uid;
  resp.allowed = false;
  resp.code = 500;
  resp.message = what + ": " + answer.error;
  st.Requests(mutate, pending.kind, "fail_closed").Increment();
  st.duration[mutate ? 1 : 0]->Observe(std::chrono::duration<double>(Clock::now() - start).count());
  done(http::Response::Json(200, k8s::EncodeAdmissionReview(pending.api_version, resp)));
  return false;
}

AdmissionHandler::AdmissionHandler(bus::Requester& bus, prometheus::Registry& registry,
                                   AdmissionOptions options)
    : bus_(bus), state_(std::make_shared<State>(registry, std::move(options))) {}

http::Response AdmissionHandler::Handle(const http::Request& request, bool mutate) {
  std::promise<http::Response> answer;
  auto future = answer.get_future();
  HandleAsync(request, mutate,
              http::Responder([&answer](http::Response r) { answer.set_value(std::move(r)); }));
  return future.get();
}

void AdmissionHandler::HandleAsync(const http::Request& request, bool mutate,
                                   http::Responder done) {
  const auto start = Clock::now();
  const std::string_view webhook = Webhook(mutate);
  State& st = *state_;
  prometheus::Histogram* duration = st.duration[mutate ? 1 : 0];
  auto answer = [&](http::Response r) {
    duration->Observe(std::chrono::duration<double>(Clock::now() - start).count());
    done(std::move(r));
  };

  std::string_view content_type = request.Header("content-type");
  if (!IsJson(content_type)) {
    return answer(
        st.Fail(webhook, "", 400,
                "Content-Type \"" + std::string(content_type) + "\" is not application/json"));
  }
  if (request.body.size() > st.options.max_body_bytes) {
    return answer(st.Fail(webhook, "", 413,
                          "request body of " + std::to_string(request.body.size()) +
                              " bytes exceeds " + std::to_string(st.options.max_body_bytes) +
                              " bytes"));
  }
  std::chrono::milliseconds budget = st.options.max_timeout;
  if (auto t = request.Query("timeout")) {
    auto d = config::ParseDuration(*t);
    if (!d.ok() || d->count() <= 0) {
      return answer(st.Fail(webhook, "", 400, "timeout \"" + *t + "\" is not a positive duration"));
    }
    budget = std::min(budget, *d);
  }
  auto review = ParseReviewCall(request.body, st.options.kubernetes_version);
  if (!review.ok())
    return answer(st.Fail(webhook, "", 400, std::string(review.status().message())));
  const v1::AdmissionCall& call = review->call;
  const v1::GroupVersionKind& gvk = call.kind();
  if (!policy::IsAdmittedKind(gvk.group(), gvk.kind())) {
    const std::string api_version =
        gvk.group().empty() ? gvk.version() : gvk.group() + "/" + gvk.version();
    return answer(st.Fail(webhook, gvk.kind(), 400,
                          "request.kind \"" + api_version + ", Kind=" + gvk.kind() +
                              "\" is not admitted by wisp (" + policy::AdmittedKindsText() + ")"));
  }
  // Keep a margin so the answer (fail-open/closed included) leaves before the caller's deadline.
  auto margin = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(100), budget / 10);
  auto call_timeout =
      std::max<std::chrono::milliseconds>(std::chrono::milliseconds(1), budget - margin);
  // What the answer needs once the policy replies; the request is gone by then.
  auto pending = std::make_shared<Pending>(Pending{
      std::move(review->api_version), call.uid(), gvk.kind(), call.namespace_(), call.name(), {}});
  ServiceAccountSource* accounts = st.options.service_accounts;
  if (accounts == nullptr || review->service_account.empty() || call.operation() != "CREATE") {
    return Send(state_, bus_, mutate, start, call_timeout, call, std::move(pending),
                std::move(done));
  }
  // A pod: its ServiceAccount's annotations ride along. From the cache (the common case: no I/O,
  // no copy of the call), else a live GET on another thread, which continues from there.
  if (auto cached = accounts->Cached(call.namespace_(), review->service_account)) {
    if (!AddServiceAccount(st, *cached, call.namespace_(), review->service_account, review->call,
                           *pending, mutate, start, done)) {
      return;
    }
    return Send(state_, bus_, mutate, start, call_timeout, call, std::move(pending),
                std::move(done));
  }
  auto moved = std::make_shared<ReviewCall>(*std::move(review));
  const std::string ns = moved->call.namespace_();
  const std::string sa = moved->service_account;
  accounts->Fetch(
      ns, sa,
      [state = state_, bus = &bus_, mutate, start, call_timeout, moved, pending,
       done = std::move(done)](ServiceAccountAnswer answer) mutable {
        log::ScopedRequestId rid(pending->uid);
        if (!AddServiceAccount(*state, answer, moved->call.namespace_(), moved->service_account,
                               moved->call, *pending, mutate, start, done)) {
          return;
        }
        Send(state, *bus, mutate, start, call_timeout, moved->call, std::move(pending),
             std::move(done));
      });
}

void AdmissionHandler::Send(const std::shared_ptr<State>& state, bus::Requester& bus, bool mutate,
                            Clock::time_point start, std::chrono::milliseconds call_timeout,
                            const v1::AdmissionCall& call, std::shared_ptr<Pending> pending,
                            http::Responder done) {
  static const auto logger = log::Get("admission");
  prometheus::Histogram* duration = state->duration[mutate ? 1 : 0];
  // A live ServiceAccount GET may have spent part of the budget.
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  const auto timeout =
      std::max<std::chrono::milliseconds>(std::chrono::milliseconds(1), call_timeout - spent);
  bus::Headers headers{{std::string(bus::kHeaderRequestId), call.uid()}};
  bus::CallAsync<v1::AdmissionVerdict>(
      bus, mutate ? bus::subjects::kPolicyMutate : bus::subjects::kPolicyValidate, call, timeout,
      headers,
      [state, mutate, start, duration, pending,
       done = std::move(done)](absl::StatusOr<v1::AdmissionVerdict> verdict) {
        const std::string_view webhook = Webhook(mutate);
        const Pending& p = *pending;
        log::ScopedRequestId rid(p.uid);
        auto finish = [&](http::Response resp) {
          duration->Observe(std::chrono::duration<double>(Clock::now() - start).count());
          done(std::move(resp));
        };
        if (!verdict.ok() && absl::IsInvalidArgument(verdict.status())) {
          return finish(state->Fail(webhook, p.kind, 400, std::string(verdict.status().message())));
        }
        k8s::AdmissionResponse resp;
        resp.uid = p.uid;
        resp.warnings = p.warnings;
        std::string_view outcome;
        if (!verdict.ok()) {
          const std::string why =
              "wisp policy unavailable: " + std::string(StatusCodeName(verdict.status().code())) +
              ": " + std::string(verdict.status().message());
          SPDLOG_LOGGER_WARN(logger, "{} {} {}/{}: {}", webhook, p.kind, p.namespace_, p.name, why);
          if (state->options.failure_mode == FailureMode::kOpen) {
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
          if (resp.allowed) resp.patch = std::move(*verdict->mutable_patch());
          for (auto& w : *verdict->mutable_warnings()) resp.warnings.push_back(std::move(w));
          for (const auto& [k, v] : verdict->audit_annotations()) resp.audit_annotations[k] = v;
          if (!resp.allowed) {
            resp.message = verdict->message();
            resp.code = verdict->code() != 0 ? verdict->code() : 403;
            resp.reason = verdict->reason();
          }
          outcome = resp.allowed ? "allowed" : "denied";
          SPDLOG_LOGGER_DEBUG(logger, "{} {} {}/{}: {} patch={}B", webhook, p.kind, p.namespace_,
                              p.name, outcome, resp.patch.size());
        }
        state->Requests(mutate, p.kind, outcome).Increment();
        finish(http::Response::Json(200, k8s::EncodeAdmissionReview(p.api_version, resp)));
      });
}

void RegisterAdmissionRoutes(http::Server& server, AdmissionHandler& handler) {
  server.HandleAsync("POST", "/mutate", [&handler](const http::Request& r, http::Responder done) {
    handler.HandleAsync(r, true, std::move(done));
  });
  server.HandleAsync("POST", "/validate", [&handler](const http::Request& r, http::Responder done) {
    handler.HandleAsync(r, false, std::move(done));
  });
}

}  // namespace wisp::gateway::admission
