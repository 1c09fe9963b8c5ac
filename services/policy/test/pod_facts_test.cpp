#include "wisp/policy/pod_facts.hpp"

#include <gtest/gtest.h>

#include "wisp/k8s/json.hpp"

namespace wisp::policy {
namespace {

using Shape = PodFacts::Shape;

// Tests that the facts are what k8s/objects.hpp would read from nlohmann's tree of the same text:
// mistyped members read as absent, a later duplicate key wins, order is kept.
TEST(PodFactsTest, ReadsAsTheTreeReaders) {
  auto pod = ReadPodFacts(R"({"metadata":{"namespace":"ml",
      "annotations":{"a":"1","b":2,"c":"x","c":"y","d":"z","d":null},"labels":{"kubevirt.io":"virt-launcher"}},
    "spec":{"hostNetwork":"yes","hostNetwork":true,
      "containers":[{"name":"main","image":"m:1","volumeMounts":[{"name":"v","mountPath":"/v"},{"name":3}],
                     "env":[{"name":"A"},{"value":"x"}],
                     "securityContext":{"runAsUser":65534,"runAsGroup":"65534"}},
                    "oops",
                    {"name":"side","env":{},"volumeMounts":null}],
      "volumes":[7,{"name":"s","emptyDir":null},
                 {"name":"d","csi":{"driver":"csi.wisp.dev","volumeAttributes":{"identityProvider":"idp"}}}]}})",
                          "object_json");
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->namespace_name, "ml");
  ASSERT_NE(pod->Annotation("a"), nullptr);
  EXPECT_EQ(*pod->Annotation("a"), "1");
  EXPECT_EQ(pod->Annotation("b"), nullptr);
  EXPECT_EQ(*pod->Annotation("c"), "y");
  EXPECT_EQ(pod->Annotation("d"), nullptr);
  EXPECT_EQ(*pod->Label("kubevirt.io"), "virt-launcher");
  EXPECT_TRUE(pod->host_network);
  EXPECT_EQ(pod->spec_shape, Shape::kExpected);
  EXPECT_EQ(pod->init_containers_shape, Shape::kAbsent);
  ASSERT_EQ(pod->containers.size(), 3u);
  const auto& main = pod->containers[0];
  EXPECT_EQ(main.name, "main");
  EXPECT_EQ(main.image, "m:1");
  EXPECT_EQ(main.run_as_user, 65534);
  EXPECT_EQ(main.run_as_group, std::nullopt);
  ASSERT_EQ(main.volume_mounts.size(), 2u);
  EXPECT_EQ(main.volume_mounts[0].mount_path, "/v");
  EXPECT_EQ(main.volume_mounts[1].name, "");
  EXPECT_EQ(main.env_names, (std::vector<std::string>{"A", ""}));
  EXPECT_FALSE(pod->containers[1].is_object);
  EXPECT_EQ(pod->containers[2].env_shape, Shape::kOther);
  EXPECT_EQ(pod->containers[2].volume_mounts_shape, Shape::kOther);
  ASSERT_EQ(pod->volumes.size(), 2u);  // the number cannot be named
  EXPECT_TRUE(pod->volumes[0].empty_dir);
  EXPECT_EQ(pod->volumes[1].identity_provider, "idp");
  EXPECT_TRUE(pod->HasVolume("d"));
  EXPECT_FALSE(pod->HasVolume("x"));
}

// Tests that bad input is refused with k8s::ParseJson's message, and that what only nlohmann
// reads (an integer beyond 64 bits) is still read.
TEST(PodFactsTest, RefusesWhatParseJsonRefuses) {
  const std::string bad = R"({"metadata":{"name":"p"},)";
  auto facts = ReadPodFacts(bad, "object_json");
  auto tree = k8s::ParseJson(bad, "object_json");
  ASSERT_FALSE(facts.ok());
  ASSERT_FALSE(tree.ok());
  EXPECT_EQ(facts.status(), tree.status());
  EXPECT_EQ(ReadPodFacts("[1]", "object_json").status().message(), "object_json is not an object");

  auto big = ReadPodFacts(
      R"({"metadata":{"annotations":{"a":"b"}},"spec":{"n":123456789012345678901234567890,
        "hostNetwork":true}})",
      "object_json");
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_TRUE(big->host_network);
  EXPECT_EQ(*big->Annotation("a"), "b");

  auto absent = ReadPodFacts(R"({"spec":[]})", "object_json");
  ASSERT_TRUE(absent.ok());
  EXPECT_EQ(absent->spec_shape, Shape::kOther);
  EXPECT_EQ(ReadPodFacts("{}", "object_json")->spec_shape, Shape::kAbsent);
}

}  // namespace
}  // namespace wisp::policy
