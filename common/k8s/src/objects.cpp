#include "wisp/k8s/objects.hpp"

#include <regex>

namespace wisp::k8s {

const Json* Find(const Json& obj, std::initializer_list<std::string_view> path) {
  const Json* cur = &obj;
  for (std::string_view key : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(key);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

std::string GetString(const Json& obj, std::initializer_list<std::string_view> path,
                      std::string fallback) {
  const Json* v = Find(obj, path);
  if (v == nullptr || !v->is_string()) return fallback;
  return v->get<std::string>();
}

std::optional<int64_t> GetInt(const Json& obj, std::initializer_list<std::string_view> path) {
  const Json* v = Find(obj, path);
  if (v == nullptr || !v->is_number_integer()) return std::nullopt;
  return v->get<int64_t>();
}

bool GetBool(const Json& obj, std::initializer_list<std::string_view> path, bool fallback) {
  const Json* v = Find(obj, path);
  if (v == nullptr || !v->is_boolean()) return fallback;
  return v->get<bool>();
}

const Json& GetArray(const Json& obj, std::initializer_list<std::string_view> path) {
  static const Json kEmpty = Json::array();
  const Json* v = Find(obj, path);
  if (v == nullptr || !v->is_array()) return kEmpty;
  return *v;
}

std::optional<std::string> FindAnnotation(const Json& obj, std::string_view key) {
  const Json* annotations = Find(obj, {"metadata", "annotations"});
  if (annotations == nullptr || !annotations->is_object()) return std::nullopt;
  auto it = annotations->find(key);
  if (it == annotations->end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

std::string Annotation(const Json& obj, std::string_view key) {
  return FindAnnotation(obj, key).value_or("");
}

std::string Label(const Json& obj, std::string_view key) {
  const Json* labels = Find(obj, {"metadata", "labels"});
  if (labels == nullptr || !labels->is_object()) return "";
  auto it = labels->find(key);
  if (it == labels->end() || !it->is_string()) return "";
  return it->get<std::string>();
}

Json& EnsureObject(Json& obj, std::initializer_list<std::string_view> path) {
  Json* cur = &obj;
  for (std::string_view key : path) {
    if (!cur->is_object()) *cur = Json::object();
    Json& next = (*cur)[std::string(key)];
    if (!next.is_object()) next = Json::object();
    cur = &next;
  }
  if (!cur->is_object()) *cur = Json::object();
  return *cur;
}

Json& EnsureArray(Json& obj, std::initializer_list<std::string_view> path) {
  Json* cur = &obj;
  size_t i = 0;
  for (std::string_view key : path) {
    if (!cur->is_object()) *cur = Json::object();
    Json& next = (*cur)[std::string(key)];
    ++i;
    if (i == path.size()) {
      if (!next.is_array()) next = Json::array();
    } else if (!next.is_object()) {
      next = Json::object();
    }
    cur = &next;
  }
  return *cur;
}

std::optional<bool> ParseStrictBool(std::string_view value) {
  if (value == "True" || value == "true") return true;
  if (value == "False" || value == "false") return false;
  return std::nullopt;
}

std::vector<std::string> ValidateDns1123Subdomain(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 253) {
    // Not past the regex: std::regex_match recurses per character and a long enough value
    // (the apiserver runs webhooks before it validates names) would overflow the stack.
    errs.push_back("must be no more than 253 characters");
    return errs;
  }
  static const std::regex kRe("^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$");
  if (!std::regex_match(value.begin(), value.end(), kRe)) {
    errs.push_back(
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
        "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
        "used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
  }
  return errs;
}

const Json* FindNamed(const Json& array, std::string_view name) {
  if (!array.is_array()) return nullptr;
  for (const auto& item : array) {
    if (item.is_object()) {
      auto it = item.find("name");
      if (it != item.end() && it->is_string() && it->get_ref<const std::string&>() == name) {
        return &item;
      }
    }
  }
  return nullptr;
}

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace wisp::k8s
