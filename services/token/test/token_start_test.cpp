// wisp-token's start on a bucket that does not answer yet (issue 24: two replicas started at once
// on a fresh 3-node cluster, one exited with "reading key set: kv get wisp_keys/keyset: Timeout"
// while the bucket's stream elected its leader). TokenApp::Start loads the keys through
// runtime::RetryWhileUnreachable; this checks the two halves it relies on over InMemoryBus.
#include <gtest/gtest.h>

#include "key_manager.hpp"
#include "wisp/runtime/runtime.hpp"
#include "wisp/token/testing/test_env.hpp"

namespace wisp::token {
namespace {

// Tests that KeyManager::Start reports a timing-out bucket as DeadlineExceeded (transport
// trouble, which start-up waits out), can be called again, and loads one key set once the bucket
// answers.
TEST(TokenStartTest, KeysLoadOnceTheBucketAnswers) {
  testing::Env env;
  env.bus.FailBucket(bus::buckets::kKeys, absl::DeadlineExceededError("Timeout"));
  int calls = 0;
  absl::Status st =
      runtime::RetryWhileUnreachable("loading the signing keys", std::chrono::seconds(10), [&] {
        if (++calls == 3) env.bus.ClearFaults();  // the stream has its leader now
        absl::Status started = env.keys->Start();
        if (calls < 3) {
          EXPECT_EQ(started.code(), absl::StatusCode::kDeadlineExceeded) << started;
        }
        return started;
      });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(calls, 3);
  ASSERT_NE(env.keys->Current()->Active(jwt::Algorithm::kRS256), nullptr);
  auto entry = env.kv->Get(kKeySetKey);
  ASSERT_TRUE(entry.ok()) << entry.status();
  EXPECT_EQ(entry->revision, 1u) << "one key set, written once";
}

}  // namespace
}  // namespace wisp::token
