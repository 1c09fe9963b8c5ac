#pragma once
// Builders shared by the rule tests: an AdmissionInput from JSON, and "apply the verdict's patch"
// with two independent appliers (wisp::k8s and nlohmann's RFC 6902 implementation).
#include <string>

#include <gtest/gtest.h>

#include "wisp/policy/rules.hpp"
#include "wisp/k8s/json_patch.hpp"

namespace wisp::policy::testing {

inline AdmissionInput Input(const std::string& group, const std::string& kind,
                            const std::string& op, const std::string& object_json,
                            const std::string& ns = "default", const std::string& version = "1.30",
                            const std::string& old_json = "") {
  v1::AdmissionCall call;
  call.set_uid("uid-1");
  call.mutable_kind()->set_group(group);
  call.mutable_kind()->set_kind(kind);
  call.set_operation(op);
  call.set_namespace_(ns);
  call.set_object_json(object_json);
  call.set_old_object_json(old_json);
  call.set_server_version(version);
  auto in = AdmissionInput::FromCall(call, 1700000000);
  EXPECT_TRUE(in.ok()) << in.status();
  return in.ok() ? *in : AdmissionInput{};
}

inline AdmissionInput Pod(const std::string& json, const std::string& ns = "default",
                          const std::string& version = "1.30") {
  return Input("", "Pod", "CREATE", json, ns, version);
}

// Applies the patch and checks that both appliers agree and that it reproduces `mutated`.
inline k8s::Json Apply(const AdmissionInput& in, const Verdict& v) {
  const k8s::Json patch = v.patch.empty() ? k8s::Json::array() : k8s::Json::parse(v.patch);
  auto ours = k8s::ApplyPatch(in.object, patch);
  EXPECT_TRUE(ours.ok()) << ours.status();
  if (!ours.ok()) return k8s::Json();
  k8s::Json theirs = in.object.patch(patch);
  EXPECT_EQ(*ours, theirs);
  if (v.mutated) {
    EXPECT_EQ(*ours, *v.mutated);
  }
  return *ours;
}

// Builds the input for a re-run on the patched object (reinvocation).
inline AdmissionInput Rerun(const AdmissionInput& in, const k8s::Json& patched) {
  v1::AdmissionCall call = in.call;
  call.set_object_json(patched.dump());
  auto again = AdmissionInput::FromCall(call, in.now_unix);
  EXPECT_TRUE(again.ok()) << again.status();
  return again.ok() ? *again : AdmissionInput{};
}

inline RecordLookup NoRecords() {
  return [](std::string_view, std::string_view) -> absl::StatusOr<std::optional<std::string>> {
    return std::optional<std::string>();
  };
}

}  // namespace wisp::policy::testing
