#include "cluster/source_ca.hpp"

#include "absl/strings/escaping.h"

#include <map>

#include "cluster/populate_plan.hpp"
#include "wisp/k8s/objects.hpp"
#include "wisp/status/status.hpp"

namespace wisp::gateway::cluster {
namespace {

using Json = kube::Json;

// The object, nullopt when the apiserver says NotFound (the object, or its kind's API).
absl::StatusOr<std::optional<Json>> GetIfExists(kube::Client& client,
                                                const kube::Resource& resource,
                                                const std::string& ns, const std::string& name) {
  auto got = client.Get(resource, ns, name);
  if (absl::IsNotFound(got.status())) return std::nullopt;
  if (!got.ok())
    return Annotate(got.status(), "reading " + resource.plural + " " + ns + "/" + name);
  return std::optional<Json>(*std::move(got));
}

}  // namespace

std::string CaBundle(const Json& config_map) {
  std::map<std::string, std::string> values;  // key order, as the mounted files are read
  if (const Json* data = k8s::Find(config_map, {"data"}); data != nullptr && data->is_object()) {
    for (auto it = data->begin(); it != data->end(); ++it) {
      if (it.value().is_string()) values[it.key()] = it.value().get<std::string>();
    }
  }
  if (const Json* binary = k8s::Find(config_map, {"binaryData"});
      binary != nullptr && binary->is_object()) {
    for (auto it = binary->begin(); it != binary->end(); ++it) {
      std::string decoded;
      if (it.value().is_string() && absl::Base64Unescape(it.value().get<std::string>(), &decoded)) {
        values[it.key()] = std::move(decoded);
      }
    }
  }
  std::string bundle;
  for (auto& [key, value] : values) {
    if (key.empty() || key[0] == '.') continue;
    bundle += value;
    if (!value.empty() && value.back() != '\n') bundle += '\n';
  }
  return bundle;
}

absl::StatusOr<std::optional<v1::SourceCa>> ReadSourceCa(kube::Client& client,
                                                         const std::string& ns,
                                                         const std::string& pvc_name) {
  WISP_ASSIGN_OR_RETURN(std::optional<Json> pvc,
                        GetIfExists(client, kube::kPersistentVolumeClaims, ns, pvc_name));
  if (!pvc) return std::nullopt;
  if (std::string target = PrimeFor(*pvc); !target.empty()) {
    WISP_ASSIGN_OR_RETURN(pvc, GetIfExists(client, kube::kPersistentVolumeClaims, ns, target));
    if (!pvc) return std::nullopt;
  }
  const std::string claim = k8s::GetString(*pvc, {"metadata", "name"});
  std::optional<Json> owner;
  std::string what;  // "<kind> <ns>/<name>", for messages
  const Json* ref = k8s::Find(*pvc, {"spec", "dataSourceRef"});
  if (ref != nullptr && IsPopulatedKind(*ref)) {
    const std::string group = k8s::GetString(*ref, {"apiGroup"});
    const std::string name = k8s::GetString(*ref, {"name"});
    const kube::Resource& resource =
        group == "wisp.dev" ? kube::kVolumeImportSources : kube::kCdiVolumeImportSources;
    WISP_ASSIGN_OR_RETURN(owner, GetIfExists(client, resource, ns, name));
    what = group + " VolumeImportSource " + ns + "/" + name;
  } else if (ref == nullptr) {
    WISP_ASSIGN_OR_RETURN(owner, GetIfExists(client, kube::kDataVolumes, ns, claim));
    what = "DataVolume " + ns + "/" + claim;
  }
  if (!owner) return std::nullopt;
  const std::string config_map =
      k8s::GetString(*owner, {"spec", "source", "http", "certConfigMap"});
  if (config_map.empty()) return std::nullopt;
  const std::string named = "ConfigMap " + ns + "/" + config_map + ", named by " + what +
                            " spec.source.http.certConfigMap, ";
  WISP_ASSIGN_OR_RETURN(std::optional<Json> cm,
                        GetIfExists(client, kube::kConfigMaps, ns, config_map));
  if (!cm) return absl::UnavailableError(named + "does not exist yet; retry");
  v1::SourceCa ca;
  ca.set_config_map(config_map);
  ca.set_ca_pem(CaBundle(*cm));
  if (ca.ca_pem().find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return absl::FailedPreconditionError(named + "holds no PEM certificate");
  }
  return ca;
}

}  // namespace wisp::gateway::cluster
