#include "wisp/kube/errors.hpp"

#include <gtest/gtest.h>

namespace wisp::kube {
namespace {

// A Status body as kube-apiserver v1.32 writes it for a missing ConfigMap.
const char* kNotFound = R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)"
                        R"("message":"configmaps \"app\" not found","reason":"NotFound",)"
                        R"("details":{"name":"app","kind":"configmaps"},"code":404})";

// Tests that the apiserver's reason decides the code, the message names the call and keeps the
// apiserver's words, and the reason travels in the payload.
TEST(KubeErrorsTest, MapsStatusBodyReasonToCode) {
  absl::Status s = StatusFromApi(404, kNotFound, "kube get configmaps default/app");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(),
            "kube get configmaps default/app: configmaps \"app\" not found (NotFound, HTTP 404)");
  EXPECT_EQ(ReasonOf(s), "NotFound");
  EXPECT_TRUE(kube::IsNotFound(s));
  EXPECT_FALSE(kube::IsConflict(s));

  struct Case {
    int http;
    std::string reason;
    absl::StatusCode code;
  };
  const std::vector<Case> cases = {
      {409, "AlreadyExists", absl::StatusCode::kAlreadyExists},
      {409, "Conflict", absl::StatusCode::kAborted},
      {403, "Forbidden", absl::StatusCode::kPermissionDenied},
      {401, "Unauthorized", absl::StatusCode::kUnauthenticated},
      {422, "Invalid", absl::StatusCode::kInvalidArgument},
      {400, "BadRequest", absl::StatusCode::kInvalidArgument},
      {410, "Expired", absl::StatusCode::kOutOfRange},
      {410, "Gone", absl::StatusCode::kOutOfRange},
      {429, "TooManyRequests", absl::StatusCode::kResourceExhausted},
      {504, "Timeout", absl::StatusCode::kUnavailable},
      {500, "ServerTimeout", absl::StatusCode::kUnavailable},
      {500, "InternalError", absl::StatusCode::kUnavailable},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.reason);
    const std::string body = R"({"kind":"Status","status":"Failure","message":"m","reason":")" +
                             c.reason + R"(","code":)" + std::to_string(c.http) + "}";
    absl::Status got = StatusFromApi(c.http, body, "ctx");
    EXPECT_EQ(got.code(), c.code) << got;
    EXPECT_EQ(ReasonOf(got), c.reason);
  }
  EXPECT_TRUE(kube::IsAlreadyExists(
      StatusFromApi(409, R"({"kind":"Status","reason":"AlreadyExists"})", "c")));
  EXPECT_TRUE(
      kube::IsConflict(StatusFromApi(409, R"({"kind":"Status","reason":"Conflict"})", "c")));
  EXPECT_TRUE(kube::IsGone(StatusFromApi(410, R"({"kind":"Status","reason":"Expired"})", "c")));
}

// Tests that an answer that is not a Status falls back on the HTTP code, with a bounded one-line
// piece of the body.
TEST(KubeErrorsTest, FallsBackOnHttpCodeForOtherBodies) {
  absl::Status s = StatusFromApi(410, "", "kube watch pods");
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(kube::IsGone(s));
  EXPECT_EQ(ReasonOf(s), "Gone");
  absl::Status proxy = StatusFromApi(502, "<html>\nbad gateway</html>", "kube get pods a/b");
  EXPECT_EQ(proxy.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(proxy.message(), "kube get pods a/b: <html> bad gateway</html> (HTTP 502)");
  EXPECT_TRUE(StatusFromApi(201, "", "x").ok());
  EXPECT_EQ(ReasonOf(absl::NotFoundError("plain")), "");
  EXPECT_FALSE(kube::IsNotFound(absl::NotFoundError("plain")));
}

}  // namespace
}  // namespace wisp::kube
