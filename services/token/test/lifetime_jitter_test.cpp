#include "lifetime_jitter.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "policy.hpp"
#include "wisp/token/testing/test_env.hpp"

namespace wisp::token {
namespace {

// The largest draw below 1: the bottom of every range.
const double kTop = std::nextafter(1.0, 0.0);

// Tests that a draw maps to an offset between 0 and the spread, the lifetime only shortening.
TEST(LifetimeJitterTest, ShortensByUpToTheSpread) {
  struct Case {
    int64_t percent, lifetime;
    double draw;
    int64_t want;
  } cases[] = {
      {10, 3600, 0.0, 3600},     // the top of the range: the lifetime asked for
      {10, 3600, 0.5, 3420},     // offsets 0..360, 361 of them: floor(0.5 * 361) = 180
      {10, 3600, kTop, 3240},    // the bottom: 10% shorter, never more
      {10, 86400, kTop, 77760},  // IRSA's 86400 s with a 10% spread
      {0, 3600, kTop, 3600},     // spread 0: off
      {50, 1000, kTop, 600},     // 500 s off would go under the minimum: raised to it
      {10, 600, kTop, 600},      // at the minimum: unchanged
      {10, int64_t{1} << 32, kTop, (int64_t{1} << 32) - 429496729},  // no overflow
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(c.percent) + "% of " + std::to_string(c.lifetime) + " at " +
                 std::to_string(c.draw));
    LifetimeJitter jitter(c.percent, [&] { return c.draw; });
    EXPECT_EQ(jitter.Apply(c.lifetime, kMinExpirationSeconds), c.want);
  }
}

// Tests that with spread 0 the source is never consulted, and out-of-range spreads are clamped.
TEST(LifetimeJitterTest, ZeroSpreadDrawsNothingAndSpreadIsClamped) {
  int draws = 0;
  LifetimeJitter off(0, [&] { return ++draws, 0.9; });
  EXPECT_EQ(off.Apply(3600, 600), 3600);
  EXPECT_EQ(draws, 0);
  EXPECT_EQ(LifetimeJitter(-5).spread_percent(), 0);
  EXPECT_EQ(LifetimeJitter(90).spread_percent(), kMaxLifetimeJitterPercent);
}

// Tests that the default source stays inside the range and spreads: 1,000 draws of 3600 s with
// 10% land in 3240..3600 and are not all the same.
TEST(LifetimeJitterTest, DefaultSourceStaysInRange) {
  LifetimeJitter jitter(10);
  int64_t lo = 3600, hi = 0;
  for (int i = 0; i < 1000; ++i) {
    const int64_t v = jitter.Apply(3600, 600);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, 3240);
  EXPECT_LE(hi, 3600);
  EXPECT_GT(hi - lo, 100);
}

class JitteredIssuerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.keys->Start().ok());
    // The same stack with an issuer whose draws the test chooses.
    issuer_ = std::make_unique<Issuer>(
        *env_.keys, env_.policy, env_.clock, env_.metrics,
        Issuer::Options{.issuer = testing::kIssuer,
                        .lifetime_jitter = LifetimeJitter(10, [this] { return draw_; })});
    exchanger_ = std::make_unique<Exchanger>(*env_.reviewer, *issuer_, env_.policy, env_.clock,
                                             env_.metrics);
  }
  testing::Env env_;
  double draw_ = 0;
  std::unique_ptr<Issuer> issuer_;
  std::unique_ptr<Exchanger> exchanger_;
};

// Tests that issued lifetimes are jittered after the policy caps: never above the namespace's or
// the global maximum, never below 600 s, and exactly what the token's exp says.
TEST_F(JitteredIssuerTest, IssueJittersBelowThePolicyCap) {
  struct Case {
    std::string ns;
    int64_t requested;
    double draw;
    int64_t want;
  } cases[] = {
      {"ml", 0, kTop, 3240},                 // the default 3600 s, 10% shorter
      {"ml", 0, 0.0, 3600},                  // the top of the range
      {"ml", int64_t{1} << 32, kTop, 6480},  // capped at 7200 first, then jittered
      {"short", 3600, kTop, 810},            // the namespace cap 900, then jittered
      {"ml", 600, kTop, 600},                // the minimum stays the minimum
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.ns + " " + std::to_string(c.requested) + " at " + std::to_string(c.draw));
    draw_ = c.draw;
    auto req = env_.Request(c.ns);
    req.set_expiration_seconds(c.requested);
    auto resp = issuer_->Issue(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_EQ(resp->expiration_unix() - resp->issued_at_unix(), c.want);
    const auto claims = jwt::Decode(resp->token())->claims;
    EXPECT_EQ(claims["exp"].get<int64_t>(), resp->expiration_unix());
  }
}

// Tests that exchanged access tokens are jittered from accessTokenLifetimeSeconds and that
// expires_in reports the lifetime the token has.
TEST_F(JitteredIssuerTest, ExchangeJittersAccessTokenLifetime) {
  auto subject = env_.issuer->Issue(env_.Request("ml", "loader", {"wisp-sts"}));
  ASSERT_TRUE(subject.ok()) << subject.status();
  v1::ExchangeRequest r;
  r.set_grant_type(std::string(kGrantTokenExchange));
  r.set_subject_token(subject->token());
  r.set_subject_token_type(std::string(kTokenTypeJwt));
  r.set_requested_token_type(std::string(kTokenTypeAccessToken));
  r.set_audience("storage.wisp.dev");
  draw_ = kTop;
  auto resp = exchanger_->Exchange(r);
  ASSERT_TRUE(resp.error().empty()) << resp.error() << ": " << resp.error_description();
  EXPECT_EQ(resp.expires_in(), 1620);  // 1800 s, 10% shorter
  const auto claims = jwt::Decode(resp.access_token())->claims;
  EXPECT_EQ(claims["exp"].get<int64_t>() - claims["iat"].get<int64_t>(), 1620);
  draw_ = 0.0;
  EXPECT_EQ(exchanger_->Exchange(r).expires_in(), 1800);
}

}  // namespace
}  // namespace wisp::token
