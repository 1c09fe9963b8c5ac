#include "token_app.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace wisp::token {
namespace {

namespace fs = std::filesystem;

class TokenAppTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("token_app_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  absl::Status Parse(std::vector<const char*> args, TokenSettings& settings) {
    config::Flags flags("wisp-token", "test");
    AddTokenFlags(flags, settings);
    args.insert(args.begin(), "wisp-token");
    return flags.Parse(static_cast<int>(args.size()), args.data());
  }
  fs::path dir_;
};

// Tests that the key-encryption key is required and read before anything starts.
TEST_F(TokenAppTest, RequiresAReadableKek) {
  TokenSettings s;
  ASSERT_TRUE(Parse({}, s).ok());
  auto missing = CheckTokenSettings(s);
  EXPECT_EQ(missing.status(), absl::InvalidArgumentError("key-encryption-key-file: required"));
  s.kek_file = (dir_ / "absent").string();
  EXPECT_EQ(CheckTokenSettings(s).status().code(), absl::StatusCode::kInvalidArgument);
  s.kek_file = Write("kek", std::string(64, 'a'));  // 32 bytes in hex
  EXPECT_TRUE(CheckTokenSettings(s).ok()) << CheckTokenSettings(s).status();
}

// Tests that a policy file that does not load fails the start, naming the problem.
TEST_F(TokenAppTest, RefusesABadPolicyFile) {
  TokenSettings s;
  s.kek_file = Write("kek", std::string(64, 'a'));
  s.policy_file = Write("policy.yaml", "maxExpirationSeconds: [not, a, number]\n");
  EXPECT_FALSE(CheckTokenSettings(s).ok());
  s.policy_file = Write("good.yaml", "maxExpirationSeconds: 3600\n");
  EXPECT_TRUE(CheckTokenSettings(s).ok()) << CheckTokenSettings(s).status();
}

// Tests the flags' defaults and their checks.
TEST_F(TokenAppTest, FlagsAndDefaults) {
  TokenSettings s;
  ASSERT_TRUE(Parse({"--algorithm", "ES256", "--key-rotation-period", "1h"}, s).ok());
  EXPECT_EQ(s.algorithm, "ES256");
  EXPECT_EQ(s.rotation, std::chrono::hours(1));
  EXPECT_EQ(s.issuer_url, "https://localhost:8443");
  EXPECT_EQ(s.leeway, std::chrono::seconds(60));
  TokenSettings t;
  EXPECT_FALSE(Parse({"--key-rotation-period", "5s"}, t).ok());
  EXPECT_FALSE(Parse({"--algorithm", "HS256"}, t).ok());
}

// Tests --key-publish-ahead: default 0 (half the rotation period), and refused when it is not below
// the rotation period, naming both settings.
TEST_F(TokenAppTest, PublishAheadMustBeBelowTheRotationPeriod) {
  TokenSettings s;
  ASSERT_TRUE(Parse({}, s).ok());
  EXPECT_EQ(s.publish_ahead, std::chrono::milliseconds(0));
  s.kek_file = Write("kek", std::string(64, 'a'));
  ASSERT_TRUE(Parse({"--key-rotation-period", "1h", "--key-publish-ahead", "10m"}, s).ok());
  EXPECT_TRUE(CheckTokenSettings(s).ok()) << CheckTokenSettings(s).status();
  ASSERT_TRUE(Parse({"--key-publish-ahead", "1h"}, s).ok());
  EXPECT_EQ(CheckTokenSettings(s).status(),
            absl::InvalidArgumentError("key-publish-ahead: 1h must be less than "
                                       "key-rotation-period (1h): the next key is published while "
                                       "the active one still signs"));
  TokenSettings t;
  EXPECT_FALSE(Parse({"--key-publish-ahead", "-5s"}, t).ok());
}

}  // namespace
}  // namespace wisp::token
