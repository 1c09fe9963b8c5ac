#include "wisp/jwt/seal.hpp"

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "wisp/jwt/base64url.hpp"

namespace wisp::jwt {
namespace {

// Tests that sealed data opens with the same KEK and aad.
TEST(SealTest, RoundTrips) {
  Kek kek = Kek::Random();
  auto sealed = Seal(kek, "secret pem", "kid-1");
  ASSERT_TRUE(sealed.ok());
  EXPECT_EQ(sealed->find("secret"), std::string::npos);
  auto opened = Open(kek, *sealed, "kid-1");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(*opened, "secret pem");
}

// Tests that a wrong KEK, another aad or a flipped bit are refused as PermissionDenied.
TEST(SealTest, RefusesWrongKekAadOrTamper) {
  Kek kek = Kek::Random();
  auto sealed = *Seal(kek, "secret pem", "kid-1");
  EXPECT_EQ(Open(Kek::Random(), sealed, "kid-1").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Open(kek, sealed, "kid-2").status().code(), absl::StatusCode::kPermissionDenied);
  std::string tampered = sealed;
  tampered[15] ^= 1;
  EXPECT_EQ(Open(kek, tampered, "kid-1").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Open(kek, "short", "kid-1").status().code(), absl::StatusCode::kInvalidArgument);
}

// Tests that a KEK reads from raw, hex and base64 text and refuses anything else.
TEST(SealTest, ReadsKekForms) {
  const std::string raw(32, 'k');
  std::string hex;
  for (unsigned char c : raw) {
    char b[3];
    std::snprintf(b, sizeof(b), "%02x", c);
    hex += b;
  }
  auto a = Kek::FromText(raw);
  auto b = Kek::FromText(hex + "\n");
  auto c = Kek::FromText(Base64Encode(raw) + "\n");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->bytes(), b->bytes());
  EXPECT_EQ(a->bytes(), c->bytes());
  EXPECT_EQ(a->Id().size(), 16u);
  EXPECT_FALSE(Kek::FromText("too short").ok());
}

// Tests that a missing or malformed KEK file gives an error naming the file, not its content.
TEST(SealTest, KekFileErrorsNameTheFile) {
  EXPECT_EQ(Kek::FromFile("/nonexistent/kek").status().code(), absl::StatusCode::kNotFound);
  const std::string path = ::testing::TempDir() + "/bad_kek";
  std::ofstream(path) << "not-a-key-content";
  auto kek = Kek::FromFile(path);
  ASSERT_FALSE(kek.ok());
  const std::string msg(kek.status().message());
  EXPECT_NE(msg.find(path), std::string::npos);
  EXPECT_EQ(msg.find("not-a-key-content"), std::string::npos);
}

}  // namespace
}  // namespace wisp::jwt
