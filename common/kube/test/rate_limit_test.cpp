#include "wisp/kube/rate_limit.hpp"

#include <gtest/gtest.h>

namespace wisp::kube {
namespace {

using std::chrono::milliseconds;

// Tests that a full bucket lets `burst` requests through at once, then one per 1/qps, and that it
// refills while idle but never beyond burst.
TEST(TokenBucketTest, BurstThenQps) {
  FakeClock clock;
  FakeSleeper sleeper(clock);
  TokenBucket bucket(10, 3, clock, sleeper);
  for (int i = 0; i < 3; ++i) bucket.Wait();
  for (auto d : sleeper.sleeps()) EXPECT_EQ(d.count(), 0);
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(bucket.Delay()).count(), 100);
  bucket.Wait();  // the 4th waits 100 ms (the fake sleeper advances the clock)
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(sleeper.sleeps().back()).count(), 100);
  bucket.Wait();
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(sleeper.sleeps().back()).count(), 100);
  clock.Advance(std::chrono::seconds(60));  // refills to burst, not 600
  for (int i = 0; i < 3; ++i) bucket.Wait();
  EXPECT_EQ(sleeper.sleeps().back().count(), 0);
  bucket.Wait();
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(sleeper.sleeps().back()).count(), 100);
}

// Tests that qps <= 0 means no limit.
TEST(TokenBucketTest, ZeroQpsIsUnlimited) {
  FakeClock clock;
  FakeSleeper sleeper(clock);
  TokenBucket bucket(0, 1, clock, sleeper);
  for (int i = 0; i < 100; ++i) bucket.Wait();
  EXPECT_TRUE(sleeper.sleeps().empty());
}

}  // namespace
}  // namespace wisp::kube
