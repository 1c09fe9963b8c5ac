#include "wisp/policy/policy_app.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace wisp::policy {
namespace {

absl::Status Parse(std::vector<const char*> args, PolicySettings& settings) {
  config::Flags flags("wisp-policy", "test");
  AddPolicyFlags(flags, settings);
  args.insert(args.begin(), "wisp-policy");
  return flags.Parse(static_cast<int>(args.size()), args.data());
}

// Tests the flags' defaults and the serve-loops range.
TEST(PolicyAppTest, FlagsAndDefaults) {
  PolicySettings s;
  ASSERT_TRUE(Parse({"--policy-reload-interval", "10s", "--serve-loops", "2"}, s).ok());
  EXPECT_EQ(s.reload_interval, std::chrono::seconds(10));
  EXPECT_EQ(s.serve_loops, 2);
  PolicySettings t;
  ASSERT_TRUE(Parse({}, t).ok());
  EXPECT_EQ(t.serve_loops, 1);
  EXPECT_TRUE(t.policy_file.empty());
  EXPECT_FALSE(Parse({"--serve-loops", "65"}, t).ok());
}

// Tests that no file means the built-in defaults and a file that does not load names
// policy-file.
TEST(PolicyAppTest, LoadsTheRulesFile) {
  PolicySettings s;
  auto defaults = LoadPolicySettings(s);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  const auto path = std::filesystem::temp_directory_path() / "policy_app_test.yaml";
  std::ofstream(path) << "rules: [this is not a mapping\n";
  s.policy_file = path.string();
  auto bad = LoadPolicySettings(s);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("policy-file: ", 0), 0u) << bad.status();
  s.policy_file = (path.parent_path() / "policy_app_test_absent.yaml").string();
  EXPECT_FALSE(LoadPolicySettings(s).ok());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace wisp::policy
