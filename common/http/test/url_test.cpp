#include "wisp/http/url.hpp"

#include <gtest/gtest.h>

namespace wisp::http {
namespace {

// Tests the split, the defaults, and that user information is kept apart from the host.
TEST(UrlTest, SplitsAndKeepsUserInfoApart) {
  auto u = ParseUrl("HTTPS://user:pw@[::1]:8443/v1/token?x=1#frag", "sts-url");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->user_info, "user:pw");
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, "8443");
  EXPECT_EQ(u->target, "/v1/token?x=1");
  EXPECT_EQ(ParseUrl("http://h")->port, "80");
  EXPECT_EQ(ParseUrl("https://h?q")->target, "/?q");
  EXPECT_TRUE(ParseUrl("https://h/")->user_info.empty());
  for (const char* bad : {"h/x", "ftp://h/x", "https://", "https://h:0/", "https://h:x/"}) {
    SCOPED_TRACE(bad);
    auto st = ParseUrl(bad, "sts-url").status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(st.message()).rfind("sts-url: ", 0), 0u) << st.message();
  }
}

}  // namespace
}  // namespace wisp::http
