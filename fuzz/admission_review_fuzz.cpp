// Fuzzes the AdmissionReview v1 codec (the body kube-apiserver POSTs to /mutate and /validate)
// and the object helpers that read the pod/VMI/DataVolume inside it, then encodes a response for
// the parsed uid (which must come out as valid JSON).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "wisp/k8s/admission_review.hpp"
#include "wisp/k8s/json.hpp"
#include "wisp/k8s/objects.hpp"
#include "wisp/k8s/quantity.hpp"

namespace k8s = wisp::k8s;

namespace {
// Walks an object the way the policy rules do: metadata, containers, volumes, resources.
void Inspect(const k8s::Json& obj) {
  if (!obj.is_object()) return;
  (void)k8s::GetString(obj, {"metadata", "name"});
  (void)k8s::ValidateDns1123Subdomain(k8s::GetString(obj, {"metadata", "name"}));
  (void)k8s::Annotation(obj, "wisp.dev/inject");
  (void)k8s::FindAnnotation(obj, "wisp.dev/audience");
  (void)k8s::Label(obj, "app");
  (void)k8s::GetBool(obj, {"spec", "hostNetwork"});
  (void)k8s::GetInt(obj, {"spec", "template", "spec", "terminationGracePeriodSeconds"});
  for (const char* list : {"containers", "initContainers", "volumes"}) {
    const k8s::Json& items = k8s::GetArray(obj, {"spec", list});
    for (const auto& item : items) {
      (void)k8s::GetString(item, {"name"});
      const k8s::Json* limits = k8s::Find(item, {"resources", "limits"});
      if (limits != nullptr && limits->is_object()) {
        for (const auto& [name, value] : limits->items()) {
          if (value.is_string()) (void)k8s::ParseQuantity(value.get<std::string>());
        }
      }
    }
    (void)k8s::FindNamed(items, "wisp-token");
  }
  const k8s::Json* storage =
      k8s::Find(obj, {"spec", "storage", "resources", "requests", "storage"});
  if (storage != nullptr && storage->is_string()) {
    auto q = k8s::ParseQuantity(storage->get<std::string>());
    if (q.ok()) (void)q->Bytes();
  }
  (void)k8s::ParseStrictBool(k8s::Annotation(obj, "wisp.dev/inject"));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  auto review = k8s::ParseAdmissionReview(body);
  if (!review.ok()) return 0;
  Inspect(review->request.object);
  Inspect(review->request.old_object);
  k8s::AdmissionResponse resp;
  resp.uid = review->request.uid;
  resp.allowed = false;
  resp.message = review->request.name;
  resp.warnings.push_back(review->request.namespace_);
  const std::string out = k8s::EncodeAdmissionReview(review->api_version, resp);
  auto reparsed = k8s::ParseJson(out, "response");
  if (!reparsed.ok()) abort();  // we produced invalid JSON from a parsed review
  return 0;
}
