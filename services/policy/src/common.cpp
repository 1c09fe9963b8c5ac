// AdmissionInput, record keys, verdict helpers and the token rules several rules share.
#include <string>

#include "policy/src/rules_internal.hpp"
#include "wisp/k8s/objects.hpp"

namespace wisp::policy {

absl::StatusOr<AdmissionInput> AdmissionInput::FromCall(const v1::AdmissionCall& call,
                                                        int64_t now_unix) {
  AdmissionInput in;
  in.call = call;
  in.now_unix = now_unix;
  if (!call.object_json().empty()) {
    WISP_ASSIGN_OR_RETURN(in.object, k8s::ParseJson(call.object_json(), "object_json"));
    if (!in.object.is_object()) return absl::InvalidArgumentError("object_json is not an object");
  }
  if (!call.old_object_json().empty()) {
    WISP_ASSIGN_OR_RETURN(in.old_object, k8s::ParseJson(call.old_object_json(), "old_object_json"));
    if (!in.old_object.is_object()) {
      return absl::InvalidArgumentError("old_object_json is not an object");
    }
  }
  return in;
}

std::string AdmissionInput::Namespace() const {
  if (!call.namespace_().empty()) return call.namespace_();
  std::string ns = k8s::GetString(object, {"metadata", "namespace"});
  if (ns.empty()) ns = k8s::GetString(old_object, {"metadata", "namespace"});
  return ns;
}

std::string AdmissionInput::Name() const {
  if (!call.name().empty()) return call.name();
  std::string name = k8s::GetString(object, {"metadata", "name"});
  if (name.empty()) name = k8s::GetString(old_object, {"metadata", "name"});
  if (name.empty()) name = k8s::GetString(object, {"metadata", "generateName"});
  return name;
}

bool AdmissionInput::Is(std::string_view group, std::string_view kind) const {
  return call.kind().group() == group && call.kind().kind() == kind;
}

std::string VmiRecordKey(std::string_view ns, std::string_view vmi) {
  return std::string(ns) + "." + std::string(vmi);
}

std::string SourceRecordKey(std::string_view ns, std::string_view kind, std::string_view name) {
  return std::string(ns) + "." + std::string(kind) + "." + std::string(name);
}

v1::AdmissionVerdict ToProto(const Verdict& verdict) {
  v1::AdmissionVerdict out;
  out.set_allowed(verdict.allowed);
  if (!verdict.patch.empty()) out.set_patch(verdict.patch.dump());
  for (const auto& w : verdict.warnings) out.add_warnings(w);
  out.set_message(verdict.message);
  out.set_code(verdict.code);
  out.set_reason(verdict.reason);
  for (const auto& [k, v] : verdict.audit_annotations) (*out.mutable_audit_annotations())[k] = v;
  for (const auto& [k, v] : verdict.rule_outcomes) (*out.mutable_rule_outcomes())[k] = v;
  return out;
}

namespace internal {

std::string JoinCauses(const std::vector<std::string>& causes) {
  std::string out;
  for (const auto& c : causes) {
    if (!out.empty()) out += ", ";
    out += c;
  }
  return out;
}

Verdict Deny(std::string_view rule, const std::vector<std::string>& causes, int32_t code,
             std::string reason) {
  Verdict v;
  v.allowed = false;
  v.message = JoinCauses(causes);
  v.code = code;
  v.reason = std::move(reason);
  v.rule_outcomes[std::string(rule)] = std::string(kOutcomeDenied);
  return v;
}

Verdict Outcome(std::string_view rule, std::string_view outcome) {
  Verdict v;
  v.rule_outcomes[std::string(rule)] = std::string(outcome);
  return v;
}

std::string Index(const std::string& base, size_t i) {
  return base + "[" + std::to_string(i) + "]";
}

std::string AudienceForbidden(const std::string& fld, const std::string& audience,
                              const std::string& ns, const Policy& policy) {
  std::string allowed;
  if (const auto* list = AllowedAudiences(policy, ns)) {
    for (const auto& a : *list) {
      if (!allowed.empty()) allowed += ", ";
      allowed += k8s::Quote(a);
    }
  }
  return fld + ": Forbidden: audience " + k8s::Quote(audience) + " is not allowed in namespace " +
         k8s::Quote(ns) + " (allowed: " + (allowed.empty() ? "none" : allowed) + ")";
}

void ValidateLifetime(int64_t seconds, const std::string& fld, const Policy& policy,
                      std::vector<std::string>& causes) {
  const std::string prefix = fld + ": Invalid value: " + std::to_string(seconds) + ": ";
  if (seconds < 600) {
    causes.push_back(prefix + "may not specify a duration less than 10 minutes");
  } else if (seconds > (int64_t{1} << 32)) {
    causes.push_back(prefix + "may not specify a duration larger than 2^32 seconds");
  } else if (seconds > policy.max_token_lifetime_seconds) {
    causes.push_back(prefix + "may not specify a duration larger than the policy's maximum " +
                     "token lifetime of " + std::to_string(policy.max_token_lifetime_seconds) +
                     " seconds");
  }
}

void ValidateTokenPath(const std::string& path, const std::string& fld,
                       std::vector<std::string>& causes) {
  const std::string prefix = fld + ": Invalid value: " + k8s::Quote(path) + ": ";
  if (!path.empty() && path[0] == '/') causes.push_back(prefix + "must be a relative path");
  bool backstep = false;
  bool long_element = false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string_view element(path.data() + start, end - start);
    if (element == "..") backstep = true;
    if (element.size() > 255) long_element = true;
    start = end + 1;
  }
  if (backstep) causes.push_back(prefix + "must not contain '..'");
  // Kubernetes does not repeat the '..' error for a path such as "../x".
  if (path.rfind("..", 0) == 0 && path.rfind("../", 0) != 0 && path != "..") {
    causes.push_back(prefix + "must not start with '..'");
  }
  if (path.size() > 4096) causes.push_back(fld + ": must be less than or equal to 4096 characters");
  if (long_element) {
    causes.push_back(fld + ": filenames must be less than or equal to 255 characters");
  }
}

void ValidateServiceAccountToken(const k8s::Json& token, const std::string& fld,
                                 const std::string& path_field, const Policy& policy,
                                 const std::string& ns, std::vector<std::string>& causes) {
  if (!token.is_object()) {
    causes.push_back(fld + ": Invalid value: must be an object");
    return;
  }
  if (auto it = token.find("expirationSeconds"); it != token.end() && !it->is_null()) {
    if (!it->is_number_integer()) {
      causes.push_back(fld + ".expirationSeconds: Invalid value: " + it->dump() +
                       ": must be an integer");
    } else {
      ValidateLifetime(it->get<int64_t>(), fld + ".expirationSeconds", policy, causes);
    }
  }
  const k8s::Json* path = k8s::Find(token, {"path"});
  std::string p = path != nullptr && path->is_string() ? path->get<std::string>() : "";
  if (p.empty()) {
    causes.push_back(path_field + ": Required value");
  } else {
    ValidateTokenPath(p, fld + ".path", causes);
  }
  std::string audience = k8s::GetString(token, {"audience"});
  if (!AudienceAllowed(policy, ns, audience)) {
    causes.push_back(AudienceForbidden(fld + ".audience", audience, ns, policy));
  }
}

}  // namespace internal
}  // namespace wisp::policy
