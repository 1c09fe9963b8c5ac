// Rule a: the token sidecar for annotated pods (GCSFuse PR 428, adapted to wisp).
#include <cstdio>

#include "policy/src/rules_internal.hpp"
#include "wisp/k8s/json_patch.hpp"
#include "wisp/k8s/objects.hpp"
#include "wisp/k8s/quantity.hpp"

namespace wisp::policy {
namespace {

using internal::Deny;
using internal::Outcome;
using k8s::Json;

constexpr std::string_view kRule = kRuleTokenSidecar;

std::string BoolValuesMessage(std::string_view annotation) {
  return "the acceptable values for " + k8s::Quote(annotation) +
         " are 'True', 'true', 'false' or 'False'";
}

// GCSFuse's ValidatePodHasSidecarContainerInjected, for wisp's names: a container or init
// container named wisp-sidecar that runs as 65534:65534 and mounts the socket volume at its path,
// and the pod has that volume as an emptyDir. A container that merely has the name is the user's
// way to pick the image (see TakeUserSidecar), not an injected sidecar.
bool SidecarInjected(const Json& pod) {
  const Json* socket = k8s::FindNamed(k8s::GetArray(pod, {"spec", "volumes"}), kSocketVolume);
  if (socket == nullptr || k8s::Find(*socket, {"emptyDir"}) == nullptr) return false;
  for (const char* list : {"containers", "initContainers"}) {
    const Json* c = k8s::FindNamed(k8s::GetArray(pod, {"spec", list}), kSidecarName);
    if (c == nullptr) continue;
    auto uid = k8s::GetInt(*c, {"securityContext", "runAsUser"});
    auto gid = k8s::GetInt(*c, {"securityContext", "runAsGroup"});
    if (!uid || *uid != 65534 || !gid || *gid != 65534) continue;
    for (const auto& m : k8s::GetArray(*c, {"volumeMounts"})) {
      if (k8s::GetString(m, {"name"}) == kSocketVolume &&
          k8s::GetString(m, {"mountPath"}) == kSocketDir) {
        return true;
      }
    }
  }
  return false;
}

// GCSFuse's ParseSidecarContainerImage: a container named wisp-sidecar declared by the user is
// removed and its image used for the injected sidecar (a privately hosted image); its other
// fields are dropped. An init container of that name is removed too, its image ignored. Returns
// the image ("" when none), or the 400 message when the image does not parse (then nothing has
// been removed).
absl::StatusOr<std::string> TakeUserSidecar(k8s::PatchBuilder& edit) {
  std::string image;
  const Json& containers = k8s::GetArray(edit.doc(), {"spec", "containers"});
  for (size_t i = 0; i < containers.size(); ++i) {
    if (k8s::GetString(containers[i], {"name"}) != kSidecarName) continue;
    image = k8s::GetString(containers[i], {"image"});
    if (std::string err = internal::ImageNameError(image); !err.empty()) {
      return absl::InvalidArgumentError("could not parse input image: " + k8s::Quote(image) +
                                        ", error: " + err);
    }
    (void)edit.Remove({"spec", "containers"}, i);  // an index it has
    break;
  }
  const Json& inits = k8s::GetArray(edit.doc(), {"spec", "initContainers"});
  for (size_t i = 0; i < inits.size(); ++i) {
    if (k8s::GetString(inits[i], {"name"}) == kSidecarName) {
      (void)edit.Remove({"spec", "initContainers"}, i);
      break;
    }
  }
  return image;
}

// "1.29", "v1.29.3", "1.29+" -> {1, 29}; nullopt when unreadable.
std::optional<std::pair<int, int>> ParseServerVersion(const std::string& v) {
  int major = 0;
  int minor = 0;
  const char* s = v.c_str();
  if (*s == 'v') ++s;
  if (std::sscanf(s, "%d.%d", &major, &minor) != 2) return std::nullopt;
  return std::make_pair(major, minor);
}

struct ResourceSpec {
  std::string name;  // cpu | memory | ephemeral-storage
  std::string default_request;
  std::string default_limit;
};

// GCSFuse's populateResource: neither set -> defaults; a missing one copies the other; a zero
// limit with no request -> the default request. "0" then means "not set" (unlimited).
absl::Status AddResources(const Json& pod, const Policy& policy, Json& resources,
                          std::vector<std::string>& causes) {
  const auto& d = policy.sidecar_resources;
  const ResourceSpec specs[] = {
      {"cpu", d.cpu_request, d.cpu_limit},
      {"memory", d.memory_request, d.memory_limit},
      {"ephemeral-storage", d.ephemeral_storage_request, d.ephemeral_storage_limit}};
  Json requests = Json::object();
  Json limits = Json::object();
  for (const auto& spec : specs) {
    const std::string req_key = std::string(kResourceAnnotationPrefix) + spec.name + "-request";
    const std::string lim_key = std::string(kResourceAnnotationPrefix) + spec.name + "-limit";
    auto parse = [&](const std::string& key, std::optional<k8s::Quantity>* out) -> bool {
      auto text = k8s::FindAnnotation(pod, key);
      if (!text) return true;
      auto q = k8s::ParseQuantity(*text);
      if (!q.ok()) {
        causes.push_back(
            "failed to parse sidecar container resource allocation from pod "
            "annotation " +
            k8s::Quote(key) + ": " + std::string(q.status().message()));
        return false;
      }
      *out = *q;
      return true;
    };
    std::optional<k8s::Quantity> request;
    std::optional<k8s::Quantity> limit;
    bool ok = parse(req_key, &request);
    ok = parse(lim_key, &limit) && ok;
    if (!ok) continue;
    if (!request && !limit) {
      request = *k8s::ParseQuantity(spec.default_request);
      limit = *k8s::ParseQuantity(spec.default_limit);
    } else if (!request) {
      request = limit->IsZero() ? *k8s::ParseQuantity(spec.default_request) : *limit;
    } else if (!limit) {
      limit = *request;
    }
    if (!request->IsZero() && !limit->IsZero() && request->value() > limit->value()) {
      causes.push_back("sidecar container " + spec.name + " request " + request->text() +
                       " must be less than or equal to its limit " + limit->text() + " (" +
                       k8s::Quote(req_key) + ", " + k8s::Quote(lim_key) + ")");
      continue;
    }
    if (!request->IsZero()) requests[spec.name] = request->text();
    if (!limit->IsZero()) limits[spec.name] = limit->text();
  }
  if (!requests.empty()) resources["requests"] = requests;
  if (!limits.empty()) resources["limits"] = limits;
  return absl::OkStatus();
}

// The first inline wisp CSI volume's identityProvider attribute, if any.
std::string IdentityProvider(const Json& pod) {
  for (const auto& vol : k8s::GetArray(pod, {"spec", "volumes"})) {
    if (k8s::GetString(vol, {"csi", "driver"}) != kWispCsiDriver) continue;
    std::string idp = k8s::GetString(vol, {"csi", "volumeAttributes", "identityProvider"});
    if (!idp.empty()) return idp;
  }
  return "";
}

size_t InsertIndex(const Json& list) {
  // After istio-proxy so the mesh is up before the sidecar calls the STS (GCSFuse does the same).
  for (size_t i = 0; i < list.size(); ++i) {
    if (k8s::GetString(list[i], {"name"}) == "istio-proxy") return i + 1;
  }
  return 0;
}

bool HasVolume(const Json& pod, std::string_view name) {
  return k8s::FindNamed(k8s::GetArray(pod, {"spec", "volumes"}), name) != nullptr;
}

}  // namespace

Verdict EvaluateTokenSidecar(const AdmissionInput& in, const Policy& policy) {
  Json out = in.object;
  Verdict v = internal::EvaluateTokenSidecarInPlace(in, out, policy);
  if (!v.patch.empty()) v.mutated = std::move(out);
  return v;
}

Verdict internal::EvaluateTokenSidecarInPlace(const AdmissionInput& in, Json& object,
                                              const Policy& policy) {
  if (!policy.rules.token_sidecar) return Outcome(kRule, kOutcomeDisabled);
  if (!in.Is("", "Pod") || in.call.operation() != "CREATE" || !object.is_object()) {
    return Outcome(kRule, kOutcomeSkipped);
  }
  const Json& pod = object;  // read-only until the edits start
  auto annotation = k8s::FindAnnotation(pod, kSidecarAnnotation);
  if (!annotation) {
    Verdict v = Outcome(kRule, kOutcomeSkipped);
    v.message = "The annotation key " + k8s::Quote(kSidecarAnnotation) +
                " is not found, no injection required.";
    return v;
  }
  auto enabled = k8s::ParseStrictBool(*annotation);
  if (!enabled) return Deny(kRule, {BoolValuesMessage(kSidecarAnnotation)}, 400, "BadRequest");
  if (!*enabled) {
    Verdict v = Outcome(kRule, kOutcomeSkipped);
    v.message = "The annotation key " + k8s::Quote(kSidecarAnnotation) +
                " is false, no injection required.";
    return v;
  }
  if (SidecarInjected(pod)) {
    Verdict v = Outcome(kRule, kOutcomeAllowed);
    v.message = "The sidecar container was injected, no injection required.";
    return v;
  }
  bool native_allowed = true;
  if (auto native = k8s::FindAnnotation(pod, kNativeSidecarAnnotation)) {
    auto b = k8s::ParseStrictBool(*native);
    if (!b) return Deny(kRule, {BoolValuesMessage(kNativeSidecarAnnotation)}, 400, "BadRequest");
    native_allowed = *b;
  }
  const bool host_network = k8s::GetBool(pod, {"spec", "hostNetwork"});
  if (!host_network && policy.token_volume_for == TokenVolumeFor::kHostNetwork) {
    Verdict v = Outcome(kRule, kOutcomeSkipped);
    v.warnings.push_back(
        "wisp: pod does not use hostNetwork, so it is left unchanged: the token sidecar and the "
        "projected token volume " +
        std::string(kTokenVolume) +
        " are injected only into hostNetwork pods (policy tokenSidecar.tokenVolumeFor: "
        "hostNetwork)");
    return v;
  }

  std::vector<std::string> causes;
  Json resources = Json::object();
  (void)AddResources(pod, policy, resources, causes);
  std::string idp = IdentityProvider(pod);
  std::string audience = idp.empty() ? policy.token_audience : idp;
  const std::string ns = in.Namespace();
  if (!AudienceAllowed(policy, ns, audience)) {
    causes.push_back(internal::AudienceForbidden("spec.volumes[" + std::string(kTokenVolume) +
                                                     "].projected.sources[0]."
                                                     "serviceAccountToken.audience",
                                                 audience, ns, policy));
  }
  if (!causes.empty()) return Deny(kRule, causes, 400, "BadRequest");

  const bool add_token_volume = !HasVolume(pod, kTokenVolume);
  const bool add_socket_volume = !HasVolume(pod, kSocketVolume);

  // The pod is edited in place from here, and each edit recorded as it is made: the patch is
  // those operations, not a diff of the whole pod (which cost more than the rest of the rule).
  k8s::PatchBuilder edit(object);
  auto user_image = TakeUserSidecar(edit);
  if (!user_image.ok()) {
    return Deny(kRule, {std::string(user_image.status().message())}, 400, "BadRequest");
  }
  const std::string image = user_image->empty() ? policy.sidecar_image : *user_image;

  Verdict v;
  bool native = false;
  switch (policy.native_sidecar) {
    case NativeSidecarMode::kOn:
      native = true;
      break;
    case NativeSidecarMode::kOff:
      native = false;
      break;
    case NativeSidecarMode::kAuto: {
      auto version = ParseServerVersion(in.call.server_version());
      if (!version) {
        v.warnings.push_back("wisp: Kubernetes server version unknown, so " +
                             std::string(kSidecarName) +
                             " runs as a regular container rather than a native sidecar");
      }
      native = version && (version->first > 1 || (version->first == 1 && version->second >= 29));
      break;
    }
  }
  native = native && native_allowed;

  Json sidecar = {
      {"name", kSidecarName},
      {"image", image},
      {"imagePullPolicy", "IfNotPresent"},
  };
  // Exactly wisp-sidecar's flags: the STS audience is the token volume's audience (the wisp
  // volume's identityProvider, else the policy's), as GCSFuse's sidecar asks its STS.
  Json args =
      Json::array({"--socket=" + std::string(kSocketDir) + "/token.sock",
                   "--token-file=" + std::string(kTokenDir) + "/token", "--audience=" + audience});
  if (!policy.sidecar_sts_url.empty()) args.push_back("--sts-url=" + policy.sidecar_sts_url);
  if (policy.sidecar_metrics_port > 0) {
    args.push_back("--metrics-address=0.0.0.0:" + std::to_string(policy.sidecar_metrics_port));
  }
  sidecar["args"] = args;
  if (policy.sidecar_metrics_port > 0) {
    sidecar["ports"] = Json::array({{{"name", "wisp-metrics"},
                                     {"containerPort", policy.sidecar_metrics_port},
                                     {"protocol", "TCP"}}});
  }
  if (native) {
    sidecar["env"] = Json::array({{{"name", "NATIVE_SIDECAR"}, {"value", "TRUE"}}});
    sidecar["restartPolicy"] = "Always";
  }
  if (!resources.empty()) sidecar["resources"] = resources;
  sidecar["securityContext"] = {
      {"allowPrivilegeEscalation", false},
      {"readOnlyRootFilesystem", true},
      {"capabilities", {{"drop", Json::array({"ALL"})}}},
      {"seccompProfile", {{"type", "RuntimeDefault"}}},
      {"runAsNonRoot", true},
      {"runAsUser", 65534},
      {"runAsGroup", 65534},
  };
  sidecar["volumeMounts"] =
      Json::array({{{"name", kSocketVolume}, {"mountPath", kSocketDir}},
                   {{"name", kTokenVolume}, {"mountPath", kTokenDir}, {"readOnly", true}}});

  // Every edit below follows members or indices the pod has, or creates what is missing, so none
  // can fail; `edited` keeps that promise checked.
  bool edited = true;
  const std::string_view list = native ? "initContainers" : "containers";
  edited &= edit.Insert({"spec", list}, InsertIndex(k8s::GetArray(edit.doc(), {"spec", list})),
                        std::move(sidecar));

  // Volumes go first, as GCSFuse prepends its own; a user-defined volume of the same name wins.
  if (add_token_volume) {
    Json token = {{"expirationSeconds", policy.token_expiration_seconds}, {"path", "token"}};
    if (!audience.empty()) token["audience"] = audience;
    edited &= edit.Insert(
        {"spec", "volumes"}, 0,
        {{"name", kTokenVolume},
         {"projected", {{"sources", Json::array({{{"serviceAccountToken", token}}})}}}});
  }
  if (add_socket_volume) {
    edited &= edit.Insert({"spec", "volumes"}, 0,
                          {{"name", kSocketVolume}, {"emptyDir", {{"medium", "Memory"}}}});
  }

  // Every app container reaches the sidecar through the socket directory.
  const size_t containers = k8s::GetArray(edit.doc(), {"spec", "containers"}).size();
  for (size_t i = 0; i < containers; ++i) {
    const Json& c = k8s::GetArray(edit.doc(), {"spec", "containers"})[i];
    if (k8s::GetString(c, {"name"}) == kSidecarName) continue;
    bool mounted = false;
    for (const auto& m : k8s::GetArray(c, {"volumeMounts"})) {
      if (k8s::GetString(m, {"name"}) == kSocketVolume ||
          k8s::GetString(m, {"mountPath"}) == kSocketDir) {
        mounted = true;
      }
    }
    const bool has_url = k8s::FindNamed(k8s::GetArray(c, {"env"}), kTokenUrlEnv) != nullptr;
    const std::string index = std::to_string(i);
    if (!mounted) {
      edited &= edit.Append({"spec", "containers", index, "volumeMounts"},
                            {{"name", kSocketVolume}, {"mountPath", kSocketDir}});
    }
    if (!has_url) {
      edited &= edit.Append({"spec", "containers", index, "env"},
                            {{"name", kTokenUrlEnv}, {"value", kTokenUrl}});
    }
  }
  if (!edited) {
    Verdict failed = Outcome(kRule, kOutcomeError);
    failed.error = absl::InternalError("token sidecar: an edit of the pod could not be recorded");
    return failed;
  }

  v.patch = edit.TakePatch();
  v.rule_outcomes[std::string(kRule)] = std::string(kOutcomeMutated);
  v.audit_annotations["token-sidecar"] =
      std::string(kSidecarName) + (native ? " (native sidecar)" : " (container)") +
      (user_image->empty() ? "" : " image " + image + " (user-declared)");
  v.audit_annotations["token-volume"] =
      std::string(kTokenVolume) + " audience=" + (audience.empty() ? "<api-server>" : audience);
  return v;
}

}  // namespace wisp::policy
