#include "exchanger.hpp"

#include <algorithm>
#include <sstream>

#include "trusted_issuer.hpp"
#include "wisp/log/log.hpp"

namespace wisp::token {
namespace {

std::vector<std::string> SplitScopes(const std::string& scope) {
  std::vector<std::string> out;
  std::istringstream in(scope);
  for (std::string s; in >> s;) out.push_back(s);
  return out;
}

// RFC 8693 2.1: resource is "an absolute URI, as specified by Section 4.3 of RFC 3986", which
// "MUST NOT include a fragment component": a scheme (a letter, then letters, digits, + - .), a
// colon and something after it, no '#', no spaces or control characters.
bool IsAbsoluteUriWithoutFragment(std::string_view s) {
  const size_t colon = s.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == s.size()) return false;
  const auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!alpha(s[0])) return false;
  for (size_t i = 1; i < colon; ++i) {
    const char c = s[i];
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.') return false;
  }
  for (const char c : s) {
    if (c == '#' || static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return false;
  }
  return true;
}

// `s` without the ASCII whitespace (space, \t, \n, \v, \f, \r) at its ends.
std::string_view TrimAsciiWhitespace(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

}  // namespace

Exchanger::Exchanger(const Reviewer& reviewer, const Issuer& issuer, const Policy& policy,
                     Clock& clock, TokenMetrics& metrics)
    : reviewer_(reviewer),
      issuer_(issuer),
      owned_policy_(std::make_unique<PolicyStore>(policy)),
      policy_(*owned_policy_),
      clock_(clock),
      metrics_(metrics) {}

Exchanger::Exchanger(const Reviewer& reviewer, const Issuer& issuer, const PolicyStore& policy,
                     Clock& clock, TokenMetrics& metrics)
    : reviewer_(reviewer), issuer_(issuer), policy_(policy), clock_(clock), metrics_(metrics) {}

absl::StatusOr<nlohmann::json> Exchanger::VerifySubject(std::string_view token,
                                                        const Policy& policy) const {
  auto decoded = jwt::Decode(token);
  if (!decoded.ok()) return decoded.status();
  const std::string iss = decoded->claims.value("iss", "");
  if (iss == issuer_.issuer()) {
    WISP_ASSIGN_OR_RETURN(auto v, reviewer_.Verify(token, policy.subject_audiences));
    return v.claims;
  }
  if (const TrustedIssuer* t = FindTrustedIssuer(policy, iss)) {
    WISP_ASSIGN_OR_RETURN(auto v, VerifyTrusted(*t, token, *decoded, t->audiences,
                                                clock_.NowUnixSeconds(), reviewer_.leeway()));
    return v.claims;
  }
  return absl::UnauthenticatedError("subject token issuer is not trusted");
}

v1::ExchangeResponse Exchanger::Exchange(const v1::ExchangeRequest& req) const {
  v1::ExchangeResponse resp;
  const auto fail = [&](std::string_view code, std::string description, int status = 400) {
    metrics_.Exchange(code).Increment();
    v1::ExchangeResponse r;
    r.set_error(std::string(code));
    r.set_error_description(std::move(description));
    r.set_http_status(status);
    if (!resp.subject().empty()) r.set_subject(resp.subject());
    return r;
  };
  if (req.grant_type().empty()) return fail("invalid_request", "grant_type is required");
  if (req.grant_type() != kGrantTokenExchange) {
    return fail("unsupported_grant_type", "grant_type must be " + std::string(kGrantTokenExchange));
  }
  // A token file written by `echo` ends in a newline, and clients that read a credential file
  // (google-auth-library's file credential source) send its content as it is: the whitespace at
  // the ends is not part of the token. Whitespace inside still fails (no JWS segment holds any).
  const std::string_view subject_token = TrimAsciiWhitespace(req.subject_token());
  if (subject_token.empty()) return fail("invalid_request", "subject_token is required");
  if (req.subject_token_type() != kTokenTypeJwt && req.subject_token_type() != kTokenTypeIdToken) {
    return fail("invalid_request", "subject_token_type must be " + std::string(kTokenTypeJwt));
  }
  if (!req.requested_token_type().empty() && req.requested_token_type() != kTokenTypeAccessToken) {
    return fail("invalid_request",
                "requested_token_type must be " + std::string(kTokenTypeAccessToken));
  }
  // The target service: audience (a logical name) and/or resource (RFC 8693 2.1, an absolute URI).
  // Both become the access token's aud, and the exchange policy must allow each like an audience.
  if (!req.resource().empty() && !IsAbsoluteUriWithoutFragment(req.resource())) {
    return fail("invalid_request", "resource must be an absolute URI without a fragment");
  }
  struct Target {
    const char* field;
    const std::string& value;
  };
  std::vector<Target> targets;
  if (!req.audience().empty()) targets.push_back({"audience", req.audience()});
  if (!req.resource().empty() && req.resource() != req.audience()) {
    targets.push_back({"resource", req.resource()});
  }
  if (targets.empty()) return fail("invalid_request", "audience or resource is required");

  const std::shared_ptr<const Policy> policy = policy_.Current();
  auto claims = VerifySubject(subject_token, *policy);
  if (!claims.ok()) {
    if (claims.status().code() == absl::StatusCode::kUnavailable) {
      // Not the client's fault: the issuer's keys are out of reach; retrying later may work.
      return fail("temporarily_unavailable", std::string(claims.status().message()), 503);
    }
    return fail("invalid_grant", "subject_token: " + std::string(claims.status().message()));
  }
  auto subject = SubjectFromClaims(*claims);
  if (!subject.ok()) {
    return fail("invalid_grant", "subject_token: " + std::string(subject.status().message()));
  }
  const std::string sub = claims->value("sub", "");
  const std::string subject_iss = claims->value("iss", "");
  resp.set_subject(subject_iss + " " + sub);

  const std::vector<std::string> scopes = SplitScopes(req.scope());
  std::vector<const ExchangeRule*> rules;  // the rules for this subject
  for (const auto& rule : policy->exchange_rules) {
    if (rule.namespace_name != "*" && rule.namespace_name != subject->namespace_()) continue;
    if (!Matches(rule.service_accounts, subject->service_account())) continue;
    rules.push_back(&rule);
  }
  for (const Target& t : targets) {
    const bool allowed = std::any_of(rules.begin(), rules.end(), [&](const ExchangeRule* r) {
      return Matches(r->audiences, t.value);
    });
    if (!allowed) {
      return fail("invalid_target",
                  std::string(t.field) + " \"" + t.value + "\" is not allowed for " + sub);
    }
  }
  bool targets_ok = false;
  const ExchangeRule* granted = nullptr;
  for (const ExchangeRule* rule : rules) {
    const bool all_targets = std::all_of(targets.begin(), targets.end(), [&](const Target& t) {
      return Matches(rule->audiences, t.value);
    });
    if (!all_targets) continue;
    targets_ok = true;
    bool all = true;
    for (const auto& s : scopes) all = all && Matches(rule->scopes, s);
    if (all) {
      granted = rule;
      break;
    }
  }
  if (!targets_ok) {
    return fail("invalid_target", "audience \"" + req.audience() + "\" and resource \"" +
                                      req.resource() + "\" are not allowed together for " + sub);
  }
  if (granted == nullptr) return fail("invalid_scope", "scope is not allowed for " + sub);

  nlohmann::json aud = nlohmann::json::array();
  for (const Target& t : targets) aud.push_back(t.value);
  nlohmann::json access = {
      {"sub", sub}, {"aud", std::move(aud)}, {"wisp.dev/subject_issuer", subject_iss}};
  if (!scopes.empty()) access["scope"] = req.scope();
  auto alg = issuer_.AlgorithmFor("");
  auto signed_token = issuer_.SignClaims(
      std::move(access), issuer_.Lifetime(policy->access_token_lifetime_seconds), *alg);
  if (!signed_token.ok()) {
    SPDLOG_LOGGER_ERROR(log::Get("exchange"), "signing access token: {}",
                        signed_token.status().ToString());
    return fail("server_error", "the access token could not be signed", 500);
  }
  metrics_.Exchange("ok").Increment();
  resp.set_access_token(std::move(signed_token->token));
  resp.set_issued_token_type(std::string(kTokenTypeAccessToken));
  resp.set_token_type("Bearer");
  resp.set_expires_in(signed_token->exp - signed_token->iat);
  resp.set_scope(req.scope());
  resp.set_http_status(200);
  return resp;
}

}  // namespace wisp::token
