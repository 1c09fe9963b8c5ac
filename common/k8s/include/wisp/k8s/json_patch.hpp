#pragma once
// RFC 6902 JSON patches: generation (Diff) and application (ApplyPatch).
//
// Contract:
//   - Diff(from, to) returns a JSON array of operations that turns `from` into `to`; applying it
//     with ApplyPatch (or any RFC 6902 implementation) yields a value equal to `to`. Objects are
//     diffed member by member; arrays keep their common prefix and suffix untouched and only add or
//     remove the elements in between, so inserting a container emits one "add" (with "-" when it
//     goes at the end), never a rewrite of every element. Equal inputs give an empty array.
//   - ApplyPatch supports add, remove, replace, move, copy and test. Errors are InvalidArgument
//     naming the operation index, op and path ("patch[2] (remove /spec/x): path does not exist").
//     The input document is never modified.
//
// Example:
//   k8s::Json mutated = pod;
//   mutated["spec"]["containers"].push_back(sidecar);
//   k8s::Json patch = k8s::Diff(pod, mutated);  // [{"op":"add","path":"/spec/containers/-",...}]
//   WISP_ASSIGN_OR_RETURN(k8s::Json check, k8s::ApplyPatch(pod, patch));  // check == mutated
#include <string_view>

#include "wisp/k8s/json.hpp"

namespace wisp::k8s {

Json Diff(const Json& from, const Json& to);

absl::StatusOr<Json> ApplyPatch(const Json& document, const Json& patch);
// Parses `patch_json` first (InvalidArgument when it is not a JSON array).
absl::StatusOr<Json> ApplyPatch(const Json& document, std::string_view patch_json);

}  // namespace wisp::k8s
