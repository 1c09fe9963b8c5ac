#include "token_service.hpp"

#include <gtest/gtest.h>

#include "wisp/token/testing/test_env.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/jwt/upload.hpp"

namespace wisp::token {
namespace {

using std::chrono::seconds;

class TokenServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.keys->Start().ok());
    auto sub =
        env_.bus.Subscribe(bus::subjects::kTokenKeysChanged, "", [this](const bus::Message& m) {
          v1::KeysResponse k;
          k.ParseFromString(m.data);
          changes_.push_back(k);
        });
    keys_sub_ = std::move(*sub);
    service_ = *bus::Service::Start(env_.bus, {.name = "wisp-token", .version = "0.1.0"});
    svc_ = std::make_unique<TokenService>(
        *service_, env_.bus, *env_.keys, *env_.issuer, *env_.reviewer, *env_.exchanger,
        TokenService::Options{.issuer = testing::kIssuer, .tick_interval = std::chrono::hours(1)});
    ASSERT_TRUE(svc_->Start().ok());
  }
  void TearDown() override {
    svc_->Stop();
    (void)service_->Drain();
  }

  testing::Env env_;
  bus::SubscriptionPtr keys_sub_;
  std::vector<v1::KeysResponse> changes_;
  std::unique_ptr<bus::Service> service_;
  std::unique_ptr<TokenService> svc_;
};

// Tests issue and review through the bus, with the Kubernetes error passed back as a Status.
TEST_F(TokenServiceTest, IssuesAndReviewsOverTheBus) {
  auto issued = bus::Call<v1::IssueResponse>(env_.bus, bus::subjects::kTokenIssue, env_.Request(),
                                             seconds(2));
  ASSERT_TRUE(issued.ok()) << issued.status();
  v1::ReviewRequest rr;
  rr.set_token(issued->token());
  auto reviewed =
      bus::Call<v1::ReviewResponse>(env_.bus, bus::subjects::kTokenReview, rr, seconds(2));
  ASSERT_TRUE(reviewed.ok());
  EXPECT_TRUE(reviewed->authenticated());
  auto req = env_.Request();
  req.set_expiration_seconds(60);
  auto refused =
      bus::Call<v1::IssueResponse>(env_.bus, bus::subjects::kTokenIssue, req, seconds(2));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  auto garbage = env_.bus.Request(bus::subjects::kTokenIssue, "\xff\xff", seconds(2));
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
}

// Tests issue_batch through the bus: each entry answered in its place, a bad batch refused.
TEST_F(TokenServiceTest, IssuesBatchesOverTheBus) {
  v1::IssueBatchRequest batch;
  *batch.add_requests() = env_.Request();
  auto refused = env_.Request();
  refused.set_expiration_seconds(60);
  *batch.add_requests() = refused;
  auto resp = bus::Call<v1::IssueBatchResponse>(env_.bus, bus::subjects::kTokenIssueBatch, batch,
                                                seconds(2));
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(resp->results_size(), 2);
  EXPECT_EQ(resp->results(0).code(), 0);
  EXPECT_FALSE(resp->results(0).token().token().empty());
  EXPECT_EQ(resp->results(1).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  auto empty = bus::Call<v1::IssueBatchResponse>(env_.bus, bus::subjects::kTokenIssueBatch,
                                                 v1::IssueBatchRequest(), seconds(2));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  auto garbage = env_.bus.Request(bus::subjects::kTokenIssueBatch, "\xff\xff", seconds(2));
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
}

// Tests that an upload token names its volume, verifies for audience wisp-upload only, and that
// bad requests are refused naming the field.
TEST_F(TokenServiceTest, IssuesUploadTokens) {
  v1::UploadTokenRequest req;
  req.set_volume_id("v-0123456789abcdef01234567");
  req.set_name("disk");
  auto issued =
      bus::Call<v1::UploadTokenResponse>(env_.bus, bus::subjects::kTokenUpload, req, seconds(2));
  ASSERT_TRUE(issued.ok()) << issued.status();
  auto verified = env_.reviewer->Verify(issued->token(), {jwt::kUploadAudience});
  ASSERT_TRUE(verified.ok()) << verified.status();
  auto grant = jwt::UploadGrantFromClaims(verified->claims);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->volume_id, req.volume_id());
  EXPECT_EQ(verified->claims["exp"].get<int64_t>() - verified->claims["iat"].get<int64_t>(), 300);
  EXPECT_FALSE(env_.reviewer->Verify(issued->token(), {"vault"}).ok());
  for (auto [id, exp, field] :
       {std::tuple{"", 0, "volume_id"}, std::tuple{"v-../x", 0, "volume_id"},
        std::tuple{"v-1", 10, "expiration_seconds"},
        std::tuple{"v-1", 7200, "expiration_seconds"}}) {
    SCOPED_TRACE(field);
    v1::UploadTokenRequest bad;
    bad.set_volume_id(id);
    bad.set_expiration_seconds(exp);
    auto refused =
        bus::Call<v1::UploadTokenResponse>(env_.bus, bus::subjects::kTokenUpload, bad, seconds(2));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find(field), std::string::npos) << refused.status();
  }
}

// Tests the keys endpoint's JWKS and discovery document shapes.
TEST_F(TokenServiceTest, ServesKeysAndDiscovery) {
  auto keys = bus::Call<v1::KeysResponse>(env_.bus, bus::subjects::kTokenKeys, v1::KeysRequest(),
                                          seconds(2));
  ASSERT_TRUE(keys.ok());
  auto jwks = nlohmann::json::parse(keys->jwks_json());
  EXPECT_EQ(jwks["keys"].size(), 2u);
  auto oidc = nlohmann::json::parse(keys->openid_configuration_json());
  EXPECT_EQ(oidc["issuer"], testing::kIssuer);
  EXPECT_EQ(oidc["jwks_uri"], std::string(testing::kIssuer) + "/openid/v1/jwks");
  EXPECT_EQ(oidc["response_types_supported"], nlohmann::json::array({"id_token"}));
  EXPECT_EQ(oidc["subject_types_supported"], nlohmann::json::array({"public"}));
  EXPECT_EQ(oidc["id_token_signing_alg_values_supported"],
            nlohmann::json::array({"ES256", "RS256"}));
  EXPECT_GT(keys->generation(), 0);
}

// Tests that a rotation publishes the new key set on the change subject.
TEST_F(TokenServiceTest, PublishesKeyChanges) {
  const size_t before = changes_.size();
  EXPECT_GE(before, 1u);  // Start() announces the current set
  ASSERT_TRUE(*env_.keys->RotateNow());
  ASSERT_EQ(changes_.size(), before + 1);
  EXPECT_EQ(nlohmann::json::parse(changes_.back().jwks_json())["keys"].size(), 4u);
}

// Tests wisp.v1.token.key_admin: list, rotate, taint and revoke over the bus, each answering the
// key set after it and a sentence; bad requests are refused naming the field or the kid.
TEST_F(TokenServiceTest, KeyAdminOverTheBus) {
  const auto call = [&](v1::KeyAdminRequest::Action action, std::string kid = "",
                        std::string alg = "") {
    v1::KeyAdminRequest req;
    req.set_action(action);
    req.set_kid(std::move(kid));
    req.set_algorithm(std::move(alg));
    return bus::Call<v1::KeyAdminResponse>(env_.bus, bus::subjects::kTokenKeyAdmin, req,
                                           seconds(2));
  };
  auto list = call(v1::KeyAdminRequest::LIST);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->keys_size(), 2);
  EXPECT_EQ(list->keys(0).state(), "active");
  EXPECT_EQ(list->rotation_period_seconds(), 86400);
  EXPECT_EQ(list->publish_ahead_seconds(), 43200);
  EXPECT_TRUE(list->message().empty());

  const size_t changes = changes_.size();
  auto rotated = call(v1::KeyAdminRequest::ROTATE, "", "ES256");
  ASSERT_TRUE(rotated.ok()) << rotated.status();
  EXPECT_EQ(rotated->message().rfind("ES256: now signing with ", 0), 0u) << rotated->message();
  EXPECT_EQ(rotated->keys_size(), 3);
  EXPECT_EQ(changes_.size(), changes + 1);  // relying parties hear of it

  const std::string rs = env_.keys->Current()->Active(jwt::Algorithm::kRS256)->kid();
  auto tainted = call(v1::KeyAdminRequest::TAINT, rs);
  ASSERT_TRUE(tainted.ok()) << tainted.status();
  EXPECT_NE(tainted->message().find("tainted"), std::string::npos);
  bool seen = false;
  for (const auto& k : tainted->keys()) {
    if (k.kid() != rs) continue;
    seen = true;
    EXPECT_TRUE(k.tainted());
    EXPECT_EQ(k.state(), "retired");
    EXPECT_GT(k.published_until_unix(), k.retired_unix());
  }
  EXPECT_TRUE(seen);
  auto revoked = call(v1::KeyAdminRequest::REVOKE, rs);
  ASSERT_TRUE(revoked.ok()) << revoked.status();
  for (const auto& k : revoked->keys()) EXPECT_NE(k.kid(), rs);

  auto unknown = call(v1::KeyAdminRequest::REVOKE, rs);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("\"" + rs + "\""), std::string::npos);
  EXPECT_EQ(call(v1::KeyAdminRequest::TAINT).status().message(), "kid: required");
  EXPECT_EQ(call(v1::KeyAdminRequest::ACTION_UNSPECIFIED).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(call(v1::KeyAdminRequest::ROTATE, "", "HS256").status().message(),
            "algorithm: \"HS256\" is not RS256 or ES256");
}

// Tests that exchange refusals come back as answers with the RFC 6749 code.
TEST_F(TokenServiceTest, ExchangeRefusalIsAnAnswer) {
  v1::ExchangeRequest req;
  req.set_grant_type("password");
  auto resp =
      bus::Call<v1::ExchangeResponse>(env_.bus, bus::subjects::kTokenExchange, req, seconds(2));
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->error(), "unsupported_grant_type");
  EXPECT_EQ(resp->http_status(), 400);
}

}  // namespace
}  // namespace wisp::token
