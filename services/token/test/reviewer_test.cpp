#include "reviewer.hpp"

#include <gtest/gtest.h>

#include "wisp/token/testing/test_env.hpp"
#include "wisp/jwt/base64url.hpp"
#include "wisp/jwt/seal.hpp"

namespace wisp::token {
namespace {

class ReviewerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(env_.keys->Start().ok()); }
  std::string Issue(int64_t exp = 600) {
    auto req = env_.Request();
    req.set_expiration_seconds(exp);
    return env_.issuer->Issue(req)->token();
  }
  v1::ReviewResponse Review(const std::string& token, std::vector<std::string> auds = {}) {
    v1::ReviewRequest r;
    r.set_token(token);
    for (auto& a : auds) r.add_audiences(a);
    return env_.reviewer->Review(r);
  }
  testing::Env env_;
};

// Tests that a fresh token is authenticated with its subject filled in.
TEST_F(ReviewerTest, AuthenticatesValidToken) {
  auto r = Review(Issue(), {"vault"});
  ASSERT_TRUE(r.authenticated()) << r.error();
  EXPECT_EQ(r.subject().namespace_(), "ml");
  EXPECT_EQ(r.subject().service_account(), "loader");
  EXPECT_EQ(r.subject().pod_uid(), "pod-uid");
  EXPECT_EQ(r.issuer(), testing::kIssuer);
}

// Tests expiry and audience refusals, and that the leeway (30 s) is honoured.
TEST_F(ReviewerTest, RefusesExpiredAndWrongAudience) {
  const std::string token = Issue(600);
  EXPECT_FALSE(Review(token, {"other"}).authenticated());
  env_.clock.Advance(std::chrono::seconds(620));
  EXPECT_TRUE(Review(token).authenticated());
  env_.clock.Advance(std::chrono::seconds(20));
  auto r = Review(token);
  EXPECT_FALSE(r.authenticated());
  EXPECT_NE(r.error().find("expired"), std::string::npos);
}

// Tests that once a retired key leaves the JWKS, even a freshly dated token signed by it is refused
// as an unknown kid.
TEST_F(ReviewerTest, RefusesTokensOfDroppedKey) {
  const auto key = *env_.keys->Current()->Active(jwt::Algorithm::kRS256);
  env_.clock.Advance(std::chrono::hours(12));
  ASSERT_TRUE(*env_.keys->Tick());  // the next key is published
  env_.clock.Advance(std::chrono::hours(12));
  ASSERT_TRUE(*env_.keys->Tick());  // and signs; `key` is retired
  env_.clock.Advance(std::chrono::seconds(7200 + 301));
  ASSERT_TRUE(*env_.keys->Tick());
  ASSERT_EQ(env_.keys->Current()->public_keys.Find(key.kid()), nullptr);
  const int64_t now = env_.clock.NowUnixSeconds();
  nlohmann::json c = {{"iss", testing::kIssuer},
                      {"sub", "system:serviceaccount:ml:loader"},
                      {"iat", now - 90000},
                      {"exp", now + 600}};
  auto r = Review(*jwt::Sign(key, c.dump()));
  EXPECT_FALSE(r.authenticated());
  EXPECT_NE(r.error().find("not a known key"), std::string::npos);
}

// Tests that a token issued before rotation still verifies while its key is retired.
TEST_F(ReviewerTest, TokenSignedBeforeRotationStillVerifies) {
  env_.clock.Advance(std::chrono::hours(12));
  ASSERT_TRUE(*env_.keys->Tick());  // the next key is published
  env_.clock.Advance(std::chrono::hours(12) - std::chrono::minutes(30));
  const std::string late = Issue(3600);
  env_.clock.Advance(std::chrono::minutes(30));
  ASSERT_TRUE(*env_.keys->Tick());  // and signs
  ASSERT_EQ(env_.keys->Current()->Info(jwt::Decode(late)->kid)->state, KeyState::kRetired);
  EXPECT_TRUE(Review(late).authenticated()) << Review(late).error();
}

// Tests that a token claiming a retired key signed it after retirement is refused.
TEST_F(ReviewerTest, RefusesTokenSignedByRetiredKeyAfterRetirement) {
  const auto key = *env_.keys->Current()->Active(jwt::Algorithm::kRS256);
  env_.clock.Advance(std::chrono::hours(12));
  ASSERT_TRUE(*env_.keys->Tick());  // the next key is published
  env_.clock.Advance(std::chrono::hours(12));
  ASSERT_TRUE(*env_.keys->Tick());  // and signs; `key` is retired
  env_.clock.Advance(std::chrono::minutes(5));
  const int64_t now = env_.clock.NowUnixSeconds();
  nlohmann::json c = {{"iss", testing::kIssuer},
                      {"sub", "system:serviceaccount:ml:loader"},
                      {"aud", {"vault"}},
                      {"iat", now},
                      {"nbf", now},
                      {"exp", now + 600}};
  auto r = Review(*jwt::Sign(key, c.dump()));
  EXPECT_FALSE(r.authenticated());
  EXPECT_NE(r.error().find("after that key was retired"), std::string::npos);
}

// Tests that a token claiming a next key (published ahead, not signing yet) is refused: wisp-token
// has signed nothing with it, so such a token can only come from someone holding its private key.
TEST_F(ReviewerTest, RefusesTokenSignedByNextKey) {
  env_.clock.Advance(std::chrono::hours(12));
  ASSERT_TRUE(*env_.keys->Tick());  // the next keys are published
  auto stored = nlohmann::json::parse(env_.kv->Get(kKeySetKey)->value);
  std::string kid, sealed;
  for (const auto& k : stored["keys"]) {
    if (k["state"] == "next" && k["alg"] == "RS256") {
      kid = k["kid"];
      sealed = k["sealed"];
    }
  }
  ASSERT_FALSE(kid.empty());
  auto pem = jwt::Open(env_.kek, *jwt::Base64Decode(sealed), kid);
  ASSERT_TRUE(pem.ok()) << pem.status();
  auto next = jwt::PrivateKey::FromPem(*pem);
  ASSERT_TRUE(next.ok()) << next.status();
  const int64_t now = env_.clock.NowUnixSeconds();
  nlohmann::json c = {{"iss", testing::kIssuer},
                      {"sub", "system:serviceaccount:ml:loader"},
                      {"aud", {"vault"}},
                      {"iat", now},
                      {"nbf", now},
                      {"exp", now + 600}};
  auto r = Review(*jwt::Sign(*next, c.dump()), {"vault"});
  EXPECT_FALSE(r.authenticated());
  EXPECT_EQ(r.error(), "token claims to be signed by key " + kid +
                           ", which is published but has not signed yet");
}

// Tests that alg none, HS256 keyed with the JWKS and an unknown kid are refused.
TEST_F(ReviewerTest, RefusesForgedTokens) {
  const std::string token = Issue();
  const size_t d2 = token.rfind('.');
  const std::string payload = token.substr(token.find('.') + 1, d2 - token.find('.') - 1);
  const std::string none =
      jwt::Base64UrlEncode(R"({"alg":"none","typ":"JWT"})") + "." + payload + ".";
  EXPECT_FALSE(Review(none).authenticated());
  auto stranger = *jwt::PrivateKey::Generate(jwt::Algorithm::kRS256);
  const int64_t now = env_.clock.NowUnixSeconds();
  nlohmann::json c = {{"iss", testing::kIssuer},
                      {"sub", "system:serviceaccount:ml:loader"},
                      {"iat", now},
                      {"exp", now + 600}};
  auto r = Review(*jwt::Sign(stranger, c.dump()));
  EXPECT_FALSE(r.authenticated());
  EXPECT_NE(r.error().find("not a known key"), std::string::npos);
}

}  // namespace
}  // namespace wisp::token
