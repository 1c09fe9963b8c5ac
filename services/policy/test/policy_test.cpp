#include "wisp/policy/policy.hpp"

#include <gtest/gtest.h>

namespace wisp::policy {
namespace {

// Tests that an empty policy gives the upstream defaults.
TEST(PolicyTest, Defaults) {
  auto p = ParsePolicyYaml("");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->rules.token_sidecar);
  EXPECT_EQ(p->native_sidecar, NativeSidecarMode::kAuto);
  EXPECT_EQ(p->token_volume_for, TokenVolumeFor::kHostNetwork);
  EXPECT_EQ(p->sidecar_resources.memory_limit, "256Mi");
  EXPECT_EQ(p->max_token_lifetime_seconds, 86400);
  EXPECT_EQ(p->sidecar_metrics_port, 0);  // no metrics listener unless asked
  EXPECT_EQ(AllowedAudiences(*p, "x"), nullptr);
}

// Tests that the example file in the repository parses and means what it says.
TEST(PolicyTest, ExampleFile) {
  auto p = LoadPolicyFile("config.example.policy.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->native_sidecar, NativeSidecarMode::kAuto);
  EXPECT_TRUE(AudienceAllowed(*p, "vms", "sts.amazonaws.com"));
  EXPECT_FALSE(AudienceAllowed(*p, "default", "sts.amazonaws.com"));
  EXPECT_EQ(p->max_token_lifetime_seconds, 86400);
}

// Tests a full policy and that each bad value is refused naming its key.
TEST(PolicyTest, ParsesAndNamesBadKeys) {
  auto p = ParsePolicyYaml(R"(
rules: {dataVolumes: false}
audiences: {"*": [wisp], vms: [sts.amazonaws.com]}
maxTokenLifetime: 12h
tokenSidecar:
  image: example/sidecar:1
  nativeSidecar: "off"
  tokenVolumeFor: all
  audience: pool
  expirationSeconds: 1800
  resources: {cpuRequest: 100m, memoryLimit: "0"}
  metricsPort: 9095
)");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->rules.data_volumes);
  EXPECT_EQ(p->max_token_lifetime_seconds, 43200);
  EXPECT_EQ(p->native_sidecar, NativeSidecarMode::kOff);
  EXPECT_EQ(p->token_volume_for, TokenVolumeFor::kAll);
  EXPECT_EQ(p->token_expiration_seconds, 1800);
  EXPECT_EQ(p->sidecar_resources.cpu_request, "100m");
  EXPECT_EQ(p->sidecar_resources.memory_limit, "0");
  EXPECT_EQ(p->sidecar_metrics_port, 9095);

  struct Case {
    const char* yaml;
    const char* message;
  } cases[] = {
      {"bogus: 1", "bogus: unknown key"},
      {"rules: {tokenSidecar: maybe}", "rules.tokenSidecar: \"maybe\" is not true or false"},
      {"tokenSidecar: {nativeSidecar: sometimes}",
       "tokenSidecar.nativeSidecar: \"sometimes\" is not one of auto, on, off"},
      {"tokenSidecar: {tokenVolumeFor: some}",
       "tokenSidecar.tokenVolumeFor: \"some\" is not one of hostNetwork, all"},
      {"tokenSidecar: {resources: {cpuLimit: lots}}",
       "tokenSidecar.resources.cpuLimit: \"lots\": quantities must match the regular expression "
       "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"},
      {"tokenSidecar: {metricsPort: 70000}",
       "tokenSidecar.metricsPort: \"70000\" is not a port number (0 = off)"},
      {"tokenSidecar: {metricsPort: http}",
       "tokenSidecar.metricsPort: \"http\" is not a port number (0 = off)"},
      {"maxTokenLifetime: 5m",
       "maxTokenLifetime: must be at least 10m (Kubernetes' minimum token lifetime)"},
      {"audiences: {vms: wisp}", "audiences.vms: must be a list of audiences"},
      {"tokenSidecar: {expirationSeconds: 300}",
       "tokenSidecar.expirationSeconds: may not specify a duration less than 10 minutes"},
      {"featureGates: [ContainerPathVolumes, Snapshot]",
       "featureGates: \"Snapshot\" is not one of ContainerPathVolumes, "
       "EnableVirtioFsStorageVolumes"},
      {"featureGates: ContainerPathVolumes",
       "featureGates: must be a list of KubeVirt feature gates"},
      {"[1, 2", nullptr},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    auto bad = ParsePolicyYaml(c.yaml);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    if (c.message != nullptr) {
      EXPECT_EQ(std::string(bad.status().message()), c.message);
    }
  }
}

// Tests that KubeVirt's alpha gates are off by default and named in featureGates.
TEST(PolicyTest, FeatureGates) {
  auto none = ParsePolicyYaml("");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->feature_gates.container_path_volumes);
  EXPECT_FALSE(none->feature_gates.virtiofs_storage_volumes);
  auto both = ParsePolicyYaml("featureGates: [ContainerPathVolumes, EnableVirtioFsStorageVolumes]");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE(both->feature_gates.container_path_volumes);
  EXPECT_TRUE(both->feature_gates.virtiofs_storage_volumes);
}

}  // namespace
}  // namespace wisp::policy
