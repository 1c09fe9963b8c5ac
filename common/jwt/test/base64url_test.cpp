#include "wisp/jwt/base64url.hpp"

#include <gtest/gtest.h>

namespace wisp::jwt {
namespace {

// Tests that encoding matches RFC 4648's test vectors without padding.
TEST(Base64UrlTest, EncodesRfc4648Vectors) {
  const std::pair<const char*, const char*> cases[] = {
      {"", ""},           {"f", "Zg"},          {"fo", "Zm8"},         {"foo", "Zm9v"},
      {"foob", "Zm9vYg"}, {"fooba", "Zm9vYmE"}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [in, out] : cases) {
    SCOPED_TRACE(in);
    EXPECT_EQ(Base64UrlEncode(in), out);
    EXPECT_EQ(*Base64UrlDecode(out), in);
  }
}

// Tests that the URL-safe alphabet is used in both directions.
TEST(Base64UrlTest, UsesUrlSafeAlphabet) {
  EXPECT_EQ(Base64UrlEncode("\xfb\xff"), "-_8");
  EXPECT_EQ(*Base64UrlDecode("-_8"), "\xfb\xff");
}

// Tests that padding, foreign characters, impossible lengths and trailing bits are refused.
TEST(Base64UrlTest, RefusesNonCanonicalInput) {
  for (const char* bad : {"Zg==", "Zm+v", "Zm/v", "Z", "Zh", "Zm9 v"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(Base64UrlDecode(bad).ok());
  }
}

// Tests that standard base64 round-trips with padding.
TEST(Base64UrlTest, StandardBase64RoundTrips) {
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(*Base64Decode("Zm8="), "fo");
  EXPECT_FALSE(Base64Decode("Zm8").ok());
}

}  // namespace
}  // namespace wisp::jwt
