#pragma once
// simdjson's DOM, for readers that take a few members of a document without building an nlohmann
// tree of all of it (k8s::ParseJson builds its trees from this DOM too).
//
// Contract: ParseDom validates the whole text as simdjson does (RFC 8259; nesting up to 1024,
// integers within 64 bits) and points `root` at the document. The DOM lives in the calling
// thread's reused parser, so `root` is valid until this thread's next ParseDom or ParseJson; a
// document over 256 KiB is parsed into `own` instead (so one large object does not pin tens of
// MiB in every thread) and lives as long as `own`.
//
// Example:
//   std::optional<simdjson::dom::parser> own;
//   simdjson::dom::element root;
//   if (k8s::ParseDom(text, own, root) != simdjson::SUCCESS) return Invalid(...);
#include <optional>
#include <string_view>

#include <simdjson.h>

namespace wisp::k8s {

simdjson::error_code ParseDom(std::string_view text, std::optional<simdjson::dom::parser>& own,
                              simdjson::dom::element& root);

}  // namespace wisp::k8s
