#include "oidc/rate_limiter.hpp"

#include <gtest/gtest.h>

#include "wisp/status/fake_clock.hpp"

namespace wisp::gateway::oidc {
namespace {

// Tests that a bucket allows its burst, refuses after, and refills at the rate.
TEST(RateLimiterTest, AllowsBurstThenRefills) {
  FakeClock clock;
  RateLimiter limiter(clock, {.rate_per_second = 2, .burst = 3});
  EXPECT_TRUE(limiter.Allow("a"));
  EXPECT_TRUE(limiter.Allow("a"));
  EXPECT_TRUE(limiter.Allow("a"));
  EXPECT_FALSE(limiter.Check("a"));
  EXPECT_FALSE(limiter.Allow("a"));
  EXPECT_TRUE(limiter.Allow("b"));  // subjects are independent
  clock.Advance(std::chrono::milliseconds(500));
  EXPECT_TRUE(limiter.Allow("a"));
  EXPECT_FALSE(limiter.Allow("a"));
}

// Tests that the number of tracked keys stays bounded.
TEST(RateLimiterTest, BoundsTrackedKeys) {
  FakeClock clock;
  RateLimiter limiter(clock, {.rate_per_second = 1, .burst = 1, .max_keys = 10});
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(limiter.Allow("k" + std::to_string(i)));
  EXPECT_FALSE(limiter.Allow("k99"));
}

}  // namespace
}  // namespace wisp::gateway::oidc
