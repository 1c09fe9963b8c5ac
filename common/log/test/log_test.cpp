#include "wisp/log/log.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

namespace wisp::log {
namespace {

// Tests that a bad level or format is rejected with the setting's name.
TEST(LogTest, RejectsBadOptions) {
  auto s = Init({.service = "t", .level = "loud", .format = "text"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("log-level"), std::string::npos);
  s = Init({.service = "t", .level = "info", .format = "xml"});
  EXPECT_NE(std::string(s.message()).find("log-format"), std::string::npos);
  EXPECT_TRUE(Init({.service = "t", .level = "off", .format = "json"}).ok());
}

// Tests that JSON lines are escaped and carry the request id while one is set.
TEST(LogTest, JsonLinesCarryRequestId) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  ASSERT_TRUE(Init({.service = "wisp-test", .level = "info", .format = "json", .sink = sink}).ok());
  auto logger = Get("unit");
  {
    ScopedRequestId rid("uid-1");
    SPDLOG_LOGGER_INFO(logger, "say \"{}\"", "hi");
  }
  SPDLOG_LOGGER_INFO(logger, "after");
  logger->flush();
  const std::string text = out.str();
  EXPECT_NE(text.find("\"rid\":\"uid-1\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"msg\":\"say \\\"hi\\\"\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"service\":\"wisp-test\""), std::string::npos) << text;
  // The second line has no request id.
  auto second = text.substr(text.find('\n') + 1);
  EXPECT_EQ(second.find("rid"), std::string::npos) << second;
}

// Tests that nested request ids restore the outer one.
TEST(LogTest, RequestIdsNest) {
  ScopedRequestId outer("a");
  {
    ScopedRequestId inner("b");
    EXPECT_EQ(CurrentRequestId(), "b");
  }
  EXPECT_EQ(CurrentRequestId(), "a");
}

// Tests that Redact never echoes the secret.
TEST(LogTest, RedactHidesSecret) { EXPECT_EQ(Redact("eyJhbGciOi"), "<redacted 10 bytes>"); }

}  // namespace
}  // namespace wisp::log
