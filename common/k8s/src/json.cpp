#include "wisp/k8s/json.hpp"

#include <optional>

#include "wisp/k8s/json_dom.hpp"

namespace wisp::k8s {
namespace {

// simdjson's DOM as the nlohmann value nlohmann's own parser would build: a later duplicate key
// replaces an earlier one, and a non-negative integer is unsigned.
Json FromDom(simdjson::dom::element e) {
  using Type = simdjson::dom::element_type;
  switch (e.type()) {
    case Type::OBJECT: {
      Json out = Json::object();
      auto& members = out.get_ref<Json::object_t&>();
      const simdjson::dom::object object = e.get_object().value_unsafe();
      for (auto [key, value] : object) {
        members.insert_or_assign(std::string(key), FromDom(value));
      }
      return out;
    }
    case Type::ARRAY: {
      Json out = Json::array();
      auto& elements = out.get_ref<Json::array_t&>();
      simdjson::dom::array array = e.get_array().value_unsafe();
      elements.reserve(array.size());
      for (simdjson::dom::element value : array) elements.push_back(FromDom(value));
      return out;
    }
    case Type::STRING:
      return Json(std::string(e.get_string().value_unsafe()));
    case Type::INT64: {
      const int64_t v = e.get_int64().value_unsafe();
      return v >= 0 ? Json(static_cast<uint64_t>(v)) : Json(v);
    }
    case Type::UINT64:
      return Json(e.get_uint64().value_unsafe());
    case Type::DOUBLE:
      return Json(e.get_double().value_unsafe());
    case Type::BOOL:
      return Json(e.get_bool().value_unsafe());
    case Type::NULL_VALUE:
      break;
  }
  return Json();
}

}  // namespace

simdjson::error_code ParseDom(std::string_view text, std::optional<simdjson::dom::parser>& own,
                              simdjson::dom::element& root) {
  // A thread keeps one parser's buffers between documents, sized for at most kReusedBytes of text
  // (about ten times that in memory).
  constexpr size_t kReusedBytes = 256 * 1024;
  thread_local simdjson::dom::parser reused(kReusedBytes);
  simdjson::dom::parser& parser = text.size() <= kReusedBytes ? reused : own.emplace();
  return parser.parse(text.data(), text.size()).get(root);
}

absl::StatusOr<Json> ParseJson(std::string_view text, std::string_view what) {
  // simdjson reads the text (several times faster than nlohmann's lexer on a pod); the tree is
  // built from its DOM. Whatever it refuses - malformed JSON, and the few valid documents past its
  // limits (nesting over 1024, integers beyond 64 bits) - goes to nlohmann, which either reads it
  // or names the problem.
  std::optional<simdjson::dom::parser> own;
  simdjson::dom::element root;
  if (ParseDom(text, own, root) == simdjson::SUCCESS) return FromDom(root);
  // Kubernetes objects come from outside: nlohmann throws, so the exception stops here.
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(std::string(what) + " is not valid JSON: " + e.what());
  }
}

std::string EscapePointerToken(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

absl::StatusOr<std::string> UnescapePointerToken(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size(); ++i) {
    if (token[i] != '~') {
      out += token[i];
      continue;
    }
    if (i + 1 >= token.size() || (token[i + 1] != '0' && token[i + 1] != '1')) {
      return absl::InvalidArgumentError("JSON pointer token \"" + std::string(token) +
                                        "\" has '~' not followed by 0 or 1");
    }
    out += token[i + 1] == '0' ? '~' : '/';
    ++i;
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> SplitPointer(std::string_view pointer) {
  std::vector<std::string> tokens;
  if (pointer.empty()) return tokens;
  if (pointer[0] != '/') {
    return absl::InvalidArgumentError("JSON pointer \"" + std::string(pointer) +
                                      "\" must be empty or start with '/'");
  }
  size_t start = 1;
  while (true) {
    size_t end = pointer.find('/', start);
    std::string_view raw = pointer.substr(start, end == std::string_view::npos ? end : end - start);
    WISP_ASSIGN_OR_RETURN(std::string token, UnescapePointerToken(raw));
    tokens.push_back(std::move(token));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return tokens;
}

std::string JoinPointer(const std::vector<std::string>& tokens) {
  std::string out;
  for (const auto& t : tokens) out += "/" + EscapePointerToken(t);
  return out;
}

std::string AppendPointer(std::string_view base, std::string_view token) {
  return std::string(base) + "/" + EscapePointerToken(token);
}

}  // namespace wisp::k8s
