#include "policy.hpp"

#include <gtest/gtest.h>

#include "wisp/token/testing/test_env.hpp"

namespace wisp::token {
namespace {

// Tests that the sample policy parses into namespaces, rules and lifetimes.
TEST(PolicyTest, ParsesSample) {
  auto p = Policy::FromYaml(testing::kPolicyYaml);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->max_expiration_seconds, 7200);
  ASSERT_NE(p->ForNamespace("ml"), nullptr);
  EXPECT_EQ(p->ForNamespace("other"), nullptr);
  EXPECT_EQ(p->ForNamespace("short")->max_expiration_seconds, 900);
  ASSERT_EQ(p->exchange_rules.size(), 1u);
  EXPECT_EQ(p->exchange_rules[0].service_accounts[0], "loader");
  EXPECT_EQ(p->LongestTokenSeconds(), 7200);
}

// Tests that the longest token counts upload tokens (up to kUploadTokenMaxSeconds, wisp-token's
// own limit) even when the policy allows only shorter ones: a retired key must stay published
// until the upload tokens it signed have expired too.
TEST(PolicyTest, LongestTokenCountsUploadTokens) {
  auto p =
      Policy::FromYaml("maxExpirationSeconds: 600\nexchange: {accessTokenLifetimeSeconds: 600}");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->LongestTokenSeconds(), 3600);
}

// Tests that bad values are refused with the YAML key named.
TEST(PolicyTest, RefusesBadValuesNamingTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"maxExpirationSeconds: 10", "maxExpirationSeconds"},
      {"namespaces: {ml: {audiences: vault}}", "namespaces.ml.audiences"},
      {"exchange: {rules: [{namespace: ml}]}", "exchange.rules[0].audiences"},
      {"trustedIssuers: [{issuer: x, jwksFile: /nonexistent, audiences: [a]}]",
       "trustedIssuers[0].jwksFile"},
      {"[1, 2", "YAML"},
  };
  for (const auto& [yaml, key] : cases) {
    SCOPED_TRACE(yaml);
    auto p = Policy::FromYaml(yaml);
    ASSERT_FALSE(p.ok());
    EXPECT_NE(std::string(p.status().message()).find(key), std::string::npos) << p.status();
  }
}

// Tests that the default policy allows any audience and no exchange.
TEST(PolicyTest, DefaultAllowsAnyAudienceAndNoExchange) {
  Policy p = Policy::Default();
  ASSERT_NE(p.ForNamespace("anything"), nullptr);
  EXPECT_TRUE(Matches(p.ForNamespace("anything")->audiences, "vault"));
  EXPECT_TRUE(p.exchange_rules.empty());
}

// Tests that "*" matches anything and lists match exactly.
TEST(PolicyTest, MatchesWildcards) {
  EXPECT_TRUE(Matches({"*"}, "x"));
  EXPECT_TRUE(Matches({"a", "b"}, "b"));
  EXPECT_FALSE(Matches({"a"}, "ab"));
  EXPECT_FALSE(Matches({}, "a"));
}

}  // namespace
}  // namespace wisp::token
