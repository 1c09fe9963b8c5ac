#include "populator_app.hpp"

#include <gtest/gtest.h>

#include <filesystem>

namespace wisp::populator {
namespace {

namespace fs = std::filesystem;

absl::Status Parse(std::vector<const char*> args, PopulatorSettings& settings) {
  config::Flags flags("wisp-populator", "test");
  AddPopulatorFlags(flags, settings);
  args.insert(args.begin(), "wisp-populator");
  return flags.Parse(static_cast<int>(args.size()), args.data());
}

// Tests the defaults and that counts must be positive.
TEST(PopulatorAppTest, FlagsAndDefaults) {
  PopulatorSettings s;
  ASSERT_TRUE(Parse({"--workers", "3", "--upload-idle-timeout", "90s"}, s).ok());
  EXPECT_EQ(s.workers, 3);
  EXPECT_EQ(s.upload_idle, std::chrono::seconds(90));
  EXPECT_EQ(s.volume_root, "/var/lib/wisp/volumes");
  EXPECT_EQ(s.checkpoint, 64ll << 20);
  EXPECT_EQ(s.node_lost_after, std::chrono::minutes(10));
  EXPECT_EQ(s.node_check_interval, std::chrono::seconds(30));
  PopulatorSettings t;
  EXPECT_FALSE(Parse({"--workers", "0"}, t).ok());
  EXPECT_FALSE(Parse({"--checkpoint-interval", "-1"}, t).ok());
  EXPECT_FALSE(Parse({"--node-check-interval", "0"}, t).ok());
  PopulatorSettings never;
  ASSERT_TRUE(Parse({"--node-lost-after", "0"}, never).ok());
  EXPECT_EQ(never.node_lost_after.count(), 0);
}

// Tests that the node name defaults to the hostname, a bad one is refused by name, and the volume
// root is created.
TEST(PopulatorAppTest, CheckFillsNodeAndCreatesRoot) {
  const fs::path root = fs::temp_directory_path() / "populator_app_test" / "volumes";
  fs::remove_all(root.parent_path());
  PopulatorSettings s;
  s.volume_root = root.string();
  ASSERT_TRUE(CheckPopulatorSettings(s).ok());
  EXPECT_FALSE(s.node_name.empty());
  EXPECT_TRUE(fs::is_directory(root));
  PopulatorSettings bad;
  bad.volume_root = root.string();
  bad.node_name = "node>a";  // ">" would be a NATS wildcard in its subjects
  absl::Status st = CheckPopulatorSettings(bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("node-name"), std::string::npos) << st;
  fs::remove_all(root.parent_path());
}

}  // namespace
}  // namespace wisp::populator
