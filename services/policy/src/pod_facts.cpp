#include "wisp/policy/pod_facts.hpp"

#include <algorithm>

#include "wisp/k8s/json.hpp"
#include "wisp/k8s/json_dom.hpp"

namespace wisp::policy {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using Shape = PodFacts::Shape;

// The last member named `key` (nlohmann's tree keeps the last duplicate), or nullopt.
std::optional<element> Member(element object, std::string_view key) {
  std::optional<element> found;
  simdjson::dom::object members;
  if (object.get_object().get(members) != simdjson::SUCCESS) return found;
  for (auto [k, v] : members) {
    if (k == key) found = v;
  }
  return found;
}

std::string String(std::optional<element> e) {
  std::string_view s;
  if (e && e->get_string().get(s) == simdjson::SUCCESS) return std::string(s);
  return "";
}

std::optional<int64_t> Int(std::optional<element> e) {
  if (!e) return std::nullopt;
  if (e->type() == element_type::INT64) return e->get_int64().value_unsafe();
  if (e->type() == element_type::UINT64) {
    return static_cast<int64_t>(e->get_uint64().value_unsafe());  // as nlohmann's get<int64_t>
  }
  return std::nullopt;
}

// The array or object `e` is (the caller checked its type), by value: a range-for over a member
// of simdjson's temporary result would outlive it.
simdjson::dom::array ArrayOf(element e) { return e.get_array().value_unsafe(); }
simdjson::dom::object ObjectOf(element e) { return e.get_object().value_unsafe(); }

Shape ShapeOf(std::optional<element> e, element_type expected) {
  if (!e) return Shape::kAbsent;
  return e->type() == expected ? Shape::kExpected : Shape::kOther;
}

// The string-valued members of an object; a later duplicate replaces (or, when it is not a
// string, removes) an earlier one.
PodFacts::Strings StringMembers(std::optional<element> e) {
  PodFacts::Strings out;
  simdjson::dom::object members;
  if (!e || e->get_object().get(members) != simdjson::SUCCESS) return out;
  for (auto [k, v] : members) {
    const std::string_view key = k;  // a lambda cannot capture a structured binding in clang 14
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& kv) { return kv.first == key; });
    std::string_view s;
    const bool is_string = v.get_string().get(s) == simdjson::SUCCESS;
    if (it != out.end()) {
      if (is_string) {
        it->second = std::string(s);
      } else {
        out.erase(it);
      }
    } else if (is_string) {
      out.emplace_back(std::string(k), std::string(s));
    }
  }
  return out;
}

PodFacts::Container ReadContainer(element e) {
  PodFacts::Container c;
  c.is_object = e.type() == element_type::OBJECT;
  if (!c.is_object) return c;
  // One pass over the members; a later duplicate replaces what an earlier one gave.
  std::optional<element> name, image, security_context, mounts, env;
  for (auto [key, value] : ObjectOf(e)) {
    if (key == "name") {
      name = value;
    } else if (key == "image") {
      image = value;
    } else if (key == "securityContext") {
      security_context = value;
    } else if (key == "volumeMounts") {
      mounts = value;
    } else if (key == "env") {
      env = value;
    }
  }
  c.name = String(name);
  c.image = String(image);
  if (security_context) {
    c.run_as_user = Int(Member(*security_context, "runAsUser"));
    c.run_as_group = Int(Member(*security_context, "runAsGroup"));
  }
  c.volume_mounts_shape = ShapeOf(mounts, element_type::ARRAY);
  if (c.volume_mounts_shape == Shape::kExpected) {
    simdjson::dom::array list = ArrayOf(*mounts);
    c.volume_mounts.reserve(list.size());
    for (element m : list) {
      c.volume_mounts.push_back({String(Member(m, "name")), String(Member(m, "mountPath"))});
    }
  }
  c.env_shape = ShapeOf(env, element_type::ARRAY);
  if (c.env_shape == Shape::kExpected) {
    simdjson::dom::array list = ArrayOf(*env);
    c.env_names.reserve(list.size());
    for (element v : list) c.env_names.push_back(String(Member(v, "name")));
  }
  return c;
}

PodFacts::Volume ReadVolume(element v, size_t index) {
  PodFacts::Volume vol;
  vol.index = index;
  vol.name = String(Member(v, "name"));
  vol.empty_dir = Member(v, "emptyDir").has_value();
  if (auto projected = Member(v, "projected")) {
    auto sources = Member(*projected, "sources");
    if (ShapeOf(sources, element_type::ARRAY) == Shape::kExpected) {
      size_t j = 0;
      for (element source : ArrayOf(*sources)) {
        if (auto token = Member(source, "serviceAccountToken")) {
          vol.projected_tokens.push_back(
              {j, String(Member(*token, "audience")), Int(Member(*token, "expirationSeconds"))});
        }
        ++j;
      }
    }
  }
  if (auto csi = Member(v, "csi")) {
    vol.csi_driver = String(Member(*csi, "driver"));
    if (auto attrs = Member(*csi, "volumeAttributes")) {
      vol.identity_provider = String(Member(*attrs, "identityProvider"));
      vol.csi_audience = String(Member(*attrs, "audience"));
      vol.csi_expiration_seconds = String(Member(*attrs, "expirationSeconds"));
    }
  }
  return vol;
}

void ReadContainers(std::optional<element> list, Shape& shape,
                    std::vector<PodFacts::Container>& out) {
  shape = ShapeOf(list, element_type::ARRAY);
  if (shape != Shape::kExpected) return;
  simdjson::dom::array array = ArrayOf(*list);
  out.reserve(array.size());
  for (element e : array) out.push_back(ReadContainer(e));
}

PodFacts FromRoot(element root) {
  PodFacts pod;
  if (auto metadata = Member(root, "metadata")) {
    pod.namespace_name = String(Member(*metadata, "namespace"));
    pod.annotations = StringMembers(Member(*metadata, "annotations"));
    pod.labels = StringMembers(Member(*metadata, "labels"));
  }
  auto spec = Member(root, "spec");
  pod.spec_shape = ShapeOf(spec, element_type::OBJECT);
  if (pod.spec_shape != Shape::kExpected) return pod;
  // One pass over spec's members; a later duplicate replaces what an earlier one gave.
  for (auto [key, value] : ObjectOf(*spec)) {
    if (key == "serviceAccountName") {
      pod.service_account_name = String(value);
    } else if (key == "securityContext") {
      pod.run_as_user = Int(Member(value, "runAsUser"));
      pod.run_as_group = Int(Member(value, "runAsGroup"));
    } else if (key == "hostNetwork") {
      bool b = false;
      pod.host_network = value.get_bool().get(b) == simdjson::SUCCESS && b;
    } else if (key == "containers") {
      pod.containers.clear();
      ReadContainers(value, pod.containers_shape, pod.containers);
    } else if (key == "initContainers") {
      pod.init_containers.clear();
      ReadContainers(value, pod.init_containers_shape, pod.init_containers);
    } else if (key == "volumes") {
      pod.volumes.clear();
      pod.volumes_shape = ShapeOf(value, element_type::ARRAY);
      if (pod.volumes_shape != Shape::kExpected) continue;
      size_t index = 0;
      for (element v : ArrayOf(value)) {
        if (v.type() == element_type::OBJECT) pod.volumes.push_back(ReadVolume(v, index));
        ++index;
      }
    }
  }
  return pod;
}

const std::string* Find(const PodFacts::Strings& members, std::string_view key) {
  for (const auto& [k, v] : members) {
    if (k == key) return &v;
  }
  return nullptr;
}

}  // namespace

const std::string* PodFacts::Annotation(std::string_view key) const {
  return Find(annotations, key);
}

const std::string* PodFacts::Label(std::string_view key) const { return Find(labels, key); }

bool PodFacts::HasVolume(std::string_view name) const {
  return std::any_of(volumes.begin(), volumes.end(),
                     [&](const Volume& v) { return v.name == name; });
}

absl::StatusOr<PodFacts> ReadPodFacts(std::string_view json, std::string_view what) {
  std::optional<simdjson::dom::parser> own;
  element root;
  if (k8s::ParseDom(json, own, root) != simdjson::SUCCESS) {
    // What simdjson refuses is malformed (ParseJson names the problem) or past its limits: an
    // integer beyond 64 bits, which nlohmann reads as a double and writes back as one, or nesting
    // deeper than 1024.
    WISP_ASSIGN_OR_RETURN(k8s::Json tree, k8s::ParseJson(json, what));
    const std::string text = tree.dump();
    if (auto err = k8s::ParseDom(text, own, root); err != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(std::string(what) +
                                        " cannot be read: " + simdjson::error_message(err));
    }
  }
  if (root.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError(std::string(what) + " is not an object");
  }
  return FromRoot(root);
}

}  // namespace wisp::policy
