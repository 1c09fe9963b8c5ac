#pragma once
// JSON values for Kubernetes objects (nlohmann::json DOM) and RFC 6901 JSON pointer tokens.
//
// Contract:
//   - ParseJson never throws: malformed input is InvalidArgument naming `what` and the byte offset.
//     It builds the value nlohmann's own parser builds from the same text (same members, numbers
//     of the same kind, last duplicate key wins), only faster: simdjson reads the text. The one
//     difference: "-0" reads as unsigned 0 rather than signed 0 (equal, and dumped alike).
//   - EscapePointerToken turns a member name into a pointer token ("~" -> "~0", "/" -> "~1"), so
//     annotation keys such as "wisp.dev/token-sidecar" address correctly:
//     "/metadata/annotations/wisp.dev~1token-sidecar".
//
// Example:
//   WISP_ASSIGN_OR_RETURN(k8s::Json pod, k8s::ParseJson(body, "request.object"));
//   std::string ptr = k8s::JoinPointer({"metadata", "annotations", "a/b"});  //
//   /metadata/annotations/a~1b
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wisp/status/status.hpp"

namespace wisp::k8s {

using Json = nlohmann::json;

absl::StatusOr<Json> ParseJson(std::string_view text, std::string_view what);

std::string EscapePointerToken(std::string_view token);
// InvalidArgument for "~" not followed by 0 or 1.
absl::StatusOr<std::string> UnescapePointerToken(std::string_view token);
// Splits "/a/b~1c" into {"a", "b/c"}; "" is the whole document. InvalidArgument when the pointer
// does not start with "/" or has a bad escape.
absl::StatusOr<std::vector<std::string>> SplitPointer(std::string_view pointer);
std::string JoinPointer(const std::vector<std::string>& tokens);
std::string AppendPointer(std::string_view base, std::string_view token);

}  // namespace wisp::k8s
