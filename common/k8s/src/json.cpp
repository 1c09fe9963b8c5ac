#include "wisp/k8s/json.hpp"

namespace wisp::k8s {

absl::StatusOr<Json> ParseJson(std::string_view text, std::string_view what) {
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
