#include "sts_client.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "sidecar_metrics.hpp"
#include "wisp/http/server.hpp"
#include "wisp/http/testing/fake_client.hpp"
#include "wisp/http/testing/test_pki.hpp"

namespace wisp::sidecar {
namespace {

using http::testing::FakeClient;

constexpr const char* kUrl = "https://gw:8443/v1/token";

bool Has(const absl::Status& st, std::string_view text) {
  return std::string(st.message()).find(text) != std::string::npos;
}

std::unique_ptr<HttpStsClient> Make(std::shared_ptr<FakeClient> fake, std::string scope = "") {
  auto c = HttpStsClient::Create(
      {.url = kUrl, .audience = "storage.wisp.dev", .scope = std::move(scope)}, std::move(fake));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// Tests that the exchange POSTs the RFC 8693 form (values escaped) and returns the access token
// with its lifetime.
TEST(HttpStsClientTest, PostsTheExchangeFormAndReadsTheToken) {
  auto fake = std::make_shared<FakeClient>();
  fake->On("POST", kUrl,
           FakeClient::Ok(R"({"access_token":"at-1","token_type":"Bearer","expires_in":600})"));
  auto sts = Make(fake, "read write");
  auto t = sts->Exchange("a.b+c");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->access_token, "at-1");
  EXPECT_EQ(t->token_type, "Bearer");
  EXPECT_EQ(t->expires_in, std::chrono::seconds(600));
  const auto requests = fake->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].body,
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange"
            "&subject_token=a.b%2Bc"
            "&subject_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Ajwt"
            "&requested_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token"
            "&audience=storage.wisp.dev&scope=read%20write");
  EXPECT_EQ(requests[0].total_timeout, std::chrono::milliseconds(10000));
  bool form = false;
  for (const auto& [k, v] : requests[0].headers) {
    form = form || (k == "Content-Type" && v == "application/x-www-form-urlencoded");
  }
  EXPECT_TRUE(form);
}

// Tests that answers and failures carry the client's one Status mapping, the RFC 6749 error in
// the message, and that only the STS's refusals count as rejections.
TEST(HttpStsClientTest, MapsAnswersAndFailuresOnce) {
  struct Case {
    absl::StatusOr<http::ClientResponse> answer;
    absl::StatusCode code;
    bool rejection;
    std::string text;
  };
  const Case cases[] = {
      {FakeClient::Ok(R"({"error":"invalid_target","error_description":"not for you"})", 400),
       absl::StatusCode::kInvalidArgument, true,
       "STS answered HTTP 400 from " + std::string(kUrl) + ": invalid_target: not for you"},
      {FakeClient::Ok(R"({"error":"invalid_grant"})", 401), absl::StatusCode::kUnauthenticated,
       true, "invalid_grant"},
      {FakeClient::Ok(R"({"error":"access_denied"})", 403), absl::StatusCode::kPermissionDenied,
       true, "access_denied"},
      {FakeClient::Ok(R"({"error":"temporarily_unavailable"})", 503),
       absl::StatusCode::kUnavailable, false, "temporarily_unavailable"},
      {FakeClient::Ok("slow down", 429), absl::StatusCode::kResourceExhausted, false, "HTTP 429"},
      {FakeClient::Ok(R"({"error": 7})", 400), absl::StatusCode::kInvalidArgument, true,
       "HTTP 400"},
      {absl::FailedPreconditionError("POST https://gw:8443/v1/token: TLS handshake with gw:8443 "
                                     "failed: certificate verify failed (self-signed)"),
       absl::StatusCode::kFailedPrecondition, false, "certificate verify failed"},
      {absl::UnavailableError("POST https://gw:8443/v1/token: connecting: refused"),
       absl::StatusCode::kUnavailable, false, "refused"},
      {FakeClient::Ok(R"({"access_token":"x"})"), absl::StatusCode::kUnavailable, false,
       "lacks access_token or expires_in"},
      {FakeClient::Ok(R"({"access_token":"","expires_in":60})"), absl::StatusCode::kUnavailable,
       false, "empty access_token"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    auto fake = std::make_shared<FakeClient>();
    fake->On("POST", kUrl, c.answer);
    auto r = Make(fake)->Exchange("subject-jwt");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_TRUE(Has(r.status(), c.text)) << r.status();
    EXPECT_FALSE(Has(r.status(), "subject-jwt")) << r.status();
    EXPECT_EQ(IsRejection(r.status()), c.rejection) << r.status();
    EXPECT_EQ(SidecarMetrics::Outcome(r.status(), false), c.rejection ? "rejected" : "unavailable");
  }
}

// Tests that a Retry-After on a 429 or 503 answer (delay-seconds or an HTTP-date) reaches the
// Status, and that an answer without one carries none.
TEST(HttpStsClientTest, CarriesRetryAfter) {
  struct Case {
    int status;
    std::string header;  // "" = none
    std::optional<std::chrono::seconds> want;
  } cases[] = {
      {429, "1", std::chrono::seconds(1)},
      {503, " 120 ", std::chrono::seconds(120)},
      {503, "Fri, 31 Dec 1999 23:59:59 GMT", std::chrono::seconds(0)},  // in the past
      {503, "soon", std::nullopt},
      {503, "", std::nullopt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(c.status) + " " + c.header);
    auto answer = FakeClient::Ok(R"({"error":"temporarily_unavailable"})", c.status);
    if (!c.header.empty()) answer.headers = {{"retry-after", c.header}};
    auto fake = std::make_shared<FakeClient>();
    fake->On("POST", kUrl, answer);
    auto r = Make(fake)->Exchange("subject-jwt");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(RetryAfterOf(r.status()), c.want) << r.status();
    EXPECT_FALSE(IsRejection(r.status()));
  }
}

// Tests Retry-After's two forms against a fixed now, and values that are neither.
TEST(ParseRetryAfterTest, SecondsAndHttpDates) {
  // Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110's example) is 784111777.
  const auto now = std::chrono::system_clock::from_time_t(784111777 - 30);
  EXPECT_EQ(ParseRetryAfter("0", now), std::chrono::seconds(0));
  EXPECT_EQ(ParseRetryAfter("45", now), std::chrono::seconds(45));
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", now), std::chrono::seconds(30));
  EXPECT_EQ(ParseRetryAfter("99999999999999", now), std::chrono::seconds(999'999'999));
  EXPECT_EQ(ParseRetryAfter("-5", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("1.5", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("Sunday, 06-Nov-94 08:49:37 GMT", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("", now), std::nullopt);
  EXPECT_EQ(RetryAfterOf(absl::UnavailableError("x")), std::nullopt);
  EXPECT_EQ(RetryAfterOf(WithRetryAfter(absl::UnavailableError("x"), std::chrono::seconds(9))),
            std::chrono::seconds(9));
}

// Tests that bad options are refused naming the flag.
TEST(HttpStsClientTest, RefusesBadOptionsNamingTheFlag) {
  const std::pair<StsOptions, const char*> cases[] = {
      {{.url = "http://gw/v1/token", .audience = "a"}, "sts-url"},
      {{.url = "https://u:p@gw/v1/token", .audience = "a"}, "sts-url"},
      {{.url = "gw/v1/token", .audience = "a"}, "sts-url"},
      {{.url = kUrl,
        .ca_file = "/ca.pem",
        .ca_pem = "-----BEGIN CERTIFICATE-----",
        .audience = "a"},
       "ca-file and ca-pem"},
      {{.url = kUrl, .ca_pem = "not pem", .audience = "a"}, "ca-pem"},
      {{.url = kUrl, .ca_file = "/nonexistent/ca.pem", .audience = "a"}, "ca-file"},
      {{.url = kUrl}, "audience"},
  };
  for (const auto& [options, flag] : cases) {
    SCOPED_TRACE(flag);
    auto c = HttpStsClient::Create(options);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
    EXPECT_TRUE(Has(c.status(), flag)) << c.status();
  }
}

// Tests the real client over TLS (http::Server): the CA as PEM text (as wisp-policy injects it)
// verifies the STS; another CA is FailedPrecondition "certificate verify failed", which is no
// rejection.
TEST(HttpStsClientTest, ExchangesOverVerifiedTls) {
  const std::string dir = ::testing::TempDir() + "/wisp-sts-tls-" + std::to_string(::getpid());
  ASSERT_TRUE(http::testing::MakeTestPki(dir));
  auto server = http::Server::Create(http::testing::TlsServerOptions(dir));
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->Handle("POST", "/v1/token", [](const http::Request& r) {
    if (r.body.find("subject_token=jwt") == std::string::npos) {
      return http::Response::Json(400, R"({"error":"invalid_request"})");
    }
    return http::Response::Json(200, R"({"access_token":"at","expires_in":60})");
  });
  ASSERT_TRUE((*server)->Start().ok());
  const std::string url = "https://localhost:" + std::to_string((*server)->port()) + "/v1/token";
  const auto pem = [&](const std::string& file) {
    std::stringstream s;
    s << std::ifstream(dir + "/" + file).rdbuf();
    return s.str();
  };
  auto trusted = HttpStsClient::Create({.url = url, .ca_pem = pem("ca.pem"), .audience = "a"});
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  auto t = (*trusted)->Exchange("jwt");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->access_token, "at");
  auto refused = (*trusted)->Exchange("other");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_TRUE(Has(refused.status(), "invalid_request")) << refused.status();

  auto untrusted =
      HttpStsClient::Create({.url = url, .ca_file = dir + "/other.pem", .audience = "a"});
  ASSERT_TRUE(untrusted.ok()) << untrusted.status();
  auto r = (*untrusted)->Exchange("jwt");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_TRUE(Has(r.status(), "certificate verify failed")) << r.status();
  EXPECT_FALSE(IsRejection(r.status()));
  (*server)->Stop(std::chrono::milliseconds(0));
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace
}  // namespace wisp::sidecar
