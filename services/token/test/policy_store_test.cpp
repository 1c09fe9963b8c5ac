#include "policy_store.hpp"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "wisp/token/testing/test_env.hpp"

namespace wisp::token {
namespace {

namespace fs = std::filesystem;

double Value(prometheus::Registry& registry, const std::string& name, const std::string& outcome) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      for (const auto& l : m.label) {
        if (l.name == "outcome" && l.value == outcome) return m.counter.value;
      }
    }
  }
  return 0;
}

class PolicyWatcherTest : public ::testing::Test {
 protected:
  PolicyWatcherTest() : metrics_(registry_) {
    dir_ = fs::path(::testing::TempDir()) /
           ("policy-watch-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "policy.yaml").string();
    Write("namespaces: {ml: {audiences: [vault]}}\n");
  }
  ~PolicyWatcherTest() override { fs::remove_all(dir_); }

  void Write(const std::string& yaml) {
    const std::string tmp = path_ + ".tmp";
    std::ofstream(tmp) << yaml;
    fs::rename(tmp, path_);  // a new inode, as editors and kubelet do
  }

  std::shared_ptr<PolicyStore> Load() {
    auto p = LoadPolicyFile(path_, nullptr, clock_, &metrics_);
    EXPECT_TRUE(p.ok()) << p.status();
    return std::make_shared<PolicyStore>(*p);
  }

  fs::path dir_;
  std::string path_;
  FakeClock clock_;
  prometheus::Registry registry_;
  TokenMetrics metrics_;
};

// Tests that Reload swaps in a good file and that a bad file keeps the policy in force, counting
// both outcomes.
TEST_F(PolicyWatcherTest, BadFileKeepsThePolicyInForce) {
  auto store = Load();
  PolicyWatcher watcher(*store, {.path = path_, .handle_sighup = false}, clock_, metrics_);
  Write("namespaces: {ml: {audiences: [vault, sts.amazonaws.com]}}\n");
  ASSERT_TRUE(watcher.Reload("test").ok());
  EXPECT_TRUE(Matches(store->Current()->ForNamespace("ml")->audiences, "sts.amazonaws.com"));

  Write("namespaces: {ml: {audiences: vault}}\n");
  auto st = watcher.Reload("test");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("namespaces.ml.audiences"), std::string::npos) << st;
  EXPECT_TRUE(Matches(store->Current()->ForNamespace("ml")->audiences, "sts.amazonaws.com"));
  fs::remove(path_);
  EXPECT_FALSE(watcher.Reload("test").ok());
  EXPECT_NE(store->Current()->ForNamespace("ml"), nullptr);
  EXPECT_EQ(Value(registry_, "wisp_token_policy_reloads_total", "ok"), 1);
  EXPECT_EQ(Value(registry_, "wisp_token_policy_reloads_total", "error"), 2);
}

// Tests that a request keeps the snapshot it started with while a reload replaces the policy.
TEST_F(PolicyWatcherTest, SnapshotsAreStableAcrossAReload) {
  auto store = Load();
  auto before = store->Current();
  store->Replace(*Policy::FromYaml("namespaces: {other: {audiences: [x]}}"));
  EXPECT_NE(before->ForNamespace("ml"), nullptr);
  EXPECT_EQ(store->Current()->ForNamespace("ml"), nullptr);
}

// Tests that every Replace reaches the OnReplace callbacks with the new policy, which the key
// manager uses to keep retired keys published as long as the new lifetimes need.
TEST_F(PolicyWatcherTest, ReplaceNotifiesWithTheNewPolicy) {
  auto store = Load();
  std::vector<int64_t> seen;
  store->OnReplace([&](const Policy& p) { seen.push_back(p.max_expiration_seconds); });
  store->Replace(*Policy::FromYaml("maxExpirationSeconds: 90000"));
  PolicyWatcher watcher(*store, {.path = path_, .handle_sighup = false}, clock_, metrics_);
  Write("maxExpirationSeconds: 7200\n");
  ASSERT_TRUE(watcher.Reload("test").ok());
  EXPECT_EQ(seen, (std::vector<int64_t>{90000, 7200}));
}

// Tests that the watcher thread notices a changed file (new inode) and reloads it.
TEST_F(PolicyWatcherTest, ReloadsWhenTheFileChanges) {
  auto store = Load();
  PolicyWatcher watcher(
      *store,
      {.path = path_, .poll_interval = std::chrono::milliseconds(20), .handle_sighup = false},
      clock_, metrics_);
  watcher.Start();
  Write("namespaces: {ml: {audiences: [vault, changed]}}\n");
  for (int i = 0; i < 250 && Value(registry_, "wisp_token_policy_reloads_total", "ok") < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  watcher.Stop();
  EXPECT_TRUE(Matches(store->Current()->ForNamespace("ml")->audiences, "changed"));
}

// Tests that SIGHUP makes the watcher reload even when the file looks unchanged.
TEST_F(PolicyWatcherTest, ReloadsOnSighup) {
  // Block SIGHUP in this thread before the watcher's thread starts (as wisp-token's main does).
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  auto store = Load();
  PolicyWatcher watcher(*store, {.path = path_, .poll_interval = std::chrono::milliseconds(50)},
                        clock_, metrics_);
  watcher.Start();
  kill(getpid(), SIGHUP);
  for (int i = 0; i < 250 && Value(registry_, "wisp_token_policy_reloads_total", "ok") < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  watcher.Stop();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  EXPECT_EQ(Value(registry_, "wisp_token_policy_reloads_total", "ok"), 1);
}

}  // namespace
}  // namespace wisp::token
