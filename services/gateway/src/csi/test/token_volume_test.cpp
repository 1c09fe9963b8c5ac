#include "csi/token_volume.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "csi/strip_secrets.hpp"

namespace wisp::gateway::csi {
namespace {
using ::testing::HasSubstr;

VolumeContext PodContext() {
  VolumeContext c;
  c[kEphemeralKey] = "true";
  c[kPodNamespaceKey] = "team";
  c[kPodNameKey] = "app-0";
  c[kPodUidKey] = "uid-1";
  c[kServiceAccountNameKey] = "app";
  return c;
}

// Tests the defaults of a token volume with only pod info.
TEST(TokenVolumeTest, ParsesDefaults) {
  auto spec = ParseTokenVolume(PodContext(), kMinExpirationSeconds);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->audience, "");
  EXPECT_EQ(spec->expiration_seconds, 3600);
  EXPECT_EQ(spec->path, "token");
  EXPECT_EQ(spec->file_mode, 0644u);
  EXPECT_EQ(spec->source, TokenSource::kWisp);
  EXPECT_EQ(spec->subject.namespace_(), "team");
  EXPECT_EQ(spec->subject.service_account(), "app");
  EXPECT_EQ(spec->subject.pod_uid(), "uid-1");
}

// Tests fileOwner/fileGroup (the identity presets' non-root owner) and their refusals.
TEST(TokenVolumeTest, ParsesFileOwner) {
  VolumeContext c = PodContext();
  c["fileOwner"] = "1000";
  c["fileGroup"] = "0";
  auto spec = ParseTokenVolume(c, kMinExpirationSeconds);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->file_uid, 1000u);
  EXPECT_EQ(spec->file_gid, 0u);
  for (const char* bad : {"", "-1", "root", "4294967295", "1e3"}) {
    c["fileOwner"] = bad;
    EXPECT_EQ(ParseTokenVolume(c, kMinExpirationSeconds).status().message(),
              "volume_context[fileOwner]: must be a numeric id between 0 and 4294967294, got \"" +
                  std::string(bad) + "\"");
  }
}

// Tests the gcp credential configuration written beside the token: Google's external-account
// format pointing at the token's path in the container, and the refusals naming the attribute.
TEST(TokenVolumeTest, GcpCredentialConfiguration) {
  VolumeContext c = PodContext();
  c["gcpCredentialFile"] = "credential-configuration.json";
  c["gcpAudience"] =
      "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k";
  c["gcpTokenUrl"] = "https://sts.googleapis.com/v1/token";
  c["gcpTokenPath"] = "/var/run/secrets/wisp/gcp/token";
  auto spec = ParseTokenVolume(c, kMinExpirationSeconds);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->extra_files.count("credential-configuration.json"), 1u);
  auto config = nlohmann::json::parse(spec->extra_files["credential-configuration.json"]);
  EXPECT_EQ(config["type"], "external_account");
  EXPECT_EQ(config["audience"], c["gcpAudience"]);
  EXPECT_EQ(config["subject_token_type"], "urn:ietf:params:oauth:token-type:jwt");
  EXPECT_EQ(config["token_url"], "https://sts.googleapis.com/v1/token");
  EXPECT_EQ(config["credential_source"],
            nlohmann::json::parse(
                R"({"file":"/var/run/secrets/wisp/gcp/token","format":{"type":"text"}})"));
  EXPECT_FALSE(config.contains("service_account_impersonation_url"));

  VolumeContext bad = c;
  bad["gcpTokenUrl"] = "http://sts";
  EXPECT_EQ(ParseTokenVolume(bad, kMinExpirationSeconds).status().message(),
            "volume_context[gcpTokenUrl]: must be an https URL");
  bad = c;
  bad["gcpCredentialFile"] = "token";
  EXPECT_THAT(std::string(ParseTokenVolume(bad, kMinExpirationSeconds).status().message()),
              HasSubstr("volume_context[gcpCredentialFile]: must be a file name without '/', "
                        "other than the token's"));
  bad = c;
  bad.erase("gcpCredentialFile");
  EXPECT_EQ(ParseTokenVolume(bad, kMinExpirationSeconds).status().message(),
            "volume_context[gcpAudience]: is set without gcpCredentialFile");
}

// Tests every attribute of the scenario-4 volume.
TEST(TokenVolumeTest, ParsesAttributes) {
  VolumeContext c = PodContext();
  c["audience"] = "vault";
  c["expirationSeconds"] = "900";
  c["path"] = "vault-token";
  c["fileMode"] = "0440";
  c["tokenSource"] = "kubelet";
  auto spec = ParseTokenVolume(c, kMinExpirationSeconds);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->audience, "vault");
  EXPECT_EQ(spec->expiration_seconds, 900);
  EXPECT_EQ(spec->path, "vault-token");
  EXPECT_EQ(spec->file_mode, 0440u);
  EXPECT_EQ(spec->source, TokenSource::kKubelet);
}

// Tests that each malformed attribute is refused with a message naming it.
TEST(TokenVolumeTest, RejectsMalformedAttributes) {
  struct Case {
    std::string key, value, message;
  };
  const std::vector<Case> cases = {
      {"expirationSeconds", "abc", "volume_context[expirationSeconds]: must be an integer"},
      {"expirationSeconds", "300", "may not specify a duration less than 10 minutes"},
      {"expirationSeconds", "4294967297", "may not specify a duration larger than 2^32 seconds"},
      {"path", "../etc/passwd", "volume_context[path]: invalid path: must not contain '..'"},
      {"path", "/abs", "invalid path: must be relative path: /abs"},
      {"path", "..data", "invalid path: must not start with '..': ..data"},
      {"path", "a/b", "must be a file name without '/'"},
      {"path", "", "invalid path: must not be empty"},
      {"fileMode", "999", "volume_context[fileMode]: must be an octal mode"},
      {"fileMode", "01777", "volume_context[fileMode]"},
      {"tokenSource", "vault", "volume_context[tokenSource]: must be \"wisp\" or \"kubelet\""},
      {kPodUidKey, "", "volume_context[csi.storage.k8s.io/pod.uid]: is required"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key + "=" + c.value);
    VolumeContext ctx = PodContext();
    ctx[c.key] = c.value;
    auto spec = ParseTokenVolume(ctx, kMinExpirationSeconds);
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(c.message));
  }
}

// Tests that the kubelet token for the audience is picked and its expiry parsed.
TEST(TokenVolumeTest, PicksKubeletTokenForAudience) {
  VolumeContext c = PodContext();
  c[kServiceAccountTokensKey] =
      R"({"vault":{"token":"t-vault","expirationTimestamp":"2026-12-02T15:14:05Z"},)"
      R"("":{"token":"t-default","expirationTimestamp":"2026-12-02T15:14:05.123+01:00"}})";
  auto vault = KubeletTokenFor(c, "vault");
  ASSERT_TRUE(vault.ok()) << vault.status();
  EXPECT_EQ(vault->token, "t-vault");
  EXPECT_EQ(vault->expires_unix, 1796224445);
  auto dflt = KubeletTokenFor(c, "");
  ASSERT_TRUE(dflt.ok());
  EXPECT_EQ(dflt->expires_unix, 1796224445 - 3600);
  auto missing = KubeletTokenFor(c, "sts");
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("could not find token for \"sts\""));
}

// Tests that malformed kubelet token maps are refused without echoing their content.
TEST(TokenVolumeTest, RejectsMalformedKubeletTokens) {
  for (std::string bad :
       {std::string(), std::string("not json eyJsecret"), std::string(R"({"vault":"eyJsecret"})"),
        std::string(R"({"vault":{"token":""}})")}) {
    SCOPED_TRACE(bad);
    VolumeContext c = PodContext();
    if (!bad.empty()) c[kServiceAccountTokensKey] = bad;
    auto t = KubeletTokenFor(c, "vault");
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(kServiceAccountTokensKey));
    EXPECT_THAT(std::string(t.status().message()), ::testing::Not(HasSubstr("eyJsecret")));
  }
}

// Tests kubelet's refresh rule: 80% of the lifetime, capped at 24h, minus jitter.
TEST(TokenVolumeTest, NextRotationFollowsKubeletRule) {
  const int64_t iat = 1'800'000'000;
  EXPECT_EQ(NextRotationUnix(iat, iat + 3600, std::chrono::milliseconds(0)), iat + 2880);
  EXPECT_EQ(NextRotationUnix(iat, iat + 900, std::chrono::milliseconds(0)), iat + 720);
  EXPECT_EQ(NextRotationUnix(iat, iat + 48 * 3600, std::chrono::milliseconds(0)), iat + 24 * 3600);
  EXPECT_EQ(NextRotationUnix(iat, iat + 3600, std::chrono::milliseconds(9500)), iat + 2870);
  EXPECT_EQ(MaxJitterFor(3600), std::chrono::seconds(10));
  EXPECT_EQ(MaxJitterFor(20), std::chrono::milliseconds(1000));
}

// Tests RFC 3339 parsing, offsets and rejects.
TEST(TokenVolumeTest, ParsesRfc3339) {
  EXPECT_EQ(*ParseRfc3339("2026-12-02T15:04:05Z"), 1796223845);
  EXPECT_EQ(*ParseRfc3339("2026-12-02T16:04:05+01:00"), 1796223845);
  EXPECT_EQ(*ParseRfc3339("2026-12-02T15:04:05.999999Z"), 1796223845);
  EXPECT_FALSE(ParseRfc3339("2026-12-02 15:04:05").ok());
  EXPECT_FALSE(ParseRfc3339("2026-12-02T15:04:05Zjunk").ok());
}

}  // namespace
}  // namespace wisp::gateway::csi
