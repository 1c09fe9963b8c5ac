// Fuzzes wisp-policy's pod reader (ReadPodFacts: what the token-sidecar and token-audience rules
// read of a pod, on simdjson's DOM) against the nlohmann tree of the same text (k8s::ParseJson)
// read with nlohmann's semantics. Aborts when they disagree: on whether the text is accepted, on
// the error message, or on any fact the rules read (duplicates, wrong types, indices included).
// The tree is read with k8s/objects.hpp, as the rules read pods before they had the facts.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "wisp/policy/pod_facts.hpp"
#include "wisp/k8s/json.hpp"
#include "wisp/k8s/objects.hpp"

namespace k8s = wisp::k8s;
using wisp::policy::PodFacts;
using Shape = PodFacts::Shape;

namespace {

[[noreturn]] void Mismatch(const char* what) {
  std::fprintf(stderr, "pod facts disagree with the tree: %s\n", what);
  std::abort();
}

void Check(bool ok, const char* what) {
  if (!ok) Mismatch(what);
}

Shape ShapeOf(const k8s::Json* j, bool want_object) {
  if (j == nullptr) return Shape::kAbsent;
  return (want_object ? j->is_object() : j->is_array()) ? Shape::kExpected : Shape::kOther;
}

std::map<std::string, std::string> Strings(const k8s::Json* j) {
  std::map<std::string, std::string> out;
  if (j == nullptr || !j->is_object()) return out;
  for (const auto& [k, v] : j->items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

std::map<std::string, std::string> Strings(const PodFacts::Strings& s) {
  std::map<std::string, std::string> out(s.begin(), s.end());
  Check(out.size() == s.size(), "a key listed twice");
  return out;
}

void CheckContainers(const k8s::Json* list, Shape shape,
                     const std::vector<PodFacts::Container>& got) {
  Check(shape == ShapeOf(list, false), "container list shape");
  if (shape != Shape::kExpected) return Check(got.empty(), "containers of a non-list");
  Check(got.size() == list->size(), "container count");
  for (size_t i = 0; i < got.size(); ++i) {
    const k8s::Json& want = (*list)[i];
    const PodFacts::Container& c = got[i];
    Check(c.is_object == want.is_object(), "container is_object");
    if (!c.is_object) continue;
    Check(c.name == k8s::GetString(want, {"name"}), "container name");
    Check(c.image == k8s::GetString(want, {"image"}), "container image");
    Check(c.run_as_user == k8s::GetInt(want, {"securityContext", "runAsUser"}), "runAsUser");
    Check(c.run_as_group == k8s::GetInt(want, {"securityContext", "runAsGroup"}), "runAsGroup");
    const k8s::Json* mounts = k8s::Find(want, {"volumeMounts"});
    Check(c.volume_mounts_shape == ShapeOf(mounts, false), "volumeMounts shape");
    if (c.volume_mounts_shape == Shape::kExpected) {
      Check(c.volume_mounts.size() == mounts->size(), "volumeMounts count");
      for (size_t m = 0; m < c.volume_mounts.size(); ++m) {
        const k8s::Json& mount = (*mounts)[m];
        Check(c.volume_mounts[m].name == k8s::GetString(mount, {"name"}), "mount name");
        Check(c.volume_mounts[m].mount_path == k8s::GetString(mount, {"mountPath"}), "mountPath");
      }
    }
    const k8s::Json* env = k8s::Find(want, {"env"});
    Check(c.env_shape == ShapeOf(env, false), "env shape");
    if (c.env_shape == Shape::kExpected) {
      Check(c.env_names.size() == env->size(), "env count");
      for (size_t e = 0; e < c.env_names.size(); ++e) {
        Check(c.env_names[e] == k8s::GetString((*env)[e], {"name"}), "env name");
      }
    }
  }
}

void CheckVolumes(const k8s::Json* list, const PodFacts& pod) {
  Check(pod.volumes_shape == ShapeOf(list, false), "volume list shape");
  size_t next = 0;
  if (pod.volumes_shape == Shape::kExpected) {
    for (size_t i = 0; i < list->size(); ++i) {
      const k8s::Json& want = (*list)[i];
      if (!want.is_object()) continue;
      Check(next < pod.volumes.size(), "volume count");
      const PodFacts::Volume& v = pod.volumes[next++];
      Check(v.index == i, "volume index");
      Check(v.name == k8s::GetString(want, {"name"}), "volume name");
      Check(v.empty_dir == (k8s::Find(want, {"emptyDir"}) != nullptr), "emptyDir");
      const k8s::Json* sources = k8s::Find(want, {"projected", "sources"});
      size_t t = 0;
      if (sources != nullptr && sources->is_array()) {
        for (size_t j = 0; j < sources->size(); ++j) {
          const k8s::Json* token = k8s::Find((*sources)[j], {"serviceAccountToken"});
          if (token == nullptr) continue;
          Check(t < v.projected_tokens.size(), "projected token count");
          const PodFacts::ProjectedToken& p = v.projected_tokens[t++];
          Check(p.source_index == j, "projected source index");
          Check(p.audience == k8s::GetString(*token, {"audience"}), "token audience");
          Check(p.expiration_seconds == k8s::GetInt(*token, {"expirationSeconds"}),
                "token expirationSeconds");
        }
      }
      Check(t == v.projected_tokens.size(), "projected token count");
      Check(v.csi_driver == k8s::GetString(want, {"csi", "driver"}), "csi driver");
      Check(v.identity_provider ==
                k8s::GetString(want, {"csi", "volumeAttributes", "identityProvider"}),
            "identityProvider");
      Check(v.csi_audience == k8s::GetString(want, {"csi", "volumeAttributes", "audience"}),
            "csi audience");
      Check(v.csi_expiration_seconds ==
                k8s::GetString(want, {"csi", "volumeAttributes", "expirationSeconds"}),
            "csi expirationSeconds");
    }
  }
  Check(next == pod.volumes.size(), "volume count");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto facts = wisp::policy::ReadPodFacts(text, "object");
  auto tree = k8s::ParseJson(text, "object");
  if (!tree.ok()) {
    Check(!facts.ok(), "accepted what ParseJson refuses");
    Check(facts.status().message() == tree.status().message(), "error message");
    return 0;
  }
  if (!tree->is_object()) {
    Check(!facts.ok() && facts.status().message() == "object is not an object", "non-object root");
    return 0;
  }
  Check(facts.ok(), "refused an object ParseJson reads");
  const k8s::Json& pod = *tree;
  Check(facts->namespace_name == k8s::GetString(pod, {"metadata", "namespace"}), "namespace");
  Check(Strings(facts->annotations) == Strings(k8s::Find(pod, {"metadata", "annotations"})),
        "annotations");
  Check(Strings(facts->labels) == Strings(k8s::Find(pod, {"metadata", "labels"})), "labels");
  const k8s::Json* spec = k8s::Find(pod, {"spec"});
  Check(facts->spec_shape == ShapeOf(spec, true), "spec shape");
  if (facts->spec_shape != Shape::kExpected) return 0;
  Check(facts->host_network == k8s::GetBool(*spec, {"hostNetwork"}), "hostNetwork");
  CheckContainers(k8s::Find(*spec, {"containers"}), facts->containers_shape, facts->containers);
  CheckContainers(k8s::Find(*spec, {"initContainers"}), facts->init_containers_shape,
                  facts->init_containers);
  CheckVolumes(k8s::Find(*spec, {"volumes"}), *facts);
  return 0;
}
