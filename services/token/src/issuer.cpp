#include "issuer.hpp"

#include <algorithm>
#include <cstring>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "pod_proof.hpp"
#include "wisp/k8s/json_writer.hpp"

namespace wisp::token {
namespace {

// Kubernetes object names used in sub: lower-case RFC 1123 subdomain characters.
bool ValidName(std::string_view s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
  });
}

}  // namespace

namespace {

// Random bytes for jti from a per-thread buffer refilled 4 KiB at a time: one RAND_bytes call
// costs about as much for 4 KiB as for 16 bytes (the DRBG's per-call work dominates), and jti is
// on every token.
void JtiRandom(unsigned char* out, size_t n) {
  thread_local unsigned char pool[4096];
  thread_local size_t left = 0;
  if (left < n) {
    if (RAND_bytes(pool, sizeof(pool)) != 1) {
      RAND_bytes(out, static_cast<int>(n));  // unreachable in practice; never reuse bytes
      return;
    }
    left = sizeof(pool);
  }
  std::memcpy(out, pool + sizeof(pool) - left, n);
  OPENSSL_cleanse(pool + sizeof(pool) - left, n);
  left -= n;
}

}  // namespace

std::string NewUuid() {
  unsigned char b[16];
  JtiRandom(b, sizeof(b));
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(kHex[b[i] >> 4]);
    out.push_back(kHex[b[i] & 15]);
  }
  return out;
}

Issuer::Issuer(const KeyManager& keys, const Policy& policy, Clock& clock, TokenMetrics& metrics,
               Options options)
    : keys_(keys),
      owned_policy_(std::make_unique<PolicyStore>(policy)),
      policy_(*owned_policy_),
      clock_(clock),
      metrics_(metrics),
      options_(std::move(options)) {}

Issuer::Issuer(const KeyManager& keys, const PolicyStore& policy, Clock& clock,
               TokenMetrics& metrics, Options options)
    : keys_(keys),
      policy_(policy),
      clock_(clock),
      metrics_(metrics),
      options_(std::move(options)) {}

int64_t Issuer::Lifetime(int64_t lifetime_seconds) const {
  return options_.lifetime_jitter.Apply(lifetime_seconds, kMinExpirationSeconds);
}

absl::StatusOr<jwt::Algorithm> Issuer::AlgorithmFor(std::string_view name) const {
  if (name.empty()) return options_.default_algorithm;
  auto alg = jwt::ParseAlgorithm(name);
  if (!alg.ok())
    return absl::InvalidArgumentError("algorithm: " + std::string(alg.status().message()));
  return alg;
}

absl::StatusOr<v1::IssueResponse> Issuer::Issue(const v1::IssueRequest& req) const {
  const auto fail = [&](std::string_view reason, absl::Status st) {
    metrics_.IssueError(reason).Increment();
    return st;
  };
  const auto& s = req.subject();
  if (!ValidName(s.namespace_(), 63)) {
    return fail("invalid_subject",
                absl::InvalidArgumentError("subject.namespace: must be a DNS label"));
  }
  if (!ValidName(s.service_account(), 253)) {
    return fail("invalid_subject",
                absl::InvalidArgumentError("subject.service_account: must be a DNS subdomain"));
  }
  const std::shared_ptr<const Policy> policy = policy_.Current();
  if (absl::Status st = CheckPodProof(req, *policy, clock_.NowUnixSeconds(), options_.leeway);
      !st.ok()) {
    return fail("pod_proof", st);
  }
  int64_t exp_s = req.expiration_seconds();
  if (exp_s == 0) exp_s = kDefaultExpirationSeconds;
  if (exp_s < kMinExpirationSeconds) {
    return fail("invalid_expiration",
                absl::InvalidArgumentError(
                    "expirationSeconds: may not specify a duration less than 10 minutes"));
  }
  if (exp_s > kMaxExpirationSeconds) {
    return fail("invalid_expiration",
                absl::InvalidArgumentError(
                    "expirationSeconds: may not specify a duration larger than 2^32 seconds"));
  }
  const NamespacePolicy* ns = policy->ForNamespace(s.namespace_());
  int64_t cap = policy->max_expiration_seconds;
  if (ns != nullptr && ns->max_expiration_seconds > 0)
    cap = std::min(cap, ns->max_expiration_seconds);
  exp_s = Lifetime(std::min(exp_s, cap));

  std::vector<std::string> auds(req.audiences().begin(), req.audiences().end());
  if (auds.empty()) auds = policy->default_audiences;
  if (auds.empty()) {
    return fail("invalid_audience",
                absl::InvalidArgumentError("audiences: none given and the policy has no default"));
  }
  for (const auto& a : auds) {
    if (a.empty()) {
      return fail("invalid_audience", absl::InvalidArgumentError("audiences: empty audience"));
    }
    const bool allowed = Matches(policy->default_audiences, a) || (ns && Matches(ns->audiences, a));
    if (!allowed) {
      return fail("audience_not_allowed",
                  absl::PermissionDeniedError("audiences: \"" + a +
                                              "\" is not allowed for namespace " + s.namespace_()));
    }
  }
  auto alg = AlgorithmFor(req.algorithm());
  if (!alg.ok()) return fail("invalid_algorithm", alg.status());

  // The claims written directly in nlohmann's sorted-key form (the same bytes SignClaims would
  // produce): building and dumping a json object cost as much as a fifth of an ES256 signature.
  const KeySnapshotPtr snap = keys_.Current();
  const jwt::PrivateKey* key = snap->Active(*alg);
  if (key == nullptr) {
    return fail("signing",
                absl::UnavailableError("no active " + std::string(jwt::AlgorithmName(*alg)) +
                                       " signing key"));
  }
  const int64_t iat = clock_.NowUnixSeconds();
  const int64_t exp = iat + exp_s;
  std::string c;
  c.reserve(512);
  bool utf8 = true;
  const auto str = [&](std::string_view v) { utf8 = k8s::AppendJsonString(c, v) && utf8; };
  c += "{\"aud\":[";
  for (size_t i = 0; i < auds.size(); ++i) {
    if (i > 0) c.push_back(',');
    str(auds[i]);
  }
  c += "],\"exp\":" + std::to_string(exp) + ",\"iat\":" + std::to_string(iat) + ",\"iss\":";
  str(options_.issuer);
  c += ",\"jti\":\"" + NewUuid() + "\",\"kubernetes.io\":{\"namespace\":";
  str(s.namespace_());
  if (!s.node_name().empty()) {
    c += ",\"node\":{\"name\":";
    str(s.node_name());
    c.push_back('}');
  }
  if (!s.pod_name().empty()) {
    c += ",\"pod\":{\"name\":";
    str(s.pod_name());
    c += ",\"uid\":";
    str(s.pod_uid());
    c.push_back('}');
  }
  c += ",\"serviceaccount\":{\"name\":";
  str(s.service_account());
  c += ",\"uid\":";
  str(s.service_account_uid());
  c += "}},\"nbf\":" + std::to_string(iat) + ",\"sub\":\"system:serviceaccount:";
  c += s.namespace_();  // checked above: DNS characters only
  c.push_back(':');
  c += s.service_account();
  c += "\"}";
  if (!utf8) {
    return fail("invalid_subject",
                absl::InvalidArgumentError("subject or audiences: not valid UTF-8"));
  }
  auto token = jwt::Sign(*key, c);
  if (!token.ok()) return fail("signing", token.status());
  metrics_.Issued(jwt::AlgorithmName(*alg)).Increment();
  v1::IssueResponse resp;
  resp.set_token(*std::move(token));
  resp.set_expiration_unix(exp);
  resp.set_issued_at_unix(iat);
  resp.set_key_id(key->kid());
  return resp;
}

absl::StatusOr<Signed> Issuer::SignClaims(nlohmann::json claims, int64_t lifetime_seconds,
                                          jwt::Algorithm alg) const {
  const KeySnapshotPtr snap = keys_.Current();
  const jwt::PrivateKey* key = snap->Active(alg);
  if (key == nullptr) {
    return absl::UnavailableError("no active " + std::string(jwt::AlgorithmName(alg)) +
                                  " signing key");
  }
  Signed out;
  out.iat = clock_.NowUnixSeconds();
  out.exp = out.iat + lifetime_seconds;
  out.kid = key->kid();
  claims["iss"] = options_.issuer;
  claims["iat"] = out.iat;
  claims["nbf"] = out.iat;
  claims["exp"] = out.exp;
  claims["jti"] = NewUuid();
  WISP_ASSIGN_OR_RETURN(out.token, jwt::Sign(*key, claims.dump()));
  metrics_.Issued(jwt::AlgorithmName(alg)).Increment();
  return out;
}

absl::StatusOr<v1::IssueBatchResponse> Issuer::IssueBatch(
    const v1::IssueBatchRequest& request) const {
  const int n = request.requests_size();
  if (n == 0) {
    metrics_.IssueError("invalid_batch").Increment();
    return absl::InvalidArgumentError("requests: empty batch");
  }
  if (n > kMaxBatch) {
    metrics_.IssueError("invalid_batch").Increment();
    return absl::InvalidArgumentError("requests: " + std::to_string(n) + " entries; at most " +
                                      std::to_string(kMaxBatch) + " per batch");
  }
  v1::IssueBatchResponse resp;
  resp.mutable_results()->Reserve(n);
  for (const v1::IssueRequest& entry : request.requests()) {
    v1::IssueResult* result = resp.add_results();
    auto token = Issue(entry);
    if (token.ok()) {
      *result->mutable_token() = *std::move(token);
    } else {
      result->set_code(static_cast<int32_t>(token.status().code()));
      result->set_message(std::string(token.status().message()));
    }
  }
  return resp;
}

}  // namespace wisp::token
