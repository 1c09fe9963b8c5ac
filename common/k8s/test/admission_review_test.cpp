#include "wisp/k8s/admission_review.hpp"

#include <absl/strings/escaping.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

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

// Tests that the encoding is the JSON kube-apiserver expects, keys sorted, strings escaped as
// nlohmann escapes them (control characters as \uXXXX or their short forms, UTF-8 as is).
TEST(AdmissionReviewTest, EncodesLiteralJson) {
  EXPECT_EQ(EncodeAdmissionReview("admission.k8s.io/v1", {.uid = "u-1"}),
            R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",)"
            R"("response":{"allowed":true,"uid":"u-1"}})");
  EXPECT_EQ(EncodeAdmissionReview("", {.uid = "u-2", .allowed = false}),
            R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",)"
            R"("response":{"allowed":false,"status":{"status":"Failure"},"uid":"u-2"}})");
  AdmissionResponse full{.uid = "u-3",
                         .patch = "[]",
                         .warnings = {"w\"1\n\x01"},
                         .message = "é 日本",
                         .code = 403,
                         .reason = "Forbidden",
                         .audit_annotations = {{"k", "v\\"}}};
  EXPECT_EQ(EncodeAdmissionReview("admission.k8s.io/v1beta1", full),
            R"({"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview",)"
            R"("response":{"allowed":true,"auditAnnotations":{"k":"v\\"},"patch":"W10=",)"
            R"("patchType":"JSONPatch","status":{"code":403,"message":"é 日本",)"
            R"("reason":"Forbidden"},"uid":"u-3","warnings":["w\"1\n\u0001"]}})");
}

// Tests that the direct encoding is byte for byte nlohmann's (EncodeAdmissionReviewWithJson),
// escapes and UTF-8 included, and that a string that is not UTF-8 is refused as nlohmann refuses
// it.
TEST(AdmissionReviewTest, EncodingMatchesJsonDump) {
  std::string controls;
  for (int c = 0; c < 0x20; ++c) controls.push_back(static_cast<char>(c));
  controls += "\x7f \" \\ / é 日本 \xf0\x9f\x98\x80";
  const std::vector<AdmissionResponse> cases = {
      {.uid = "u-1"},
      {.uid = "u-2", .allowed = false},
      {.uid = "u-3",
       .allowed = true,
       .patch = R"([{"op":"add","path":"/a","value":"x\"y"}])",
       .warnings = {"w1", controls},
       .audit_annotations = {{"token-volume", "wisp-sa-token audience=sts"}, {"a", controls}}},
      {.uid = controls,
       .allowed = false,
       .warnings = {""},
       .message = "pods \"x\" is forbidden: " + controls,
       .code = 403,
       .reason = "Forbidden"},
      {.uid = "u-5", .allowed = true, .message = "note", .code = -1},
      {.uid = "u-6", .allowed = true, .reason = "only a reason"},
  };
  for (const auto& api : {"admission.k8s.io/v1", "admission.k8s.io/v1beta1", ""}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(std::string(api) + " case " + std::to_string(i));
      EXPECT_EQ(EncodeAdmissionReview(api, cases[i]), EncodeAdmissionReviewWithJson(api, cases[i]));
    }
  }
  for (const std::string bad :
       {"\xff", "a\xc3", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    AdmissionResponse r{.uid = "u", .message = bad};
    EXPECT_THROW(EncodeAdmissionReviewWithJson("", r), Json::type_error);
    EXPECT_THROW(EncodeAdmissionReview("", r), Json::type_error);
  }
}

}  // namespace
}  // namespace wisp::k8s
