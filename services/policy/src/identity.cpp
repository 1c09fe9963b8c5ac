// Rule g: SDK wiring presets (aws, azure, gcp, generic) and wisp.dev/tokens, several tokens per
// pod (issue 25 items 1 and 2). Each token is an inline csi.wisp.dev volume mounted into the
// chosen containers only; the environment each SDK reads points at it.
//
// Facts from upstream (names, paths, defaults): amazon-eks-pod-identity-webhook (pkg/handler,
// pkg/cache, pkg/annotations.go, main.go's flags), azure-workload-identity (pkg/webhook/consts.go,
// webhook.go), Google's external-account credential configuration.
#include <algorithm>
#include <regex>
#include <set>

#include "rules_internal.hpp"
#include "wisp/k8s/objects.hpp"

namespace wisp::policy {
namespace {

using internal::Deny;
using internal::Outcome;
using Json = k8s::Json;
using Shape = PodFacts::Shape;

constexpr std::string_view kRule = kRuleIdentityPresets;

// amazon-eks-pod-identity-webhook.
constexpr std::string_view kAwsRoleArn = "eks.amazonaws.com/role-arn";
constexpr std::string_view kAwsAudience = "eks.amazonaws.com/audience";
constexpr std::string_view kAwsRegionalSts = "eks.amazonaws.com/sts-regional-endpoints";
constexpr std::string_view kAwsTokenExpiration = "eks.amazonaws.com/token-expiration";
constexpr std::string_view kAwsSkipContainers = "eks.amazonaws.com/skip-containers";
constexpr std::string_view kAwsVolume = "aws-iam-token";
constexpr std::string_view kAwsMountPath = "/var/run/secrets/eks.amazonaws.com/serviceaccount";
// azure-workload-identity.
constexpr std::string_view kAzureUseLabel = "azure.workload.identity/use";
constexpr std::string_view kAzureClientId = "azure.workload.identity/client-id";
constexpr std::string_view kAzureTenantId = "azure.workload.identity/tenant-id";
constexpr std::string_view kAzureTokenExpiration =
    "azure.workload.identity/service-account-token-expiration";
constexpr std::string_view kAzureSkipContainers = "azure.workload.identity/skip-containers";
constexpr std::string_view kAzureVolume = "azure-identity-token";
constexpr std::string_view kAzureMountPath = "/var/run/secrets/azure/tokens";
constexpr std::string_view kAzureTokenFile = "azure-identity-token";
constexpr int64_t kAzureMinExpiration = 3600;
constexpr int64_t kAzureMaxExpiration = 86400;
// gcp and generic (wisp's own).
constexpr std::string_view kGcpVolume = "wisp-gcp-token";
constexpr std::string_view kGcpMountPath = "/var/run/secrets/wisp/gcp";
constexpr std::string_view kGcpCredentialFile = "credential-configuration.json";
constexpr std::string_view kGenericVolume = "wisp-identity-token";
constexpr std::string_view kGenericMountPath = "/var/run/secrets/wisp/identity";
constexpr std::string_view kTokenVolumePrefixId = "wisp-id-";

const std::regex& RoleArnRegex() {
  // The webhook's own check (pkg/cache/cache.go), which it only logs; wisp refuses.
  static const std::regex r(R"(^arn:aws[a-z0-9-]*:iam::\d{12}:role\/[\w\-\/.@+=,]+$)");
  return r;
}
const std::regex& GuidRegex() {
  static const std::regex r(
      "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$");
  return r;
}
const std::regex& GcpProviderRegex() {
  static const std::regex r(
      R"(^//iam\.googleapis\.com/projects/[0-9]+/locations/global/workloadIdentityPools/)"
      R"([a-z0-9-]+/providers/[a-z0-9-]+$)");
  return r;
}
const std::regex& EnvNameRegex() {
  static const std::regex r("^[-._a-zA-Z][-._a-zA-Z0-9]*$");
  return r;
}

// std::regex_match recurses once per character (libstdc++): a 200 KiB annotation, which the
// apiserver allows (256 KiB for all of them), overflows the stack. Every value is held to its
// format's own length before a regex sees it; `why` then says which limit it broke.
bool Matches(const std::string& value, const std::regex& re, size_t max_length, std::string* why) {
  if (value.size() > max_length) {
    *why = " (at most " + std::to_string(max_length) + " characters, got " +
           std::to_string(value.size()) + ")";
    return false;
  }
  why->clear();
  return std::regex_match(value, re);
}

// An annotation's value and the field a message names.
struct Found {
  std::string value;
  std::string field;
};

// Where the rule reads its settings: the pod's annotations first, then its ServiceAccount's (from
// the gateway, AdmissionCall.service_account_annotations).
class Settings {
 public:
  Settings(const PodFacts& pod, const v1::AdmissionCall& call, std::string ns)
      : pod_(pod), call_(call), ns_(std::move(ns)) {
    sa_name_ = pod.service_account_name.empty() ? "default" : pod.service_account_name;
  }
  std::optional<Found> FromPod(std::string_view key) const {
    if (const std::string* v = pod_.Annotation(key)) {
      return Found{*v, "metadata.annotations[" + std::string(key) + "]"};
    }
    return std::nullopt;
  }
  std::optional<Found> FromServiceAccount(std::string_view key) const {
    if (!call_.service_account_found()) return std::nullopt;
    auto it = call_.service_account_annotations().find(std::string(key));
    if (it == call_.service_account_annotations().end()) return std::nullopt;
    return Found{it->second, "ServiceAccount " + ns_ + "/" + sa_name_ + " metadata.annotations[" +
                                 std::string(key) + "]"};
  }
  // The pod's annotation, else the ServiceAccount's.
  std::optional<Found> Get(std::string_view key) const {
    if (auto f = FromPod(key)) return f;
    return FromServiceAccount(key);
  }
  const std::string& service_account() const { return sa_name_; }

 private:
  const PodFacts& pod_;
  const v1::AdmissionCall& call_;
  std::string ns_;
  std::string sa_name_;
};

// A value as a message quotes it: at most 256 characters of it.
std::string Shorten(const std::string& value) {
  if (value.size() <= 256) return value;
  size_t cut = 256;  // not inside a UTF-8 sequence: the message must stay valid UTF-8
  while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) --cut;
  return value.substr(0, cut) + "...";
}

std::string Invalid(const Found& f, const std::string& why) {
  return f.field + ": Invalid value: " + k8s::Quote(Shorten(f.value)) + ": " + why;
}

// One token: a csi.wisp.dev volume, where the chosen containers mount it, and the environment.
struct TokenPlan {
  std::string volume;
  std::string audience;
  int64_t expiration_seconds = 3600;
  std::string mount_path;
  std::string file = "token";
  std::string field;  // what asked for it, for messages
  // Groups of variables: a group is added to a container only when it has none of its names (the
  // IRSA webhook's rule: a container that sets AWS_ROLE_ARN itself keeps its own pair).
  std::vector<std::vector<std::pair<std::string, std::string>>> env;
  std::vector<std::string> containers;  // names, in the pod's order
  std::vector<std::pair<std::string, std::string>> extra_attributes;
};

std::string TokenFile(const TokenPlan& t) { return t.mount_path + "/" + t.file; }

// "a, b" (IRSA reads a CSV record; azure splits on ';'): names trimmed, empties dropped.
std::vector<std::string> SplitNames(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    std::string name = text.substr(start, end - start);
    const auto b = name.find_first_not_of(" \t");
    const auto e = name.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(name.substr(b, e - b + 1));
    start = end + 1;
  }
  return out;
}

// The expiration annotation (an integer of seconds) or `fallback`, capped at maxTokenLifetime
// when it is the default.
std::optional<int64_t> Lifetime(const std::optional<Found>& f, int64_t fallback,
                                const Policy& policy, std::vector<std::string>& causes) {
  if (!f) return std::min(fallback, policy.max_token_lifetime_seconds);
  const std::string& v = f->value;
  if (v.empty() || v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos) {
    causes.push_back(Invalid(*f, "must be a whole number of seconds"));
    return std::nullopt;
  }
  const int64_t seconds = std::stoll(v);
  const size_t before = causes.size();
  internal::ValidateLifetime(seconds, f->field, policy, causes);
  if (causes.size() != before) return std::nullopt;
  return seconds;
}

class Planner {
 public:
  Planner(const AdmissionInput& in, const PodFacts& pod, const Policy& policy)
      : pod_(pod), policy_(policy), ns_(in.Namespace()), settings_(pod, in.call, ns_) {
    for (const auto* list : {&pod.init_containers, &pod.containers}) {
      for (const auto& c : *list) names_.push_back(c.name);
    }
  }

  std::vector<std::string>& causes() { return causes_; }
  std::vector<std::string>& warnings() { return warnings_; }
  std::vector<TokenPlan>& plans() { return plans_; }
  const std::string& preset() const { return preset_; }
  const std::string& preset_from() const { return preset_from_; }

  // Which preset applies, and from where; "" when none.
  void ChoosePreset() {
    std::optional<Found> named = settings_.Get(kPresetAnnotation);
    if (named) {
      static const std::set<std::string> kPresets = {"aws", "azure", "gcp", "generic"};
      if (kPresets.count(named->value) == 0) {
        causes_.push_back(
            Invalid(*named, "unknown preset; must be one of aws, azure, gcp, generic"));
        return;
      }
      preset_ = named->value;
      preset_from_ = named->field;
      return;
    }
    if (!policy_.presets.upstream_annotations) return;
    if (auto arn = settings_.Get(kAwsRoleArn)) {
      preset_ = "aws";
      preset_from_ = arn->field;
    } else if (const std::string* use = pod_.Label(kAzureUseLabel); use != nullptr) {
      if (*use == "true") {
        preset_ = "azure";
        preset_from_ = "metadata.labels[" + std::string(kAzureUseLabel) + "]";
      }
    }
  }

  void PlanPreset() {
    if (preset_ == "aws") {
      PlanAws();
    } else if (preset_ == "azure") {
      PlanAzure();
    } else if (preset_ == "gcp") {
      PlanGcp();
    } else if (preset_ == "generic") {
      PlanGeneric();
    }
  }

  // wisp.dev/tokens: [{"name","audience","expirationSeconds","mountPath","path","containers",
  // "env"}], from the pod, else from the ServiceAccount.
  void PlanTokens() {
    std::optional<Found> f = settings_.Get(kTokensAnnotation);
    if (!f) return;
    auto doc = k8s::ParseJson(f->value, f->field);
    if (!doc.ok() || !doc->is_array()) {
      causes_.push_back(Invalid(*f, "must be a JSON array of token requests"));
      return;
    }
    static const std::set<std::string> kKeys = {
        "name", "audience", "expirationSeconds", "mountPath", "path", "containers", "env"};
    std::set<std::string> seen_names;
    for (size_t i = 0; i < doc->size(); ++i) {
      const Json& t = (*doc)[i];
      const std::string fld = f->field + "[" + std::to_string(i) + "]";
      if (!t.is_object()) {
        causes_.push_back(fld + ": Invalid value: must be an object");
        continue;
      }
      bool ok = true;
      for (const auto& [key, value] : t.items()) {
        if (kKeys.count(key) == 0) {
          causes_.push_back(fld + "." + key + ": Unsupported value: unknown field; known: name, " +
                            "audience, expirationSeconds, mountPath, path, containers, env");
          ok = false;
        }
      }
      auto str = [&](const char* key, std::string* out, bool required) {
        auto it = t.find(key);
        if (it == t.end()) {
          if (required) {
            causes_.push_back(fld + "." + key + ": Required value");
            ok = false;
          }
          return;
        }
        if (!it->is_string() || it->get<std::string>().empty()) {
          causes_.push_back(fld + "." + key + ": Invalid value: must be a non-empty string");
          ok = false;
          return;
        }
        *out = it->get<std::string>();
      };
      TokenPlan plan;
      std::string name;
      std::string env;
      str("name", &name, true);
      str("audience", &plan.audience, true);
      str("mountPath", &plan.mount_path, true);
      str("path", &plan.file, false);
      str("env", &env, false);
      if (!ok) continue;
      plan.field = fld;
      const std::string volume = std::string(kTokenVolumePrefixId) + name;
      static const std::regex kLabel("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
      if (volume.size() > 63 || !std::regex_match(volume, kLabel)) {
        causes_.push_back(fld + ".name: Invalid value: " + k8s::Quote(name) + ": the volume name " +
                          k8s::Quote(volume) +
                          " must be a DNS-1123 label (lower case alphanumerics and '-', at most "
                          "63 characters)");
        ok = false;
      }
      if (!seen_names.insert(name).second) {
        causes_.push_back(fld + ".name: Duplicate value: " + k8s::Quote(name));
        ok = false;
      }
      plan.volume = volume;
      if (plan.mount_path.front() != '/') {
        causes_.push_back(fld + ".mountPath: Invalid value: " + k8s::Quote(plan.mount_path) +
                          ": must be an absolute path");
        ok = false;
      }
      if (plan.file.find('/') != std::string::npos) {
        causes_.push_back(fld + ".path: Invalid value: " + k8s::Quote(plan.file) +
                          ": must be a file name without '/'");
        ok = false;
      } else {
        const size_t before = causes_.size();
        internal::ValidateTokenPath(plan.file, fld + ".path", causes_);
        ok = ok && causes_.size() == before;
      }
      if (!env.empty()) {
        std::string why;
        if (!Matches(env, EnvNameRegex(), 256, &why)) {
          causes_.push_back(fld + ".env: Invalid value: " + k8s::Quote(Shorten(env)) +
                            ": must be a valid environment variable name" + why);
          ok = false;
        }
      }
      plan.expiration_seconds = std::min<int64_t>(3600, policy_.max_token_lifetime_seconds);
      if (auto it = t.find("expirationSeconds"); it != t.end()) {
        if (!it->is_number_integer()) {
          causes_.push_back(fld + ".expirationSeconds: Invalid value: must be an integer");
          ok = false;
        } else {
          const size_t before = causes_.size();
          internal::ValidateLifetime(it->get<int64_t>(), fld + ".expirationSeconds", policy_,
                                     causes_);
          ok = ok && causes_.size() == before;
          plan.expiration_seconds = it->get<int64_t>();
        }
      }
      std::optional<std::vector<std::string>> allow;
      if (auto it = t.find("containers"); it != t.end()) {
        if (!it->is_array()) {
          causes_.push_back(fld + ".containers: Invalid value: must be a list of container names");
          ok = false;
        } else {
          allow.emplace();
          for (size_t j = 0; j < it->size(); ++j) {
            const Json& c = (*it)[j];
            const std::string cf = fld + ".containers[" + std::to_string(j) + "]";
            if (!c.is_string()) {
              causes_.push_back(cf + ": Invalid value: must be a container name");
              ok = false;
            } else if (!HasContainer(c.get<std::string>())) {
              causes_.push_back(cf + ": Not found: " + k8s::Quote(c.get<std::string>()) +
                                ": the pod has no container or init container of that name");
              ok = false;
            } else {
              allow->push_back(c.get<std::string>());
            }
          }
        }
      }
      if (!ok) continue;
      if (!env.empty()) plan.env.push_back({{env, TokenFile(plan)}});
      CheckAudience(plan.audience, fld + ".audience");
      plan.containers = Choose(allow, {});
      plans_.push_back(std::move(plan));
    }
  }

  // Mount paths and volume names may not collide between the tokens.
  void CheckCollisions() {
    for (size_t i = 0; i < plans_.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (plans_[i].mount_path == plans_[j].mount_path) {
          causes_.push_back(plans_[i].field +
                            ".mountPath: Duplicate value: " + k8s::Quote(plans_[i].mount_path) +
                            " is where " + plans_[j].field + " is mounted");
        }
        if (plans_[i].volume == plans_[j].volume) {
          causes_.push_back(plans_[i].field + ": Duplicate value: volume " +
                            k8s::Quote(plans_[i].volume) + " is " + plans_[j].field + "'s");
        }
      }
    }
  }

 private:
  bool HasContainer(const std::string& name) const {
    return std::find(names_.begin(), names_.end(), name) != names_.end();
  }

  void CheckAudience(const std::string& audience, const std::string& field) {
    if (!AudienceAllowed(policy_, ns_, audience)) {
      causes_.push_back(internal::AudienceForbidden(field, audience, ns_, policy_));
    }
  }

  // The containers (init first, in the pod's order) a token goes to: the allow-list's (all when
  // none; wisp's own sidecar only when named), less those the skip-lists name. A skip-list may
  // name containers the pod does not have (the upstream webhooks ignore them); a warning says so.
  std::vector<std::string> Choose(const std::optional<std::vector<std::string>>& allow,
                                  const std::vector<std::pair<std::string_view, char>>& skips) {
    std::set<std::string> skipped;
    std::vector<std::pair<std::string_view, char>> all = skips;
    all.emplace_back(kSkipContainersAnnotation, ',');
    for (const auto& [key, sep] : all) {
      auto f = settings_.FromPod(key);
      if (!f) continue;
      for (const auto& name : SplitNames(f->value, sep)) {
        if (!HasContainer(name)) {
          warnings_.push_back("wisp: " + f->field + " names " + k8s::Quote(name) +
                              ", which is not a container of this pod");
        }
        skipped.insert(name);
      }
    }
    std::vector<std::string> out;
    for (const auto& name : names_) {
      if (skipped.count(name) > 0) continue;
      if (allow) {
        if (std::find(allow->begin(), allow->end(), name) == allow->end()) continue;
      } else if (name == kSidecarName) {
        continue;
      }
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    }
    return out;
  }

  // wisp.dev/containers (pod): the preset's allow-list.
  std::optional<std::vector<std::string>> PresetAllowList() {
    auto f = settings_.FromPod(kContainersAnnotation);
    if (!f) return std::nullopt;
    std::vector<std::string> names = SplitNames(f->value, ',');
    bool ok = !names.empty();
    if (names.empty()) causes_.push_back(Invalid(*f, "must name at least one container"));
    for (const auto& name : names) {
      if (!HasContainer(name)) {
        causes_.push_back(
            Invalid(*f, "the pod has no container or init container named " + k8s::Quote(name)));
        ok = false;
      }
    }
    if (!ok) return std::vector<std::string>{};
    return names;
  }

  TokenPlan Preset(std::string_view volume, std::string_view mount_path, std::string_view file) {
    TokenPlan plan;
    plan.volume = volume;
    plan.mount_path = mount_path;
    plan.file = file;
    plan.field = "the " + preset_ + " preset (" + preset_from_ + ")";
    return plan;
  }

  void PlanAws() {
    const IdentityPresets& p = policy_.presets;
    TokenPlan plan = Preset(kAwsVolume, kAwsMountPath, "token");
    auto arn = settings_.Get(kAwsRoleArn);
    if (!arn) {
      causes_.push_back(plan.field + ": Required value: the aws preset needs annotation " +
                        k8s::Quote(kAwsRoleArn) + " on the pod or on ServiceAccount " + ns_ + "/" +
                        settings_.service_account());
      return;
    }
    if (std::string why; !Matches(arn->value, RoleArnRegex(), 2048, &why)) {
      causes_.push_back(Invalid(
          *arn,
          "must be an IAM role ARN, arn:<partition>:iam::<12-digit account>:role/<name>" + why));
    }
    plan.audience = p.aws_audience;
    if (auto a = settings_.Get(kAwsAudience)) {
      if (a->value.empty()) causes_.push_back(Invalid(*a, "must not be empty"));
      plan.audience = a->value;
    }
    CheckAudience(plan.audience, plan.field + " audience");
    bool regional = p.aws_sts_regional_endpoints;
    if (auto r = settings_.Get(kAwsRegionalSts)) {
      // Go's strconv.ParseBool, which the webhook uses.
      static const std::set<std::string> kTrue = {"1", "t", "T", "TRUE", "true", "True"};
      static const std::set<std::string> kFalse = {"0", "f", "F", "FALSE", "false", "False"};
      if (kTrue.count(r->value) > 0) {
        regional = true;
      } else if (kFalse.count(r->value) > 0) {
        regional = false;
      } else {
        causes_.push_back(Invalid(*r, "must be true or false"));
      }
    }
    // The pod's annotation wins over the ServiceAccount's, as in the webhook.
    auto lifetime =
        Lifetime(settings_.Get(kAwsTokenExpiration), p.aws_expiration_seconds, policy_, causes_);
    if (lifetime) plan.expiration_seconds = *lifetime;
    plan.env.push_back(
        {{"AWS_ROLE_ARN", arn->value}, {"AWS_WEB_IDENTITY_TOKEN_FILE", TokenFile(plan)}});
    if (regional) plan.env.push_back({{"AWS_STS_REGIONAL_ENDPOINTS", "regional"}});
    if (!p.aws_region.empty()) {
      plan.env.push_back({{"AWS_DEFAULT_REGION", p.aws_region}, {"AWS_REGION", p.aws_region}});
    }
    plan.containers = Choose(PresetAllowList(), {{kAwsSkipContainers, ','}});
    plans_.push_back(std::move(plan));
  }

  void PlanAzure() {
    const IdentityPresets& p = policy_.presets;
    TokenPlan plan = Preset(kAzureVolume, kAzureMountPath, kAzureTokenFile);
    plan.audience = p.azure_audience;
    CheckAudience(plan.audience, plan.field + " audience");
    std::string client_id;
    if (auto c = settings_.Get(kAzureClientId)) {
      if (std::string why; !Matches(c->value, GuidRegex(), 36, &why)) {
        causes_.push_back(Invalid(*c, "must be an application (client) ID, a GUID" + why));
      }
      client_id = c->value;
    } else {
      warnings_.push_back("wisp: no " + k8s::Quote(kAzureClientId) + " on ServiceAccount " + ns_ +
                          "/" + settings_.service_account() + ", so AZURE_CLIENT_ID is not set");
    }
    std::string tenant_id = p.azure_tenant_id;
    if (auto t = settings_.Get(kAzureTenantId)) {
      if (std::string why; !Matches(t->value, GuidRegex(), 36, &why)) {
        causes_.push_back(Invalid(*t, "must be a tenant ID, a GUID" + why));
      }
      tenant_id = t->value;
    }
    int64_t lifetime = std::min(p.azure_expiration_seconds, policy_.max_token_lifetime_seconds);
    if (auto e = settings_.Get(kAzureTokenExpiration)) {
      const std::string& v = e->value;
      if (v.empty() || v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos) {
        causes_.push_back(Invalid(*e, "must be a whole number of seconds"));
      } else if (std::stoll(v) < kAzureMinExpiration || std::stoll(v) > kAzureMaxExpiration) {
        // azure-workload-identity's own bounds and words.
        causes_.push_back(Invalid(*e, "token expiration " + v +
                                          " not valid. Expected value to be between 3600 and "
                                          "86400"));
      } else {
        const size_t before = causes_.size();
        internal::ValidateLifetime(std::stoll(v), e->field, policy_, causes_);
        if (causes_.size() == before) lifetime = std::stoll(v);
      }
    }
    plan.expiration_seconds = lifetime;
    // Each variable on its own, and only a non-empty one, as the upstream webhook adds them.
    if (!client_id.empty()) plan.env.push_back({{"AZURE_CLIENT_ID", client_id}});
    if (!tenant_id.empty()) plan.env.push_back({{"AZURE_TENANT_ID", tenant_id}});
    plan.env.push_back({{"AZURE_FEDERATED_TOKEN_FILE", TokenFile(plan)}});
    plan.env.push_back({{"AZURE_AUTHORITY_HOST", p.azure_authority_host}});
    plan.containers = Choose(PresetAllowList(), {{kAzureSkipContainers, ';'}});
    plans_.push_back(std::move(plan));
  }

  void PlanGcp() {
    const IdentityPresets& p = policy_.presets;
    TokenPlan plan = Preset(kGcpVolume, kGcpMountPath, "token");
    auto provider = settings_.Get(kGcpProviderAnnotation);
    if (!provider) {
      causes_.push_back(plan.field + ": Required value: the gcp preset needs annotation " +
                        k8s::Quote(kGcpProviderAnnotation) + " on the pod or on ServiceAccount " +
                        ns_ + "/" + settings_.service_account());
      return;
    }
    if (std::string why; !Matches(provider->value, GcpProviderRegex(), 1024, &why)) {
      causes_.push_back(
          Invalid(*provider,
                  "must be a workload identity provider, //iam.googleapis.com/projects/<number>/"
                  "locations/global/workloadIdentityPools/<pool>/providers/<provider>" +
                      why));
    }
    // A provider's default allowed audience is its resource name as an https URL.
    plan.audience = "https:" + provider->value;
    if (auto a = settings_.Get(kAudienceAnnotation)) {
      if (a->value.empty()) causes_.push_back(Invalid(*a, "must not be empty"));
      plan.audience = a->value;
    }
    CheckAudience(plan.audience, plan.field + " audience");
    std::string impersonation;
    if (auto sa = settings_.Get(kGcpServiceAccountAnnotation)) {
      static const std::regex kEmail(R"(^[a-z0-9-]+@[a-z0-9.-]+\.iam\.gserviceaccount\.com$)");
      if (std::string why; !Matches(sa->value, kEmail, 254, &why)) {
        causes_.push_back(Invalid(*sa,
                                  "must be a service account email, "
                                  "<name>@<project>.iam.gserviceaccount.com" +
                                      why));
      }
      impersonation = "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/" +
                      sa->value + ":generateAccessToken";
    }
    auto lifetime = Lifetime(settings_.Get(kTokenExpirationAnnotation), p.gcp_expiration_seconds,
                             policy_, causes_);
    if (lifetime) plan.expiration_seconds = *lifetime;
    // The credential file is the CSI node's to write, next to the token (gateway token_volume.hpp).
    plan.extra_attributes = {{"gcpCredentialFile", std::string(kGcpCredentialFile)},
                             {"gcpAudience", provider->value},
                             {"gcpTokenUrl", p.gcp_token_url},
                             {"gcpTokenPath", TokenFile(plan)}};
    if (!impersonation.empty()) {
      plan.extra_attributes.emplace_back("gcpServiceAccountImpersonationUrl", impersonation);
    }
    plan.env.push_back({{"GOOGLE_APPLICATION_CREDENTIALS",
                         plan.mount_path + "/" + std::string(kGcpCredentialFile)}});
    plan.containers = Choose(PresetAllowList(), {});
    plans_.push_back(std::move(plan));
  }

  void PlanGeneric() {
    const IdentityPresets& p = policy_.presets;
    TokenPlan plan = Preset(kGenericVolume, kGenericMountPath, "token");
    plan.audience = p.generic_audience;
    if (auto a = settings_.Get(kAudienceAnnotation)) {
      if (a->value.empty()) causes_.push_back(Invalid(*a, "must not be empty"));
      plan.audience = a->value;
    }
    CheckAudience(plan.audience, plan.field + " audience");
    auto lifetime = Lifetime(settings_.Get(kTokenExpirationAnnotation),
                             p.generic_expiration_seconds, policy_, causes_);
    if (lifetime) plan.expiration_seconds = *lifetime;
    plan.env.push_back({{"WISP_TOKEN_FILE", TokenFile(plan)}});
    plan.env.push_back({{"WISP_TOKEN_AUDIENCE", plan.audience}});
    plan.containers = Choose(PresetAllowList(), {});
    plans_.push_back(std::move(plan));
  }

  const PodFacts& pod_;
  const Policy& policy_;
  std::string ns_;
  Settings settings_;
  std::vector<std::string> names_;
  std::vector<std::string> causes_;
  std::vector<std::string> warnings_;
  std::vector<TokenPlan> plans_;
  std::string preset_;
  std::string preset_from_;
};

// A container of the pod and where the patch addresses it.
struct Target {
  const PodFacts::Container* c;
  std::string path;   // /spec/containers/<i>
  std::string field;  // spec.containers[<i>]
  bool env_exists;
  bool mounts_exists;
  std::set<std::string> env_names;
};

// The owner the CSI node gives the token files: the one user (and group) every chosen container
// runs as, from its securityContext or the pod's. nullopt when they differ or one is not known
// (the image's USER decides): the file then stays 0644 in a tmpfs only those containers mount.
std::optional<int64_t> CommonId(const PodFacts& pod, const std::vector<const Target*>& targets,
                                bool group) {
  std::optional<int64_t> id;
  for (const Target* t : targets) {
    std::optional<int64_t> v = group ? t->c->run_as_group : t->c->run_as_user;
    if (!v) v = group ? pod.run_as_group : pod.run_as_user;
    if (!v || (id && *id != *v)) return std::nullopt;
    id = v;
  }
  return id;
}

}  // namespace

namespace {

// Whether rule g has anything to do for the pod: a preset named, IRSA's or azure's own markers
// (when the policy follows them), or wisp.dev/tokens, on the pod or its ServiceAccount, as
// ChoosePreset and PlanTokens read them. None of it is in what the token-sidecar rule's patch
// changes (containers and volumes), so the pod as submitted answers.
bool AsksForIdentity(const AdmissionInput& in, const Policy& policy) {
  const Settings settings(*in.pod, in.call, "");
  if (settings.Get(kPresetAnnotation) || settings.Get(kTokensAnnotation)) return true;
  if (!policy.presets.upstream_annotations) return false;
  if (settings.Get(kAwsRoleArn)) return true;
  const std::string* use = in.pod->Label(kAzureUseLabel);
  return use != nullptr && *use == "true";
}

}  // namespace

bool IdentityPresetsNeedObject(const AdmissionInput& in, const Policy& policy) {
  // Only when the token-sidecar rule may have patched the pod before this rule: its patch and
  // this one both add env and volumeMounts to the same containers, so this rule reads the pod as
  // that patch left it. A sidecar pod that asks this rule for nothing needs no tree: parsing the
  // pod, applying the sidecar's patch and reading it again took two thirds of wisp-policy's time
  // for such a pod (bench/admission/policy_eval_bench, PolicyWholeRequest).
  return policy.rules.identity_presets && policy.rules.token_sidecar && in.pod &&
         in.pod->Annotation(kSidecarAnnotation) != nullptr && AsksForIdentity(in, policy);
}

Verdict EvaluateIdentityPresets(const AdmissionInput& in, const Policy& policy) {
  if (!policy.rules.identity_presets) return Outcome(kRule, kOutcomeDisabled);
  if (!in.Is("", "Pod") || in.call.operation() != "CREATE" || !in.pod) {
    return Outcome(kRule, kOutcomeSkipped);
  }
  // virt-launcher pods are rule c's: the guest, not the launcher, is the workload.
  if (internal::IsVirtLauncherPod(in)) return Outcome(kRule, kOutcomeSkipped);
  if (!AsksForIdentity(in, policy)) return Outcome(kRule, kOutcomeSkipped);
  const PodFacts* pod = &*in.pod;
  std::optional<PodFacts> patched;
  if (IdentityPresetsNeedObject(in, policy) && !in.object_deferred && in.object.is_object()) {
    auto facts = ReadPodFacts(in.object.dump(), "object");
    if (!facts.ok()) {
      Verdict v;
      v.error = facts.status();
      return v;
    }
    patched = *std::move(facts);
    pod = &*patched;
  }

  Planner planner(in, *pod, policy);
  planner.ChoosePreset();
  if (planner.causes().empty()) planner.PlanPreset();
  planner.PlanTokens();
  planner.CheckCollisions();
  if (!planner.causes().empty()) return Deny(kRule, planner.causes(), 400, "BadRequest");
  if (planner.plans().empty()) return Outcome(kRule, kOutcomeSkipped);

  // Shapes the patch must add to or descend into.
  if (pod->spec_shape != Shape::kExpected) {
    return Deny(kRule, {"spec: Invalid value: must be an object"}, 400, "BadRequest");
  }
  if (pod->volumes_shape == Shape::kOther) {
    return Deny(kRule, {"spec.volumes: Invalid value: must be an array"}, 400, "BadRequest");
  }
  std::vector<Target> targets;
  for (const auto& [list, path, field] :
       {std::tuple{&pod->init_containers, "/spec/initContainers", "spec.initContainers"},
        std::tuple{&pod->containers, "/spec/containers", "spec.containers"}}) {
    for (size_t i = 0; i < list->size(); ++i) {
      const auto& c = (*list)[i];
      Target t{&c,
               std::string(path) + "/" + std::to_string(i),
               internal::Index(field, i),
               c.env_shape == Shape::kExpected,
               c.volume_mounts_shape == Shape::kExpected,
               std::set<std::string>(c.env_names.begin(), c.env_names.end())};
      targets.push_back(std::move(t));
    }
  }
  auto target_of = [&](const std::string& name) -> Target* {
    for (auto& t : targets) {
      if (t.c->name == name) return &t;
    }
    return nullptr;
  };

  Verdict v = Outcome(kRule, kOutcomeAllowed);
  v.warnings = std::move(planner.warnings());
  Json patch = Json::array();
  bool volumes_exist = pod->volumes_shape == Shape::kExpected;
  std::vector<std::string> causes;
  std::vector<std::string> summary;
  for (const TokenPlan& plan : planner.plans()) {
    std::vector<const Target*> chosen;
    for (const auto& name : plan.containers) {
      if (const Target* t = target_of(name); t != nullptr) chosen.push_back(t);
    }
    if (chosen.empty()) {
      v.warnings.push_back("wisp: " + plan.field + " reaches no container (every one skipped)");
      continue;
    }
    summary.push_back(plan.volume + " audience=" + plan.audience + " containers=" + [&] {
      std::string s;
      for (const auto* t : chosen) s += (s.empty() ? "" : ",") + t->c->name;
      return s;
    }());
    if (!pod->HasVolume(plan.volume)) {
      Json attrs = {{"audience", plan.audience},
                    {"expirationSeconds", std::to_string(plan.expiration_seconds)},
                    {"path", plan.file}};
      if (policy.presets.token_source != "wisp") attrs["tokenSource"] = policy.presets.token_source;
      const auto uid = CommonId(*pod, chosen, false);
      if (uid) {
        attrs["fileOwner"] = std::to_string(*uid);
        attrs["fileMode"] = "0600";
        if (const auto gid = CommonId(*pod, chosen, true))
          attrs["fileGroup"] = std::to_string(*gid);
      }
      for (const auto& [k, val] : plan.extra_attributes) attrs[k] = val;
      Json volume = {
          {"name", plan.volume},
          {"csi", {{"driver", kWispCsiDriver}, {"readOnly", true}, {"volumeAttributes", attrs}}}};
      if (volumes_exist) {
        patch.push_back({{"op", "add"}, {"path", "/spec/volumes/-"}, {"value", volume}});
      } else {
        patch.push_back(
            {{"op", "add"}, {"path", "/spec/volumes"}, {"value", Json::array({volume})}});
        volumes_exist = true;
      }
    }
    for (const Target* ct : chosen) {
      Target& t = *target_of(ct->c->name);
      if (!t.c->is_object) {
        causes.push_back(t.field + ": Invalid value: must be an object");
        continue;
      }
      if (t.c->volume_mounts_shape == Shape::kOther) {
        causes.push_back(t.field + ".volumeMounts: Invalid value: must be an array");
        continue;
      }
      if (t.c->env_shape == Shape::kOther) {
        causes.push_back(t.field + ".env: Invalid value: must be an array");
        continue;
      }
      bool mounted = false;
      for (size_t m = 0; m < t.c->volume_mounts.size(); ++m) {
        const auto& mount = t.c->volume_mounts[m];
        if (mount.name == plan.volume) mounted = true;
        if (mount.name != plan.volume && mount.mount_path == plan.mount_path) {
          causes.push_back(internal::Index(t.field + ".volumeMounts", m) +
                           ".mountPath: Invalid value: " + k8s::Quote(plan.mount_path) +
                           ": already mounted from volume " + k8s::Quote(mount.name) + ", where " +
                           plan.field + " mounts " + plan.volume);
          mounted = true;
        }
      }
      if (!mounted) {
        Json mount = {{"name", plan.volume}, {"mountPath", plan.mount_path}, {"readOnly", true}};
        if (t.mounts_exists) {
          patch.push_back({{"op", "add"}, {"path", t.path + "/volumeMounts/-"}, {"value", mount}});
        } else {
          patch.push_back(
              {{"op", "add"}, {"path", t.path + "/volumeMounts"}, {"value", Json::array({mount})}});
          t.mounts_exists = true;
        }
      }
      for (const auto& group : plan.env) {
        const bool has_any = std::any_of(group.begin(), group.end(), [&](const auto& kv) {
          return t.env_names.count(kv.first) > 0;
        });
        if (has_any) continue;
        for (const auto& [name, value] : group) {
          Json var = {{"name", name}, {"value", value}};
          if (t.env_exists) {
            patch.push_back({{"op", "add"}, {"path", t.path + "/env/-"}, {"value", var}});
          } else {
            patch.push_back(
                {{"op", "add"}, {"path", t.path + "/env"}, {"value", Json::array({var})}});
            t.env_exists = true;
          }
          t.env_names.insert(name);
        }
      }
    }
  }
  if (!causes.empty()) return Deny(kRule, causes, 400, "BadRequest");
  if (!planner.preset().empty()) {
    v.audit_annotations["identity-preset"] = planner.preset() + " (" + planner.preset_from() + ")";
  }
  if (!summary.empty()) {
    std::string s;
    for (const auto& part : summary) s += (s.empty() ? "" : "; ") + part;
    v.audit_annotations["identity-tokens"] = s;
  }
  if (patch.empty()) return v;
  v.patch = patch.dump();
  v.rule_outcomes[std::string(kRule)] = std::string(kOutcomeMutated);
  return v;
}

}  // namespace wisp::policy
