#include "issuer.hpp"

#include <gtest/gtest.h>

#include "wisp/token/testing/test_env.hpp"
#include "wisp/jwt/base64url.hpp"

namespace wisp::token {
namespace {

class IssuerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(env_.keys->Start().ok()); }
  nlohmann::json ClaimsOf(const std::string& token) { return jwt::Decode(token)->claims; }
  testing::Env env_;
};

// Tests that an issued token carries Kubernetes' claim shapes and verifies with the JWKS.
TEST_F(IssuerTest, IssuesKubernetesShapedToken) {
  auto resp = env_.issuer->Issue(env_.Request());
  ASSERT_TRUE(resp.ok()) << resp.status();
  auto c = ClaimsOf(resp->token());
  EXPECT_EQ(c["iss"], testing::kIssuer);
  EXPECT_EQ(c["sub"], "system:serviceaccount:ml:loader");
  EXPECT_EQ(c["aud"], nlohmann::json::array({"vault"}));
  EXPECT_EQ(c["exp"].get<int64_t>() - c["iat"].get<int64_t>(), 3600);
  EXPECT_EQ(c["nbf"], c["iat"]);
  EXPECT_EQ(c["jti"].get<std::string>().size(), 36u);
  EXPECT_EQ(c["kubernetes.io"]["namespace"], "ml");
  EXPECT_EQ(c["kubernetes.io"]["serviceaccount"]["name"], "loader");
  EXPECT_EQ(c["kubernetes.io"]["serviceaccount"]["uid"], "sa-uid");
  EXPECT_EQ(c["kubernetes.io"]["pod"]["name"], "loader-0");
  EXPECT_EQ(c["kubernetes.io"]["pod"]["uid"], "pod-uid");
  EXPECT_EQ(resp->expiration_unix(), c["exp"].get<int64_t>());
  auto d = jwt::Decode(resp->token());
  EXPECT_EQ(d->alg, "RS256");
  EXPECT_EQ(d->kid, resp->key_id());
  EXPECT_TRUE(jwt::Verify(resp->token(), env_.keys->Current()->public_keys,
                          {.now_unix = env_.clock.NowUnixSeconds()})
                  .ok());
}

// Tests Kubernetes' expirationSeconds limits and messages, and the policy caps.
TEST_F(IssuerTest, EnforcesExpirationLimits) {
  struct Case {
    std::string ns;
    int64_t requested;
    int64_t want;  // 0 = refused
    const char* message;
  } cases[] = {
      {"ml", 0, 3600, ""},
      {"ml", 599, 0, "may not specify a duration less than 10 minutes"},
      {"ml", 600, 600, ""},
      {"ml", (int64_t{1} << 32) + 1, 0, "may not specify a duration larger than 2^32 seconds"},
      {"ml", int64_t{1} << 32, 7200, ""},  // global cap
      {"short", 3600, 900, ""},            // namespace cap
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.ns + " " + std::to_string(c.requested));
    auto req = env_.Request(c.ns);
    req.set_expiration_seconds(c.requested);
    auto resp = env_.issuer->Issue(req);
    if (c.want == 0) {
      ASSERT_FALSE(resp.ok());
      EXPECT_EQ(resp.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(std::string(resp.status().message()),
                std::string("expirationSeconds: ") + c.message);
    } else {
      ASSERT_TRUE(resp.ok()) << resp.status();
      EXPECT_EQ(resp->expiration_unix() - resp->issued_at_unix(), c.want);
    }
  }
}

// Tests that audiences outside the namespace's list are refused and defaults apply.
TEST_F(IssuerTest, ChecksAudiencesAgainstPolicy) {
  auto denied = env_.issuer->Issue(env_.Request("short", "x", {"sts.amazonaws.com"}));
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(std::string(denied.status().message()).find("sts.amazonaws.com"), std::string::npos);
  EXPECT_FALSE(env_.issuer->Issue(env_.Request("unlisted", "x", {"vault"})).ok());
  auto def = env_.issuer->Issue(env_.Request("unlisted", "x", {}));
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(ClaimsOf(def->token())["aud"], nlohmann::json::array({"wisp"}));
}

// Tests that malformed subjects and algorithms are refused naming the field.
TEST_F(IssuerTest, RefusesBadSubjectAndAlgorithm) {
  auto bad_ns = env_.issuer->Issue(env_.Request("", "loader"));
  EXPECT_NE(std::string(bad_ns.status().message()).find("subject.namespace"), std::string::npos);
  auto bad_sa = env_.issuer->Issue(env_.Request("ml", "Bad:Name"));
  EXPECT_NE(std::string(bad_sa.status().message()).find("subject.service_account"),
            std::string::npos);
  auto req = env_.Request();
  req.set_algorithm("HS256");
  EXPECT_EQ(env_.issuer->Issue(req).status().code(), absl::StatusCode::kInvalidArgument);
  req.set_algorithm("ES256");
  auto es = env_.issuer->Issue(req);
  ASSERT_TRUE(es.ok());
  EXPECT_EQ(jwt::Decode(es->token())->alg, "ES256");
}

// Tests that the hand-written claims are exactly nlohmann's dump of them (sorted keys, its
// escaping), with escapes and UTF-8 in free-form fields, and that invalid UTF-8 is refused.
TEST_F(IssuerTest, ClaimsAreCanonicalJsonAndRefuseInvalidUtf8) {
  auto req = env_.Request();
  req.mutable_subject()->set_pod_uid("q\"b\\s\n\x01\x7f caf\xc3\xa9 \xf0\x9f\x94\x91");
  req.mutable_subject()->set_node_name("node-1");
  req.add_audiences("sts.amazonaws.com");
  auto resp = env_.issuer->Issue(req);
  ASSERT_TRUE(resp.ok()) << resp.status();
  const std::string& t = resp->token();
  const size_t d1 = t.find('.'), d2 = t.rfind('.');
  const std::string raw = *jwt::Base64UrlDecode(t.substr(d1 + 1, d2 - d1 - 1));
  EXPECT_EQ(raw, nlohmann::json::parse(raw).dump());
  EXPECT_EQ(ClaimsOf(t)["kubernetes.io"]["pod"]["uid"],
            "q\"b\\s\n\x01\x7f caf\xc3\xa9 \xf0\x9f\x94\x91");
  EXPECT_EQ(ClaimsOf(t)["kubernetes.io"]["node"]["name"], "node-1");
  for (const char* bad : {"\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xff"}) {
    req.mutable_subject()->set_pod_uid(bad);
    auto refused = env_.issuer->Issue(req);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// Tests that a batch answers each entry in its place, a refused entry with the code and message
// Issue gives it alone, and that an empty or oversized batch is refused naming `requests`.
TEST_F(IssuerTest, IssueBatchAnswersEachEntry) {
  v1::IssueBatchRequest batch;
  *batch.add_requests() = env_.Request("ml", "loader", {"vault"});
  *batch.add_requests() = env_.Request("short", "x", {"sts.amazonaws.com"});
  auto es = env_.Request("ml", "trainer", {"vault"});
  es.set_algorithm("ES256");
  *batch.add_requests() = es;
  auto short_lived = env_.Request();
  short_lived.set_expiration_seconds(60);
  *batch.add_requests() = short_lived;

  auto resp = env_.issuer->IssueBatch(batch);
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(resp->results_size(), 4);
  EXPECT_EQ(resp->results(0).code(), 0);
  EXPECT_EQ(ClaimsOf(resp->results(0).token().token())["sub"], "system:serviceaccount:ml:loader");
  EXPECT_EQ(resp->results(1).code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_FALSE(resp->results(1).has_token());
  EXPECT_EQ(resp->results(1).message(), env_.issuer->Issue(batch.requests(1)).status().message());
  EXPECT_EQ(resp->results(2).code(), 0);
  EXPECT_EQ(jwt::Decode(resp->results(2).token().token())->alg, "ES256");
  EXPECT_EQ(ClaimsOf(resp->results(2).token().token())["sub"], "system:serviceaccount:ml:trainer");
  EXPECT_EQ(resp->results(3).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(resp->results(3).message(),
            "expirationSeconds: may not specify a duration less than 10 minutes");
  for (int i : {0, 2}) {
    EXPECT_TRUE(jwt::Verify(resp->results(i).token().token(), env_.keys->Current()->public_keys,
                            {.now_unix = env_.clock.NowUnixSeconds()})
                    .ok());
  }

  auto empty = env_.issuer->IssueBatch(v1::IssueBatchRequest());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(empty.status().message()), "requests: empty batch");
  v1::IssueBatchRequest big;
  for (int i = 0; i <= Issuer::kMaxBatch; ++i) *big.add_requests() = env_.Request();
  auto refused = env_.issuer->IssueBatch(big);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(refused.status().message()),
            "requests: 257 entries; at most 256 per batch");
}

}  // namespace
}  // namespace wisp::token
