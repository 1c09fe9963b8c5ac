#include "wisp/policy/policy.hpp"

#include <set>

#include <yaml-cpp/yaml.h>

#include "wisp/config/flags.hpp"
#include "wisp/fsutil/read_file.hpp"
#include "wisp/k8s/quantity.hpp"

namespace wisp::policy {
namespace {

absl::Status Bad(const std::string& key, const std::string& problem) {
  return absl::InvalidArgumentError(key + ": " + problem);
}

absl::Status CheckKeys(const YAML::Node& node, const std::string& prefix,
                       const std::set<std::string>& allowed) {
  if (!node.IsMap()) return Bad(prefix.empty() ? "policy" : prefix, "must be a mapping");
  for (const auto& kv : node) {
    std::string key = kv.first.as<std::string>();
    if (allowed.count(key) == 0) {
      return Bad(prefix.empty() ? key : prefix + "." + key, "unknown key");
    }
  }
  return absl::OkStatus();
}

std::string Scalar(const YAML::Node& node) { return node.IsScalar() ? node.Scalar() : ""; }

absl::Status ReadBool(const YAML::Node& node, const std::string& key, bool* out) {
  if (!node) return absl::OkStatus();
  std::string v = Scalar(node);
  if (v == "true" || v == "True") {
    *out = true;
  } else if (v == "false" || v == "False") {
    *out = false;
  } else {
    return Bad(key, "\"" + v + "\" is not true or false");
  }
  return absl::OkStatus();
}

absl::Status ReadString(const YAML::Node& node, const std::string& key, std::string* out) {
  if (!node) return absl::OkStatus();
  if (!node.IsScalar()) return Bad(key, "must be a string");
  *out = node.Scalar();
  return absl::OkStatus();
}

absl::Status ReadSeconds(const YAML::Node& node, const std::string& key, int64_t* out) {
  if (!node) return absl::OkStatus();
  std::string v = Scalar(node);
  if (v.empty()) return Bad(key, "must be a number of seconds or a duration such as 1h");
  bool digits = v.find_first_not_of("0123456789") == std::string::npos;
  if (digits) {
    if (v.size() > 12) return Bad(key, "\"" + v + "\" is too large");
    *out = std::stoll(v);
  } else {
    auto d = config::ParseDuration(v);
    if (!d.ok()) return Bad(key, "\"" + v + "\" is not a duration");
    *out = std::chrono::duration_cast<std::chrono::seconds>(*d).count();
  }
  return absl::OkStatus();
}

absl::Status ReadQuantity(const YAML::Node& node, const std::string& key, std::string* out) {
  if (!node) return absl::OkStatus();
  std::string v = Scalar(node);
  auto q = k8s::ParseQuantity(v);
  if (!q.ok()) return Bad(key, "\"" + v + "\": " + std::string(q.status().message()));
  *out = v;
  return absl::OkStatus();
}

// An https URL (the STS or authority host a preset's SDK calls).
absl::Status ReadHttpsUrl(const YAML::Node& node, const std::string& key, std::string* out) {
  WISP_RETURN_IF_ERROR(ReadString(node, key, out));
  if (out->rfind("https://", 0) != 0 || out->size() <= 8) {
    return Bad(key, "\"" + *out + "\" is not an https URL");
  }
  return absl::OkStatus();
}

// identityPresets (rule g): each preset's lifetime is checked against maxTokenLifetime here, once
// set in the file; a default above it is capped at admission instead.
absl::Status ParsePresets(const YAML::Node& node, Policy& p) {
  if (!node) return absl::OkStatus();
  const std::string k = "identityPresets";
  WISP_RETURN_IF_ERROR(
      CheckKeys(node, k, {"upstreamAnnotations", "tokenSource", "aws", "azure", "gcp", "generic"}));
  IdentityPresets& ip = p.presets;
  WISP_RETURN_IF_ERROR(
      ReadBool(node["upstreamAnnotations"], k + ".upstreamAnnotations", &ip.upstream_annotations));
  WISP_RETURN_IF_ERROR(ReadString(node["tokenSource"], k + ".tokenSource", &ip.token_source));
  if (ip.token_source != "wisp" && ip.token_source != "kubelet") {
    return Bad(k + ".tokenSource", "\"" + ip.token_source + "\" is not one of wisp, kubelet");
  }
  auto lifetime = [&](const YAML::Node& n, const std::string& key, int64_t* out) -> absl::Status {
    if (!n) return absl::OkStatus();
    WISP_RETURN_IF_ERROR(ReadSeconds(n, key, out));
    if (*out < 600) return Bad(key, "may not specify a duration less than 10 minutes");
    if (*out > p.max_token_lifetime_seconds) return Bad(key, "exceeds maxTokenLifetime");
    return absl::OkStatus();
  };
  auto audience = [&](const YAML::Node& n, const std::string& key,
                      std::string* out) -> absl::Status {
    WISP_RETURN_IF_ERROR(ReadString(n, key, out));
    if (out->empty()) return Bad(key, "must not be empty");
    return absl::OkStatus();
  };
  if (const auto aws = node["aws"]) {
    const std::string a = k + ".aws";
    WISP_RETURN_IF_ERROR(
        CheckKeys(aws, a, {"audience", "region", "stsRegionalEndpoints", "expirationSeconds"}));
    WISP_RETURN_IF_ERROR(audience(aws["audience"], a + ".audience", &ip.aws_audience));
    WISP_RETURN_IF_ERROR(ReadString(aws["region"], a + ".region", &ip.aws_region));
    WISP_RETURN_IF_ERROR(ReadBool(aws["stsRegionalEndpoints"], a + ".stsRegionalEndpoints",
                                  &ip.aws_sts_regional_endpoints));
    WISP_RETURN_IF_ERROR(
        lifetime(aws["expirationSeconds"], a + ".expirationSeconds", &ip.aws_expiration_seconds));
  }
  if (const auto az = node["azure"]) {
    const std::string a = k + ".azure";
    WISP_RETURN_IF_ERROR(
        CheckKeys(az, a, {"audience", "tenantId", "authorityHost", "expirationSeconds"}));
    WISP_RETURN_IF_ERROR(audience(az["audience"], a + ".audience", &ip.azure_audience));
    WISP_RETURN_IF_ERROR(ReadString(az["tenantId"], a + ".tenantId", &ip.azure_tenant_id));
    if (az["authorityHost"]) {
      WISP_RETURN_IF_ERROR(
          ReadHttpsUrl(az["authorityHost"], a + ".authorityHost", &ip.azure_authority_host));
    }
    WISP_RETURN_IF_ERROR(
        lifetime(az["expirationSeconds"], a + ".expirationSeconds", &ip.azure_expiration_seconds));
  }
  if (const auto gcp = node["gcp"]) {
    const std::string a = k + ".gcp";
    WISP_RETURN_IF_ERROR(CheckKeys(gcp, a, {"tokenUrl", "expirationSeconds"}));
    if (gcp["tokenUrl"]) {
      WISP_RETURN_IF_ERROR(ReadHttpsUrl(gcp["tokenUrl"], a + ".tokenUrl", &ip.gcp_token_url));
    }
    WISP_RETURN_IF_ERROR(
        lifetime(gcp["expirationSeconds"], a + ".expirationSeconds", &ip.gcp_expiration_seconds));
  }
  if (const auto g = node["generic"]) {
    const std::string a = k + ".generic";
    WISP_RETURN_IF_ERROR(CheckKeys(g, a, {"audience", "expirationSeconds"}));
    WISP_RETURN_IF_ERROR(audience(g["audience"], a + ".audience", &ip.generic_audience));
    WISP_RETURN_IF_ERROR(
        lifetime(g["expirationSeconds"], a + ".expirationSeconds", &ip.generic_expiration_seconds));
  }
  return absl::OkStatus();
}

absl::Status Parse(const YAML::Node& root, Policy& p) {
  if (!root || root.IsNull()) return absl::OkStatus();
  WISP_RETURN_IF_ERROR(CheckKeys(root, "",
                                 {"rules", "audiences", "maxTokenLifetime", "tokenSidecar",
                                  "featureGates", "identityPresets"}));
  if (const auto gates = root["featureGates"]) {
    if (!gates.IsSequence()) return Bad("featureGates", "must be a list of KubeVirt feature gates");
    for (const auto& g : gates) {
      std::string gate = Scalar(g);
      if (gate == "ContainerPathVolumes") {
        p.feature_gates.container_path_volumes = true;
      } else if (gate == "EnableVirtioFsStorageVolumes") {
        p.feature_gates.virtiofs_storage_volumes = true;
      } else {
        return Bad("featureGates", "\"" + gate +
                                       "\" is not one of ContainerPathVolumes, "
                                       "EnableVirtioFsStorageVolumes");
      }
    }
  }
  if (const auto rules = root["rules"]) {
    WISP_RETURN_IF_ERROR(
        CheckKeys(rules, "rules",
                  {"tokenSidecar", "vmiTokenVolumes", "virtLauncher", "dataVolumes", "pvcSources",
                   "podTokenAudiences", "identityPresets"}));
    WISP_RETURN_IF_ERROR(
        ReadBool(rules["tokenSidecar"], "rules.tokenSidecar", &p.rules.token_sidecar));
    WISP_RETURN_IF_ERROR(
        ReadBool(rules["vmiTokenVolumes"], "rules.vmiTokenVolumes", &p.rules.vmi_token_volumes));
    WISP_RETURN_IF_ERROR(
        ReadBool(rules["virtLauncher"], "rules.virtLauncher", &p.rules.virt_launcher));
    WISP_RETURN_IF_ERROR(
        ReadBool(rules["dataVolumes"], "rules.dataVolumes", &p.rules.data_volumes));
    WISP_RETURN_IF_ERROR(ReadBool(rules["pvcSources"], "rules.pvcSources", &p.rules.pvc_sources));
    WISP_RETURN_IF_ERROR(ReadBool(rules["podTokenAudiences"], "rules.podTokenAudiences",
                                  &p.rules.pod_token_audiences));
    WISP_RETURN_IF_ERROR(
        ReadBool(rules["identityPresets"], "rules.identityPresets", &p.rules.identity_presets));
  }
  if (const auto aud = root["audiences"]) {
    if (!aud.IsMap()) return Bad("audiences", "must map a namespace (or \"*\") to a list");
    for (const auto& kv : aud) {
      std::string ns = kv.first.as<std::string>();
      std::string key = "audiences." + ns;
      if (!kv.second.IsSequence()) return Bad(key, "must be a list of audiences");
      std::vector<std::string> list;
      for (const auto& a : kv.second) {
        if (!a.IsScalar() || a.Scalar().empty())
          return Bad(key, "entries must be non-empty strings");
        list.push_back(a.Scalar());
      }
      p.audiences[ns] = std::move(list);
    }
  }
  WISP_RETURN_IF_ERROR(
      ReadSeconds(root["maxTokenLifetime"], "maxTokenLifetime", &p.max_token_lifetime_seconds));
  if (p.max_token_lifetime_seconds < 600) {
    return Bad("maxTokenLifetime", "must be at least 10m (Kubernetes' minimum token lifetime)");
  }
  if (const auto ts = root["tokenSidecar"]) {
    WISP_RETURN_IF_ERROR(
        CheckKeys(ts, "tokenSidecar",
                  {"image", "stsUrl", "stsCaFile", "nativeSidecar", "tokenVolumeFor", "audience",
                   "expirationSeconds", "resources", "metricsPort"}));
    WISP_RETURN_IF_ERROR(ReadString(ts["image"], "tokenSidecar.image", &p.sidecar_image));
    if (p.sidecar_image.empty()) return Bad("tokenSidecar.image", "must not be empty");
    WISP_RETURN_IF_ERROR(ReadString(ts["stsUrl"], "tokenSidecar.stsUrl", &p.sidecar_sts_url));
    std::string ca_file;
    WISP_RETURN_IF_ERROR(ReadString(ts["stsCaFile"], "tokenSidecar.stsCaFile", &ca_file));
    if (!ca_file.empty()) {
      auto pem = fsutil::ReadFile(ca_file);
      if (!pem.ok() || pem->find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
        return Bad("tokenSidecar.stsCaFile", "\"" + ca_file + "\" is not a readable PEM CA bundle");
      }
      p.sidecar_sts_ca_pem = *std::move(pem);
    }
    WISP_RETURN_IF_ERROR(ReadString(ts["audience"], "tokenSidecar.audience", &p.token_audience));
    if (const auto mode = ts["nativeSidecar"]) {
      std::string v = Scalar(mode);
      if (v == "auto") {
        p.native_sidecar = NativeSidecarMode::kAuto;
      } else if (v == "on") {
        p.native_sidecar = NativeSidecarMode::kOn;
      } else if (v == "off") {
        p.native_sidecar = NativeSidecarMode::kOff;
      } else {
        return Bad("tokenSidecar.nativeSidecar", "\"" + v + "\" is not one of auto, on, off");
      }
    }
    if (const auto tv = ts["tokenVolumeFor"]) {
      std::string v = Scalar(tv);
      if (v == "hostNetwork") {
        p.token_volume_for = TokenVolumeFor::kHostNetwork;
      } else if (v == "all") {
        p.token_volume_for = TokenVolumeFor::kAll;
      } else {
        return Bad("tokenSidecar.tokenVolumeFor", "\"" + v + "\" is not one of hostNetwork, all");
      }
    }
    if (const auto mp = ts["metricsPort"]) {
      const std::string v = Scalar(mp);
      const bool digits =
          !v.empty() && v.size() <= 5 && v.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || std::stoi(v) > 65535) {
        return Bad("tokenSidecar.metricsPort", "\"" + v + "\" is not a port number (0 = off)");
      }
      p.sidecar_metrics_port = std::stoi(v);
    }
    WISP_RETURN_IF_ERROR(ReadSeconds(ts["expirationSeconds"], "tokenSidecar.expirationSeconds",
                                     &p.token_expiration_seconds));
    if (p.token_expiration_seconds < 600) {
      return Bad("tokenSidecar.expirationSeconds",
                 "may not specify a duration less than 10 minutes");
    }
    if (const auto r = ts["resources"]) {
      const std::string k = "tokenSidecar.resources";
      WISP_RETURN_IF_ERROR(CheckKeys(r, k,
                                     {"cpuRequest", "cpuLimit", "memoryRequest", "memoryLimit",
                                      "ephemeralStorageRequest", "ephemeralStorageLimit"}));
      auto& sr = p.sidecar_resources;
      WISP_RETURN_IF_ERROR(ReadQuantity(r["cpuRequest"], k + ".cpuRequest", &sr.cpu_request));
      WISP_RETURN_IF_ERROR(ReadQuantity(r["cpuLimit"], k + ".cpuLimit", &sr.cpu_limit));
      WISP_RETURN_IF_ERROR(
          ReadQuantity(r["memoryRequest"], k + ".memoryRequest", &sr.memory_request));
      WISP_RETURN_IF_ERROR(ReadQuantity(r["memoryLimit"], k + ".memoryLimit", &sr.memory_limit));
      WISP_RETURN_IF_ERROR(ReadQuantity(r["ephemeralStorageRequest"],
                                        k + ".ephemeralStorageRequest",
                                        &sr.ephemeral_storage_request));
      WISP_RETURN_IF_ERROR(ReadQuantity(r["ephemeralStorageLimit"], k + ".ephemeralStorageLimit",
                                        &sr.ephemeral_storage_limit));
    }
  }
  if (p.token_expiration_seconds > p.max_token_lifetime_seconds) {
    return Bad("tokenSidecar.expirationSeconds", "exceeds maxTokenLifetime");
  }
  return ParsePresets(root["identityPresets"], p);
}

}  // namespace

absl::StatusOr<Policy> ParsePolicyYaml(std::string_view yaml) {
  Policy policy;
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    WISP_RETURN_IF_ERROR(Parse(root, policy));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(std::string("policy is not valid YAML: ") + e.what());
  }
  return policy;
}

absl::StatusOr<Policy> LoadPolicyFile(const std::string& path) {
  auto text = fsutil::ReadFile(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        "policy file: cannot read " + std::string(text.status().message()));
  }
  auto policy = ParsePolicyYaml(*text);
  if (!policy.ok()) return Annotate(policy.status(), path);
  return policy;
}

const std::vector<std::string>* AllowedAudiences(const Policy& policy, std::string_view ns) {
  auto it = policy.audiences.find(std::string(ns));
  if (it != policy.audiences.end()) return &it->second;
  it = policy.audiences.find("*");
  if (it != policy.audiences.end()) return &it->second;
  return nullptr;
}

bool AudienceAllowed(const Policy& policy, std::string_view ns, std::string_view audience) {
  if (audience.empty()) return true;
  const auto* list = AllowedAudiences(policy, ns);
  if (list == nullptr) return true;
  for (const auto& a : *list) {
    if (a == audience) return true;
  }
  return false;
}

std::string_view NativeSidecarModeName(NativeSidecarMode mode) {
  switch (mode) {
    case NativeSidecarMode::kAuto:
      return "auto";
    case NativeSidecarMode::kOn:
      return "on";
    case NativeSidecarMode::kOff:
      return "off";
  }
  return "auto";
}

std::string_view TokenVolumeForName(TokenVolumeFor mode) {
  return mode == TokenVolumeFor::kAll ? "all" : "hostNetwork";
}

}  // namespace wisp::policy
