// Rule a: the token sidecar for annotated pods (GCSFuse PR 428, adapted to wisp).
#include <algorithm>
#include <charconv>
#include <tuple>

#include "rules_internal.hpp"
#include "wisp/k8s/json_writer.hpp"
#include "wisp/k8s/objects.hpp"
#include "wisp/k8s/quantity.hpp"

namespace wisp::policy {
namespace {

using internal::Deny;
using internal::Outcome;

constexpr std::string_view kRule = kRuleTokenSidecar;

std::string BoolValuesMessage(std::string_view annotation) {
  return "the acceptable values for " + k8s::Quote(annotation) +
         " are 'True', 'true', 'false' or 'False'";
}

// The index of the first container named wisp-sidecar in `list`, or nullopt.
std::optional<size_t> FindSidecar(const std::vector<PodFacts::Container>& list) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].name == kSidecarName) return i;
  }
  return std::nullopt;
}

// GCSFuse's ValidatePodHasSidecarContainerInjected, for wisp's names: a container or init
// container named wisp-sidecar that runs as 65534:65534 and mounts the socket volume at its path,
// and the pod has that volume as an emptyDir. A container that merely has the name is the user's
// way to pick the image (see UserSidecarImage), not an injected sidecar.
bool SidecarInjected(const PodFacts& pod) {
  auto socket = std::find_if(pod.volumes.begin(), pod.volumes.end(),
                             [](const PodFacts::Volume& v) { return v.name == kSocketVolume; });
  if (socket == pod.volumes.end() || !socket->empty_dir) return false;
  for (const auto* list : {&pod.containers, &pod.init_containers}) {
    const auto i = FindSidecar(*list);
    if (!i) continue;
    const PodFacts::Container& c = (*list)[*i];
    if (c.run_as_user != 65534 || c.run_as_group != 65534) continue;
    for (const auto& m : c.volume_mounts) {
      if (m.name == kSocketVolume && m.mount_path == kSocketDir) return true;
    }
  }
  return false;
}

// GCSFuse's ParseSidecarContainerImage: a container named wisp-sidecar declared by the user is
// removed and its image used for the injected sidecar (a privately hosted image); its other
// fields are dropped. An init container of that name is removed too, its image ignored. Returns
// the image ("" when none), or the 400 message when the image does not parse.
absl::StatusOr<std::string> UserSidecarImage(const PodFacts& pod) {
  auto i = FindSidecar(pod.containers);
  if (!i) return std::string();
  const std::string& image = pod.containers[*i].image;
  if (std::string err = internal::ImageNameError(image); !err.empty()) {
    return absl::InvalidArgumentError("could not parse input image: " + k8s::Quote(image) +
                                      ", error: " + err);
  }
  return image;
}

// "1.29", "v1.29.3", "1.29+" -> {1, 29}; nullopt when unreadable.
std::optional<std::pair<int, int>> ParseServerVersion(std::string_view v) {
  if (!v.empty() && v.front() == 'v') v.remove_prefix(1);
  int major = 0;
  int minor = 0;
  const char* end = v.data() + v.size();
  auto [dot, e1] = std::from_chars(v.data(), end, major);
  if (e1 != std::errc() || dot == end || *dot != '.') return std::nullopt;
  auto [rest, e2] = std::from_chars(dot + 1, end, minor);
  if (e2 != std::errc()) return std::nullopt;
  return std::make_pair(major, minor);
}

struct ResourceSpec {
  std::string_view name;  // cpu | memory | ephemeral-storage
  const std::string& default_request;
  const std::string& default_limit;
};

// The sidecar's requests and limits as (resource, quantity) pairs.
struct Resources {
  std::vector<std::pair<std::string_view, std::string>> requests;
  std::vector<std::pair<std::string_view, std::string>> limits;
};

// GCSFuse's populateResource: neither set -> defaults; a missing one copies the other; a zero
// limit with no request -> the default request. "0" then means "not set" (unlimited).
Resources ResourcesFor(const PodFacts& pod, const Policy& policy,
                       std::vector<std::string>& causes) {
  const auto& d = policy.sidecar_resources;
  const ResourceSpec specs[] = {
      {"cpu", d.cpu_request, d.cpu_limit},
      {"memory", d.memory_request, d.memory_limit},
      {"ephemeral-storage", d.ephemeral_storage_request, d.ephemeral_storage_limit}};
  Resources out;
  std::string req_key;
  std::string lim_key;
  for (const auto& spec : specs) {
    req_key.assign(kResourceAnnotationPrefix).append(spec.name).append("-request");
    lim_key.assign(kResourceAnnotationPrefix).append(spec.name).append("-limit");
    auto parse = [&](const std::string& key, std::optional<k8s::Quantity>* out) -> bool {
      const std::string* text = pod.Annotation(key);
      if (text == nullptr) return true;
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
      // The policy's defaults were checked when it was loaded.
      request = *k8s::ParseQuantity(spec.default_request);
      limit = *k8s::ParseQuantity(spec.default_limit);
    } else if (!request) {
      request = limit->IsZero() ? *k8s::ParseQuantity(spec.default_request) : *limit;
    } else if (!limit) {
      limit = *request;
    }
    if (!request->IsZero() && !limit->IsZero() && request->value() > limit->value()) {
      causes.push_back("sidecar container " + std::string(spec.name) + " request " +
                       request->text() + " must be less than or equal to its limit " +
                       limit->text() + " (" + k8s::Quote(req_key) + ", " + k8s::Quote(lim_key) +
                       ")");
      continue;
    }
    if (!request->IsZero()) out.requests.emplace_back(spec.name, request->text());
    if (!limit->IsZero()) out.limits.emplace_back(spec.name, limit->text());
  }
  return out;
}

// The first inline wisp CSI volume's identityProvider attribute, if any.
std::string IdentityProvider(const PodFacts& pod) {
  for (const auto& vol : pod.volumes) {
    if (vol.csi_driver == kWispCsiDriver && !vol.identity_provider.empty()) {
      return vol.identity_provider;
    }
  }
  return "";
}

// Where the sidecar goes in `list` (the pod's containers or init containers, nullptr standing for
// the sidecar itself): after istio-proxy, so the mesh is up before the sidecar calls the STS
// (GCSFuse does the same).
size_t InsertIndex(const std::vector<const PodFacts::Container*>& list) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] != nullptr && list[i]->name == "istio-proxy") return i + 1;
  }
  return 0;
}

// `list` less the element at `removed`, as pointers.
std::vector<const PodFacts::Container*> Without(const std::vector<PodFacts::Container>& list,
                                                std::optional<size_t> removed) {
  std::vector<const PodFacts::Container*> out;
  out.reserve(list.size() + 1);
  for (size_t i = 0; i < list.size(); ++i) {
    if (!removed || i != *removed) out.push_back(&list[i]);
  }
  return out;
}

// A member the patch must add to or descend into, of the wrong type: kube-apiserver decodes pods
// into typed structs before calling a webhook, so only a hand-made request has one. Nothing of
// the user's is overwritten; the request is refused, naming the member.
std::optional<std::string> ShapeError(const PodFacts& pod, bool native) {
  using Shape = PodFacts::Shape;
  if (pod.spec_shape == Shape::kOther) return "spec: Invalid value: must be an object";
  if (pod.volumes_shape == Shape::kOther) return "spec.volumes: Invalid value: must be an array";
  if (pod.containers_shape == Shape::kOther) {
    return "spec.containers: Invalid value: must be an array";
  }
  if (native && pod.init_containers_shape == Shape::kOther) {
    return "spec.initContainers: Invalid value: must be an array";
  }
  for (size_t i = 0; i < pod.containers.size(); ++i) {
    const auto& c = pod.containers[i];
    const std::string field = internal::Index("spec.containers", i);
    if (!c.is_object) return field + ": Invalid value: must be an object";
    if (c.name == kSidecarName) continue;  // removed or left alone, never edited
    if (c.volume_mounts_shape == Shape::kOther) {
      return field + ".volumeMounts: Invalid value: must be an array";
    }
    if (c.env_shape == Shape::kOther) return field + ".env: Invalid value: must be an array";
  }
  return std::nullopt;
}

// Writes the operations of one RFC 6902 patch as JSON text.
class PatchText {
 public:
  PatchText() : w_(4096) { w_.BeginArray(); }  // the sidecar's patch is about 2 KiB
  // {"op":"remove","path":<path>}
  void Remove(std::string_view path) { Op("remove", path).EndObject(); }
  // {"op":"add","path":<path>,"value": ...}: the caller writes the value, then calls EndObject().
  k8s::JsonWriter& Add(std::string_view path) { return Op("add", path).Key("value"); }
  bool ok() const { return w_.ok(); }
  std::string Take() { return w_.EndArray().Take(); }

 private:
  k8s::JsonWriter& Op(std::string_view op, std::string_view path) {
    return w_.BeginObject().Key("op").String(op).Key("path").String(path);
  }
  k8s::JsonWriter w_;
};

// Adds `value` (written by `write`) to the array `path` at `at` (an index, or "-" for the end),
// or creates the array holding just it when `exists` is false.
template <typename Write>
void AddElement(PatchText& patch, std::string_view path, bool exists, std::string_view at,
                Write write) {
  std::string pointer(path);
  if (exists) pointer.append("/").append(at);
  k8s::JsonWriter& w = patch.Add(pointer);
  if (!exists) w.BeginArray();
  write(w);
  if (!exists) w.EndArray();
  w.EndObject();
}

struct Sidecar {
  std::string image;
  std::string audience;
  bool native = false;
  Resources resources;
};

// The parts of the patch that no pod or policy changes, written once (by the same writer, so the
// text is what writing them per request gave) and inserted as they are.
struct FixedJson {
  std::string security_context;     // the sidecar's restricted securityContext
  std::string sidecar_mounts;       // the sidecar's volumeMounts
  std::string socket_volume;        // the socket emptyDir
  std::string socket_mount;         // an app container's mount of it
  std::string token_url_env;        // an app container's WISP_TOKEN_URL
  std::string no_api_token_volume;  // the empty tmpfs over the API token path (kNoApiTokenVolume)
};

const FixedJson& Fragments() {
  static const FixedJson fixed = [] {
    FixedJson f;
    k8s::JsonWriter w;
    w.BeginObject();
    w.Key("allowPrivilegeEscalation").Bool(false);
    w.Key("readOnlyRootFilesystem").Bool(true);
    w.Key("capabilities").BeginObject().Key("drop").BeginArray().String("ALL").EndArray();
    w.EndObject();
    w.Key("seccompProfile").BeginObject().Key("type").String("RuntimeDefault").EndObject();
    w.Key("runAsNonRoot").Bool(true);
    w.Key("runAsUser").Int(65534);
    w.Key("runAsGroup").Int(65534);
    f.security_context = w.EndObject().Take();
    w.BeginArray();
    w.BeginObject().Key("name").String(kSocketVolume).Key("mountPath").String(kSocketDir);
    w.EndObject();
    w.BeginObject().Key("name").String(kTokenVolume).Key("mountPath").String(kTokenDir);
    w.Key("readOnly").Bool(true).EndObject();
    w.BeginObject().Key("name").String(kNoApiTokenVolume).Key("mountPath").String(kApiTokenDir);
    w.Key("readOnly").Bool(true).EndObject();
    f.sidecar_mounts = w.EndArray().Take();
    w.BeginObject().Key("name").String(kSocketVolume);
    w.Key("emptyDir").BeginObject().Key("medium").String("Memory").EndObject();
    f.socket_volume = w.EndObject().Take();
    w.BeginObject().Key("name").String(kNoApiTokenVolume);
    w.Key("emptyDir").BeginObject().Key("medium").String("Memory");
    w.Key("sizeLimit").String("1Ki").EndObject();
    f.no_api_token_volume = w.EndObject().Take();
    w.BeginObject().Key("name").String(kSocketVolume).Key("mountPath").String(kSocketDir);
    f.socket_mount = w.EndObject().Take();
    w.BeginObject().Key("name").String(kTokenUrlEnv).Key("value").String(kTokenUrl);
    f.token_url_env = w.EndObject().Take();
    return f;
  }();
  return fixed;
}

void WriteSidecar(k8s::JsonWriter& w, const Sidecar& s, const Policy& policy) {
  w.BeginObject();
  w.Key("name").String(kSidecarName);
  w.Key("image").String(s.image);
  w.Key("imagePullPolicy").String("IfNotPresent");
  // The binary by name: the image's entrypoint (wisp's image has none) is not relied upon.
  w.Key("command").BeginArray().String("wisp-sidecar").EndArray();
  // Exactly wisp-sidecar's flags: the STS audience is the token volume's audience (the wisp
  // volume's identityProvider, else the policy's), as GCSFuse's sidecar asks its STS.
  w.Key("args").BeginArray();
  w.String(std::string("--socket=").append(kSocketDir).append("/token.sock"));
  w.String(std::string("--token-file=").append(kTokenDir).append("/token"));
  w.String("--audience=" + s.audience);
  if (!policy.sidecar_sts_url.empty()) w.String("--sts-url=" + policy.sidecar_sts_url);
  if (!policy.sidecar_sts_ca_pem.empty()) w.String("--ca-pem=$(WISP_STS_CA_PEM)");
  if (policy.sidecar_metrics_port > 0) {
    w.String("--metrics-address=0.0.0.0:" + std::to_string(policy.sidecar_metrics_port));
  }
  w.EndArray();
  if (policy.sidecar_metrics_port > 0) {
    w.Key("ports").BeginArray().BeginObject();
    w.Key("name").String("wisp-metrics");
    w.Key("containerPort").Int(policy.sidecar_metrics_port);
    w.Key("protocol").String("TCP");
    w.EndObject().EndArray();
  }
  if (s.native || !policy.sidecar_sts_ca_pem.empty()) {
    w.Key("env").BeginArray();
    if (s.native) {
      w.BeginObject().Key("name").String("NATIVE_SIDECAR").Key("value").String("TRUE").EndObject();
    }
    if (!policy.sidecar_sts_ca_pem.empty()) {
      w.BeginObject().Key("name").String("WISP_STS_CA_PEM");
      w.Key("value").String(policy.sidecar_sts_ca_pem).EndObject();
    }
    w.EndArray();
  }
  if (s.native) w.Key("restartPolicy").String("Always");
  // Not started (so, native, the app containers wait) and not Ready until it holds a token:
  // wisp-sidecar publishes the expiry of the token it holds in the socket directory, and
  // `wisp-sidecar --probe` checks it (no HTTP, no port: hostNetwork pods share the node's).
  const std::string probe_ready = std::string("--ready-file=").append(kSocketDir).append("/ready");
  for (const auto& [probe, period, failures] :
       {std::tuple{"startupProbe", 1, 300}, std::tuple{"readinessProbe", 10, 3}}) {
    w.Key(probe).BeginObject();
    w.Key("exec").BeginObject().Key("command").BeginArray();
    w.String("wisp-sidecar").String("--probe").String(probe_ready);
    w.EndArray().EndObject();
    w.Key("periodSeconds").Int(period);
    w.Key("timeoutSeconds").Int(2);
    w.Key("failureThreshold").Int(failures);
    w.EndObject();
  }
  if (!s.resources.requests.empty() || !s.resources.limits.empty()) {
    w.Key("resources").BeginObject();
    for (const auto* part : {&s.resources.requests, &s.resources.limits}) {
      if (part->empty()) continue;
      w.Key(part == &s.resources.requests ? "requests" : "limits").BeginObject();
      for (const auto& [name, quantity] : *part) w.Key(name).String(quantity);
      w.EndObject();
    }
    w.EndObject();
  }
  w.Key("securityContext").Raw(Fragments().security_context);
  w.Key("volumeMounts").Raw(Fragments().sidecar_mounts);
  w.EndObject();
}

bool IsVirtiofsContainer(const PodFacts::Container& c) {
  return c.name.rfind("virtiofs-", 0) == 0 &&
         std::any_of(c.volume_mounts.begin(), c.volume_mounts.end(),
                     [](const PodFacts::Mount& m) { return m.mount_path == kVirtiofsSocketDir; });
}

// Every app container reaches the sidecar through the socket directory: the socket volume's mount
// and WISP_TOKEN_URL, each added only where it is missing, so a second pass (reinvocation after a
// later webhook added a container, azure-workload-identity's #791) wires the new container alone.
// `containers` as the patch leaves them (nullptr: the injected sidecar). The names of the
// containers it changed.
std::vector<std::string> WireAppContainers(PatchText& patch,
                                           const std::vector<const PodFacts::Container*>& list) {
  using Shape = PodFacts::Shape;
  std::vector<std::string> wired;
  for (size_t i = 0; i < list.size(); ++i) {
    const PodFacts::Container* c = list[i];
    if (c == nullptr || c->name == kSidecarName) continue;
    // virtiofsd's containers in a virt-launcher pod (KubeVirt's virtiofs-<volume>, whether
    // virt-controller or wisp's launcher rule rendered them, which runs after this one) only
    // share files with the guest: no token URL, on the first pass or a reinvocation alike.
    if (IsVirtiofsContainer(*c)) continue;
    const bool mounted =
        std::any_of(c->volume_mounts.begin(), c->volume_mounts.end(), [](const PodFacts::Mount& m) {
          return m.name == kSocketVolume || m.mount_path == kSocketDir;
        });
    const bool has_url =
        std::find(c->env_names.begin(), c->env_names.end(), kTokenUrlEnv) != c->env_names.end();
    const std::string base = "/spec/containers/" + std::to_string(i);
    if (!mounted) {
      AddElement(patch, base + "/volumeMounts", c->volume_mounts_shape == Shape::kExpected, "-",
                 [](k8s::JsonWriter& w) { w.Raw(Fragments().socket_mount); });
    }
    if (!has_url) {
      AddElement(patch, base + "/env", c->env_shape == Shape::kExpected, "-",
                 [](k8s::JsonWriter& w) { w.Raw(Fragments().token_url_env); });
    }
    if (!mounted || !has_url) wired.push_back(c->name);
  }
  return wired;
}

}  // namespace

Verdict EvaluateTokenSidecar(const AdmissionInput& in, const Policy& policy) {
  if (!policy.rules.token_sidecar) return Outcome(kRule, kOutcomeDisabled);
  if (!in.Is("", "Pod") || in.call.operation() != "CREATE" || !in.pod) {
    return Outcome(kRule, kOutcomeSkipped);
  }
  const PodFacts& pod = *in.pod;
  const std::string* annotation = pod.Annotation(kSidecarAnnotation);
  if (annotation == nullptr) {
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
    // Injected before: by this webhook, and the pod is back because a later webhook changed it
    // (reinvocationPolicy IfNeeded). A container that webhook added is wired like the others;
    // what is wired already is left alone, so a second reinvocation changes nothing.
    if (auto err = ShapeError(pod, false)) return Deny(kRule, {*err}, 400, "BadRequest");
    PatchText patch;
    const std::vector<std::string> wired = WireAppContainers(patch, Without(pod.containers, {}));
    if (wired.empty()) {
      Verdict v = Outcome(kRule, kOutcomeAllowed);
      v.message = "The sidecar container was injected, no injection required.";
      return v;
    }
    Verdict v;
    v.patch = patch.Take();
    v.rule_outcomes[std::string(kRule)] = std::string(kOutcomeMutated);
    std::string names;
    for (const auto& n : wired) names += (names.empty() ? "" : ",") + n;
    v.audit_annotations["token-sidecar-wired"] = names;
    return v;
  }
  bool native_allowed = true;
  if (const std::string* native = pod.Annotation(kNativeSidecarAnnotation)) {
    auto b = k8s::ParseStrictBool(*native);
    if (!b) return Deny(kRule, {BoolValuesMessage(kNativeSidecarAnnotation)}, 400, "BadRequest");
    native_allowed = *b;
  }
  if (!pod.host_network && policy.token_volume_for == TokenVolumeFor::kHostNetwork) {
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
  Sidecar sidecar;
  sidecar.resources = ResourcesFor(pod, policy, causes);
  std::string idp = IdentityProvider(pod);
  sidecar.audience = idp.empty() ? policy.token_audience : idp;
  const std::string ns = in.Namespace();
  if (!AudienceAllowed(policy, ns, sidecar.audience)) {
    causes.push_back(internal::AudienceForbidden("spec.volumes[" + std::string(kTokenVolume) +
                                                     "].projected.sources[0]."
                                                     "serviceAccountToken.audience",
                                                 sidecar.audience, ns, policy));
  }
  if (!causes.empty()) return Deny(kRule, causes, 400, "BadRequest");
  auto user_image = UserSidecarImage(pod);
  if (!user_image.ok()) {
    return Deny(kRule, {std::string(user_image.status().message())}, 400, "BadRequest");
  }
  sidecar.image = user_image->empty() ? policy.sidecar_image : *user_image;

  Verdict v;
  switch (policy.native_sidecar) {
    case NativeSidecarMode::kOn:
      sidecar.native = true;
      break;
    case NativeSidecarMode::kOff:
      sidecar.native = false;
      break;
    case NativeSidecarMode::kAuto: {
      auto version = ParseServerVersion(in.call.server_version());
      if (!version) {
        v.warnings.push_back("wisp: Kubernetes server version unknown, so " +
                             std::string(kSidecarName) +
                             " runs as a regular container rather than a native sidecar");
      }
      sidecar.native =
          version && (version->first > 1 || (version->first == 1 && version->second >= 29));
      break;
    }
  }
  sidecar.native = sidecar.native && native_allowed;
  if (auto err = ShapeError(pod, sidecar.native)) return Deny(kRule, {*err}, 400, "BadRequest");

  // The patch, written as text in the order it applies (RFC 6902 applies operations one after the
  // other, so each index below is one in the pod as the operations before it left it).
  using Shape = PodFacts::Shape;
  PatchText patch;
  if (pod.spec_shape == Shape::kAbsent) patch.Add("/spec").BeginObject().EndObject().EndObject();
  // The user's wisp-sidecar container and init container go; the image is kept (above).
  const auto user_container = FindSidecar(pod.containers);
  const auto user_init = FindSidecar(pod.init_containers);
  if (user_container) patch.Remove("/spec/containers/" + std::to_string(*user_container));
  if (user_init) patch.Remove("/spec/initContainers/" + std::to_string(*user_init));
  std::vector<const PodFacts::Container*> containers = Without(pod.containers, user_container);
  std::vector<const PodFacts::Container*> inits = Without(pod.init_containers, user_init);

  auto& list = sidecar.native ? inits : containers;
  const bool list_exists =
      (sidecar.native ? pod.init_containers_shape : pod.containers_shape) == Shape::kExpected;
  const size_t at = InsertIndex(list);
  AddElement(patch, sidecar.native ? "/spec/initContainers" : "/spec/containers", list_exists,
             std::to_string(at), [&](k8s::JsonWriter& w) { WriteSidecar(w, sidecar, policy); });
  list.insert(list.begin() + static_cast<std::ptrdiff_t>(std::min(at, list.size())), nullptr);

  // Volumes go last: every volume keeps the index it has in the pod as submitted, so a refusal
  // by a validating webhook (wisp's rule f among them) names the user's own field. A
  // user-defined volume of the same name wins.
  bool volumes_exist = pod.volumes_shape == Shape::kExpected;
  if (!pod.HasVolume(kTokenVolume)) {
    AddElement(patch, "/spec/volumes", volumes_exist, "-", [&](k8s::JsonWriter& w) {
      w.BeginObject().Key("name").String(kTokenVolume).Key("projected").BeginObject();
      w.Key("sources").BeginArray().BeginObject().Key("serviceAccountToken").BeginObject();
      if (!sidecar.audience.empty()) w.Key("audience").String(sidecar.audience);
      w.Key("expirationSeconds").Int(policy.token_expiration_seconds);
      w.Key("path").String("token");
      w.EndObject().EndObject().EndArray().EndObject().EndObject();
    });
    volumes_exist = true;
  }
  if (!pod.HasVolume(kSocketVolume)) {
    AddElement(patch, "/spec/volumes", volumes_exist, "-",
               [](k8s::JsonWriter& w) { w.Raw(Fragments().socket_volume); });
    volumes_exist = true;
  }
  if (!pod.HasVolume(kNoApiTokenVolume)) {
    AddElement(patch, "/spec/volumes", volumes_exist, "-",
               [](k8s::JsonWriter& w) { w.Raw(Fragments().no_api_token_volume); });
  }

  WireAppContainers(patch, containers);
  if (!patch.ok()) {
    // Every string written came from the validated pod or the loaded policy; one that is not UTF-8
    // is the policy's.
    return Deny(kRule, {"wisp policy: the sidecar image, audience or STS URL is not valid UTF-8"},
                500, "InternalError");
  }

  v.patch = patch.Take();
  v.rule_outcomes[std::string(kRule)] = std::string(kOutcomeMutated);
  v.audit_annotations["token-sidecar"] =
      std::string(kSidecarName) + (sidecar.native ? " (native sidecar)" : " (container)") +
      (user_image->empty() ? "" : " image " + sidecar.image + " (user-declared)");
  v.audit_annotations["token-volume"] =
      std::string(kTokenVolume) +
      " audience=" + (sidecar.audience.empty() ? "<api-server>" : sidecar.audience);
  return v;
}

}  // namespace wisp::policy
