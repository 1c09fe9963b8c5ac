#pragma once
// Small helpers for reading and editing Kubernetes objects held as k8s::Json.
//
// Contract: readers never throw and never insert; a missing member or a member of the wrong type
// reads as absent (nullptr / default). Editors create intermediate objects and arrays as needed.
//
// Example:
//   std::string v = k8s::Annotation(pod, "wisp.dev/token-sidecar");       // "" when absent
//   const k8s::Json* vols = k8s::Find(pod, {"spec", "volumes"});          // nullptr when absent
//   k8s::Json& containers = k8s::EnsureArray(pod, {"spec", "containers"});
//   auto b = k8s::ParseStrictBool("True");                                 // true
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wisp/k8s/json.hpp"

namespace wisp::k8s {

const Json* Find(const Json& obj, std::initializer_list<std::string_view> path);
std::string GetString(const Json& obj, std::initializer_list<std::string_view> path,
                      std::string fallback = "");
std::optional<int64_t> GetInt(const Json& obj, std::initializer_list<std::string_view> path);
bool GetBool(const Json& obj, std::initializer_list<std::string_view> path, bool fallback = false);
// An array member or an empty array.
const Json& GetArray(const Json& obj, std::initializer_list<std::string_view> path);

std::string Annotation(const Json& obj, std::string_view key);
std::optional<std::string> FindAnnotation(const Json& obj, std::string_view key);
std::string Label(const Json& obj, std::string_view key);

Json& EnsureObject(Json& obj, std::initializer_list<std::string_view> path);
Json& EnsureArray(Json& obj, std::initializer_list<std::string_view> path);

// Go's strconv.ParseBool as GCSFuse restricts it: exactly True, true, False or false.
std::optional<bool> ParseStrictBool(std::string_view value);

// Kubernetes IsDNS1123Subdomain: the list of problems, empty when valid (Kubernetes' messages).
std::vector<std::string> ValidateDns1123Subdomain(std::string_view value);

// Finds the element of an array of named objects ({"name": ...}); nullptr when absent.
const Json* FindNamed(const Json& array, std::string_view name);

// Go's %q for a plain string: double-quoted with \" and \\ escaped.
std::string Quote(std::string_view s);

}  // namespace wisp::k8s
