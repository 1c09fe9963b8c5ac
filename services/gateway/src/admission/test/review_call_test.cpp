#include "admission/review_call.hpp"

#include <gtest/gtest.h>

#include "admission/admission_handler.hpp"
#include "wisp/k8s/admission_review.hpp"

namespace wisp::gateway::admission {
namespace {

using k8s::Json;

// What the gateway sent before the simdjson path: ParseAdmissionReview + ToAdmissionCall.
absl::StatusOr<ReviewCall> Reference(std::string_view body) {
  WISP_ASSIGN_OR_RETURN(k8s::AdmissionReview review, k8s::ParseAdmissionReview(body));
  return ReviewCall{review.api_version, ToAdmissionCall(review.request, "1.30")};
}

// Same verdict, same message, same call; the object JSON compared as values.
void ExpectSame(const std::string& body) {
  SCOPED_TRACE(body.substr(0, 200));
  auto want = Reference(body);
  auto got = ParseReviewCall(body, "1.30");
  ASSERT_EQ(got.status(), want.status());
  if (!want.ok()) return;
  EXPECT_EQ(got->api_version, want->api_version);
  v1::AdmissionCall g = got->call, w = want->call;
  for (auto [gj, wj] : {std::pair{g.mutable_object_json(), w.mutable_object_json()},
                        std::pair{g.mutable_old_object_json(), w.mutable_old_object_json()}}) {
    EXPECT_EQ(gj->empty(), wj->empty());
    if (!gj->empty()) {
      EXPECT_EQ(Json::parse(*gj), Json::parse(*wj));
    }
    gj->clear();
    wj->clear();
  }
  EXPECT_EQ(g.SerializeAsString(), w.SerializeAsString()) << g.DebugString() << "\nvs\n"
                                                          << w.DebugString();
}

constexpr const char* kFull = R"({
  "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "extra": [1, 2],
  "request": {
    "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
    "kind": {"group": "", "version": "v1", "kind": "Pod"},
    "resource": {"group": "", "version": "v1", "resource": "pods"},
    "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
    "subResource": null,
    "operation": "UPDATE", "namespace": "ml", "name": "loader",
    "userInfo": {"username": "admin", "uid": "u1", "groups": ["system:masters", "a\"b"]},
    "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "l\u00e9", "b": 1, "a": 2.5,
               "big": 18446744073709551615, "neg": -9223372036854775808, "e": 1e3, "t": true,
               "n": null, "s": "tab\tnl\nq\"u\u0001"}},
    "oldObject": {"kind": "Pod", "spec": {"containers": []}}, "dryRun": true
  }
})";

// Tests that well-formed reviews of every shape give the call the reference path gives.
TEST(ReviewCallTest, MatchesTheReferenceOnValidReviews) {
  ExpectSame(kFull);
  Json base = Json::parse(kFull);
  auto with = [&](const std::string& pointer, const Json& value) {
    Json j = base;
    j[Json::json_pointer(pointer)] = value;
    return j.dump();
  };
  auto without = [&](const std::string& parent, const std::string& key) {
    Json j = base;
    j[Json::json_pointer(parent)].erase(key);
    return j.dump();
  };
  ExpectSame(with("/apiVersion", "admission.k8s.io/v1beta1"));
  ExpectSame(with("/request/operation", "DELETE"));
  ExpectSame(without("/request", "object"));
  ExpectSame(with("/request/operation", "CONNECT"));
  ExpectSame(with("/request/resource", nullptr));
  ExpectSame(without("/request", "resource"));
  ExpectSame(with("/request/userInfo", nullptr));
  ExpectSame(with("/request/userInfo/groups", nullptr));
  ExpectSame(with("/request/dryRun", nullptr));
  ExpectSame(with("/request/dryRun", false));
  ExpectSame(with("/request/kind/group", "kubevirt.io"));
  ExpectSame(with("/request/kind/group", nullptr));
  ExpectSame(with("/request/object", Json::object()));
  ExpectSame(with("/request/oldObject", nullptr));
  // Big numbers simdjson does not take go the reference way and still agree.
  ExpectSame(with("/request/object/metadata/huge", Json::parse("123456789012345678901234567890")));
  ExpectSame(R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",)"
             R"("kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{"x":1e400}}})");
  // A UTF-8 byte order mark (nlohmann skips it).
  ExpectSame("\xEF\xBB\xBF" + base.dump());
}

// Tests that every malformed review gets the reference path's message.
TEST(ReviewCallTest, MatchesTheReferenceOnBadReviews) {
  Json base = Json::parse(kFull);
  auto with = [&](const std::string& pointer, const Json& value) {
    Json j = base;
    j[Json::json_pointer(pointer)] = value;
    return j.dump();
  };
  auto without = [&](const std::string& parent, const std::string& key) {
    Json j = base;
    j[Json::json_pointer(parent)].erase(key);
    return j.dump();
  };
  for (const std::string& body : {
           std::string("{not json"),
           std::string(""),
           std::string("[]"),
           std::string("{} {}"),
           base.dump() + " x",
           with("/apiVersion", "v1"),
           with("/apiVersion", 1),
           without("", "apiVersion"),
           with("/kind", "Review"),
           without("", "request"),
           with("/request", nullptr),
           with("/request", "x"),
           with("/request/uid", ""),
           with("/request/uid", 7),
           without("/request", "kind"),
           with("/request/kind", "Pod"),
           with("/request/kind/version", ""),
           with("/request/kind/kind", nullptr),
           with("/request/kind/group", false),
           with("/request/resource", Json::array()),
           with("/request/resource/resource", 1),
           with("/request/subResource", 1),
           with("/request/operation", "PATCH"),
           without("/request", "operation"),
           with("/request/name", Json::object()),
           with("/request/namespace", 1.5),
           with("/request/userInfo", "admin"),
           with("/request/userInfo/username", 1),
           with("/request/userInfo/groups", "a"),
           with("/request/userInfo/groups", Json::array({"a", 1})),
           with("/request/object", Json::array()),
           with("/request/object", nullptr),
           with("/request/oldObject", "x"),
           with("/request/dryRun", "true"),
       }) {
    ExpectSame(body);
    EXPECT_FALSE(ParseReviewCall(body, "1.30").ok()) << body;
  }
  // A duplicate key: nlohmann keeps the last one; so must the answer.
  ExpectSame(
      R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a",)"
      R"("uid":"b","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{}}})");
  ExpectSame(
      R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a",)"
      R"("kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{},"object":null}})");
}

// Tests that the objects go to wisp-policy as the body has them (copied, not written out again),
// escapes and spacing included, and that a key spelled with an escape still finds them.
TEST(ReviewCallTest, ObjectsAreTheBodysText) {
  const std::string object = R"({"kind": "Pod",  "metadata": {"name": "l\u00e9"}})";
  const std::string old = R"({"kind":"Pod"})";
  const std::string body =
      R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",
      "kind":{"group":"","version":"v1","kind":"Pod"},"operation":"UPDATE",
      "obj\u0065ct": )" +
      object + R"(, "oldObject":)" + old + "}}";
  auto got = ParseReviewCall(body, "1.30");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->call.object_json(), object);
  EXPECT_EQ(got->call.old_object_json(), old);
  ExpectSame(body);
}

// Tests that a pod's ServiceAccount is read from the parsed body: serviceAccountName, else the
// deprecated serviceAccount, else "default"; nothing for other kinds.
TEST(ReviewCallTest, PodsServiceAccount) {
  auto review = [](const std::string& kind, const std::string& spec) {
    return R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
      "uid":"u","kind":{"group":"","version":"v1","kind":")" +
           kind + R"("},"operation":"CREATE","namespace":"ml",
      "object":{"metadata":{"name":"p"},"spec":)" +
           spec + "}}}";
  };
  struct Case {
    std::string kind, spec, want;
  } cases[] = {
      {"Pod", R"({"serviceAccountName":"loader","serviceAccount":"old"})", "loader"},
      {"Pod", R"({"serviceAccount":"old"})", "old"},
      {"Pod", R"({"serviceAccountName":""})", "default"},
      {"Pod", R"({"containers":[]})", "default"},
      {"PersistentVolumeClaim", R"({"serviceAccountName":"x"})", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.spec);
    auto got = ParseReviewCall(review(c.kind, c.spec), "1.30");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->service_account, c.want);
  }
}

}  // namespace
}  // namespace wisp::gateway::admission
