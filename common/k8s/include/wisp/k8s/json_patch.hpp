#pragma once
// RFC 6902 JSON patches: generation (Diff) and application (ApplyPatch).
//
// Contract:
//   - Diff(from, to) returns a JSON array of operations that turns `from` into `to`; applying it
//     with ApplyPatch (or any RFC 6902 implementation) yields a value equal to `to`. Objects are
//     diffed member by member; arrays keep their common prefix and suffix untouched and only add or
//     remove the elements in between, so inserting a container emits one "add" (with "-" when it
//     goes at the end), never a rewrite of every element. Equal inputs give an empty array.
//   - PatchBuilder edits a document and records each edit as the operation that makes it, for a
//     rule that knows its few changes: no copy of the original and no Diff over the whole object.
//     Paths are member names and, inside arrays, element indices ("0", "12"). A missing member or a
//     member of the wrong type on the way is created with one "add" (or "replace") of the whole
//     new value, as Diff would emit it. Applying TakePatch() to the document as it was yields the
//     document as it is. An edit whose path crosses an array at an index it does not have, or a
//     scalar it cannot descend, changes nothing and returns false.
//   - ApplyPatch supports add, remove, replace, move, copy and test. Errors are InvalidArgument
//     naming the operation index, op and path ("patch[2] (remove /spec/x): path does not exist").
//     The input document is never modified.
//
// Example:
//   k8s::Json mutated = pod;
//   mutated["spec"]["containers"].push_back(sidecar);
//   k8s::Json patch = k8s::Diff(pod, mutated);  // [{"op":"add","path":"/spec/containers/-",...}]
//   WISP_ASSIGN_OR_RETURN(k8s::Json check, k8s::ApplyPatch(pod, patch));  // check == mutated
//
//   k8s::PatchBuilder edit(pod);                          // pod is edited in place
//   edit.Append({"spec", "containers"}, sidecar);          // add /spec/containers/-
//   edit.Insert({"spec", "volumes"}, 0, volume);           // add /spec/volumes/0, or /spec/volumes
//   k8s::Json ops = edit.TakePatch();
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "wisp/k8s/json.hpp"

namespace wisp::k8s {

Json Diff(const Json& from, const Json& to);

absl::StatusOr<Json> ApplyPatch(const Json& document, const Json& patch);
// Parses `patch_json` first (InvalidArgument when it is not a JSON array).
absl::StatusOr<Json> ApplyPatch(const Json& document, std::string_view patch_json);

class PatchBuilder {
 public:
  static constexpr size_t kEnd = static_cast<size_t>(-1);

  explicit PatchBuilder(Json& doc) : doc_(doc) {}

  // Inserts `value` before element `index` of the array at `path` (kEnd, or an index at or past
  // the end, appends). An absent array is created holding just `value`.
  [[nodiscard]] bool Insert(std::initializer_list<std::string_view> path, size_t index, Json value);
  [[nodiscard]] bool Append(std::initializer_list<std::string_view> path, Json value) {
    return Insert(path, kEnd, std::move(value));
  }
  // Removes element `index` of the array at `path`; false when there is no such element.
  [[nodiscard]] bool Remove(std::initializer_list<std::string_view> path, size_t index);

  const Json& doc() const { return doc_; }
  bool empty() const { return ops_.empty(); }
  // The operations recorded so far; the builder starts a new patch.
  Json TakePatch();

 private:
  // The array at `path`, or nullptr when the path cannot be followed. With `create`, a missing
  // or mistyped part of the path is created (and recorded) holding *create as the array's only
  // element, and *create is then moved from; `pointer` is the array's JSON pointer.
  Json* Resolve(std::initializer_list<std::string_view> path, std::string& pointer, Json* create);

  Json& doc_;
  Json ops_ = Json::array();
};

}  // namespace wisp::k8s
