#include "wisp/runtime/runtime.hpp"

#include <gtest/gtest.h>

namespace wisp::runtime {
namespace {

// Tests that comma-separated NATS URLs split, trim, and are rejected naming the setting.
TEST(RuntimeTest, ParsesNatsUrls) {
  auto urls = ParseNatsUrls("nats://a:4222, tls://b:4222,");
  ASSERT_TRUE(urls.ok());
  EXPECT_EQ(*urls, (std::vector<std::string>{"nats://a:4222", "tls://b:4222"}));
  auto bad = ParseNatsUrls("localhost:4222");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("nats-url"), std::string::npos);
  EXPECT_FALSE(ParseNatsUrls(" , ").ok());
}

// Tests that the common flags are declared with their environment names in --help.
TEST(RuntimeTest, CommonFlagsAppearInHelp) {
  CommonSettings s;
  config::Flags flags("wisp-x", "test");
  AddCommonFlags(flags, s);
  const std::string help = flags.Help();
  for (const char* want :
       {"--nats-url", "WISP_NATS_PASSWORD", "--metrics-address", "--drain-timeout"}) {
    EXPECT_NE(help.find(want), std::string::npos) << want;
  }
}

// Tests that Fail maps a bad setting to exit code 2 and anything else to 1.
TEST(RuntimeTest, FailExitCodes) {
  EXPECT_EQ(Fail("wisp-x", absl::InvalidArgumentError("--port: bad")), 2);
  EXPECT_EQ(Fail("wisp-x", absl::UnavailableError("no nats")), 1);
  EXPECT_EQ(Fail("wisp-x", absl::CancelledError("stopped")), 0);
}

}  // namespace
}  // namespace wisp::runtime
