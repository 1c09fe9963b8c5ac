#include "key_manager.hpp"

#include <gtest/gtest.h>

#include "wisp/token/testing/test_env.hpp"

namespace wisp::token {
namespace {

using std::chrono::hours;

// Tests that the first start creates one sealed key per algorithm and no private key in the KV.
TEST(KeyManagerTest, FirstStartCreatesSealedKeys) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  auto snap = env.keys->Current();
  ASSERT_NE(snap->Active(jwt::Algorithm::kRS256), nullptr);
  ASSERT_NE(snap->Active(jwt::Algorithm::kES256), nullptr);
  EXPECT_EQ(snap->public_keys.size(), 2u);
  auto entry = env.kv->Get(kKeySetKey);
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(entry->value.find("PRIVATE KEY"), std::string::npos);
  EXPECT_NE(entry->value.find("\"sealed\""), std::string::npos);
}

// Tests that a second replica with the same KEK loads the same keys instead of making new ones.
TEST(KeyManagerTest, SecondReplicaSharesTheKeySet) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  KeyManager other(*env.kv, env.kek, env.clock, {}, nullptr);
  ASSERT_TRUE(other.Start().ok());
  EXPECT_EQ(other.Current()->Active(jwt::Algorithm::kRS256)->kid(),
            env.keys->Current()->Active(jwt::Algorithm::kRS256)->kid());
}

// Tests that a replica holding another KEK refuses to start, saying so.
TEST(KeyManagerTest, WrongKekRefusesToStart) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  KeyManager other(*env.kv, jwt::Kek::Random(), env.clock, {}, nullptr);
  auto st = other.Start();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("key-encryption key"), std::string::npos);
}

// Tests that rotation happens after the period, keeps the retired key published until its tokens
// expire, and then drops it.
TEST(KeyManagerTest, RotatesAndDropsRetiredKeyAfterLongestToken) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  const std::string first = env.keys->Current()->Active(jwt::Algorithm::kRS256)->kid();
  env.clock.Advance(hours(23));
  EXPECT_FALSE(*env.keys->Tick());
  env.clock.Advance(hours(1));
  EXPECT_TRUE(*env.keys->Tick());
  auto snap = env.keys->Current();
  EXPECT_NE(snap->Active(jwt::Algorithm::kRS256)->kid(), first);
  ASSERT_NE(snap->Info(first), nullptr);
  EXPECT_NE(snap->Info(first)->retired_unix, 0);
  EXPECT_NE(snap->public_keys.Find(first), nullptr);
  EXPECT_EQ(snap->public_keys.size(), 4u);
  // Longest token is 7200 s (policy) plus 5 minutes of slack.
  env.clock.Advance(std::chrono::seconds(7200 + 299));
  EXPECT_FALSE(*env.keys->Tick());
  EXPECT_NE(env.keys->Current()->public_keys.Find(first), nullptr);
  env.clock.Advance(std::chrono::seconds(2));
  EXPECT_TRUE(*env.keys->Tick());
  EXPECT_EQ(env.keys->Current()->public_keys.Find(first), nullptr);
  EXPECT_EQ(env.keys->Current()->public_keys.size(), 2u);
}

// Tests that a longer lifetime (a reloaded policy) keeps keys retired afterwards published longer,
// and that a shorter one never lowers it: tokens signed under the longer lifetime may be live.
TEST(KeyManagerTest, ExtendLongestTokenRaisesRetentionAndNeverLowersIt) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  EXPECT_EQ(env.keys->LongestToken(), std::chrono::seconds(7200));
  env.keys->ExtendLongestToken(std::chrono::seconds(20000));
  env.keys->ExtendLongestToken(std::chrono::seconds(600));
  EXPECT_EQ(env.keys->LongestToken(), std::chrono::seconds(20000));
  const std::string first = env.keys->Current()->Active(jwt::Algorithm::kES256)->kid();
  env.clock.Advance(hours(24));
  ASSERT_TRUE(*env.keys->Tick());
  // Past the old 7200 s + 300 s, the retired key is still published; past 20000 s + 300 s, gone.
  env.clock.Advance(std::chrono::seconds(7200 + 301));
  EXPECT_FALSE(*env.keys->Tick());
  EXPECT_NE(env.keys->Current()->public_keys.Find(first), nullptr);
  env.clock.Advance(std::chrono::seconds(20000 - 7200));
  EXPECT_TRUE(*env.keys->Tick());
  EXPECT_EQ(env.keys->Current()->public_keys.Find(first), nullptr);
}

// Tests that two replicas due for rotation at once produce exactly one rotation.
TEST(KeyManagerTest, TwoReplicasNeverBothRotate) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  KeyManager other(*env.kv, env.kek, env.clock, {}, nullptr);
  ASSERT_TRUE(other.Start().ok());
  env.clock.Advance(hours(25));
  const bool a = *env.keys->Tick();
  const bool b = *other.Tick();
  EXPECT_NE(a, b);
  EXPECT_EQ(env.keys->Current()->public_keys.size(), 4u);
  EXPECT_EQ(other.Current()->Active(jwt::Algorithm::kES256)->kid(),
            env.keys->Current()->Active(jwt::Algorithm::kES256)->kid());
}

// Tests that a stale compare-and-set (a write landing between read and update) loses cleanly.
TEST(KeyManagerTest, LostCompareAndSetLoadsWinner) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  KeyManager other(*env.kv, env.kek, env.clock, {}, nullptr);
  ASSERT_TRUE(other.Start().ok());
  ASSERT_TRUE(*other.RotateNow());
  // env.keys saw the change through its watch; a forced rotation on it still works on top.
  EXPECT_EQ(env.keys->Current()->revision, other.Current()->revision);
  ASSERT_TRUE(*env.keys->RotateNow());
  EXPECT_EQ(env.keys->Current()->public_keys.size(), 6u);
}

// Tests that change callbacks fire for watched writes from another replica.
TEST(KeyManagerTest, NotifiesOnWatchedChanges) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  int calls = 0;
  env.keys->OnChange([&](const KeySnapshot&) { ++calls; });
  KeyManager other(*env.kv, env.kek, env.clock, {}, nullptr);
  ASSERT_TRUE(other.Start().ok());
  ASSERT_TRUE(*other.RotateNow());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace wisp::token
