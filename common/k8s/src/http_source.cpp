#include "wisp/k8s/http_source.hpp"

#include "wisp/k8s/objects.hpp"

namespace wisp::k8s {
namespace {

std::string Shown(const Json& value) {
  return value.is_string() ? Quote(value.get<std::string>()) : value.dump();
}

bool Set(const Json* value) {
  if (value == nullptr || value->is_null()) return false;
  if (value->is_string()) return !value->get<std::string>().empty();
  if (value->is_array()) return !value->empty();
  return true;
}

constexpr std::string_view kNoCredentials =
    ": wisp-populator does not fetch with credentials from Secrets: an import's source is stored "
    "in JetStream (wisp_sources, the populate job stream), where a Secret's values must not go";

}  // namespace

HttpSourceExtras ReadHttpSource(const Json& http, std::string_view prefix,
                                std::vector<std::string>& causes) {
  HttpSourceExtras out;
  const std::string p = std::string(prefix) + ".";
  for (const char* field : {"secretRef", "secretExtraHeaders"}) {
    const Json* v = Find(http, {field});
    if (Set(v)) {
      causes.push_back(p + field + ": Unsupported value: " + Shown(*v) +
                       std::string(kNoCredentials));
    }
  }
  if (const Json* v = Find(http, {"insecureSkipVerify"}); v != nullptr && *v != Json(false)) {
    causes.push_back(p + "insecureSkipVerify: Unsupported value: " + Shown(*v) +
                     ": wisp-populator always verifies the server's certificate; name a ConfigMap "
                     "holding the CA that signed it in certConfigMap");
  }
  for (const char* field : {"certConfigMap", "extraHeaders"}) {
    const Json* v = Find(http, {field});
    if (Set(v)) {
      causes.push_back(p + field + ": Unsupported value: " + Shown(*v) +
                       ": not applied by this version of wisp-populator");
    }
  }
  return out;
}

}  // namespace wisp::k8s
