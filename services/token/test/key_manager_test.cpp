#include "key_manager.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

// Tests SPIRE's schedule with the defaults (24 h signing, next key published 12 h ahead): the next
// key is published at half the active key's signing period without signing, takes over at 24 h,
// and the retired key stays published until its tokens expire, then is dropped.
TEST(KeyManagerTest, PrePublishesNextKeyThenSwitchesAndDropsTheOld) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  EXPECT_EQ(env.keys->PublishAhead(), hours(12));
  const std::string first = env.keys->Current()->Active(jwt::Algorithm::kRS256)->kid();
  env.clock.Advance(hours(11));
  EXPECT_FALSE(*env.keys->Tick());
  env.clock.Advance(hours(1));
  EXPECT_TRUE(*env.keys->Tick());
  auto snap = env.keys->Current();
  EXPECT_EQ(snap->Active(jwt::Algorithm::kRS256)->kid(), first);  // still signing
  EXPECT_EQ(snap->public_keys.size(), 4u);
  std::string next;
  for (const auto& [kid, info] : snap->info) {
    if (info.state == KeyState::kNext && info.alg == jwt::Algorithm::kRS256) next = kid;
  }
  ASSERT_FALSE(next.empty());
  EXPECT_NE(snap->public_keys.Find(next), nullptr);  // in the JWKS before it signs
  EXPECT_EQ(snap->Info(next)->activated_unix, 0);
  // Its private key is in the store, sealed, as the active one's.
  EXPECT_NE(env.kv->Get(kKeySetKey)->value.find("\"state\":\"next\""), std::string::npos);

  env.clock.Advance(hours(11));
  EXPECT_FALSE(*env.keys->Tick());
  env.clock.Advance(hours(1));
  EXPECT_TRUE(*env.keys->Tick());
  snap = env.keys->Current();
  EXPECT_EQ(snap->Active(jwt::Algorithm::kRS256)->kid(), next);
  ASSERT_NE(snap->Info(first), nullptr);
  EXPECT_EQ(snap->Info(first)->state, KeyState::kRetired);
  EXPECT_NE(snap->public_keys.Find(first), nullptr);
  EXPECT_EQ(snap->public_keys.size(), 4u);
  // A retired key's private key leaves the store: it can never sign again.
  auto stored = nlohmann::json::parse(env.kv->Get(kKeySetKey)->value);
  for (const auto& k : stored["keys"]) {
    EXPECT_EQ(k.contains("sealed"), k["state"] != "retired") << k["kid"];
  }
  // Longest token is 7200 s (policy) plus 5 minutes of slack.
  env.clock.Advance(std::chrono::seconds(7200 + 299));
  EXPECT_FALSE(*env.keys->Tick());
  EXPECT_NE(env.keys->Current()->public_keys.Find(first), nullptr);
  env.clock.Advance(std::chrono::seconds(2));
  EXPECT_TRUE(*env.keys->Tick());
  EXPECT_EQ(env.keys->Current()->public_keys.Find(first), nullptr);
  EXPECT_EQ(env.keys->Current()->public_keys.size(), 2u);
}

// Tests that a next key made late (the schedule was not running at half-life) is still published
// for the whole publish-ahead time before it signs, and that publish_ahead is configurable.
TEST(KeyManagerTest, LateNextKeyIsPublishedAheadBeforeItSigns) {
  testing::Env env;
  KeyManager keys(*env.kv, env.kek, env.clock,
                  {.rotation_period = hours(6), .publish_ahead = hours(1)}, nullptr);
  ASSERT_TRUE(keys.Start().ok());
  EXPECT_EQ(keys.PublishAhead(), hours(1));
  const std::string first = keys.Current()->Active(jwt::Algorithm::kES256)->kid();
  env.clock.Advance(hours(4) + std::chrono::minutes(59));
  EXPECT_FALSE(*keys.Tick());
  env.clock.Advance(hours(3));  // past the switch time, with no next key yet
  EXPECT_TRUE(*keys.Tick());
  EXPECT_EQ(keys.Current()->Active(jwt::Algorithm::kES256)->kid(), first);
  EXPECT_EQ(keys.Current()->public_keys.size(), 4u);
  env.clock.Advance(std::chrono::minutes(59));
  EXPECT_FALSE(*keys.Tick());
  env.clock.Advance(std::chrono::minutes(1));
  EXPECT_TRUE(*keys.Tick());
  EXPECT_NE(keys.Current()->Active(jwt::Algorithm::kES256)->kid(), first);
  // A publish-ahead time as long as the period is clamped below it.
  KeyManager clamped(*env.kv, env.kek, env.clock,
                     {.rotation_period = hours(2), .publish_ahead = hours(5)}, nullptr);
  EXPECT_EQ(clamped.PublishAhead(), hours(2) - std::chrono::seconds(1));
}

// Tests that a key set written before key states existed (only created/retired) loads as it was:
// the active keys sign, and the schedule counts their age from their creation.
TEST(KeyManagerTest, LoadsKeySetWrittenBeforeStates) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  auto entry = *env.kv->Get(kKeySetKey);
  auto doc = nlohmann::json::parse(entry.value);
  for (auto& k : doc["keys"]) {
    k.erase("state");
    k.erase("activated");
    k.erase("tainted");
  }
  ASSERT_TRUE(env.kv->Update(kKeySetKey, doc.dump(), entry.revision).ok());
  KeyManager other(*env.kv, env.kek, env.clock, {}, nullptr);
  ASSERT_TRUE(other.Start().ok());
  EXPECT_EQ(other.Current()->Active(jwt::Algorithm::kRS256)->kid(),
            env.keys->Current()->Active(jwt::Algorithm::kRS256)->kid());
  EXPECT_EQ(other.Current()->Info(other.Current()->Active(jwt::Algorithm::kRS256)->kid())->state,
            KeyState::kActive);
  env.clock.Advance(hours(12));
  EXPECT_TRUE(*other.Tick());  // next keys published at half-life
  EXPECT_EQ(other.Current()->public_keys.size(), 4u);
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
  env.clock.Advance(hours(12));
  ASSERT_TRUE(*env.keys->Tick());  // next published
  env.clock.Advance(hours(12));
  ASSERT_TRUE(*env.keys->Tick());  // next signs, first retired
  ASSERT_EQ(env.keys->Current()->Info(first)->state, KeyState::kRetired);
  // Past the old 7200 s + 300 s, the retired key is still published; past 20000 s + 300 s, gone.
  env.clock.Advance(std::chrono::seconds(7200 + 301));
  EXPECT_FALSE(*env.keys->Tick());
  EXPECT_NE(env.keys->Current()->public_keys.Find(first), nullptr);
  env.clock.Advance(std::chrono::seconds(20000 - 7200));
  EXPECT_TRUE(*env.keys->Tick());
  EXPECT_EQ(env.keys->Current()->public_keys.Find(first), nullptr);
}

// Tests that an operator rotation makes the published next key sign at once, says so, and leaves
// the other algorithm alone; without a next key it makes one and says relying parties may lag.
TEST(KeyManagerTest, RotateUsesThePublishedNextKey) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  const std::string rs = env.keys->Current()->Active(jwt::Algorithm::kRS256)->kid();
  const std::string es = env.keys->Current()->Active(jwt::Algorithm::kES256)->kid();
  env.clock.Advance(hours(12));
  ASSERT_TRUE(*env.keys->Tick());
  env.clock.Advance(hours(1));
  std::string next;
  for (const auto& [kid, info] : env.keys->Current()->info) {
    if (info.state == KeyState::kNext && info.alg == jwt::Algorithm::kRS256) next = kid;
  }
  auto said = env.keys->Rotate(jwt::Algorithm::kRS256);
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_NE(said->find("RS256: now signing with " + next + " (published 1h"), std::string::npos)
      << *said;
  EXPECT_NE(said->find(rs + " stopped signing and stays in the JWKS until"), std::string::npos)
      << *said;
  auto snap = env.keys->Current();
  EXPECT_EQ(snap->Active(jwt::Algorithm::kRS256)->kid(), next);
  EXPECT_EQ(snap->Active(jwt::Algorithm::kES256)->kid(), es);
  EXPECT_EQ(snap->Info(rs)->state, KeyState::kRetired);
  EXPECT_FALSE(snap->Info(rs)->tainted);

  said = env.keys->Rotate(jwt::Algorithm::kRS256);  // no next key now
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_NE(said->find("made just now: no next key was published"), std::string::npos) << *said;
  EXPECT_NE(env.keys->Current()->Active(jwt::Algorithm::kRS256)->kid(), next);
}

// Tests taint: the active key stops signing now (the next key takes over), and stays published,
// so the tokens it signed still verify, until they expire; a next key, having signed nothing,
// leaves the JWKS.
TEST(KeyManagerTest, TaintStopsSigningAndKeepsVerifying) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  const auto before = *env.issuer->Issue(env.Request());
  const std::string a = before.key_id();
  auto said = env.keys->Taint(a);
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_NE(said->find("key " + a +
                       " (RS256, active) tainted: no new token carries it; it stays "
                       "in the JWKS until"),
            std::string::npos)
      << *said;
  auto snap = env.keys->Current();
  EXPECT_TRUE(snap->Info(a)->tainted);
  EXPECT_EQ(snap->Info(a)->state, KeyState::kRetired);
  EXPECT_NE(snap->public_keys.Find(a), nullptr);
  EXPECT_TRUE(env.reviewer->Verify(before.token(), {"vault"}).ok());
  const auto after = *env.issuer->Issue(env.Request());
  EXPECT_NE(after.key_id(), a);
  EXPECT_TRUE(env.reviewer->Verify(after.token(), {"vault"}).ok());
  // Tainting it again only says so.
  said = env.keys->Taint(a);
  ASSERT_TRUE(said.ok());
  EXPECT_NE(said->find("it had already stopped signing"), std::string::npos) << *said;

  // Once every token it signed has expired (7200 s + 5 min after the taint), it leaves the JWKS.
  env.clock.Advance(std::chrono::seconds(7200 + 299));
  (void)*env.keys->Tick();
  EXPECT_NE(env.keys->Current()->public_keys.Find(a), nullptr);
  env.clock.Advance(std::chrono::seconds(2));
  EXPECT_TRUE(*env.keys->Tick());
  EXPECT_EQ(env.keys->Current()->public_keys.Find(a), nullptr);

  // A next key is dropped at once.
  env.clock.Advance(hours(12));
  ASSERT_TRUE(*env.keys->Tick());
  std::string next;
  for (const auto& [kid, info] : env.keys->Current()->info) {
    if (info.state == KeyState::kNext && info.alg == jwt::Algorithm::kRS256) next = kid;
  }
  ASSERT_FALSE(next.empty());
  said = env.keys->Taint(next);
  ASSERT_TRUE(said.ok());
  EXPECT_NE(said->find("it had signed no token, so it left the JWKS now"), std::string::npos);
  EXPECT_EQ(env.keys->Current()->public_keys.Find(next), nullptr);
}

// Tests revoke: the key leaves the JWKS now and the tokens it signed stop verifying; revoking the
// active key puts the next one to work. Unknown and empty kids are refused, naming the kid.
TEST(KeyManagerTest, RevokeRemovesTheKeyNow) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  const auto before = *env.issuer->Issue(env.Request());
  auto said = env.keys->Revoke(before.key_id());
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_NE(said->find("revoked: removed from the JWKS now, so the tokens it signed no longer "
                       "verify"),
            std::string::npos)
      << *said;
  EXPECT_NE(said->find("now signing with"), std::string::npos) << *said;
  EXPECT_EQ(env.keys->Current()->public_keys.Find(before.key_id()), nullptr);
  auto v = env.reviewer->Verify(before.token(), {"vault"});
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find(before.key_id()), std::string::npos) << v.status();
  EXPECT_TRUE(env.issuer->Issue(env.Request()).ok());

  auto unknown = env.keys->Revoke("no-such-kid");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(),
            "kid: key \"no-such-kid\" is not in the key set (wispctl keys list shows the kids)");
  EXPECT_EQ(env.keys->Taint("no-such-kid").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(env.keys->Taint("").status().code(), absl::StatusCode::kInvalidArgument);
}

// Tests that every key of the JWKS, next keys included, says use "sig" and its alg (spire#2623).
TEST(KeyManagerTest, JwksKeysCarryUseAndAlg) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  env.clock.Advance(hours(12));
  ASSERT_TRUE(*env.keys->Tick());
  auto jwks = nlohmann::json::parse(env.keys->Current()->jwks_json);
  ASSERT_EQ(jwks["keys"].size(), 4u);
  for (const auto& k : jwks["keys"]) {
    EXPECT_EQ(k["use"], "sig") << k;
    EXPECT_EQ(k["alg"], k["kty"] == "RSA" ? "RS256" : "ES256") << k;
  }
}

// Tests that two replicas due for rotation at once produce exactly one rotation.
TEST(KeyManagerTest, TwoReplicasNeverBothRotate) {
  testing::Env env;
  ASSERT_TRUE(env.keys->Start().ok());
  KeyManager other(*env.kv, env.kek, env.clock, {}, nullptr);
  ASSERT_TRUE(other.Start().ok());
  env.clock.Advance(hours(25));
  bool a = *env.keys->Tick();  // publishes the next keys
  bool b = *other.Tick();
  EXPECT_NE(a, b);
  EXPECT_EQ(env.keys->Current()->public_keys.size(), 4u);
  env.clock.Advance(hours(12));
  a = *env.keys->Tick();  // the next keys sign
  b = *other.Tick();
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
