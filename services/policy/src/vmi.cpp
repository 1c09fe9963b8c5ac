// Rules b and c: VirtualMachineInstance token volumes (KubeVirt VEP 94, with the mechanics of the
// serviceAccount/containerPath code that shipped) and the virt-launcher pods that serve them.
#include <set>

#include "policy/src/rules_internal.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/k8s/json_patch.hpp"
#include "wisp/k8s/objects.hpp"

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
    if (const Json* projected = k8s::Find(vol, {"projected"})) {
      const std::string pf = fld + ".projected";
      const Json& sources = k8s::GetArray(*projected, {"sources"});
      if (sources.empty()) causes.push_back(pf + ".sources: Required value");
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
  for (size_t i = 0; i < volumes.size(); ++i) {
    const Json& vol = volumes[i];
    if (k8s::Find(vol, {"memoryDump"}) != nullptr) continue;
    std::string vname = k8s::GetString(vol, {"name"});
    const Json* disk = k8s::FindNamed(disks, vname);
    const Json* fs = k8s::FindNamed(filesystems, vname);
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
    if (token_names.count(fname) != 0 && k8s::Find(filesystems[k], {"virtiofs"}) == nullptr) {
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
  if (tokens.empty()) return v;
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
  v.writes.push_back({std::string(bus::buckets::kPods), VmiRecordKey(ns, name),
                      record.SerializeAsString(), false});
  v.audit_annotations["vmi-token-volumes"] = summary;
  return v;
}

Verdict EvaluateVirtLauncher(const AdmissionInput& in, const Policy& policy,
                             const RecordLookup& lookup) {
  constexpr std::string_view kRule = kRuleVirtLauncher;
  if (!policy.rules.virt_launcher) return Outcome(kRule, kOutcomeDisabled);
  if (!in.Is("", "Pod") || in.call.operation() != "CREATE" || !in.object.is_object() ||
      k8s::Label(in.object, "kubevirt.io") != "virt-launcher") {
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
  // The socket directory the compute container's libvirt connects to.
  Json& volumes = k8s::EnsureArray(out, {"spec", "volumes"});
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
  // A projected serviceAccountToken needs the pod's serviceAccountName (Kubernetes forbids it
  // otherwise); KubeVirt renders the VMI's service account there.
  if (k8s::GetString(out, {"spec", "serviceAccountName"}).empty() &&
      !record.service_account_name().empty()) {
    out["spec"]["serviceAccountName"] = record.service_account_name();
  }
  std::vector<Json> sidecars;
  std::string injected;
  for (const auto& tv : record.volumes()) {
    const std::string container = "virtiofs-" + tv.name();
    const std::string data_dir = "/virtiofs-data/" + tv.name();
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
    sidecars.push_back({
        {"name", container},
        {"image", image},
        {"command", Json::array({"/usr/libexec/virtiofsd"})},
        {"args", Json::array({"--socket-path=" + std::string(kVirtiofsSocketDir) + "/" + tv.name() +
                                  ".sock",
                              "--shared-dir=" + data_dir, "--sandbox=none", "--cache=auto",
                              "--migration-on-error=guest-error", "--migration-mode=find-paths",
                              "--translate-uid=host:107:0:1"})},
        {"volumeMounts",
         Json::array({{{"name", kVirtiofsVolume}, {"mountPath", kVirtiofsSocketDir}},
                      {{"name", tv.name()}, {"mountPath", data_dir}, {"readOnly", true}}})},
        {"resources",
         {{"requests", {{"cpu", "10m"}, {"memory", "1M"}}},
          {"limits", {{"cpu", "100m"}, {"memory", "80M"}}}}},
        {"securityContext",
         {{"runAsUser", 107},
          {"runAsGroup", 107},
          {"runAsNonRoot", true},
          {"allowPrivilegeEscalation", false},
          {"capabilities", {{"drop", Json::array({"ALL"})}}}}},
    });
    if (!injected.empty()) injected += ",";
    injected += container;
  }
  for (auto& s : sidecars) containers.push_back(std::move(s));
  v.patch = k8s::Diff(pod, out);
  v.rule_outcomes[std::string(kRule)] =
      std::string(v.patch.empty() ? kOutcomeAllowed : kOutcomeMutated);
  if (!injected.empty()) v.audit_annotations["virtiofs-containers"] = injected;
  v.mutated = std::move(out);
  return v;
}

}  // namespace wisp::policy
