#include "token_service.hpp"

#include <algorithm>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "upload_issuer.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/log/log.hpp"

namespace wisp::token {
namespace {

std::shared_ptr<spdlog::logger> Logger() {
  static auto logger = log::Get("token");
  return logger;
}

}  // namespace

std::string OpenIdConfiguration(const std::string& issuer, const std::string& jwks_uri,
                                const KeySnapshot& keys) {
  std::set<std::string> algs;
  for (const auto& [alg, key] : keys.active) algs.emplace(jwt::AlgorithmName(alg));
  nlohmann::json doc = {{"issuer", issuer},
                        {"jwks_uri", jwks_uri.empty() ? issuer + "/openid/v1/jwks" : jwks_uri},
                        {"response_types_supported", {"id_token"}},
                        {"subject_types_supported", {"public"}},
                        {"id_token_signing_alg_values_supported", algs}};
  return doc.dump();
}

v1::KeysResponse BuildKeysResponse(const std::string& issuer, const std::string& jwks_uri,
                                   const KeySnapshot& keys) {
  v1::KeysResponse resp;
  resp.set_issuer(issuer);
  resp.set_jwks_json(keys.jwks_json);
  resp.set_openid_configuration_json(OpenIdConfiguration(issuer, jwks_uri, keys));
  resp.set_generation(static_cast<int64_t>(keys.revision));
  return resp;
}

TokenService::TokenService(bus::Service& service, bus::Publisher& publisher, KeyManager& keys,
                           const Issuer& issuer, const Reviewer& reviewer,
                           const Exchanger& exchanger, Options options)
    : service_(service),
      publisher_(publisher),
      keys_(keys),
      issuer_(issuer),
      reviewer_(reviewer),
      exchanger_(exchanger),
      options_(std::move(options)) {}

TokenService::~TokenService() { Stop(); }

absl::Status TokenService::Start() {
  keys_.OnChange([this](const KeySnapshot& snap) { PublishKeys(snap); });
  const auto add = [&](std::string_view name, std::string_view subject,
                       bus::Reply (TokenService::*handler)(const bus::Request&) const) {
    return service_.AddEndpoint(name, subject, bus::queues::kToken,
                                [this, handler](const bus::Request& r) {
                                  log::ScopedRequestId rid(r.request_id);
                                  return (this->*handler)(r);
                                });
  };
  WISP_RETURN_IF_ERROR(add("issue", bus::subjects::kTokenIssue, &TokenService::HandleIssue));
  WISP_RETURN_IF_ERROR(
      add("issue_batch", bus::subjects::kTokenIssueBatch, &TokenService::HandleIssueBatch));
  WISP_RETURN_IF_ERROR(
      add("exchange", bus::subjects::kTokenExchange, &TokenService::HandleExchange));
  WISP_RETURN_IF_ERROR(add("review", bus::subjects::kTokenReview, &TokenService::HandleReview));
  WISP_RETURN_IF_ERROR(add("keys", bus::subjects::kTokenKeys, &TokenService::HandleKeys));
  WISP_RETURN_IF_ERROR(add("upload", bus::subjects::kTokenUpload, &TokenService::HandleUpload));
  WISP_RETURN_IF_ERROR(
      add("key_admin", bus::subjects::kTokenKeyAdmin, &TokenService::HandleKeyAdmin));
  PublishKeys(*keys_.Current());
  rotation_ = std::thread([this] { RotationLoop(); });
  return absl::OkStatus();
}

void TokenService::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (rotation_.joinable()) rotation_.join();
}

void TokenService::RotationLoop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.tick_interval, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    if (auto r = keys_.Tick(); !r.ok()) {
      SPDLOG_LOGGER_WARN(Logger(), "key rotation check failed: {}", r.status().ToString());
    }
    lock.lock();
  }
}

void TokenService::PublishKeys(const KeySnapshot& snap) {
  const auto resp = BuildKeysResponse(options_.issuer, options_.jwks_uri, snap);
  std::string body;
  resp.SerializeToString(&body);
  if (auto st = publisher_.Publish(bus::subjects::kTokenKeysChanged, body); !st.ok()) {
    SPDLOG_LOGGER_WARN(Logger(), "publishing key set change: {}", st.ToString());
  }
}

bus::Reply TokenService::HandleIssue(const bus::Request& request) const {
  auto req = bus::ParseBody<v1::IssueRequest>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  auto resp = issuer_.Issue(*req);
  if (!resp.ok()) return bus::Reply::Error(resp.status());
  return bus::ProtoReply(*resp);
}

bus::Reply TokenService::HandleIssueBatch(const bus::Request& request) const {
  auto req = bus::ParseBody<v1::IssueBatchRequest>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  auto resp = issuer_.IssueBatch(*req);
  if (!resp.ok()) return bus::Reply::Error(resp.status());
  return bus::ProtoReply(*resp);
}

bus::Reply TokenService::HandleUpload(const bus::Request& request) const {
  auto req = bus::ParseBody<v1::UploadTokenRequest>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  auto resp = IssueUploadToken(issuer_, *req);
  if (!resp.ok()) return bus::Reply::Error(resp.status());
  SPDLOG_LOGGER_INFO(Logger(), "upload token for volume {} (expires {})", req->volume_id(),
                     resp->expiration_unix());
  return bus::ProtoReply(*resp);
}

bus::Reply TokenService::HandleReview(const bus::Request& request) const {
  auto req = bus::ParseBody<v1::ReviewRequest>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  return bus::ProtoReply(reviewer_.Review(*req));
}

bus::Reply TokenService::HandleExchange(const bus::Request& request) const {
  auto req = bus::ParseBody<v1::ExchangeRequest>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  return bus::ProtoReply(exchanger_.Exchange(*req));
}

bus::Reply TokenService::HandleKeys(const bus::Request& request) const {
  auto req = bus::ParseBody<v1::KeysRequest>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  return bus::ProtoReply(BuildKeysResponse(options_.issuer, options_.jwks_uri, *keys_.Current()));
}

v1::KeyAdminResponse BuildKeyAdminResponse(const KeySnapshot& keys, const KeyManager& manager) {
  v1::KeyAdminResponse resp;
  std::vector<const KeyInfo*> order;
  for (const auto& [kid, info] : keys.info) order.push_back(&info);
  // active, next, retired; newest first within each.
  const auto rank = [](KeyState s) {
    return s == KeyState::kActive ? 0 : s == KeyState::kNext ? 1 : 2;
  };
  std::sort(order.begin(), order.end(), [&](const KeyInfo* a, const KeyInfo* b) {
    if (rank(a->state) != rank(b->state)) return rank(a->state) < rank(b->state);
    if (a->created_unix != b->created_unix) return a->created_unix > b->created_unix;
    return a->kid < b->kid;
  });
  for (const KeyInfo* info : order) {
    v1::KeyStatus* k = resp.add_keys();
    k->set_kid(info->kid);
    k->set_algorithm(std::string(jwt::AlgorithmName(info->alg)));
    k->set_state(std::string(KeyStateName(info->state)));
    k->set_tainted(info->tainted);
    k->set_created_unix(info->created_unix);
    k->set_activated_unix(info->activated_unix);
    k->set_retired_unix(info->retired_unix);
    k->set_published_until_unix(info->state == KeyState::kRetired ? info->drop_after_unix : 0);
  }
  resp.set_rotation_period_seconds(manager.RotationPeriod().count());
  resp.set_publish_ahead_seconds(manager.PublishAhead().count());
  return resp;
}

bus::Reply TokenService::HandleKeyAdmin(const bus::Request& request) const {
  auto req = bus::ParseBody<v1::KeyAdminRequest>(request);
  if (!req.ok()) return bus::Reply::Error(req.status());
  absl::StatusOr<std::string> said = std::string();
  switch (req->action()) {
    case v1::KeyAdminRequest::LIST:
      break;
    case v1::KeyAdminRequest::ROTATE: {
      std::optional<jwt::Algorithm> alg;
      if (!req->algorithm().empty()) {
        auto parsed = jwt::ParseAlgorithm(req->algorithm());
        if (!parsed.ok()) {
          return bus::Reply::Error(absl::InvalidArgumentError("algorithm: \"" + req->algorithm() +
                                                              "\" is not RS256 or ES256"));
        }
        alg = *parsed;
      }
      said = keys_.Rotate(alg);
      break;
    }
    case v1::KeyAdminRequest::TAINT:
      said = keys_.Taint(req->kid());
      break;
    case v1::KeyAdminRequest::REVOKE:
      said = keys_.Revoke(req->kid());
      break;
    default:
      return bus::Reply::Error(
          absl::InvalidArgumentError("action: one of LIST, ROTATE, TAINT, REVOKE is required"));
  }
  if (!said.ok()) return bus::Reply::Error(said.status());
  v1::KeyAdminResponse resp = BuildKeyAdminResponse(*keys_.Current(), keys_);
  resp.set_message(*said);
  return bus::ProtoReply(resp);
}

}  // namespace wisp::token
