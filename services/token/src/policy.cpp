#include "policy.hpp"

#include <algorithm>
#include <fstream>

#include <yaml-cpp/yaml.h>

#include "remote_jwks.hpp"
#include "upload_issuer.hpp"
#include "wisp/fsutil/read_file.hpp"

namespace wisp::token {
namespace {

absl::StatusOr<std::vector<std::string>> StringList(const YAML::Node& node,
                                                    const std::string& key) {
  std::vector<std::string> out;
  if (!node) return out;
  if (!node.IsSequence()) return absl::InvalidArgumentError(key + ": must be a list of strings");
  for (const auto& item : node) {
    if (!item.IsScalar() || item.Scalar().empty()) {
      return absl::InvalidArgumentError(key + ": every item must be a non-empty string");
    }
    out.push_back(item.Scalar());
  }
  return out;
}

absl::StatusOr<int64_t> Seconds(const YAML::Node& node, const std::string& key, int64_t def) {
  if (!node) return def;
  int64_t v = 0;
  if (!node.IsScalar() || !YAML::convert<int64_t>::decode(node, v)) {
    return absl::InvalidArgumentError(key + ": must be an integer number of seconds");
  }
  if (v < kMinExpirationSeconds || v > kMaxExpirationSeconds) {
    return absl::InvalidArgumentError(key + ": must be between 600 and 2^32 seconds");
  }
  return v;
}

absl::StatusOr<Policy> Parse(const YAML::Node& root) {
  Policy p;
  if (!root || root.IsNull()) return p;
  if (!root.IsMap()) return absl::InvalidArgumentError("policy: top level must be a mapping");
  WISP_ASSIGN_OR_RETURN(p.max_expiration_seconds,
                        Seconds(root["maxExpirationSeconds"], "maxExpirationSeconds", 86400));
  WISP_ASSIGN_OR_RETURN(p.default_audiences,
                        StringList(root["defaultAudiences"], "defaultAudiences"));
  if (const auto ns = root["namespaces"]; ns) {
    if (!ns.IsMap()) return absl::InvalidArgumentError("namespaces: must be a mapping");
    for (const auto& kv : ns) {
      const std::string name = kv.first.Scalar();
      const std::string key = "namespaces." + name;
      if (!kv.second.IsMap()) return absl::InvalidArgumentError(key + ": must be a mapping");
      NamespacePolicy np;
      WISP_ASSIGN_OR_RETURN(np.audiences, StringList(kv.second["audiences"], key + ".audiences"));
      WISP_ASSIGN_OR_RETURN(np.max_expiration_seconds, Seconds(kv.second["maxExpirationSeconds"],
                                                               key + ".maxExpirationSeconds", 0));
      p.namespaces.emplace(name, std::move(np));
    }
  }
  if (const auto ex = root["exchange"]; ex) {
    if (!ex.IsMap()) return absl::InvalidArgumentError("exchange: must be a mapping");
    WISP_ASSIGN_OR_RETURN(
        p.access_token_lifetime_seconds,
        Seconds(ex["accessTokenLifetimeSeconds"], "exchange.accessTokenLifetimeSeconds", 3600));
    WISP_ASSIGN_OR_RETURN(p.subject_audiences,
                          StringList(ex["subjectAudiences"], "exchange.subjectAudiences"));
    if (const auto rules = ex["rules"]; rules) {
      if (!rules.IsSequence()) return absl::InvalidArgumentError("exchange.rules: must be a list");
      for (size_t i = 0; i < rules.size(); ++i) {
        const std::string key = "exchange.rules[" + std::to_string(i) + "]";
        const auto r = rules[i];
        if (!r.IsMap() || !r["namespace"] || !r["namespace"].IsScalar()) {
          return absl::InvalidArgumentError(key + ".namespace: required");
        }
        ExchangeRule rule;
        rule.namespace_name = r["namespace"].Scalar();
        WISP_ASSIGN_OR_RETURN(rule.service_accounts,
                              StringList(r["serviceAccounts"], key + ".serviceAccounts"));
        if (rule.service_accounts.empty()) rule.service_accounts = {"*"};
        WISP_ASSIGN_OR_RETURN(rule.audiences, StringList(r["audiences"], key + ".audiences"));
        if (rule.audiences.empty()) {
          return absl::InvalidArgumentError(key + ".audiences: at least one is required");
        }
        WISP_ASSIGN_OR_RETURN(rule.scopes, StringList(r["scopes"], key + ".scopes"));
        p.exchange_rules.push_back(std::move(rule));
      }
    }
  }
  if (const auto ti = root["trustedIssuers"]; ti) {
    if (!ti.IsSequence()) return absl::InvalidArgumentError("trustedIssuers: must be a list");
    for (size_t i = 0; i < ti.size(); ++i) {
      const std::string key = "trustedIssuers[" + std::to_string(i) + "]";
      const auto t = ti[i];
      TrustedIssuer issuer;
      if (!t.IsMap() || !t["issuer"] || t["issuer"].Scalar().empty()) {
        return absl::InvalidArgumentError(key + ".issuer: required");
      }
      issuer.issuer = t["issuer"].Scalar();
      const auto scalar = [&](const char* name) -> absl::StatusOr<std::string> {
        const auto n = t[name];
        if (!n) return std::string();
        if (!n.IsScalar() || n.Scalar().empty()) {
          return absl::InvalidArgumentError(key + "." + name + ": must be a non-empty string");
        }
        return n.Scalar();
      };
      WISP_ASSIGN_OR_RETURN(issuer.jwks_file, scalar("jwksFile"));
      WISP_ASSIGN_OR_RETURN(issuer.jwks_url, scalar("jwksUrl"));
      WISP_ASSIGN_OR_RETURN(issuer.jwks_ca_file, scalar("jwksCaFile"));
      WISP_ASSIGN_OR_RETURN(issuer.jwks_bearer_token_file, scalar("jwksBearerTokenFile"));
      if (issuer.jwks_file.empty() == issuer.jwks_url.empty()) {
        return absl::InvalidArgumentError(
            key + ": give exactly one of jwksFile and jwksUrl" +
            (issuer.jwks_file.empty() ? " (neither is set)" : " (both are set)"));
      }
      WISP_ASSIGN_OR_RETURN(issuer.audiences, StringList(t["audiences"], key + ".audiences"));
      if (issuer.audiences.empty()) {
        return absl::InvalidArgumentError(key + ".audiences: at least one is required");
      }
      if (!issuer.jwks_url.empty()) {
        WISP_RETURN_IF_ERROR(ValidateHttpsUrl(issuer.jwks_url, key + ".jwksUrl"));
        if (!issuer.jwks_ca_file.empty() && !std::ifstream(issuer.jwks_ca_file)) {
          return absl::InvalidArgumentError(key + ".jwksCaFile: cannot read " +
                                            issuer.jwks_ca_file);
        }
        if (!issuer.jwks_bearer_token_file.empty() &&
            !std::ifstream(issuer.jwks_bearer_token_file)) {
          return absl::InvalidArgumentError(key + ".jwksBearerTokenFile: cannot read " +
                                            issuer.jwks_bearer_token_file);
        }
        if (const auto r = t["jwksRefreshSeconds"]; r) {
          int64_t v = 0;
          if (!r.IsScalar() || !YAML::convert<int64_t>::decode(r, v) || v < 10 || v > 86400) {
            return absl::InvalidArgumentError(
                key + ".jwksRefreshSeconds: must be an integer from 10 to 86400");
          }
          issuer.jwks_refresh_seconds = v;
        }
        p.trusted_issuers.push_back(std::move(issuer));
        continue;
      }
      if (!issuer.jwks_ca_file.empty() || !issuer.jwks_bearer_token_file.empty() ||
          t["jwksRefreshSeconds"]) {
        return absl::InvalidArgumentError(
            key + ": jwksCaFile, jwksBearerTokenFile and jwksRefreshSeconds apply to jwksUrl only");
      }
      auto jwks = fsutil::ReadFile(issuer.jwks_file);
      if (!jwks.ok()) {
        return absl::InvalidArgumentError(key + ".jwksFile: cannot read " +
                                          std::string(jwks.status().message()));
      }
      auto keys = jwt::KeySet::FromJwks(*jwks);
      if (!keys.ok()) {
        return absl::InvalidArgumentError(key +
                                          ".jwksFile: " + std::string(keys.status().message()));
      }
      issuer.keys = std::move(*keys);
      p.trusted_issuers.push_back(std::move(issuer));
    }
  }
  if (const auto is = root["issue"]; is) {
    if (!is.IsMap()) return absl::InvalidArgumentError("issue: must be a mapping");
    if (const auto r = is["requirePodProof"]; r) {
      if (!r.IsScalar() || !YAML::convert<bool>::decode(r, p.pod_proof.required)) {
        return absl::InvalidArgumentError("issue.requirePodProof: must be true or false");
      }
    }
    if (const auto a = is["podProofAudience"]; a) {
      if (!a.IsScalar() || a.Scalar().empty()) {
        return absl::InvalidArgumentError("issue.podProofAudience: must be a non-empty string");
      }
      p.pod_proof.audience = a.Scalar();
    }
    WISP_ASSIGN_OR_RETURN(p.pod_proof.issuers,
                          StringList(is["podProofIssuers"], "issue.podProofIssuers"));
    for (const auto& iss : p.pod_proof.issuers) {
      const bool known = std::any_of(p.trusted_issuers.begin(), p.trusted_issuers.end(),
                                     [&](const TrustedIssuer& t) { return t.issuer == iss; });
      if (!known) {
        return absl::InvalidArgumentError("issue.podProofIssuers: \"" + iss +
                                          "\" is not one of trustedIssuers[].issuer");
      }
    }
    if (p.pod_proof.required && p.pod_proof.issuers.empty()) {
      return absl::InvalidArgumentError(
          "issue.podProofIssuers: at least one is required when requirePodProof is true");
    }
  }
  return p;
}

}  // namespace

absl::StatusOr<Policy> Policy::FromYaml(std::string_view yaml) {
  try {
    return Parse(YAML::Load(std::string(yaml)));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(std::string("policy: YAML error: ") + e.what());
  }
}

absl::StatusOr<Policy> Policy::FromFile(const std::string& path) {
  auto text = fsutil::ReadFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError("policy-file: cannot read " +
                                      std::string(text.status().message()));
  }
  auto p = FromYaml(*text);
  if (!p.ok()) return Annotate(p.status(), "policy-file " + path);
  return p;
}

Policy Policy::Default() {
  Policy p;
  p.namespaces.emplace("*", NamespacePolicy{{"*"}, 0});
  return p;
}

const NamespacePolicy* Policy::ForNamespace(std::string_view ns) const {
  if (auto it = namespaces.find(ns); it != namespaces.end()) return &it->second;
  if (auto it = namespaces.find("*"); it != namespaces.end()) return &it->second;
  return nullptr;
}

int64_t Policy::LongestTokenSeconds() const {
  int64_t longest =
      std::max({max_expiration_seconds, access_token_lifetime_seconds, kUploadTokenMaxSeconds});
  for (const auto& [name, np] : namespaces) {
    longest = std::max(longest, std::min(np.max_expiration_seconds, max_expiration_seconds));
  }
  return longest;
}

bool Matches(const std::vector<std::string>& allowed, std::string_view value) {
  return std::any_of(allowed.begin(), allowed.end(),
                     [&](const std::string& a) { return a == "*" || a == value; });
}

}  // namespace wisp::token
