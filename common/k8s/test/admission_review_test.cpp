#include "wisp/k8s/admission_review.hpp"

#include <absl/strings/escaping.h>
#include <gtest/gtest.h>

namespace wisp::k8s {
namespace {

constexpr const char* kReview = R"({
  "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
  "request": {
    "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
    "kind": {"group": "", "version": "v1", "kind": "Pod"},
    "resource": {"group": "", "version": "v1", "resource": "pods"},
    "operation": "CREATE", "namespace": "ml", "name": "loader",
    "userInfo": {"username": "admin", "uid": "u1", "groups": ["system:masters"]},
    "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "loader"}},
    "oldObject": null, "dryRun": true
  }
})";

// Tests that a complete AdmissionReview decodes every field the policy needs.
TEST(AdmissionReviewTest, ParsesRequest) {
  auto review = ParseAdmissionReview(kReview);
  ASSERT_TRUE(review.ok()) << review.status();
  const auto& r = review->request;
  EXPECT_EQ(review->api_version, "admission.k8s.io/v1");
  EXPECT_EQ(r.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
  EXPECT_EQ(r.kind.kind, "Pod");
  EXPECT_EQ(r.kind.ApiVersion(), "v1");
  EXPECT_EQ(r.resource.resource, "pods");
  EXPECT_EQ(r.operation, "CREATE");
  EXPECT_EQ(r.namespace_, "ml");
  EXPECT_EQ(r.user.groups, std::vector<std::string>{"system:masters"});
  EXPECT_EQ(r.object["metadata"]["name"], "loader");
  EXPECT_TRUE(r.old_object.is_null());
  EXPECT_TRUE(r.dry_run);
}

// Tests that each malformed review is refused with a message naming the field.
TEST(AdmissionReviewTest, NamesTheProblem) {
  struct Case {
    const char* body;
    const char* message;
  } cases[] = {
      {R"([])", "body is not a JSON object"},
      {R"({"kind":"AdmissionReview"})", "apiVersion is missing"},
      {R"({"apiVersion":"v1","kind":"AdmissionReview"})",
       "apiVersion \"v1\" is not admission.k8s.io/v1"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"Pod"})",
       "kind \"Pod\" is not AdmissionReview"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"})", "request is missing"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}})",
       "request.uid is missing"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1"}})",
       "request.kind is missing"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1",
          "kind":{"version":"v1"}}})",
       "request.kind.kind is missing"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1",
          "kind":{"version":"v1","kind":"Pod"},"operation":"PATCH"}})",
       "request.operation \"PATCH\" is not one of CREATE, UPDATE, DELETE, CONNECT"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1",
          "kind":{"version":"v1","kind":"Pod"},"operation":"CREATE"}})",
       "request.object is missing"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1",
          "kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":[1]}})",
       "request.object is not an object"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}})",
       "request.uid is not a string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    auto review = ParseAdmissionReview(c.body);
    ASSERT_FALSE(review.ok());
    EXPECT_EQ(review.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(review.status().message()), c.message);
  }
}

// Tests that the response echoes apiVersion and uid and base64-encodes the patch.
TEST(AdmissionReviewTest, EncodesResponse) {
  AdmissionResponse resp;
  resp.uid = "u-1";
  resp.allowed = true;
  resp.patch = R"([{"op":"add","path":"/a","value":1}])";
  resp.warnings = {"w1"};
  resp.audit_annotations = {{"injected", "wisp-sidecar"}};
  Json out = Json::parse(EncodeAdmissionReview("admission.k8s.io/v1", resp));
  EXPECT_EQ(out["apiVersion"], "admission.k8s.io/v1");
  EXPECT_EQ(out["kind"], "AdmissionReview");
  EXPECT_EQ(out["response"]["uid"], "u-1");
  EXPECT_EQ(out["response"]["allowed"], true);
  EXPECT_EQ(out["response"]["patchType"], "JSONPatch");
  std::string decoded;
  ASSERT_TRUE(absl::Base64Unescape(out["response"]["patch"].get<std::string>(), &decoded));
  EXPECT_EQ(decoded, resp.patch);
  EXPECT_EQ(out["response"]["warnings"], Json::array({"w1"}));
  EXPECT_EQ(out["response"]["auditAnnotations"]["injected"], "wisp-sidecar");
  EXPECT_FALSE(out["response"].contains("status"));

  AdmissionResponse deny{.uid = "u-2", .allowed = false, .message = "no", .code = 403};
  Json denied = Json::parse(EncodeAdmissionReview("admission.k8s.io/v1", deny));
  EXPECT_EQ(denied["response"]["allowed"], false);
  EXPECT_EQ(denied["response"]["status"]["message"], "no");
  EXPECT_EQ(denied["response"]["status"]["code"], 403);
  EXPECT_FALSE(denied["response"].contains("patch"));
}

}  // namespace
}  // namespace wisp::k8s
