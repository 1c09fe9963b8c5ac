// Rules b and c: VirtualMachineInstance token volumes (KubeVirt VEP 94, with the mechanics of the
// serviceAccount/containerPath code that shipped) and the virt-launcher pods that serve them.
#include <cmath>
#include <set>

#include "rules_internal.hpp"
#include "wisp/bus/subjects.hpp"
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
  bool read_only_explicit;
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

// vmipredicates.WantsToHaveQOSGuaranteed: cpu and memory requested, non-zero, equal to limits.
bool WantsGuaranteedQos(const Json& vmi) {
  for (const char* res : {"cpu", "memory"}) {
    std::string req = k8s::GetString(vmi, {"spec", "domain", "resources", "requests", res});
    std::string lim = k8s::GetString(vmi, {"spec", "domain", "resources", "limits", res});
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
// 1M/80M memory; dedicated CPUs or guaranteed QoS raise the cpu request to the limit, guaranteed
// QoS (which dedicated CPUs imply, as in the launcher-pod mutator) the memory request too.
Json VirtiofsResources(const v1::VmiTokenRecord& record) {
  const bool dedicated = record.dedicated_cpus();
  const bool guaranteed = dedicated || record.guaranteed_qos();
  return {
      {"requests",
       {{"cpu", dedicated || guaranteed ? "100m" : "10m"}, {"memory", guaranteed ? "80M" : "1M"}}},
      {"limits", {{"cpu", "100m"}, {"memory", "80M"}}}};
}

Json VirtiofsContainer(const std::string& volume, const std::string& image, Json args,
                       Json data_mount, const v1::VmiTokenRecord& record) {
  return {
      {"name", "virtiofs-" + volume},
      {"image", image},
      {"imagePullPolicy", "IfNotPresent"},
      {"command", Json::array({"/usr/libexec/virtiofsd"})},
      {"args", std::move(args)},
      {"volumeMounts", Json::array({{{"name", kVirtiofsVolume}, {"mountPath", kVirtiofsSocketDir}},
                                    std::move(data_mount)})},
      {"resources", VirtiofsResources(record)},
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

bool IsSupportedContainerPathVolume(const Json& volume) {
  for (const char* type : {"configMap", "secret", "projected", "downwardAPI", "emptyDir"}) {
    if (k8s::Find(volume, {type}) != nullptr) return true;
  }
  return false;
}

bool HasServiceAccountTokenSource(const Json& volume) {
  for (const auto& src : k8s::GetArray(volume, {"projected", "sources"})) {
    if (k8s::Find(src, {"serviceAccountToken"}) != nullptr) return true;
  }
  return false;
}

constexpr std::string_view kContainerPathGateOff =
    "VMI has ContainerPath volumes but the ContainerPathVolumes feature gate is disabled";

}  // namespace

Verdict EvaluateVmiTokenVolumes(const AdmissionInput& in, const Policy& policy) {
  constexpr std::string_view kRule = kRuleVmiTokenVolumes;
  if (!policy.rules.vmi_token_volumes) return Outcome(kRule, kOutcomeDisabled);
  if (!in.Is("kubevirt.io", "VirtualMachineInstance")) return Outcome(kRule, kOutcomeSkipped);
  const std::string ns = in.Namespace();
  const std::string name = in.Name();
  if (in.call.operation() == "DELETE") {
    Verdict v = Outcome(kRule, kOutcomeAllowed);
    v.writes.push_back({std::string(bus::buckets::kPods), VmiRecordKey(ns, name), "", true});
    return v;
  }
  if (in.call.operation() != "CREATE" && in.call.operation() != "UPDATE") {
    return Outcome(kRule, kOutcomeSkipped);
  }
  const Json& vmi = in.object;
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
        tokens.push_back({i, vname, token});
      }
    }
    if (const Json* cp = k8s::Find(vol, {"containerPath"})) {
      ValidateContainerPath(*cp, fld + ".containerPath", causes);
      const Json* ro = k8s::Find(*cp, {"readOnly"});
      container_paths.push_back({i, vname, k8s::GetString(*cp, {"path"}),
                                 ro != nullptr && ro->is_boolean() && ro->get<bool>()});
    }
    if (const Json* projected = k8s::Find(vol, {"projected"})) {
      const std::string pf = fld + ".projected";
      const Json& sources = k8s::GetArray(*projected, {"sources"});
      if (sources.empty()) causes.push_back(pf + ".sources: Required value");
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
        // Kubernetes reports a missing path on the projected volume, not on the source.
        internal::ValidateServiceAccountToken(token, sf + ".serviceAccountToken", pf + ".path",
                                              policy, ns, causes);
        tokens.push_back({i, vname, &token});
      }
    }
  }
  if (sa_volumes > 1) causes.push_back("spec.volumes must have max one serviceAccount volume set");

  // Every volume needs a disk or a filesystem; token volumes only a virtiofs filesystem, because a
  // disk is a frozen ISO that never sees a rotated token.
  const Json& disks = k8s::GetArray(vmi, {"spec", "domain", "devices", "disks"});
  const Json& filesystems = k8s::GetArray(vmi, {"spec", "domain", "devices", "filesystems"});
  std::set<std::string> token_names;
  for (const auto& t : tokens) token_names.insert(t.name);
  std::set<std::string> container_path_names;
  for (const auto& c : container_paths) container_path_names.insert(c.name);
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
    if (token_names.count(vname) != 0) {
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
    if ((token_names.count(fname) != 0 || container_path_names.count(fname) != 0) &&
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
  if (!causes.empty()) return Deny(kRule, causes, 422, "Invalid");

  Verdict v = Outcome(kRule, kOutcomeAllowed);
  if (!container_paths.empty() && !policy.feature_gates.container_path_volumes) {
    // KubeVirt's admitter lets such a VMI in and its controller then refuses the pod; wisp does
    // the same on the virt-launcher pod and says so now.
    v.warnings.push_back("wisp: " + std::string(kContainerPathGateOff) +
                         " (policy featureGates); its virt-launcher pod will be refused");
  }
  if (tokens.empty() && container_paths.empty()) return v;
  v1::VmiTokenRecord record;
  record.set_namespace_(ns);
  record.set_name(name);
  record.set_uid(k8s::GetString(vmi, {"metadata", "uid"}));
  record.set_service_account_name(spec_sa.empty() ? sa_volume_name : spec_sa);
  record.set_admitted_unix(in.now_unix);
  std::string summary;
  for (const auto& t : tokens) {
    auto* tv = record.add_volumes();
    tv->set_name(t.name);
    tv->set_audience(k8s::GetString(*t.token, {"audience"}));
    tv->set_expiration_seconds(k8s::GetInt(*t.token, {"expirationSeconds"}).value_or(3600));
    tv->set_path(k8s::GetString(*t.token, {"path"}));
    if (!summary.empty()) summary += ",";
    summary += t.name;
  }
  std::string cp_summary;
  for (const auto& c : container_paths) {
    auto* cv = record.add_container_path_volumes();
    cv->set_name(c.name);
    cv->set_path(c.path);
    cv->set_read_only_explicit(c.read_only_explicit);
    if (!cp_summary.empty()) cp_summary += ",";
    cp_summary += c.name;
  }
  record.set_dedicated_cpus(k8s::GetBool(vmi, {"spec", "domain", "cpu", "dedicatedCpuPlacement"}));
  record.set_guaranteed_qos(WantsGuaranteedQos(vmi));
  v.writes.push_back({std::string(bus::buckets::kPods), VmiRecordKey(ns, name),
                      record.SerializeAsString(), false});
  if (!summary.empty()) v.audit_annotations["vmi-token-volumes"] = summary;
  if (!cp_summary.empty()) v.audit_annotations["vmi-containerpath-volumes"] = cp_summary;
  return v;
}

Verdict EvaluateVirtLauncher(const AdmissionInput& in, const Policy& policy,
                             const RecordLookup& lookup) {
  constexpr std::string_view kRule = kRuleVirtLauncher;
  if (!policy.rules.virt_launcher) return Outcome(kRule, kOutcomeDisabled);
  if (!internal::IsVirtLauncherPod(in) || in.call.operation() != "CREATE" ||
      !in.object.is_object()) {
    return Outcome(kRule, kOutcomeSkipped);
  }
  const Json& pod = in.object;
  const std::string ns = in.Namespace();
  std::string vmi_name;
  for (const auto& owner : k8s::GetArray(pod, {"metadata", "ownerReferences"})) {
    if (k8s::GetString(owner, {"kind"}) == "VirtualMachineInstance") {
      vmi_name = k8s::GetString(owner, {"name"});
    }
  }
  // Every failure path allows the pod unchanged, as KubeVirt's launcher-pod mutator does.
  if (vmi_name.empty()) {
    Verdict v = Outcome(kRule, kOutcomeAllowed);
    v.warnings.push_back(
        "wisp: virt-launcher pod has no VirtualMachineInstance owner; token "
        "volumes not injected");
    return v;
  }
  auto raw = lookup(bus::buckets::kPods, VmiRecordKey(ns, vmi_name));
  if (!raw.ok() || !raw->has_value()) {
    Verdict v = Outcome(kRule, raw.ok() ? kOutcomeAllowed : kOutcomeError);
    v.warnings.push_back("wisp: no token-volume record for VirtualMachineInstance " + ns + "/" +
                         vmi_name +
                         (raw.ok() ? "" : " (" + std::string(raw.status().message()) + ")") +
                         "; token volumes not injected");
    return v;
  }
  v1::VmiTokenRecord record;
  if (!record.ParseFromString(**raw)) {
    Verdict v = Outcome(kRule, kOutcomeError);
    v.warnings.push_back("wisp: the token-volume record for VirtualMachineInstance " + ns + "/" +
                         vmi_name + " is unreadable; token volumes not injected");
    return v;
  }
  if (record.container_path_volumes_size() > 0 && !policy.feature_gates.container_path_volumes) {
    // virt-controller's lifecycle.go blocks the pod (event ContainerPathVolumesDisabled).
    return Deny(kRule, {std::string(kContainerPathGateOff)}, 403, "Forbidden");
  }
  Verdict v;
  Json out = pod;
  Json& containers = k8s::EnsureArray(out, {"spec", "containers"});
  Json* compute = nullptr;
  for (auto& c : containers) {
    if (k8s::GetString(c, {"name"}) == "compute") compute = &c;
  }
  std::string image = compute != nullptr ? k8s::GetString(*compute, {"image"}) : "";
  if (compute == nullptr || image.empty()) {
    Verdict w = Outcome(kRule, kOutcomeAllowed);
    w.warnings.push_back(
        "wisp: virt-launcher pod has no compute container; token volumes not "
        "injected");
    return w;
  }
  Json& volumes = k8s::EnsureArray(out, {"spec", "volumes"});
  // A projected serviceAccountToken needs the pod's serviceAccountName (Kubernetes forbids it
  // otherwise); KubeVirt renders the VMI's service account there.
  if (record.volumes_size() > 0 && k8s::GetString(out, {"spec", "serviceAccountName"}).empty() &&
      !record.service_account_name().empty()) {
    out["spec"]["serviceAccountName"] = record.service_account_name();
  }
  std::vector<Json> sidecars;
  std::string injected;
  auto add = [&](const std::string& volume, Json container) {
    sidecars.push_back(std::move(container));
    if (!injected.empty()) injected += ",";
    injected += "virtiofs-" + volume;
  };
  // The socket directory the compute container's libvirt connects to (KubeVirt's withVirtioFS).
  auto ensure_socket_dir = [&]() {
    if (k8s::FindNamed(volumes, kVirtiofsVolume) == nullptr) {
      volumes.push_back({{"name", kVirtiofsVolume}, {"emptyDir", Json::object()}});
    }
    bool compute_mounted = false;
    for (const auto& m : k8s::GetArray(*compute, {"volumeMounts"})) {
      if (k8s::GetString(m, {"name"}) == kVirtiofsVolume) compute_mounted = true;
    }
    if (!compute_mounted) {
      k8s::EnsureArray(*compute, {"volumeMounts"})
          .push_back({{"name", kVirtiofsVolume}, {"mountPath", kVirtiofsSocketDir}});
    }
  };
  if (record.volumes_size() > 0) ensure_socket_dir();
  for (const auto& tv : record.volumes()) {
    const std::string container = "virtiofs-" + tv.name();
    const Json* existing = k8s::FindNamed(volumes, tv.name());
    if (existing != nullptr && k8s::Find(*existing, {"projected"}) == nullptr) {
      v.warnings.push_back("wisp: pod volume " + k8s::Quote(tv.name()) +
                           " exists and is not a projected volume; token volume skipped");
      continue;
    }
    if (existing == nullptr) {
      Json token = {{"expirationSeconds", tv.expiration_seconds()}, {"path", tv.path()}};
      if (!tv.audience().empty()) token["audience"] = tv.audience();
      volumes.push_back(
          {{"name", tv.name()},
           {"projected", {{"sources", Json::array({{{"serviceAccountToken", token}}})}}}});
    }
    if (k8s::FindNamed(containers, container) != nullptr) continue;  // idempotent
    add(tv.name(),
        VirtiofsContainer(
            tv.name(), image, VirtiofsArgs(tv.name(), true),
            {{"name", tv.name()}, {"mountPath", "/virtiofs-data/" + tv.name()}, {"readOnly", true}},
            record));
  }
  // VEP 165: what the virt-api launcher-pod mutator adds, after other webhooks (IRSA, Vault) have
  // injected the volumes the paths point into. Each skip is a warning; the pod is still allowed.
  for (const auto& cp : record.container_path_volumes()) {
    const std::string container = "virtiofs-" + cp.name();
    if (k8s::FindNamed(containers, container) != nullptr) continue;  // idempotent
    if (!cp.read_only_explicit()) {
      v.warnings.push_back("wisp: ContainerPath volume " + cp.name() +
                           " does not have readOnly=true; skipping virtiofs container");
      continue;
    }
    std::string sub_path;
    const Json* mount = FindVolumeMountForPath(*compute, cp.path(), &sub_path);
    if (mount == nullptr) {
      v.warnings.push_back("wisp: No volumeMount found for containerPath " + cp.path() +
                           " in volume " + cp.name());
      continue;
    }
    const std::string pod_volume = k8s::GetString(*mount, {"name"});
    const Json* backing = k8s::FindNamed(volumes, pod_volume);
    if (backing == nullptr) {
      v.warnings.push_back("wisp: Pod volume " + pod_volume +
                           " not found for containerPath volume " + cp.name());
      continue;
    }
    if (!IsSupportedContainerPathVolume(*backing)) {
      v.warnings.push_back("wisp: Pod volume " + pod_volume +
                           " has unsupported type for containerPath volume " + cp.name() +
                           "; supported types are: ConfigMap, Secret, Projected, DownwardAPI, "
                           "EmptyDir");
      continue;
    }
    Json data_mount = {{"name", pod_volume}, {"mountPath", "/virtiofs-data/" + cp.name()}};
    if (!sub_path.empty()) data_mount["subPath"] = sub_path;
    data_mount["readOnly"] = true;
    add(cp.name(),
        VirtiofsContainer(cp.name(), image,
                          VirtiofsArgs(cp.name(), HasServiceAccountTokenSource(*backing)),
                          std::move(data_mount), record));
  }
  if (!sidecars.empty()) ensure_socket_dir();
  for (auto& s : sidecars) containers.push_back(std::move(s));
  const Json patch = k8s::Diff(pod, out);
  v.rule_outcomes[std::string(kRule)] =
      std::string(patch.empty() ? kOutcomeAllowed : kOutcomeMutated);
  if (!injected.empty()) v.audit_annotations["virtiofs-containers"] = injected;
  if (!patch.empty()) {
    v.patch = patch.dump();
    v.mutated = std::move(out);
  }
  return v;
}

}  // namespace wisp::policy
