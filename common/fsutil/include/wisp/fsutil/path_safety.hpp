#pragma once
// Path checks for paths that arrive from outside (CSI target/staging paths, volume ids).
//
// Contract: every check is lexical (no filesystem access, so a path that does not exist yet can be
// checked) and fails with InvalidArgument naming the field.
//
// Example:
//   WISP_RETURN_IF_ERROR(fsutil::CheckPathUnder("target_path", req.target_path(), roots));
//   WISP_ASSIGN_OR_RETURN(std::string dir, fsutil::JoinUnder("volume_id", volume_root, id));
#include <string>
#include <string_view>
#include <vector>

#include "wisp/status/status.hpp"

namespace wisp::fsutil {

// Lexically cleaned path in the manner of Go's filepath.Clean ("/a//b/./c/" -> "/a/b/c").
// The non-empty elements of a '/'-separated path ("a//b/" -> {"a", "b"}); views into `path`.
std::vector<std::string_view> SplitPath(std::string_view path);

std::string CleanPath(std::string_view path);

// True when any element of `path` is exactly "..".
bool HasDotDot(std::string_view path);

// `path` must be non-empty, absolute, free of ".." elements and of NUL bytes.
absl::Status CheckAbsolute(std::string_view field, std::string_view path);

// CheckAbsolute, and the cleaned path equals a root or lies below one (element-wise, so
// "/var/lib2" is not under "/var/lib"). An empty `roots` list allows any absolute path.
absl::Status CheckPathUnder(std::string_view field, std::string_view path,
                            const std::vector<std::string>& roots);

// `name` must be one safe path element (no '/', not "." or "..", no NUL or control characters,
// at most 255 bytes); returns root + "/" + name.
absl::StatusOr<std::string> JoinUnder(std::string_view field, std::string_view root,
                                      std::string_view name);

}  // namespace wisp::fsutil
