#include "wisp/policy/reload.hpp"

#include <unistd.h>

#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

namespace wisp::policy {
namespace {

// One file per test and process (ctest runs tests in parallel).
class PolicyReloaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "wisp-policy-reload-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".yaml";
    Write("maxTokenLifetime: 12h\n");
  }
  void TearDown() override { std::remove(path_.c_str()); }
  void Write(const std::string& text) {
    std::ofstream out(path_, std::ios::trunc);
    out << text;
  }
  double Count(const std::string& trigger, const std::string& result) {
    return metrics_.reloads.Add({{"trigger", trigger}, {"result", result}}).Value();
  }

  std::string path_;
  prometheus::Registry registry_;
  ReloadMetrics metrics_{registry_};
  std::vector<Policy> applied_;
  PolicyReloader::Apply apply_ = [this](Policy p) { applied_.push_back(std::move(p)); };
};

// Tests that a good file is applied and counted.
TEST_F(PolicyReloaderTest, AppliesGoodFile) {
  PolicyReloader reloader(path_, apply_, metrics_);
  Write("maxTokenLifetime: 1h\nrules: {dataVolumes: false}\n");
  ASSERT_TRUE(reloader.Reload("sighup").ok());
  ASSERT_EQ(applied_.size(), 1u);
  EXPECT_EQ(applied_[0].max_token_lifetime_seconds, 3600);
  EXPECT_FALSE(applied_[0].rules.data_volumes);
  EXPECT_EQ(Count("sighup", "ok"), 1);
  EXPECT_EQ(metrics_.success.Value(), 1);
}

// Tests that a bad or missing file is refused with a message naming the file and the key, the
// policy in force is kept (nothing applied), and the refusal is counted.
TEST_F(PolicyReloaderTest, RefusesBadFileAndKeepsPolicy) {
  PolicyReloader reloader(path_, apply_, metrics_);
  Write("rules: {tokenSidecar: maybe}\n");
  absl::Status st = reloader.Reload("sighup");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(st.message()),
            path_ + ": rules.tokenSidecar: \"maybe\" is not true or false");
  EXPECT_TRUE(applied_.empty());
  EXPECT_EQ(Count("sighup", "error"), 1);
  EXPECT_EQ(metrics_.success.Value(), 0);

  std::remove(path_.c_str());
  EXPECT_EQ(reloader.Reload("sighup").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(applied_.empty());

  Write("maxTokenLifetime: 2h\n");
  ASSERT_TRUE(reloader.Reload("sighup").ok());
  ASSERT_EQ(applied_.size(), 1u);
  EXPECT_EQ(metrics_.success.Value(), 1);
}

// Tests that the file watcher's check reloads only changed contents, and tries a refused file
// once, not on every tick.
TEST_F(PolicyReloaderTest, ReloadIfChangedOnlyOnChange) {
  PolicyReloader reloader(path_, apply_, metrics_);
  ASSERT_TRUE(reloader.ReloadIfChanged("file-change").ok());
  EXPECT_TRUE(applied_.empty());  // the bytes the service started with

  Write("maxTokenLifetime: 3h\n");
  ASSERT_TRUE(reloader.ReloadIfChanged("file-change").ok());
  ASSERT_EQ(applied_.size(), 1u);
  EXPECT_EQ(applied_[0].max_token_lifetime_seconds, 10800);
  ASSERT_TRUE(reloader.ReloadIfChanged("file-change").ok());
  EXPECT_EQ(applied_.size(), 1u);

  Write("bogus: 1\n");
  EXPECT_FALSE(reloader.ReloadIfChanged("file-change").ok());
  EXPECT_TRUE(reloader.ReloadIfChanged("file-change").ok());  // same bad bytes: not retried
  EXPECT_EQ(Count("file-change", "error"), 1);
  EXPECT_EQ(applied_.size(), 1u);
}

}  // namespace
}  // namespace wisp::policy
