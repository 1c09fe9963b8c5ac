#include "wisp/k8s/http_source.hpp"

#include <cctype>
#include <set>

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

// RFC 9110 tchar.
constexpr std::string_view kTokenChars =
    "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

// Headers the importer's HTTP client writes itself, in lower case.
const std::set<std::string>& Reserved() {
  static const std::set<std::string> kReserved = {
      "host",   "content-length",  "transfer-encoding", "connection", "upgrade",
      "te",     "trailer",         "keep-alive",        "range",      "if-range",
      "expect", "proxy-connection"};
  return kReserved;
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
  if (const Json* v = Find(http, {"certConfigMap"}); Set(v)) {
    if (!v->is_string()) {
      causes.push_back(p + "certConfigMap: Invalid value: " + Shown(*v) + ": must be a string");
    } else {
      out.cert_config_map = v->get<std::string>();
      for (const auto& problem : ValidateDns1123Subdomain(out.cert_config_map)) {
        causes.push_back(p + "certConfigMap: Invalid value: " + Quote(out.cert_config_map) + ": " +
                         problem);
      }
    }
  }
  const Json& headers = GetArray(http, {"extraHeaders"});
  std::set<std::string> seen;  // lower-case names
  for (size_t i = 0; i < headers.size(); ++i) {
    const std::string f = p + "extraHeaders[" + std::to_string(i) + "]: ";
    if (!headers[i].is_string()) {
      causes.push_back(f + "Invalid value: " + Shown(headers[i]) + ": must be \"Name: value\"");
      continue;
    }
    const std::string line = headers[i].get<std::string>();
    const size_t colon = line.find(':');
    const std::string name = colon == std::string::npos ? "" : line.substr(0, colon);
    if (name.empty() || name.find_first_not_of(kTokenChars) != std::string::npos) {
      causes.push_back(f + "Invalid value: " + Quote(line) +
                       ": must be \"Name: value\" with a header name of letters, digits and "
                       "!#$%&'*+-.^_`|~");
      continue;
    }
    std::string value = line.substr(colon + 1);
    const size_t first = value.find_first_not_of(" \t");
    const size_t last = value.find_last_not_of(" \t");
    value = first == std::string::npos ? "" : value.substr(first, last - first + 1);
    bool control = false;
    for (unsigned char c : value) control = control || (c < 0x20 && c != '\t') || c == 0x7f;
    if (control) {
      causes.push_back(f + "Invalid value: " + Quote(line) +
                       ": a header value may not hold control characters (CR, LF, ...)");
      continue;
    }
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (Reserved().count(lower) != 0) {
      causes.push_back(f + "Forbidden: " + Quote(name) +
                       ": wisp-populator sets this header itself (Range and If-Range resume an "
                       "import; the others frame the request)");
      continue;
    }
    if (!seen.insert(lower).second) {
      causes.push_back(f + "Duplicate value: " + Quote(name) + ": give each header once");
      continue;
    }
    out.headers.emplace_back(name, value);
  }
  return out;
}

}  // namespace wisp::k8s
