#include "remote_jwks.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "exchanger.hpp"
#include "policy_store.hpp"
#include "wisp/http/server.hpp"
#include "wisp/http/testing/fake_client.hpp"
#include "wisp/http/testing/test_pki.hpp"
#include "wisp/token/testing/test_env.hpp"

namespace wisp::token {
namespace {

constexpr const char* kIdp = "https://idp.example";

// Serves whatever JWKS text the test puts in `body` (or fails with `error`), counting fetches.
class FakeFetcher final : public JwksFetcher {
 public:
  absl::StatusOr<std::string> Fetch(const std::string& url) override {
    std::lock_guard lock(mu);
    ++fetches;
    last_url = url;
    if (!error.ok()) return error;
    return body;
  }
  std::mutex mu;
  int fetches = 0;
  std::string last_url;
  std::string body;
  absl::Status error = absl::OkStatus();
};

std::string JwksOf(const std::vector<const jwt::PrivateKey*>& keys) {
  jwt::KeySet set;
  for (const auto* k : keys) set.Add(k->public_key());
  return set.ToJwks().dump();
}

std::string Count(prometheus::Registry& registry, const std::string& name,
                  const std::map<std::string, std::string>& labels) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      bool all = true;
      for (const auto& [k, v] : labels) {
        bool found = false;
        for (const auto& l : m.label) found = found || (l.name == k && l.value == v);
        all = all && found;
      }
      if (all) return std::to_string(static_cast<int64_t>(m.counter.value + m.gauge.value));
    }
  }
  return "absent";
}

class RemoteJwksTest : public ::testing::Test {
 protected:
  RemoteJwksTest()
      : key1_(*jwt::PrivateKey::Generate(jwt::Algorithm::kES256)),
        key2_(*jwt::PrivateKey::Generate(jwt::Algorithm::kRS256)),
        fetcher_(std::make_shared<FakeFetcher>()),
        metrics_(registry_) {}

  RemoteJwks Make() {
    return RemoteJwks(fetcher_, {.url = "https://idp.example/keys", .issuer = kIdp}, clock_,
                      &metrics_);
  }

  jwt::PrivateKey key1_, key2_;
  std::shared_ptr<FakeFetcher> fetcher_;
  FakeClock clock_;
  prometheus::Registry registry_;
  TokenMetrics metrics_;
};

// Tests that a failed fetch or a bad document keeps the last good key set.
TEST_F(RemoteJwksTest, KeepsLastGoodSetWhenAFetchFails) {
  RemoteJwks jwks = Make();
  fetcher_->error = absl::UnavailableError("connection refused");
  EXPECT_FALSE(jwks.Refresh().ok());
  EXPECT_FALSE(jwks.loaded());
  EXPECT_TRUE(jwks.Current()->keys().empty());

  fetcher_->error = absl::OkStatus();
  fetcher_->body = JwksOf({&key1_});
  ASSERT_TRUE(jwks.Refresh().ok());
  EXPECT_NE(jwks.Current()->Find(key1_.kid()), nullptr);

  fetcher_->error = absl::UnavailableError("HTTP 500");
  EXPECT_FALSE(jwks.Refresh().ok());
  fetcher_->error = absl::OkStatus();
  fetcher_->body = "{\"keys\": 7}";
  EXPECT_FALSE(jwks.Refresh().ok());
  fetcher_->body = "{\"keys\": []}";
  EXPECT_FALSE(jwks.Refresh().ok());
  EXPECT_TRUE(jwks.loaded());
  EXPECT_NE(jwks.Current()->Find(key1_.kid()), nullptr);
  EXPECT_EQ(Count(registry_, "wisp_token_jwks_fetches_total", {{"outcome", "ok"}}), "1");
  EXPECT_EQ(Count(registry_, "wisp_token_jwks_fetches_total", {{"outcome", "error"}}), "4");
  EXPECT_EQ(Count(registry_, "wisp_token_jwks_keys", {{"issuer", kIdp}}), "1");
}

// Tests that periodic refreshes wait for the interval, and refetches on an unknown kid are limited
// to one per min_refetch_interval.
TEST_F(RemoteJwksTest, RefreshesPeriodicallyAndOnUnknownKidWithARateLimit) {
  RemoteJwks jwks = Make();
  fetcher_->body = JwksOf({&key1_});
  ASSERT_TRUE(jwks.Refresh().ok());
  jwks.RefreshIfDue();
  EXPECT_EQ(fetcher_->fetches, 1);
  clock_.Advance(std::chrono::seconds(301));
  jwks.RefreshIfDue();
  EXPECT_EQ(fetcher_->fetches, 2);

  fetcher_->body = JwksOf({&key1_, &key2_});
  clock_.Advance(std::chrono::seconds(5));
  EXPECT_FALSE(jwks.RefreshForUnknownKid());  // 5 s after the last fetch: limited
  EXPECT_EQ(fetcher_->fetches, 2);
  clock_.Advance(std::chrono::seconds(30));
  EXPECT_TRUE(jwks.RefreshForUnknownKid());
  EXPECT_EQ(fetcher_->fetches, 3);
  EXPECT_NE(jwks.Current()->Find(key2_.kid()), nullptr);
  EXPECT_FALSE(jwks.RefreshForUnknownKid());
  EXPECT_EQ(fetcher_->fetches, 3);
}

// Tests that plain http, user info and bad ports are refused naming the field.
TEST(HttpsUrlTest, RefusesWhatIsNotHttps) {
  EXPECT_TRUE(ValidateHttpsUrl("https://idp.example/keys", "f").ok());
  EXPECT_TRUE(ValidateHttpsUrl("https://127.0.0.1:8443", "f").ok());
  EXPECT_TRUE(ValidateHttpsUrl("https://[::1]:8443/jwks", "f").ok());
  for (const char* bad : {"http://idp.example/keys", "idp.example", "https://", "https://u:p@h/",
                          "https://h:0/", "https://h:99999/", "https://h:x/"}) {
    SCOPED_TRACE(bad);
    auto st = ValidateHttpsUrl(bad, "trustedIssuers[0].jwksUrl");
    ASSERT_FALSE(st.ok());
    EXPECT_NE(std::string(st.message()).find("trustedIssuers[0].jwksUrl"), std::string::npos);
  }
}

bool Has(const absl::Status& st, std::string_view text) {
  return std::string(st.message()).find(text) != std::string::npos;
}

// Tests that the fetcher GETs the URL once, asking for a JWKS within the size limit and the
// timeout, and returns the body as it came.
TEST(HttpsJwksFetcherTest, GetsTheSetWithinTheLimits) {
  auto fake = std::make_shared<http::testing::FakeClient>();
  fake->On("GET", "https://idp.example/keys", http::testing::FakeClient::Ok(R"({"keys":[]})"));
  HttpsJwksFetcher fetcher(fake, {.timeout = std::chrono::seconds(3), .max_bytes = 4096});
  auto body = fetcher.Fetch("https://idp.example/keys");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, R"({"keys":[]})");
  const auto requests = fake->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[0].max_response_bytes, 4096u);
  EXPECT_EQ(requests[0].total_timeout, std::chrono::milliseconds(3000));
  ASSERT_EQ(requests[0].headers.size(), 1u);
  EXPECT_EQ(requests[0].headers[0].first, "Accept");
  EXPECT_NE(requests[0].headers[0].second.find("application/jwk-set+json"), std::string::npos);
}

// Tests that plain http and user info are refused before anything is sent.
TEST(HttpsJwksFetcherTest, RefusesNonHttpsUrlsWithoutSending) {
  auto fake = std::make_shared<http::testing::FakeClient>();
  HttpsJwksFetcher fetcher(fake, {});
  for (const char* bad : {"http://idp.example/keys", "https://u:p@idp.example/keys"}) {
    SCOPED_TRACE(bad);
    auto r = fetcher.Fetch(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_TRUE(Has(r.status(), "JWKS URL")) << r.status();
  }
  EXPECT_TRUE(fake->requests().empty());
}

// Tests that failures carry the client's one Status mapping: HTTP answers through StatusOf, a
// transport error and an oversized body as the client gives them.
TEST(HttpsJwksFetcherTest, FailuresUseTheClientsMapping) {
  auto fake = std::make_shared<http::testing::FakeClient>();
  fake->On("GET", "https://idp/missing", http::testing::FakeClient::Ok("gone", 404));
  fake->On("GET", "https://idp/down", http::testing::FakeClient::Ok("oops", 503));
  fake->On("GET", "https://idp/untrusted",
           absl::FailedPreconditionError("GET https://idp/untrusted: TLS handshake with idp:443 "
                                         "failed: certificate verify failed (self-signed)"));
  fake->On("GET", "https://idp/big", http::testing::FakeClient::Ok(std::string(100, 'x')));
  HttpsJwksFetcher fetcher(fake, {.max_bytes = 64});
  const std::pair<const char*, absl::StatusCode> cases[] = {
      {"https://idp/missing", absl::StatusCode::kNotFound},
      {"https://idp/down", absl::StatusCode::kUnavailable},
      {"https://idp/untrusted", absl::StatusCode::kFailedPrecondition},
      {"https://idp/big", absl::StatusCode::kResourceExhausted},
  };
  for (const auto& [url, code] : cases) {
    SCOPED_TRACE(url);
    auto r = fetcher.Fetch(url);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_TRUE(Has(r.status(), url)) << r.status();
  }
}

// A JWKS server over real TLS (http::Server), its certificate for localhost signed by a test CA
// (MakeTestPki); other.pem is a CA that did not sign it.
class HttpsJwksFetcherTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/wisp-jwks-tls-" + std::to_string(::getpid());
    ASSERT_TRUE(http::testing::MakeTestPki(dir_));
    auto server = http::Server::Create(http::testing::TlsServerOptions(dir_));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    server_->Handle("GET", "/keys",
                    [this](const http::Request&) { return http::Response::Json(200, jwks_); });
    server_->Handle("GET", "/big", [](const http::Request&) {
      return http::Response::Json(200, "{\"pad\":\"" + std::string(2 << 20, 'x') + "\"}");
    });
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_) server_->Stop(std::chrono::milliseconds(0));
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string Url(const std::string& path) const {
    return "https://localhost:" + std::to_string(server_->port()) + path;
  }

  std::string dir_;
  std::string jwks_;
  std::unique_ptr<http::Server> server_;
};

// Tests the real fetcher over TLS: the set comes through a server the CA file trusts; a server it
// does not trust is FailedPrecondition "certificate verify failed"; a JWKS over the size limit is
// refused; an unreadable CA file is refused at Create.
TEST_F(HttpsJwksFetcherTlsTest, FetchesOverVerifiedTls) {
  auto key = *jwt::PrivateKey::Generate(jwt::Algorithm::kES256);
  jwks_ = JwksOf({&key});
  auto trusted = HttpsJwksFetcher::Create({.ca_file = dir_ + "/ca.pem"});
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  auto body = (*trusted)->Fetch(Url("/keys"));
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, jwks_);
  auto big = (*trusted)->Fetch(Url("/big"));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  EXPECT_TRUE(Has(big.status(), "larger than 1048576 bytes")) << big.status();

  auto untrusted = HttpsJwksFetcher::Create({.ca_file = dir_ + "/other.pem"});
  ASSERT_TRUE(untrusted.ok()) << untrusted.status();
  auto refused = (*untrusted)->Fetch(Url("/keys"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_TRUE(Has(refused.status(), "certificate verify failed")) << refused.status();

  auto missing = HttpsJwksFetcher::Create({.ca_file = dir_ + "/nonexistent.pem"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(missing.status(), "nonexistent.pem")) << missing.status();
}

// Tests the policy keys of a JWKS URL and their errors.
TEST(PolicyJwksUrlTest, ParsesAndRefusesNamingTheKey) {
  auto p = Policy::FromYaml(R"(
trustedIssuers:
  - {issuer: "https://idp.example", jwksUrl: "https://idp.example/keys",
     jwksRefreshSeconds: 60, audiences: [wisp-sts]}
)");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->trusted_issuers.size(), 1u);
  EXPECT_EQ(p->trusted_issuers[0].jwks_url, "https://idp.example/keys");
  EXPECT_EQ(p->trusted_issuers[0].jwks_refresh_seconds, 60);

  const std::pair<const char*, const char*> cases[] = {
      {"trustedIssuers: [{issuer: x, audiences: [a]}]", "exactly one of jwksFile and jwksUrl"},
      {"trustedIssuers: [{issuer: x, jwksUrl: 'https://h/k', jwksFile: /f, audiences: [a]}]",
       "exactly one of jwksFile and jwksUrl"},
      {"trustedIssuers: [{issuer: x, jwksUrl: 'http://h/k', audiences: [a]}]",
       "trustedIssuers[0].jwksUrl"},
      {"trustedIssuers: [{issuer: x, jwksUrl: 'https://h/k', jwksCaFile: /nonexistent, "
       "audiences: [a]}]",
       "trustedIssuers[0].jwksCaFile"},
      {"trustedIssuers: [{issuer: x, jwksUrl: 'https://h/k', jwksRefreshSeconds: 1, "
       "audiences: [a]}]",
       "trustedIssuers[0].jwksRefreshSeconds"},
      {"trustedIssuers: [{issuer: x, jwksUrl: 'https://h/k'}]", "trustedIssuers[0].audiences"},
  };
  for (const auto& [yaml, key] : cases) {
    SCOPED_TRACE(yaml);
    auto bad = Policy::FromYaml(yaml);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(std::string(bad.status().message()).find(key), std::string::npos) << bad.status();
  }
}

// Tests the STS against a JWKS URL issuer: verifies its tokens, picks up a rotated key on the
// first token that names it, and keeps verifying with the last good set when the IdP is down.
TEST(ExchangerRemoteJwksTest, VerifiesAgainstTheUrlsKeysAndFollowsRotation) {
  testing::Env env("exchange: {rules: [{namespace: ml, audiences: [storage.wisp.dev]}]}\n");
  ASSERT_TRUE(env.keys->Start().ok());
  auto old_key = *jwt::PrivateKey::Generate(jwt::Algorithm::kES256);
  auto new_key = *jwt::PrivateKey::Generate(jwt::Algorithm::kRS256);
  auto fetcher = std::make_shared<FakeFetcher>();
  fetcher->body = JwksOf({&old_key});
  auto policy = *Policy::FromYaml(R"(
exchange: {rules: [{namespace: ml, audiences: [storage.wisp.dev]}]}
trustedIssuers:
  - {issuer: "https://idp.example", jwksUrl: "https://idp.example/keys", audiences: [wisp-sts]}
)");
  ASSERT_TRUE(AttachRemoteJwks(policy, nullptr, env.clock, &env.metrics, [&](const TrustedIssuer&) {
                return absl::StatusOr<std::shared_ptr<JwksFetcher>>(fetcher);
              }).ok());
  EXPECT_EQ(fetcher->fetches, 1);  // fetched at load
  EXPECT_EQ(fetcher->last_url, "https://idp.example/keys");
  PolicyStore store(policy);
  Exchanger exchanger(*env.reviewer, *env.issuer, store, env.clock, env.metrics);

  const auto request = [&](const jwt::PrivateKey& key) {
    const int64_t now = env.clock.NowUnixSeconds();
    nlohmann::json c = {{"iss", kIdp},
                        {"sub", "system:serviceaccount:ml:loader"},
                        {"aud", {"wisp-sts"}},
                        {"iat", now},
                        {"exp", now + 600}};
    v1::ExchangeRequest r;
    r.set_grant_type(std::string(kGrantTokenExchange));
    r.set_subject_token(*jwt::Sign(key, c.dump()));
    r.set_subject_token_type(std::string(kTokenTypeJwt));
    r.set_audience("storage.wisp.dev");
    return r;
  };
  auto ok = exchanger.Exchange(request(old_key));
  EXPECT_TRUE(ok.error().empty()) << ok.error_description();

  // The IdP rotated: the first token naming the new kid makes one refetch.
  fetcher->body = JwksOf({&new_key});
  env.clock.Advance(std::chrono::seconds(31));
  auto rotated = exchanger.Exchange(request(new_key));
  EXPECT_TRUE(rotated.error().empty()) << rotated.error_description();
  EXPECT_EQ(fetcher->fetches, 2);

  // A made-up kid within the rate limit does not fetch again and is refused.
  auto stranger = *jwt::PrivateKey::Generate(jwt::Algorithm::kES256);
  EXPECT_EQ(exchanger.Exchange(request(stranger)).error(), "invalid_grant");
  EXPECT_EQ(fetcher->fetches, 2);

  // The IdP is down: the last good set still verifies.
  fetcher->error = absl::UnavailableError("down");
  env.clock.Advance(std::chrono::seconds(400));
  policy.trusted_issuers[0].remote->RefreshIfDue();
  EXPECT_EQ(fetcher->fetches, 3);
  auto still = exchanger.Exchange(request(new_key));
  EXPECT_TRUE(still.error().empty()) << still.error_description();
}

// Tests that an issuer whose JWKS never loaded answers temporarily_unavailable (503), not
// invalid_grant, so clients retry instead of giving up.
TEST(ExchangerRemoteJwksTest, UnreachableIdpIsTemporarilyUnavailable) {
  testing::Env env("exchange: {rules: [{namespace: ml, audiences: [storage.wisp.dev]}]}\n");
  ASSERT_TRUE(env.keys->Start().ok());
  auto fetcher = std::make_shared<FakeFetcher>();
  fetcher->error = absl::UnavailableError("connection refused");
  auto policy = *Policy::FromYaml(R"(
exchange: {rules: [{namespace: ml, audiences: [storage.wisp.dev]}]}
trustedIssuers:
  - {issuer: "https://idp.example", jwksUrl: "https://idp.example/keys", audiences: [wisp-sts]}
)");
  ASSERT_TRUE(AttachRemoteJwks(policy, nullptr, env.clock, &env.metrics, [&](const TrustedIssuer&) {
                return absl::StatusOr<std::shared_ptr<JwksFetcher>>(fetcher);
              }).ok());
  PolicyStore store(policy);
  Exchanger exchanger(*env.reviewer, *env.issuer, store, env.clock, env.metrics);
  auto key = *jwt::PrivateKey::Generate(jwt::Algorithm::kES256);
  const int64_t now = env.clock.NowUnixSeconds();
  nlohmann::json c = {{"iss", kIdp},
                      {"sub", "system:serviceaccount:ml:loader"},
                      {"aud", {"wisp-sts"}},
                      {"iat", now},
                      {"exp", now + 600}};
  v1::ExchangeRequest r;
  r.set_grant_type(std::string(kGrantTokenExchange));
  r.set_subject_token(*jwt::Sign(key, c.dump()));
  r.set_subject_token_type(std::string(kTokenTypeJwt));
  r.set_audience("storage.wisp.dev");
  auto resp = exchanger.Exchange(r);
  EXPECT_EQ(resp.error(), "temporarily_unavailable");
  EXPECT_EQ(resp.http_status(), 503);
}

}  // namespace
}  // namespace wisp::token
