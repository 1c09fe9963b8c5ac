#include "exchanger.hpp"

#include <fstream>

#include <gtest/gtest.h>

#include "wisp/token/testing/test_env.hpp"

namespace wisp::token {
namespace {

constexpr const char* kScope = "https://www.googleapis.com/auth/cloud-platform";

class ExchangerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(env_.keys->Start().ok()); }
  std::string Subject(std::string sa = "loader", std::vector<std::string> auds = {"wisp-sts"}) {
    return env_.issuer->Issue(env_.Request("ml", sa, auds))->token();
  }
  v1::ExchangeRequest Request(std::string subject_token) {
    v1::ExchangeRequest r;
    r.set_grant_type(std::string(kGrantTokenExchange));
    r.set_subject_token(std::move(subject_token));
    r.set_subject_token_type(std::string(kTokenTypeJwt));
    r.set_requested_token_type(std::string(kTokenTypeAccessToken));
    r.set_audience("storage.wisp.dev");
    r.set_scope(kScope);
    return r;
  }
  testing::Env env_;
};

// Tests that an allowed exchange returns a wisp-signed access token for the audience.
TEST_F(ExchangerTest, ExchangesAllowedSubject) {
  auto resp = env_.exchanger->Exchange(Request(Subject()));
  ASSERT_TRUE(resp.error().empty()) << resp.error() << ": " << resp.error_description();
  EXPECT_EQ(resp.token_type(), "Bearer");
  EXPECT_EQ(resp.issued_token_type(), kTokenTypeAccessToken);
  EXPECT_EQ(resp.expires_in(), 1800);
  EXPECT_EQ(resp.scope(), kScope);
  EXPECT_EQ(resp.http_status(), 200);
  EXPECT_EQ(resp.subject(), std::string(testing::kIssuer) + " system:serviceaccount:ml:loader");
  auto v = env_.reviewer->Verify(resp.access_token(), {"storage.wisp.dev"});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->claims["sub"], "system:serviceaccount:ml:loader");
  EXPECT_EQ(v->claims["scope"], kScope);
}

// Tests RFC 8693's resource parameter: an absolute URI naming the target, allowed by the exchange
// policy like an audience, and written into the access token's aud (alone or next to audience).
TEST_F(ExchangerTest, ResourceIsATargetLikeAudience) {
  auto req = Request(Subject());
  req.clear_audience();
  req.set_resource("https://storage.wisp.dev/v1");
  auto alone = env_.exchanger->Exchange(req);
  ASSERT_TRUE(alone.error().empty()) << alone.error() << ": " << alone.error_description();
  auto v = env_.reviewer->Verify(alone.access_token(), {"https://storage.wisp.dev/v1"});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->claims["aud"], nlohmann::json::array({"https://storage.wisp.dev/v1"}));

  req.set_audience("storage.wisp.dev");
  auto both = env_.exchanger->Exchange(req);
  ASSERT_TRUE(both.error().empty()) << both.error() << ": " << both.error_description();
  v = env_.reviewer->Verify(both.access_token(), {"storage.wisp.dev"});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->claims["aud"],
            nlohmann::json::array({"storage.wisp.dev", "https://storage.wisp.dev/v1"}));

  struct Case {
    const char* resource;
    const char* error;
    const char* says;
  } cases[] = {
      {"storage.wisp.dev", "invalid_request", "resource must be an absolute URI"},
      {"/v1/storage", "invalid_request", "resource must be an absolute URI"},
      {"https://storage.wisp.dev/v1#frag", "invalid_request", "without a fragment"},
      {"https://storage wisp.dev", "invalid_request", "resource must be an absolute URI"},
      {"1https://storage.wisp.dev", "invalid_request", "resource must be an absolute URI"},
      {"https://other.example/", "invalid_target",
       "resource \"https://other.example/\" is not allowed for system:serviceaccount:ml:loader"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.resource);
    auto r = Request(Subject());
    r.set_resource(c.resource);
    auto resp = env_.exchanger->Exchange(r);
    EXPECT_EQ(resp.error(), c.error);
    EXPECT_NE(resp.error_description().find(c.says), std::string::npos) << resp.error_description();
    EXPECT_EQ(resp.http_status(), 400);
    EXPECT_TRUE(resp.access_token().empty());
  }
  auto neither = Request(Subject());
  neither.clear_audience();
  auto resp = env_.exchanger->Exchange(neither);
  EXPECT_EQ(resp.error(), "invalid_request");
  EXPECT_EQ(resp.error_description(), "audience or resource is required");
}

// Tests each RFC 6749 error the exchange can give.
TEST_F(ExchangerTest, RefusesWithRfc6749Errors) {
  struct Case {
    const char* name;
    std::function<void(v1::ExchangeRequest&)> edit;
    const char* error;
  } cases[] = {
      {"grant", [](auto& r) { r.set_grant_type("client_credentials"); }, "unsupported_grant_type"},
      {"no grant", [](auto& r) { r.clear_grant_type(); }, "invalid_request"},
      {"no token", [](auto& r) { r.clear_subject_token(); }, "invalid_request"},
      {"token type", [](auto& r) { r.set_subject_token_type("saml2"); }, "invalid_request"},
      {"requested", [](auto& r) { r.set_requested_token_type("x"); }, "invalid_request"},
      {"no audience", [](auto& r) { r.clear_audience(); }, "invalid_request"},
      {"garbage", [](auto& r) { r.set_subject_token("a.b.c"); }, "invalid_grant"},
      {"audience", [](auto& r) { r.set_audience("other"); }, "invalid_target"},
      {"scope", [](auto& r) { r.set_scope("admin"); }, "invalid_scope"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto req = Request(Subject());
    c.edit(req);
    auto resp = env_.exchanger->Exchange(req);
    EXPECT_EQ(resp.error(), c.error) << resp.error_description();
    EXPECT_EQ(resp.http_status(), 400);
    EXPECT_TRUE(resp.access_token().empty());
  }
}

// Tests that whitespace at the ends of the subject token (a file written by `echo`, sent as it is
// by google-auth-library's file credential source) is dropped, and whitespace inside is refused.
TEST_F(ExchangerTest, TrimsWhitespaceAtTheEndsOfTheSubjectToken) {
  const std::string token = Subject();
  for (const std::string& padded : {token + "\n", token + "\r\n", " \t" + token + " \n\n"}) {
    auto resp = env_.exchanger->Exchange(Request(padded));
    EXPECT_TRUE(resp.error().empty()) << resp.error() << ": " << resp.error_description();
    EXPECT_FALSE(resp.access_token().empty());
  }
  const size_t dot = token.rfind('.');
  for (const char* inside : {"\n", " ", "\t"}) {
    SCOPED_TRACE(inside);
    const std::string broken = token.substr(0, dot + 5) + inside + token.substr(dot + 5);
    auto resp = env_.exchanger->Exchange(Request(broken));
    EXPECT_EQ(resp.error(), "invalid_grant");
    EXPECT_NE(resp.error_description().find("subject_token: "), std::string::npos)
        << resp.error_description();
  }
  auto blank = env_.exchanger->Exchange(Request(" \n"));
  EXPECT_EQ(blank.error(), "invalid_request");
  EXPECT_EQ(blank.error_description(), "subject_token is required");
}

// Tests that the subject token must carry the STS audience and come from an allowed subject.
TEST_F(ExchangerTest, RefusesWrongSubjectAudienceOrAccount) {
  auto wrong_aud = env_.exchanger->Exchange(Request(Subject("loader", {"vault"})));
  EXPECT_EQ(wrong_aud.error(), "invalid_grant");
  auto other_sa = env_.exchanger->Exchange(Request(Subject("trainer")));
  EXPECT_EQ(other_sa.error(), "invalid_target");
  auto req = Request(Subject());
  env_.clock.Advance(std::chrono::hours(2));
  auto expired = env_.exchanger->Exchange(req);
  EXPECT_EQ(expired.error(), "invalid_grant");
  EXPECT_NE(expired.error_description().find("expired"), std::string::npos);
}

// Tests that a configured external issuer (JWKS file) is trusted for its audience only.
TEST(ExchangerExternalTest, TrustsConfiguredExternalIssuer) {
  auto cluster = *jwt::PrivateKey::Generate(jwt::Algorithm::kES256);
  jwt::KeySet set;
  set.Add(cluster.public_key());
  const std::string jwks = ::testing::TempDir() + "/cluster-jwks.json";
  std::ofstream(jwks) << set.ToJwks().dump();
  const std::string yaml = std::string(R"(
exchange:
  rules: [{namespace: ml, audiences: [storage.wisp.dev]}]
trustedIssuers:
  - {issuer: "https://kubernetes.default.svc", jwksFile: ")") +
                           jwks + R"(", audiences: [wisp-sts]}
)";
  testing::Env env(yaml.c_str());
  ASSERT_TRUE(env.keys->Start().ok());
  const int64_t now = env.clock.NowUnixSeconds();
  nlohmann::json c = {{"iss", "https://kubernetes.default.svc"},
                      {"sub", "system:serviceaccount:ml:anyone"},
                      {"aud", {"wisp-sts"}},
                      {"iat", now},
                      {"exp", now + 600}};
  v1::ExchangeRequest r;
  r.set_grant_type(std::string(kGrantTokenExchange));
  r.set_subject_token(*jwt::Sign(cluster, c.dump()));
  r.set_subject_token_type(std::string(kTokenTypeJwt));
  r.set_audience("storage.wisp.dev");
  auto ok = env.exchanger->Exchange(r);
  EXPECT_TRUE(ok.error().empty()) << ok.error_description();
  c["aud"] = {"other"};
  r.set_subject_token(*jwt::Sign(cluster, c.dump()));
  EXPECT_EQ(env.exchanger->Exchange(r).error(), "invalid_grant");
  c["aud"] = {"wisp-sts"};
  c["iss"] = "https://untrusted";
  r.set_subject_token(*jwt::Sign(cluster, c.dump()));
  EXPECT_EQ(env.exchanger->Exchange(r).error(), "invalid_grant");
}

}  // namespace
}  // namespace wisp::token
