// Rules b and c: VM tokens. A VirtualMachineInstance asks for a token with a
// wisp.dev/token.<volume> annotation on a containerPath volume (VEP 165, in released KubeVirt) or,
// on a KubeVirt that carries VEP 94, with a serviceAccountToken volume that rule b's mutating half
// turns into that annotation. virt-controller copies VMI annotations onto the launcher pod, and
// rule c serves the token from the pod alone: nothing is recorded between the two admissions, so
// nothing is left behind for an object the API server did not store.
#include <cmath>
#include <set>

#include "rules_internal.hpp"
#include "wisp/k8s/json.hpp"
#include "wisp/k8s/json_patch.hpp"
#include "wisp/k8s/objects.hpp"
#include "wisp/k8s/quantity.hpp"

namespace wisp::policy {
namespace {

using internal::Deny;
using internal::Index;
using internal::Outcome;
using k8s::Json;

// A volume's token, in either API shape.
struct TokenVolume {
  size_t index;
  std::string name;
  std::string field;  // "spec.volumes[1].serviceAccount.serviceAccountToken"
  const Json* token;  // the serviceAccountToken object
};

std::vector<std::string> SourceKeys(const Json& volume) {
  std::vector<std::string> keys;
  if (!volume.is_object()) return keys;
  for (auto it = volume.begin(); it != volume.end(); ++it) {
    if (it.key() != "name") keys.push_back(it.key());
  }
  return keys;
}

// A containerPath volume (VEP 165) as the VMI declares it.
struct ContainerPathVolume {
  size_t index;
  std::string name;
  std::string path;
  const Json* read_only;  // nullptr when not set
};

// VEP 165's CRD schema for containerPath (MaxLength and CEL rules; the API server prints a CEL
// failure as `<field>: Invalid value: "<type>": <message>`) and the admitter's reserved prefixes.
void ValidateContainerPath(const Json& cp, const std::string& fld,
                           std::vector<std::string>& causes) {
  if (!cp.is_object()) {
    causes.push_back(fld + ": Invalid value: must be an object");
    return;
  }
  const Json* path = k8s::Find(cp, {"path"});
  if (path == nullptr || !path->is_string() || path->get<std::string>().empty()) {
    causes.push_back(fld + ".path: Required value");
  } else {
    const std::string p = path->get<std::string>();
    if (p.size() > 4096) {
      causes.push_back(fld + ".path: Too long: may not be more than 4096 bytes");
    }
    if (p[0] != '/') {
      causes.push_back(fld +
                       ".path: Invalid value: \"string\": path must be absolute (start with '/')");
    }
    if (p.find("..") != std::string::npos) {
      causes.push_back(fld + ".path: Invalid value: \"string\": path must not contain '..'");
    }
  }
  if (const Json* ro = k8s::Find(cp, {"readOnly"}); ro != nullptr && !ro->is_null()) {
    if (!ro->is_boolean() || !ro->get<bool>()) {
      causes.push_back(fld +
                       ".readOnly: Invalid value: \"boolean\": readOnly must be true, write access "
                       "is not supported");
    }
  }
}

// KubeVirt's reserved prefixes for containerPath: the launcher's own runtime directories.
constexpr std::string_view kReservedPrefixes[] = {"/var/run/kubevirt", "/var/run/libvirt"};

// vmipredicates.WantsToHaveQOSGuaranteed, read from the launcher pod: virt-controller renders
// the VMI's requests and limits (and, for dedicated CPUs, equal ones) on the compute container,
// so equal non-zero cpu and memory requests and limits there mean the VMI wants guaranteed QoS.
bool ComputeWantsGuaranteedQos(const Json& compute) {
  for (const char* res : {"cpu", "memory"}) {
    std::string req = k8s::GetString(compute, {"resources", "requests", res});
    std::string lim = k8s::GetString(compute, {"resources", "limits", res});
    auto rq = k8s::ParseQuantity(req);
    auto lq = k8s::ParseQuantity(lim);
    // Compared in milli-units: "2" and "2000m" are the same quantity (Quantity.Cmp).
    if (!rq.ok() || !lq.ok() || rq->IsZero() ||
        std::llroundl(rq->value() * 1000) != std::llroundl(lq->value() * 1000)) {
      return false;
    }
  }
  return true;
}

// pkg/virtiofs/resources.go (defaults, no SupportContainerResources override): 10m/100m cpu,
// 1M/80M memory; guaranteed QoS (which dedicated CPUs imply) raises both requests to the limits,
// so that the pod stays Guaranteed.
Json VirtiofsResources(bool guaranteed) {
  return {
      {"requests", {{"cpu", guaranteed ? "100m" : "10m"}, {"memory", guaranteed ? "80M" : "1M"}}},
      {"limits", {{"cpu", "100m"}, {"memory", "80M"}}}};
}

Json VirtiofsContainer(const std::string& volume, const std::string& image, Json args,
                       Json data_mount, bool guaranteed) {
  return {
      {"name", "virtiofs-" + volume},
      {"image", image},
      {"imagePullPolicy", "IfNotPresent"},
      {"command", Json::array({"/usr/libexec/virtiofsd"})},
      {"args", std::move(args)},
      {"volumeMounts", Json::array({{{"name", kVirtiofsVolume}, {"mountPath", kVirtiofsSocketDir}},
                                    std::move(data_mount)})},
      {"resources", VirtiofsResources(guaranteed)},
      {"securityContext",
       {{"runAsUser", 107},
        {"runAsGroup", 107},
        {"runAsNonRoot", true},
        {"allowPrivilegeEscalation", false},
        {"capabilities", {{"drop", Json::array({"ALL"})}}}}},
  };
}

Json VirtiofsArgs(const std::string& volume, bool translate_uid) {
  Json args =
      Json::array({"--socket-path=" + std::string(kVirtiofsSocketDir) + "/" + volume + ".sock",
                   "--shared-dir=/virtiofs-data/" + volume, "--sandbox=none", "--cache=auto",
                   "--migration-on-error=guest-error", "--migration-mode=find-paths"});
  // NonRootUID 107: the kubelet's token symlink is owned by the pod's user (KubeVirt #17792).
  if (translate_uid) args.push_back("--translate-uid=host:107:0:1");
  return args;
}

// virtiofs.FindVolumeMountForPath: the compute mount at `path` or, failing that, the longest one
// above it, with the rest of the path as subPath.
const Json* FindVolumeMountForPath(const Json& container, const std::string& path,
                                   std::string* sub_path) {
  const Json* best = nullptr;
  size_t best_len = 0;
  for (const auto& m : k8s::GetArray(container, {"volumeMounts"})) {
    std::string mount_path = k8s::GetString(m, {"mountPath"});
    if (path == mount_path) {
      sub_path->clear();
      return &m;
    }
    if (path.rfind(mount_path + "/", 0) == 0 && mount_path.size() > best_len) {
      best = &m;
      best_len = mount_path.size();
    }
  }
  if (best != nullptr) *sub_path = path.substr(best_len + 1);
  return best;
}

// A VM token request: the value of a wisp.dev/token.<volume> annotation.
struct TokenRequest {
  std::string audience;  // "" = the API server's own audiences, as in a projected volume
  int64_t expiration_seconds = 3600;
  std::string path;
  bool operator==(const TokenRequest&) const = default;
};

constexpr std::string_view kTokenRequestExample =
    R"({"audience":"sts.amazonaws.com","expirationSeconds":3600,"path":"token"})";

// germag's question (VEP 94 review): may a token name its own service account? No.
constexpr std::string_view kTokenServiceAccountRule =
    "Forbidden: a token is always for the VirtualMachineInstance's service account "
    "(spec.serviceAccountName, or the serviceAccount volume's serviceAccountName, which the "
    "launcher pod runs as); name it there, not per token";

// The annotation value a token request stands for (dumped compact, fields in name order).
Json TokenRequestObject(const TokenRequest& r) {
  Json j = Json::object();
  if (!r.audience.empty()) j["audience"] = r.audience;
  j["expirationSeconds"] = r.expiration_seconds;
  j["path"] = r.path;
  return j;
}
std::string TokenRequestJson(const TokenRequest& r) { return TokenRequestObject(r).dump(); }

// The request a VEP 94 serviceAccountToken stands for; nullopt when a field has the wrong type
// (rule b then refuses the volume itself).
std::optional<TokenRequest> FromServiceAccountToken(const Json& token) {
  if (!token.is_object()) return std::nullopt;
  const Json* audience = k8s::Find(token, {"audience"});
  const Json* seconds = k8s::Find(token, {"expirationSeconds"});
  const Json* path = k8s::Find(token, {"path"});
  if ((audience != nullptr && !audience->is_null() && !audience->is_string()) ||
      (seconds != nullptr && !seconds->is_null() && !seconds->is_number_integer()) ||
      path == nullptr || !path->is_string()) {
    return std::nullopt;
  }
  return TokenRequest{k8s::GetString(token, {"audience"}),
                      k8s::GetInt(token, {"expirationSeconds"}).value_or(3600),
                      path->get<std::string>()};
}

// Reads and checks one wisp.dev/token.<volume> value; `fld` names it as the user wrote it
// ("metadata.annotations[wisp.dev/token.aws-token]"). nullopt, with the causes, when it is bad.
std::optional<TokenRequest> ParseTokenRequest(const std::string& text, const std::string& fld,
                                              const Policy& policy, const std::string& ns,
                                              std::vector<std::string>& causes) {
  auto parsed = k8s::ParseJson(text, fld);
  if (!parsed.ok() || !parsed->is_object()) {
    causes.push_back(fld + ": Invalid value: must be a JSON object such as " +
                     std::string(kTokenRequestExample));
    return std::nullopt;
  }
  const size_t before = causes.size();
  TokenRequest r;
  bool has_path = false;
  for (auto it = parsed->begin(); it != parsed->end(); ++it) {
    const std::string f = fld + "." + it.key();
    const Json& value = it.value();
    if (it.key() == "audience") {
      if (!value.is_string()) {
        causes.push_back(f + ": Invalid value: " + value.dump() + ": must be a string");
      } else {
        r.audience = value.get<std::string>();
        if (!AudienceAllowed(policy, ns, r.audience)) {
          causes.push_back(internal::AudienceForbidden(f, r.audience, ns, policy));
        }
      }
    } else if (it.key() == "expirationSeconds") {
      if (!value.is_number_integer() ||
          (value.is_number_unsigned() && value.get<uint64_t>() > (uint64_t{1} << 32))) {
        causes.push_back(f + ": Invalid value: " + value.dump() +
                         ": must be a whole number of seconds");
        continue;
      }
      r.expiration_seconds = value.get<int64_t>();
      const std::string prefix =
          f + ": Invalid value: " + std::to_string(r.expiration_seconds) + ": must be at ";
      if (r.expiration_seconds < 600) {
        causes.push_back(prefix + "least 600 (10 minutes)");
      } else if (r.expiration_seconds > policy.max_token_lifetime_seconds) {
        causes.push_back(prefix + "most " + std::to_string(policy.max_token_lifetime_seconds) +
                         " (the policy's maxTokenLifetime)");
      }
    } else if (it.key() == "path") {
      has_path = true;
      if (!value.is_string() || value.get<std::string>().empty()) {
        causes.push_back(f + ": Invalid value: " + value.dump() +
                         ": must be the token's file name in the shared directory, e.g. \"token\"");
      } else {
        r.path = value.get<std::string>();
        internal::ValidateTokenPath(r.path, f, causes);
      }
    } else if (it.key() == "serviceAccountName") {
      causes.push_back(f + ": " + std::string(kTokenServiceAccountRule));
    } else {
      causes.push_back(f +
                       ": Unsupported field: the fields are audience, expirationSeconds and path");
    }
  }
  if (!has_path) {
    causes.push_back(fld +
                     ".path: Required value: the token's file name in the shared directory, "
                     "e.g. \"token\"");
  }
  if (causes.size() != before) return std::nullopt;
  return r;
}

// The wisp.dev/token.* and wisp.dev/token-mount.* annotations of an object, by key.
std::map<std::string, std::string> TokenAnnotations(const Json& obj) {
  std::map<std::string, std::string> out;
  const Json* annotations = k8s::Find(obj, {"metadata", "annotations"});
  if (annotations == nullptr || !annotations->is_object()) return out;
  for (auto it = annotations->begin(); it != annotations->end(); ++it) {
    const std::string& key = it.key();
    if ((key.rfind(kTokenAnnotationPrefix, 0) == 0 ||
         key.rfind(kTokenMountAnnotationPrefix, 0) == 0) &&
        it.value().is_string()) {
      out[key] = it.value().get<std::string>();
    }
  }
  return out;
}

std::string AnnotationField(std::string_view key) {
  return "metadata.annotations[" + std::string(key) + "]";
}

// The token source of a VEP 94 volume: serviceAccount.serviceAccountToken, or the only
// serviceAccountToken source of a projected volume; nullptr otherwise.
const Json* VolumeToken(const Json& volume) {
  if (const Json* t = k8s::Find(volume, {"serviceAccount", "serviceAccountToken"})) return t;
  const Json& sources = k8s::GetArray(volume, {"projected", "sources"});
  if (sources.size() == 1) return k8s::Find(sources[0], {"serviceAccountToken"});
  return nullptr;
}

// The value of `--<flag>=` in a container's args ("" when absent).
std::string ArgValue(const Json& container, std::string_view flag) {
  const std::string prefix = "--" + std::string(flag) + "=";
  for (const auto& a : k8s::GetArray(container, {"args"})) {
    if (a.is_string() && a.get<std::string>().rfind(prefix, 0) == 0) {
      return a.get<std::string>().substr(prefix.size());
    }
  }
  return "";
}

// The container's mount at `path` (nullptr when none).
const Json* MountAt(const Json& container, const std::string& path) {
  for (const auto& m : k8s::GetArray(container, {"volumeMounts"})) {
    if (k8s::GetString(m, {"mountPath"}) == path) return &m;
  }
  return nullptr;
}

bool SameSharedDir(std::string a, std::string b) {
  while (a.size() > 1 && a.back() == '/') a.pop_back();
  while (b.size() > 1 && b.back() == '/') b.pop_back();
  return a == b;
}

constexpr std::string_view kContainerPathGateOff =
    "VMI has ContainerPath volumes but the ContainerPathVolumes feature gate is disabled";

constexpr std::string_view kAnnotationFixed =
    ": Forbidden: may not be added, changed or removed after the VirtualMachineInstance is "
    "created (virt-controller copies it onto every launcher pod it renders, a migration "
    "target's too)";

}  // namespace

Verdict EvaluateVmiTokenVolumes(const AdmissionInput& in, const Policy& policy) {
  constexpr std::string_view kRule = kRuleVmiTokenVolumes;
  if (!policy.rules.vmi_token_volumes) return Outcome(kRule, kOutcomeDisabled);
  if (!in.Is("kubevirt.io", "VirtualMachineInstance")) return Outcome(kRule, kOutcomeSkipped);
  const std::string& op = in.call.operation();
  if ((op != "CREATE" && op != "UPDATE") || !in.object.is_object()) {
    return Outcome(kRule, kOutcomeSkipped);
  }
  const Json& vmi = in.object;
  const auto annotations = TokenAnnotations(vmi);
  const bool creating = op == "CREATE" || !in.old_object.is_object();
  if (!creating) {
    // A status or finalizer update (VMIs have no status subresource) changes neither.
    const auto before = TokenAnnotations(in.old_object);
    if (before != annotations) {
      std::vector<std::string> causes;
      std::set<std::string> keys;
      for (const auto& [k, v] : before) keys.insert(k);
      for (const auto& [k, v] : annotations) keys.insert(k);
      for (const auto& k : keys) {
        auto b = before.find(k);
        auto a = annotations.find(k);
        if (b == before.end() || a == annotations.end() || a->second != b->second) {
          causes.push_back(AnnotationField(k) + std::string(kAnnotationFixed));
        }
      }
      return Deny(kRule, causes, 422, "Invalid");
    }
    const Json* spec = k8s::Find(vmi, {"spec"});
    const Json* old_spec = k8s::Find(in.old_object, {"spec"});
    if ((spec == nullptr) == (old_spec == nullptr) && (spec == nullptr || *spec == *old_spec)) {
      return Outcome(kRule, kOutcomeSkipped);
    }
  }
  const std::string ns = in.Namespace();
  const Json& volumes = k8s::GetArray(vmi, {"spec", "volumes"});
  std::vector<std::string> causes;
  std::map<std::string, size_t> names;
  std::vector<TokenVolume> tokens;
  std::vector<ContainerPathVolume> container_paths;
  std::string sa_volume_name;
  int sa_volumes = 0;
  const std::string vf = "spec.volumes";
  for (size_t i = 0; i < volumes.size(); ++i) {
    const Json& vol = volumes[i];
    const std::string fld = Index(vf, i);
    std::string vname = k8s::GetString(vol, {"name"});
    if (auto it = names.find(vname); it != names.end()) {
      causes.push_back(fld + " and " + Index(vf, it->second) + " must not have the same Name.");
    } else {
      names[vname] = i;
    }
    if (SourceKeys(vol).size() != 1) {
      causes.push_back(fld + " must have exactly one source type set");
    }
    if (const Json* sa = k8s::Find(vol, {"serviceAccount"})) {
      ++sa_volumes;
      std::string sa_name = k8s::GetString(*sa, {"serviceAccountName"});
      if (sa_name.empty()) {
        causes.push_back(fld + ".serviceAccount.serviceAccountName is a required field");
      } else if (sa_volume_name.empty()) {
        sa_volume_name = sa_name;
      }
      if (const Json* token = k8s::Find(*sa, {"serviceAccountToken"})) {
        const std::string tf = fld + ".serviceAccount.serviceAccountToken";
        internal::ValidateServiceAccountToken(*token, tf, tf + ".path", policy, ns, causes);
        if (k8s::Find(*token, {"serviceAccountName"}) != nullptr) {
          causes.push_back(tf + ".serviceAccountName: " + std::string(kTokenServiceAccountRule));
        }
        tokens.push_back({i, vname, tf, token});
      }
    }
    if (const Json* cp = k8s::Find(vol, {"containerPath"})) {
      ValidateContainerPath(*cp, fld + ".containerPath", causes);
      const Json* ro = k8s::Find(*cp, {"readOnly"});
      container_paths.push_back({i, vname, k8s::GetString(*cp, {"path"}),
                                 ro != nullptr && !ro->is_null() ? ro : nullptr});
    }
    if (const Json* projected = k8s::Find(vol, {"projected"})) {
      const std::string pf = fld + ".projected";
      const Json& sources = k8s::GetArray(*projected, {"sources"});
      if (sources.empty()) causes.push_back(pf + ".sources: Required value");
      if (sources.size() > 1) {
        causes.push_back(pf + ".sources: Too many: " + std::to_string(sources.size()) +
                         ": must have at most 1 item (one virtiofs tag serves one token)");
      }
      if (const Json* mode = k8s::Find(*projected, {"defaultMode"});
          mode != nullptr && mode->is_number_integer() &&
          (mode->get<int64_t>() < 0 || mode->get<int64_t>() > 0777)) {
        causes.push_back(pf + ".defaultMode: Invalid value: " + mode->dump() +
                         ": must be a number between 0 and 0777 (octal), both inclusive");
      }
      for (size_t j = 0; j < sources.size(); ++j) {
        const std::string sf = Index(pf + ".sources", j);
        auto keys = SourceKeys(sources[j]);
        if (keys.size() > 1) {
          causes.push_back(sf + ": Forbidden: may not specify more than 1 volume type per source");
          continue;
        }
        if (keys.empty() || keys[0] != "serviceAccountToken") {
          causes.push_back(sf + ": Unsupported value: " + k8s::Quote(keys.empty() ? "" : keys[0]) +
                           ": supported values: \"serviceAccountToken\"");
          continue;
        }
        const Json& token = sources[j]["serviceAccountToken"];
        const std::string tf = sf + ".serviceAccountToken";
        // Kubernetes reports a missing path on the projected volume, not on the source.
        internal::ValidateServiceAccountToken(token, tf, pf + ".path", policy, ns, causes);
        if (k8s::Find(token, {"serviceAccountName"}) != nullptr) {
          causes.push_back(tf + ".serviceAccountName: " + std::string(kTokenServiceAccountRule));
        }
        tokens.push_back({i, vname, tf, &token});
      }
    }
  }
  if (sa_volumes > 1) causes.push_back("spec.volumes must have max one serviceAccount volume set");

  // Every volume needs a disk or a filesystem; token volumes only a virtiofs filesystem, because a
  // disk is a frozen ISO that never sees a rotated token.
  const Json& disks = k8s::GetArray(vmi, {"spec", "domain", "devices", "disks"});
  const Json& filesystems = k8s::GetArray(vmi, {"spec", "domain", "devices", "filesystems"});
  std::map<std::string, const TokenVolume*> token_volumes;
  for (const auto& t : tokens) token_volumes.emplace(t.name, &t);
  std::map<std::string, const ContainerPathVolume*> container_path_volumes;
  for (const auto& c : container_paths) container_path_volumes.emplace(c.name, &c);
  for (size_t i = 0; i < volumes.size(); ++i) {
    const Json& vol = volumes[i];
    if (k8s::Find(vol, {"memoryDump"}) != nullptr) continue;
    std::string vname = k8s::GetString(vol, {"name"});
    const Json* disk = k8s::FindNamed(disks, vname);
    const Json* fs = k8s::FindNamed(filesystems, vname);
    if (const Json* cp = k8s::Find(vol, {"containerPath"})) {
      if (disk != nullptr) {
        causes.push_back("ContainerPath volume '" + vname +
                         "' must be mapped to a filesystem, not a disk");
      } else if (fs == nullptr) {
        causes.push_back("ContainerPath volume '" + vname +
                         "' must have a matching filesystem defined in "
                         "spec.domain.devices.filesystems");
      }
      std::string path = k8s::GetString(*cp, {"path"});
      for (std::string_view prefix : kReservedPrefixes) {
        if (path.rfind(prefix, 0) == 0) {
          causes.push_back("ContainerPath volume '" + vname + "' uses reserved path prefix '" +
                           std::string(prefix) + "'");
          break;
        }
      }
      continue;
    }
    // Filesystems backed by storage need the alpha gate; config volumes do not (GA).
    if (fs != nullptr && !policy.feature_gates.virtiofs_storage_volumes &&
        (k8s::Find(vol, {"persistentVolumeClaim"}) != nullptr ||
         k8s::Find(vol, {"dataVolume"}) != nullptr)) {
      causes.push_back("virtiofs is not allowed: virtiofs feature gate is not enabled for PVC");
    }
    if (token_volumes.count(vname) != 0) {
      if (disk != nullptr) {
        causes.push_back("ServiceAccount token volume '" + vname +
                         "' must be mapped to a filesystem, not a disk");
      } else if (fs == nullptr) {
        causes.push_back("ServiceAccount token volume '" + vname +
                         "' must have a matching filesystem defined in "
                         "spec.domain.devices.filesystems");
      }
      continue;
    }
    if (disk == nullptr && fs == nullptr) {
      causes.push_back(Index(vf, i) + ".name '" + vname + "' not found.");
    }
  }
  for (size_t k = 0; k < filesystems.size(); ++k) {
    const std::string ff = Index("spec.domain.devices.filesystems", k);
    std::string fname = k8s::GetString(filesystems[k], {"name"});
    if (fname.size() > 36) {
      causes.push_back(ff + ".name '" + fname +
                       "' must be at most 36 bytes: it is the virtiofs tag the guest mounts");
    }
    if ((token_volumes.count(fname) != 0 || container_path_volumes.count(fname) != 0) &&
        k8s::Find(filesystems[k], {"virtiofs"}) == nullptr) {
      causes.push_back(ff + ".virtiofs is a required field");
    }
  }

  // VEP 250: spec.serviceAccountName names the pod's SA and must agree with the SA volume.
  std::string spec_sa = k8s::GetString(vmi, {"spec", "serviceAccountName"});
  if (!spec_sa.empty()) {
    auto errs = k8s::ValidateDns1123Subdomain(spec_sa);
    if (!errs.empty()) {
      causes.push_back("spec.serviceAccountName is not a valid service account name: " +
                       internal::JoinCauses(errs));
    }
    if (!sa_volume_name.empty() && sa_volume_name != spec_sa) {
      causes.push_back("spec.serviceAccountName " + k8s::Quote(spec_sa) +
                       " and serviceAccount volume " + k8s::Quote(sa_volume_name) +
                       " must reference the same service account");
    }
  }

  // The token requests: each names a containerPath volume (or is a VEP 94 volume's).
  std::map<std::string, TokenRequest> requests;  // by volume
  for (const auto& [key, value] : annotations) {
    if (key.rfind(kTokenAnnotationPrefix, 0) != 0) continue;
    const std::string volume = key.substr(kTokenAnnotationPrefix.size());
    const std::string af = AnnotationField(key);
    if (auto t = token_volumes.find(volume); t != token_volumes.end()) {
      // A VEP 94 volume's: its own checks above speak for the content; this must only agree.
      auto wanted = FromServiceAccountToken(*t->second->token);
      if (!wanted) continue;
      requests[volume] = *wanted;
      auto parsed = k8s::ParseJson(value, af);
      if (!parsed.ok() || *parsed != TokenRequestObject(*wanted)) {
        causes.push_back(af + ": Invalid value: must be " + TokenRequestJson(*wanted) + ", what " +
                         t->second->field + " asks for (wisp writes it from there)");
      }
      continue;
    }
    auto request = ParseTokenRequest(value, af, policy, ns, causes);
    if (request) requests[volume] = *request;
    auto it = names.find(volume);
    if (it == names.end()) {
      causes.push_back(af + ": Not found: spec.volumes has no volume " + k8s::Quote(volume));
      continue;
    }
    auto c = container_path_volumes.find(volume);
    if (c == container_path_volumes.end()) {
      causes.push_back(af + ": Invalid value: " + Index(vf, it->second) + " (" +
                       k8s::Quote(volume) +
                       ") is not a containerPath volume: the token is served to the guest from "
                       "the path a containerPath volume names");
      continue;
    }
    if (c->second->read_only == nullptr) {
      causes.push_back(Index(vf, it->second) + ".containerPath.readOnly: Required value: must be " +
                       "true for " + key + " (KubeVirt serves only read-only containerPath " +
                       "volumes)");
    }
  }
  for (const auto& [key, value] : annotations) {
    if (key.rfind(kTokenMountAnnotationPrefix, 0) != 0) continue;
    const std::string volume = key.substr(kTokenMountAnnotationPrefix.size());
    const std::string token_key = std::string(kTokenAnnotationPrefix) + volume;
    if (annotations.count(token_key) == 0 || container_path_volumes.count(volume) == 0) {
      causes.push_back(AnnotationField(key) +
                       ": Forbidden: wisp writes it, for a containerPath volume that a " +
                       token_key + " annotation names; remove it");
    }
  }
  if (!causes.empty()) return Deny(kRule, causes, 422, "Invalid");

  // What wisp's mutating webhook (EvaluateVmiTokenAnnotations) writes at CREATE: without it the
  // launcher pod would not learn of the token, or where it goes.
  if (creating) {
    for (const auto& t : tokens) {
      const std::string key = std::string(kTokenAnnotationPrefix) + t.name;
      if (annotations.count(key) == 0) {
        causes.push_back(t.field + ": annotation " + key +
                         " is missing: wisp's mutating webhook for VirtualMachineInstances did "
                         "not run, and without it the launcher pod never gets this token "
                         "(install the chart's virtualmachineinstances mutating webhook)");
      }
    }
    for (const auto& [volume, request] : requests) {
      auto c = container_path_volumes.find(volume);
      if (c == container_path_volumes.end()) continue;
      const std::string key = std::string(kTokenMountAnnotationPrefix) + volume;
      auto it = annotations.find(key);
      if (it == annotations.end() || it->second != c->second->path) {
        causes.push_back(AnnotationField(key) + ": " +
                         (it == annotations.end() ? "Required value"
                                                  : "Invalid value: " + k8s::Quote(it->second)) +
                         ": wisp's mutating webhook for VirtualMachineInstances writes the "
                         "containerPath " +
                         k8s::Quote(c->second->path) +
                         " there and did not run (install the chart's virtualmachineinstances "
                         "mutating webhook)");
      }
    }
    if (!causes.empty()) return Deny(kRule, causes, 422, "Invalid");
  }

  Verdict v = Outcome(kRule, kOutcomeAllowed);
  if (!container_paths.empty() && !policy.feature_gates.container_path_volumes) {
    // KubeVirt's admitter lets such a VMI in and its controller then refuses the pod; wisp does
    // the same on the virt-launcher pod and says so now.
    v.warnings.push_back("wisp: " + std::string(kContainerPathGateOff) +
                         " (policy featureGates); its virt-launcher pod will be refused");
  }
  std::string summary;
  for (const auto& [volume, request] : requests) {
    if (!summary.empty()) summary += ",";
    summary += volume;
  }
  if (!summary.empty()) v.audit_annotations["vmi-token-volumes"] = summary;
  return v;
}

Verdict EvaluateVmiTokenAnnotations(const AdmissionInput& in, const Policy& policy) {
  constexpr std::string_view kRule = kRuleVmiTokenAnnotations;
  if (!policy.rules.vmi_token_volumes) return Outcome(kRule, kOutcomeDisabled);
  if (!in.Is("kubevirt.io", "VirtualMachineInstance") || in.call.operation() != "CREATE" ||
      !in.object.is_object()) {
    return Outcome(kRule, kOutcomeSkipped);
  }
  const Json& vmi = in.object;
  const auto annotations = TokenAnnotations(vmi);
  std::map<std::string, std::string> writes;
  for (const auto& vol : k8s::GetArray(vmi, {"spec", "volumes"})) {
    const std::string name = k8s::GetString(vol, {"name"});
    if (name.empty()) continue;
    const std::string token_key = std::string(kTokenAnnotationPrefix) + name;
    if (const Json* token = VolumeToken(vol)) {
      // A user's own annotation stays: rule b refuses it unless it says the same.
      auto request = FromServiceAccountToken(*token);
      if (request && annotations.count(token_key) == 0) {
        writes[token_key] = TokenRequestJson(*request);
      }
    }
    const Json* path = k8s::Find(vol, {"containerPath", "path"});
    if (path != nullptr && path->is_string() && annotations.count(token_key) != 0) {
      const std::string mount_key = std::string(kTokenMountAnnotationPrefix) + name;
      auto it = annotations.find(mount_key);
      if (it == annotations.end() || it->second != path->get<std::string>()) {
        writes[mount_key] = path->get<std::string>();
      }
    }
  }
  if (writes.empty()) return Outcome(kRule, kOutcomeAllowed);
  Json out = vmi;
  Json& out_annotations = k8s::EnsureObject(out, {"metadata", "annotations"});
  std::string summary;
  for (const auto& [key, value] : writes) {
    out_annotations[key] = value;
    if (!summary.empty()) summary += ",";
    summary += key;
  }
  Verdict v = Outcome(kRule, kOutcomeMutated);
  v.patch = k8s::Diff(vmi, out).dump();
  v.mutated = std::move(out);
  v.audit_annotations["vmi-token-annotations"] = summary;
  return v;
}

Verdict EvaluateVirtLauncher(const AdmissionInput& in, const Policy& policy) {
  constexpr std::string_view kRule = kRuleVirtLauncher;
  if (!policy.rules.virt_launcher) return Outcome(kRule, kOutcomeDisabled);
  if (!internal::IsVirtLauncherPod(in) || in.call.operation() != "CREATE" ||
      !in.object.is_object()) {
    return Outcome(kRule, kOutcomeSkipped);
  }
  const Json& pod = in.object;
  // Everything comes from the pod: virt-controller copied the VMI's annotations onto it.
  const auto annotations = TokenAnnotations(pod);
  std::vector<std::pair<std::string, std::string>> requests;  // volume, annotation value
  bool container_path = false;
  for (const auto& [key, value] : annotations) {
    if (key.rfind(kTokenAnnotationPrefix, 0) == 0) {
      requests.emplace_back(key.substr(kTokenAnnotationPrefix.size()), value);
    } else {
      container_path = true;  // a wisp.dev/token-mount.<volume>
    }
  }
  if (requests.empty()) return Outcome(kRule, kOutcomeAllowed);
  if (container_path && !policy.feature_gates.container_path_volumes) {
    // virt-controller's lifecycle.go blocks the pod (event ContainerPathVolumesDisabled).
    return Deny(kRule, {std::string(kContainerPathGateOff)}, 403, "Forbidden");
  }
  Json out = pod;
  Json& containers = k8s::EnsureArray(out, {"spec", "containers"});
  size_t compute_index = containers.size();
  for (size_t i = 0; i < containers.size(); ++i) {
    if (k8s::GetString(containers[i], {"name"}) == "compute") compute_index = i;
  }
  const std::string image =
      compute_index < containers.size() ? k8s::GetString(containers[compute_index], {"image"}) : "";
  if (image.empty()) {
    return Deny(kRule,
                {"virt-launcher pod has no compute container with an image: the tokens its "
                 "wisp.dev/token.* annotations ask for cannot be served"},
                403, "Forbidden");
  }
  const bool guaranteed = ComputeWantsGuaranteedQos(containers[compute_index]);
  const std::string ns = in.Namespace();
  Json& volumes = k8s::EnsureArray(out, {"spec", "volumes"});
  std::vector<std::string> causes;
  std::vector<Json> added;
  std::string injected;
  std::string rewritten;
  for (const auto& [volume, text] : requests) {
    const std::string key = std::string(kTokenAnnotationPrefix) + volume;
    auto request = ParseTokenRequest(text, AnnotationField(key), policy, ns, causes);
    if (!request) continue;
    const std::string token_volume = std::string(kTokenVolumePrefix) + volume;
    const std::string container_name = "virtiofs-" + volume;
    const std::string data_dir = "/virtiofs-data/" + volume;
    Json& compute = containers[compute_index];

    // 1. The projected token (the API server may have defaulted defaultMode since: compare the
    //    token only).
    Json source = {{"expirationSeconds", request->expiration_seconds}, {"path", request->path}};
    if (!request->audience.empty()) source["audience"] = request->audience;
    if (const Json* existing = k8s::FindNamed(volumes, token_volume)) {
      const Json& sources = k8s::GetArray(*existing, {"projected", "sources"});
      const Json* token =
          sources.size() == 1 ? k8s::Find(sources[0], {"serviceAccountToken"}) : nullptr;
      if (token == nullptr || *token != source) {
        causes.push_back("spec.volumes: volume " + k8s::Quote(token_volume) +
                         " exists and is not the token " + key + " asks for");
        continue;
      }
    } else {
      volumes.push_back(
          {{"name", token_volume},
           {"projected", {{"sources", Json::array({{{"serviceAccountToken", source}}})}}}});
    }

    // 2. The virtiofs container: wisp's (again), virt-controller's VEP 94 one, or someone else's.
    Json* existing = nullptr;
    for (auto& c : containers) {
      if (k8s::GetString(c, {"name"}) == container_name) existing = &c;
    }
    if (existing != nullptr) {
      const std::string shared = ArgValue(*existing, "shared-dir");
      const Json* data = MountAt(*existing, data_dir);
      if (SameSharedDir(shared, data_dir) && data != nullptr &&
          k8s::GetString(*data, {"name"}) == token_volume) {
        continue;  // wisp's own, from an earlier pass
      }
      if (SameSharedDir(shared, std::string(kServiceAccountSharedDir))) {
        // virt-controller's container for a VEP 94 serviceAccount volume shares the pod's
        // API-audience token: point it at the requested one instead.
        for (auto& a : (*existing)["args"]) {
          if (a.is_string() && a.get<std::string>().rfind("--shared-dir=", 0) == 0) {
            a = "--shared-dir=" + data_dir;
          }
        }
        const Json translate = "--translate-uid=host:107:0:1";
        bool has_translate = false;
        for (const auto& a : (*existing)["args"]) has_translate = has_translate || a == translate;
        if (!has_translate) (*existing)["args"].push_back(translate);
        if (data == nullptr) {
          k8s::EnsureArray(*existing, {"volumeMounts"})
              .push_back({{"name", token_volume}, {"mountPath", data_dir}, {"readOnly", true}});
        }
        if (!rewritten.empty()) rewritten += ",";
        rewritten += container_name;
        continue;
      }
      const std::string source_volume = data != nullptr ? k8s::GetString(*data, {"name"}) : "";
      causes.push_back(
          "container " + container_name + " already exists and shares " +
          (source_volume.empty() ? k8s::Quote(shared) : "volume " + k8s::Quote(source_volume)) +
          ", not " + k8s::Quote(token_volume) + " that " + key +
          " asks for (KubeVirt's launcher-pod mutator renders it for a mount another webhook "
          "made at the containerPath): wisp does not serve a second token under one tag; use "
          "another containerPath path or drop one of the two");
      continue;
    }

    // 3. The compute mount at the containerPath (wisp.dev/token-mount.<volume>), unless another
    //    webhook already put something there.
    if (auto mp = annotations.find(std::string(kTokenMountAnnotationPrefix) + volume);
        mp != annotations.end()) {
      const std::string& path = mp->second;
      std::string sub_path;
      const Json* covering = FindVolumeMountForPath(compute, path, &sub_path);
      if (covering == nullptr) {
        k8s::EnsureArray(compute, {"volumeMounts"})
            .push_back({{"name", token_volume}, {"mountPath", path}, {"readOnly", true}});
      } else if (k8s::GetString(*covering, {"name"}) != token_volume || !sub_path.empty()) {
        causes.push_back(
            "the compute container already mounts volume " +
            k8s::Quote(k8s::GetString(*covering, {"name"})) + " at " +
            k8s::Quote(k8s::GetString(*covering, {"mountPath"})) + ", which " +
            (sub_path.empty() ? "is" : "covers") + " the containerPath " + k8s::Quote(path) +
            " of " + key +
            " (another webhook, e.g. the EKS pod identity webhook, injected it): wisp does not "
            "put a second token at that path; use another containerPath path or drop one of "
            "the two");
        continue;
      }
    }
    // KubeVirt's launcher-pod mutator renders the same container for a containerPath (it skips
    // a volume whose container exists, so whichever runs first, this one stands).
    added.push_back(VirtiofsContainer(
        volume, image, VirtiofsArgs(volume, true),
        {{"name", token_volume}, {"mountPath", data_dir}, {"readOnly", true}}, guaranteed));
    if (!injected.empty()) injected += ",";
    injected += container_name;
  }
  if (!causes.empty()) return Deny(kRule, causes, 403, "Forbidden");
  if (!added.empty()) {
    // The socket directory the compute container's libvirt connects to (KubeVirt's withVirtioFS).
    Json& compute = containers[compute_index];
    if (k8s::FindNamed(volumes, kVirtiofsVolume) == nullptr) {
      volumes.push_back({{"name", kVirtiofsVolume}, {"emptyDir", Json::object()}});
    }
    bool compute_mounted = false;
    for (const auto& m : k8s::GetArray(compute, {"volumeMounts"})) {
      if (k8s::GetString(m, {"name"}) == kVirtiofsVolume) compute_mounted = true;
    }
    if (!compute_mounted) {
      k8s::EnsureArray(compute, {"volumeMounts"})
          .push_back({{"name", kVirtiofsVolume}, {"mountPath", kVirtiofsSocketDir}});
    }
    for (auto& c : added) containers.push_back(std::move(c));
  }
  Verdict v;
  const Json patch = k8s::Diff(pod, out);
  v.rule_outcomes[std::string(kRule)] =
      std::string(patch.empty() ? kOutcomeAllowed : kOutcomeMutated);
  if (!injected.empty()) v.audit_annotations["virtiofs-containers"] = injected;
  if (!rewritten.empty()) v.audit_annotations["virtiofs-containers-rewritten"] = rewritten;
  if (!patch.empty()) {
    v.patch = patch.dump();
    v.mutated = std::move(out);
  }
  return v;
}

}  // namespace wisp::policy
