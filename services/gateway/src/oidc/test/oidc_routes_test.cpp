#include "oidc/oidc_routes.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "wisp/token/testing/test_env.hpp"
#include "token_service.hpp"

namespace wisp::gateway::oidc {
namespace {

constexpr const char* kScope = "https://www.googleapis.com/auth/cloud-platform";

std::string FormEscape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      char b[4];
      std::snprintf(b, sizeof(b), "%%%02X", c);
      out += b;
    }
  }
  return out;
}

class OidcRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.keys->Start().ok());
    micro_ = *bus::Service::Start(env_.bus, {.name = "wisp-token", .version = "0.1.0"});
    svc_ = std::make_unique<token::TokenService>(
        *micro_, env_.bus, *env_.keys, *env_.issuer, *env_.reviewer, *env_.exchanger,
        token::TokenService::Options{.issuer = token::testing::kIssuer,
                                     .tick_interval = std::chrono::hours(1)});
    ASSERT_TRUE(svc_->Start().ok());
    OidcOptions opts;
    opts.sts_rate_per_second = 0.001;
    opts.sts_burst = 3;
    opts.key_cache.refresh_interval = std::chrono::hours(1);
    routes_ = std::make_unique<OidcRoutes>(env_.bus, env_.registry, env_.clock, opts);
    ASSERT_TRUE(routes_->Start().ok());
  }
  void TearDown() override {
    routes_.reset();
    svc_->Stop();
    (void)micro_->Drain();
  }

  std::string SubjectToken(std::string sa = "loader") {
    return env_.issuer->Issue(env_.Request("ml", sa, {"wisp-sts"}))->token();
  }
  http::Request Form(std::string body) {
    http::Request r;
    r.method = "POST";
    r.path = "/v1/token";
    r.headers["content-type"] = "application/x-www-form-urlencoded";
    r.body = std::move(body);
    return r;
  }
  std::string FormBody(const std::string& token, std::string audience = "storage.wisp.dev") {
    return "grant_type=" + FormEscape("urn:ietf:params:oauth:grant-type:token-exchange") +
           "&subject_token=" + token +
           "&subject_token_type=" + FormEscape("urn:ietf:params:oauth:token-type:jwt") +
           "&requested_token_type=" + FormEscape("urn:ietf:params:oauth:token-type:access_token") +
           "&audience=" + FormEscape(audience) + "&scope=" + FormEscape(kScope);
  }
  std::string Header(const http::Response& r, std::string_view name) {
    for (const auto& [k, v] : r.headers) {
      if (k == name) return v;
    }
    return "";
  }

  token::testing::Env env_;
  std::unique_ptr<bus::Service> micro_;
  std::unique_ptr<token::TokenService> svc_;
  std::unique_ptr<OidcRoutes> routes_;
};

// Tests the discovery document and JWKS shapes and cache headers.
TEST_F(OidcRoutesTest, ServesDiscoveryAndJwks) {
  auto d = routes_->Discovery({});
  ASSERT_EQ(d.status, 200);
  auto doc = nlohmann::json::parse(d.body);
  EXPECT_EQ(doc["issuer"], token::testing::kIssuer);
  EXPECT_EQ(doc["jwks_uri"], std::string(token::testing::kIssuer) + "/openid/v1/jwks");
  EXPECT_EQ(Header(d, "Cache-Control"), "public, max-age=300");
  auto j = routes_->Jwks({});
  ASSERT_EQ(j.status, 200);
  EXPECT_EQ(j.content_type, "application/jwk-set+json");
  EXPECT_EQ(nlohmann::json::parse(j.body)["keys"].size(), 2u);
}

// Tests that the JWKS follows a rotation through the change event, without a request per call.
TEST_F(OidcRoutesTest, JwksFollowsRotation) {
  ASSERT_TRUE(*env_.keys->RotateNow());
  EXPECT_EQ(nlohmann::json::parse(routes_->Jwks({}).body)["keys"].size(), 4u);
  env_.bus.FailSubject(bus::subjects::kTokenKeys, absl::UnavailableError("down"));
  EXPECT_EQ(routes_->Jwks({}).status, 200);  // served from the cache
}

// Tests a form-encoded exchange end to end through the bus.
TEST_F(OidcRoutesTest, ExchangesFormEncoded) {
  auto r = routes_->Token(Form(FormBody(SubjectToken())));
  ASSERT_EQ(r.status, 200) << r.body;
  auto body = nlohmann::json::parse(r.body);
  EXPECT_EQ(body["token_type"], "Bearer");
  EXPECT_EQ(body["issued_token_type"], "urn:ietf:params:oauth:token-type:access_token");
  EXPECT_EQ(body["expires_in"], 1800);
  EXPECT_EQ(body["scope"], kScope);
  EXPECT_FALSE(body["access_token"].get<std::string>().empty());
  EXPECT_EQ(Header(r, "Cache-Control"), "no-store");
}

// Tests a JSON exchange in Google STS's camelCase.
TEST_F(OidcRoutesTest, ExchangesJsonCamelCase) {
  http::Request r;
  r.headers["content-type"] = "application/json";
  r.body = nlohmann::json{{"grantType", "urn:ietf:params:oauth:grant-type:token-exchange"},
                          {"subjectToken", SubjectToken()},
                          {"subjectTokenType", "urn:ietf:params:oauth:token-type:jwt"},
                          {"audience", "storage.wisp.dev"}}
               .dump();
  auto resp = routes_->Token(r);
  EXPECT_EQ(resp.status, 200) << resp.body;
}

// Tests RFC 6749 error answers and statuses.
TEST_F(OidcRoutesTest, AnswersRfc6749Errors) {
  auto bad_grant = routes_->Token(Form("grant_type=password"));
  EXPECT_EQ(bad_grant.status, 400);
  EXPECT_EQ(nlohmann::json::parse(bad_grant.body)["error"], "unsupported_grant_type");
  auto bad_target = routes_->Token(Form(FormBody(SubjectToken(), "elsewhere")));
  EXPECT_EQ(bad_target.status, 400);
  EXPECT_EQ(nlohmann::json::parse(bad_target.body)["error"], "invalid_target");
  auto bad_token = routes_->Token(Form(FormBody("x.y.z")));
  EXPECT_EQ(nlohmann::json::parse(bad_token.body)["error"], "invalid_grant");
  http::Request text;
  text.headers["content-type"] = "text/plain";
  EXPECT_EQ(nlohmann::json::parse(routes_->Token(text).body)["error"], "invalid_request");
  EXPECT_EQ(routes_->Token(Form("grant_type=%zz")).status, 400);
  env_.bus.FailSubject(bus::subjects::kTokenExchange, absl::UnavailableError("down"));
  auto down = routes_->Token(Form(FormBody(SubjectToken())));
  EXPECT_EQ(down.status, 503);
}

// Tests a token file's content sent as it is (google-auth-library's file credential source; a
// file written by `echo` ends in a newline), with the GCP-specific `options` parameter RFC 6749
// 3.2 says to ignore: exchanged, and rate-limited by its subject like the bare token.
TEST_F(OidcRoutesTest, ExchangesTokenFileContentWithTrailingNewline) {
  const std::string body = FormBody(SubjectToken() + "\n") + "&options=" + FormEscape("{}");
  for (int i = 0; i < 3; ++i) {
    auto r = routes_->Token(Form(body));
    ASSERT_EQ(r.status, 200) << r.body;
    auto j = nlohmann::json::parse(r.body);
    EXPECT_EQ(j["issued_token_type"], "urn:ietf:params:oauth:token-type:access_token");
    EXPECT_EQ(j["token_type"], "Bearer");
    EXPECT_GT(j["expires_in"].get<int64_t>(), 0);
  }
  EXPECT_EQ(routes_->Token(Form(body)).status, 429);
}

// Tests the per-subject limit, and that forged tokens naming a subject do not use its quota.
TEST_F(OidcRoutesTest, RateLimitsPerVerifiedSubject) {
  const std::string token = SubjectToken();
  // A forged token that claims the same iss/sub but does not verify.
  auto stranger = *jwt::PrivateKey::Generate(jwt::Algorithm::kRS256);
  const int64_t now = env_.clock.NowUnixSeconds();
  nlohmann::json c = {{"iss", token::testing::kIssuer},
                      {"sub", "system:serviceaccount:ml:loader"},
                      {"aud", {"wisp-sts"}},
                      {"iat", now},
                      {"exp", now + 600}};
  const std::string forged = *jwt::Sign(stranger, c.dump());
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(routes_->Token(Form(FormBody(forged))).status, 400);
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(routes_->Token(Form(FormBody(token))).status, 200) << i;
  }
  auto limited = routes_->Token(Form(FormBody(token)));
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(Header(limited, "Retry-After"), "1");
  EXPECT_EQ(routes_->Token(Form(FormBody(SubjectToken("other")))).status, 400);  // not limited
}

// Tests form decoding of escapes and plus signs.
TEST(ParseFormTest, DecodesEscapes) {
  auto f = ParseForm("a=b%20c&d=e+f&g&a=dup");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)["a"], "b c");
  EXPECT_EQ((*f)["d"], "e f");
  EXPECT_EQ((*f)["g"], "");
  EXPECT_FALSE(ParseForm("a=%4").ok());
}

}  // namespace
}  // namespace wisp::gateway::oidc
