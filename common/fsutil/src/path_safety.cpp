#include "wisp/fsutil/path_safety.hpp"

#include <vector>

namespace wisp::fsutil {
std::vector<std::string_view> SplitPath(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (end > start) parts.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::string CleanPath(std::string_view path) {
  if (path.empty()) return ".";
  const bool rooted = path.front() == '/';
  std::vector<std::string_view> out;
  for (std::string_view part : SplitPath(path)) {
    if (part == ".") continue;
    if (part == "..") {
      if (!out.empty() && out.back() != "..") {
        out.pop_back();
      } else if (!rooted) {
        out.push_back(part);
      }
      continue;
    }
    out.push_back(part);
  }
  std::string result = rooted ? "/" : "";
  for (size_t i = 0; i < out.size(); ++i) {
    if (i > 0) result += '/';
    result += out[i];
  }
  if (result.empty()) return ".";
  return result;
}

bool HasDotDot(std::string_view path) {
  for (std::string_view part : SplitPath(path)) {
    if (part == "..") return true;
  }
  return false;
}

absl::Status CheckAbsolute(std::string_view field, std::string_view path) {
  const std::string f(field);
  if (path.empty()) return absl::InvalidArgumentError(f + " is required");
  if (path.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(f + " must not contain NUL bytes");
  }
  if (path.front() != '/') {
    return absl::InvalidArgumentError(f + " must be an absolute path: " + std::string(path));
  }
  if (HasDotDot(path)) {
    return absl::InvalidArgumentError(f + " must not contain '..': " + std::string(path));
  }
  if (path.size() > 4096) {
    return absl::InvalidArgumentError(f + " must be at most 4096 characters");
  }
  return absl::OkStatus();
}

absl::Status CheckPathUnder(std::string_view field, std::string_view path,
                            const std::vector<std::string>& roots) {
  WISP_RETURN_IF_ERROR(CheckAbsolute(field, path));
  if (roots.empty()) return absl::OkStatus();
  const std::string clean = CleanPath(path);
  for (const std::string& root : roots) {
    const std::string r = CleanPath(root);
    if (clean == r) return absl::OkStatus();
    if (r == "/" ||
        (clean.size() > r.size() && clean.compare(0, r.size(), r) == 0 && clean[r.size()] == '/')) {
      return absl::OkStatus();
    }
  }
  std::string allowed;
  for (const std::string& root : roots) allowed += (allowed.empty() ? "" : ", ") + root;
  return absl::InvalidArgumentError(std::string(field) + " " + std::string(path) +
                                    " is not under an allowed root (" + allowed + ")");
}

absl::StatusOr<std::string> JoinUnder(std::string_view field, std::string_view root,
                                      std::string_view name) {
  const std::string f(field);
  if (name.empty()) return absl::InvalidArgumentError(f + " is required");
  if (name.size() > 255) return absl::InvalidArgumentError(f + " must be at most 255 bytes");
  if (name == "." || name == "..") {
    return absl::InvalidArgumentError(f + " must not be '.' or '..'");
  }
  for (char c : name) {
    if (c == '/') return absl::InvalidArgumentError(f + " must not contain '/'");
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(f + " must not contain control characters");
    }
  }
  std::string joined(root);
  if (joined.empty() || joined.back() != '/') joined += '/';
  joined += name;
  return joined;
}

}  // namespace wisp::fsutil
