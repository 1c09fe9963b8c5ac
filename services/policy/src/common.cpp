// AdmissionInput, record keys, verdict helpers and the token rules several rules share.
#include <regex>
#include <string>

#include "rules_internal.hpp"
#include "wisp/k8s/objects.hpp"

namespace wisp::policy {

absl::StatusOr<AdmissionInput> AdmissionInput::FromCall(v1::AdmissionCall call, int64_t now_unix,
                                                        PodTree tree) {
  AdmissionInput in;
  in.call = std::move(call);
  in.now_unix = now_unix;
  const std::string& object_json = in.call.object_json();
  if (!object_json.empty()) {
    in.object_deferred = true;
    if (in.Is("", "Pod")) {
      WISP_ASSIGN_OR_RETURN(in.pod, ReadPodFacts(object_json, "object_json"));
    }
    if (!in.pod || tree == PodTree::kParse) WISP_RETURN_IF_ERROR(in.ParseObject());
  }
  if (!in.call.old_object_json().empty()) {
    WISP_ASSIGN_OR_RETURN(in.old_object,
                          k8s::ParseJson(in.call.old_object_json(), "old_object_json"));
    if (!in.old_object.is_object()) {
      return absl::InvalidArgumentError("old_object_json is not an object");
    }
  }
  return in;
}

absl::Status AdmissionInput::ParseObject() {
  if (!object_deferred) return absl::OkStatus();
  object_deferred = false;
  WISP_ASSIGN_OR_RETURN(object, k8s::ParseJson(call.object_json(), "object_json"));
  if (!object.is_object()) return absl::InvalidArgumentError("object_json is not an object");
  return absl::OkStatus();
}

std::string AdmissionInput::Namespace() const {
  if (!call.namespace_().empty()) return call.namespace_();
  std::string ns = pod ? pod->namespace_name : k8s::GetString(object, {"metadata", "namespace"});
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

std::string SourceRecordKey(std::string_view ns, std::string_view kind, std::string_view name) {
  return std::string(ns) + "." + std::string(kind) + "." + std::string(name);
}

v1::AdmissionVerdict ToProto(const Verdict& verdict) {
  v1::AdmissionVerdict out;
  out.set_allowed(verdict.allowed);
  out.set_patch(verdict.patch);
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

bool IsVirtLauncherPod(const AdmissionInput& in) {
  const std::string* app = in.pod ? in.pod->Label("kubevirt.io") : nullptr;
  return in.Is("", "Pod") && app != nullptr && *app == "virt-launcher";
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

namespace {

// distribution/reference's grammar (reference.go / regexp.go).
const std::regex& ReferenceRegex() {
  static const std::string kDomainComponent = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
  static const std::string kHost =
      "(?:" + kDomainComponent + "(?:\\." + kDomainComponent + ")*|\\[[a-fA-F0-9:]+\\])";
  static const std::string kDomain = kHost + "(?::[0-9]+)?";
  static const std::string kAlnum = "[a-z0-9]+";
  static const std::string kPathComponent = kAlnum + "(?:(?:[._]|__|[-]+)" + kAlnum + ")*";
  static const std::string kName =
      "(?:" + kDomain + "/)?" + kPathComponent + "(?:/" + kPathComponent + ")*";
  static const std::string kTag = "[\\w][\\w.-]{0,127}";
  static const std::string kDigest =
      "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
  static const std::regex kRe("^(" + kName + ")(?::(" + kTag + "))?(?:@(" + kDigest + "))?$");
  return kRe;
}

std::string ToLower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The reason distribution/reference gives, "" when valid.
std::string ReferenceError(const std::string& s) {
  // Before any regex (std::regex_match recurses per character): distribution's own limits are
  // 255 characters of repository name and 128 of tag, plus a domain and a digest.
  if (s.size() > 1024) {
    return "invalid reference format: " + std::to_string(s.size()) +
           " characters, more than an image reference can hold (1024)";
  }
  static const std::regex kHex64("^[a-f0-9]{64}$");
  if (std::regex_match(s, kHex64)) {
    return "invalid repository name (" + s + "), cannot specify 64-byte hexadecimal strings";
  }
  // splitDockerDomain, then the lower-case check on the repository path.
  size_t slash = s.find('/');
  std::string domain;
  std::string remainder;
  if (slash == std::string::npos ||
      (s.substr(0, slash).find_first_of(".:") == std::string::npos &&
       s.substr(0, slash) != "localhost" && ToLower(s.substr(0, slash)) == s.substr(0, slash))) {
    domain = "docker.io";
    remainder = s;
  } else {
    domain = s.substr(0, slash);
    remainder = s.substr(slash + 1);
  }
  if (domain == "index.docker.io") domain = "docker.io";
  if (domain == "docker.io" && remainder.find('/') == std::string::npos) {
    remainder = "library/" + remainder;
  }
  std::string remote = remainder.substr(0, remainder.find(':'));
  if (ToLower(remote) != remote) {
    return "invalid reference format: repository name (" + remote + ") must be lowercase";
  }
  const std::string full = domain + "/" + remainder;
  std::smatch m;
  if (!std::regex_match(full, m, ReferenceRegex())) {
    if (s.empty()) return "repository name must have at least one component";
    std::string lower = ToLower(full);
    if (std::regex_match(lower, ReferenceRegex())) return "repository name must be lowercase";
    return "invalid reference format";
  }
  if (m[1].length() > 255) return "repository name must not be more than 255 characters";
  if (m[3].matched) {
    std::string digest = m[3].str();
    size_t colon = digest.find(':');
    std::string algorithm = digest.substr(0, colon);
    std::string encoded = digest.substr(colon + 1);
    size_t size = algorithm == "sha256"   ? 64
                  : algorithm == "sha384" ? 96
                  : algorithm == "sha512" ? 128
                                          : 0;
    if (size == 0) return "unsupported digest algorithm";
    if (encoded.size() != size) return "invalid checksum digest length";
    if (encoded.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return "invalid checksum digest format";
    }
  }
  return "";
}

}  // namespace

std::string ImageNameError(const std::string& image) {
  std::string reason =
      image.empty() ? "repository name must have at least one component" : ReferenceError(image);
  if (reason.empty()) return "";
  return "couldn't parse image name " + k8s::Quote(image) + ": " + reason;
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
  // Kubernetes does not repeat the '..' error for a path such as "../x", but does for "..".
  if (path.rfind("..", 0) == 0 && path.rfind("../", 0) != 0) {
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
