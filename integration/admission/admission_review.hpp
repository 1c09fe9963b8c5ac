#pragma once
// What kube-apiserver sends a webhook for the manifests users write (integration/admission/
// manifests), for the tests that drive /mutate and /validate over HTTPS.
//
//   Json vmi = LoadManifest("vmi-irsa.yaml");
//   stack->Https("POST", "/validate?timeout=5s", AdmissionReviewFor(vmi, "uid-1"), ...);
//   nlohmann::json review = PostAdmissionReview(*stack, "validate", vmi, "uid-1");
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "wisp/integration/stack.hpp"

namespace wisp::integration {

inline std::string AdmissionManifestDir() { return SourceDir() + "/integration/admission"; }

// A manifest of integration/admission/manifests as JSON (YAML read by python3-yaml).
inline nlohmann::json LoadManifest(const std::string& name) {
  auto r = RunCommand(
      "/usr/bin/python3 -c 'import json,sys,yaml; "
      "print(json.dumps(yaml.safe_load(sys.stdin)))' < " +
      AdmissionManifestDir() + "/manifests/" + name + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output);
}

// An AdmissionReview v1 request for `object` by a cluster admin.
inline std::string AdmissionReviewFor(const nlohmann::json& object, const std::string& uid,
                                      const std::string& operation = "CREATE") {
  std::string api = object.value("apiVersion", "");
  auto slash = api.find('/');
  std::string group = slash == std::string::npos ? "" : api.substr(0, slash);
  std::string version = slash == std::string::npos ? api : api.substr(slash + 1);
  nlohmann::json review = {
      {"apiVersion", "admission.k8s.io/v1"},
      {"kind", "AdmissionReview"},
      {"request",
       {{"uid", uid},
        {"kind", {{"group", group}, {"version", version}, {"kind", object["kind"]}}},
        {"operation", operation},
        {"namespace", object["metadata"].value("namespace", "default")},
        {"name", object["metadata"].value("name", "")},
        {"userInfo", {{"username", "kubernetes-admin"}, {"groups", {"system:masters"}}}},
        {"object", object},
        {"dryRun", false}}}};
  return review.dump();
}

// POSTs `object`'s AdmissionReview to the stack's /<webhook> (mutate or validate) and returns the
// AdmissionReview it answers; the call failing or answering other than 200 fails the test (null
// when there is no answer).
inline nlohmann::json PostAdmissionReview(Stack& stack, const std::string& webhook,
                                          const nlohmann::json& object, const std::string& uid) {
  auto resp = stack.Https("POST", "/" + webhook + "?timeout=5s", AdmissionReviewFor(object, uid),
                          {{"Content-Type", "application/json"}});
  EXPECT_TRUE(resp.ok()) << resp.status();
  if (!resp.ok()) return nlohmann::json();
  EXPECT_EQ(resp->status, 200) << resp->body;
  return nlohmann::json::parse(resp->body);
}

// `object` after the review's patch, applied by python3-jsonpatch (not wisp's code).
inline nlohmann::json ApplyPatchIndependently(const nlohmann::json& object,
                                              const nlohmann::json& review,
                                              const std::string& scratch_file) {
  std::ofstream(scratch_file) << nlohmann::json{{"object", object}, {"review", review}}.dump();
  auto r = RunCommand("/usr/bin/python3 " + AdmissionManifestDir() + "/apply_patch.py < " +
                      scratch_file + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.exit_code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json();
}

}  // namespace wisp::integration
