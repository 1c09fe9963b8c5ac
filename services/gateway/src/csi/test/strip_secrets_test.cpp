#include "csi/strip_secrets.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "csi/csi.pb.h"

namespace wisp::gateway::csi {
namespace {
using ::testing::HasSubstr;
using ::testing::Not;

// Tests that csi_secret maps and the kubelet token map are stripped and everything else is kept.
TEST(StripSecretsTest, StripsMarkedSecretsAndServiceAccountTokens) {
  ::csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id("vol-1");
  req.set_target_path("/var/lib/kubelet/pods/p/volumes/v/mount");
  (*req.mutable_secrets())["password"] = "hunter2";
  (*req.mutable_volume_context())["audience"] = "vault";
  (*req.mutable_volume_context())[kServiceAccountTokensKey] =
      R"({"vault":{"token":"eyJhbGciOiJSUzI1NiJ9.secret","expirationTimestamp":"2026-12-02T15:00:00Z"}})";
  const std::string out = StripSecrets(req);
  EXPECT_THAT(out, Not(HasSubstr("hunter2")));
  EXPECT_THAT(out, Not(HasSubstr("eyJhbGci")));
  EXPECT_THAT(out, HasSubstr("vol-1"));
  EXPECT_THAT(out, HasSubstr("vault"));
  EXPECT_THAT(out, HasSubstr(kStripped));
  // The original is untouched.
  EXPECT_EQ(req.secrets().at("password"), "hunter2");
}

// Tests that secrets nested in other messages' maps are stripped too.
TEST(StripSecretsTest, StripsControllerSecrets) {
  ::csi::v1::CreateVolumeRequest req;
  req.set_name("pvc-1");
  (*req.mutable_secrets())["token"] = "s3cr3t";
  (*req.mutable_parameters())["size"] = "1Gi";
  const std::string out = StripSecrets(req);
  EXPECT_THAT(out, Not(HasSubstr("s3cr3t")));
  EXPECT_THAT(out, HasSubstr("1Gi"));
  EXPECT_THAT(out, HasSubstr("pvc-1"));
}

}  // namespace
}  // namespace wisp::gateway::csi
