#include "wisp/jwt/upload.hpp"

#include <gtest/gtest.h>

namespace wisp::jwt {
namespace {

// Tests that the claims of a grant read back as the same grant.
TEST(UploadClaimsTest, RoundTrips) {
  auto claims = UploadClaims({.volume_id = "v-0123", .name = "disk", .namespace_ = "ns"});
  EXPECT_EQ(claims["aud"][0], kUploadAudience);
  auto grant = UploadGrantFromClaims(claims);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->volume_id, "v-0123");
  EXPECT_EQ(grant->name, "disk");
  EXPECT_EQ(grant->namespace_, "ns");
}

// Tests that a token without the upload claim, or with a sub for another volume, is refused.
TEST(UploadClaimsTest, RefusesOtherTokens) {
  nlohmann::json sa = {{"sub", "system:serviceaccount:ns:sa"}, {"aud", {kUploadAudience}}};
  auto none = UploadGrantFromClaims(sa);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(none.status().message().find(kUploadClaim), std::string::npos);
  auto claims = UploadClaims({.volume_id = "v-1"});
  claims["sub"] = "wisp:upload:v-2";
  EXPECT_EQ(UploadGrantFromClaims(claims).status().code(), absl::StatusCode::kUnauthenticated);
  claims = UploadClaims({.volume_id = ""});
  EXPECT_EQ(UploadGrantFromClaims(claims).status().code(), absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace wisp::jwt
