#include "wisp/policy/registry.hpp"

#include <gtest/gtest.h>

#include <set>

#include "test_util.hpp"

namespace wisp::policy {
namespace {

// Tests that the kind list the gateway answers with is the registry's, in its order.
TEST(RegistryTest, AdmittedKindsText) {
  EXPECT_EQ(AdmittedKindsText(),
            "v1 Pod, v1 PersistentVolumeClaim, kubevirt.io VirtualMachineInstance, "
            "cdi.kubevirt.io DataVolume, wisp.dev VolumeImportSource");
}

// Tests that every listed kind is found, by group and kind, and admitted unless listed as not;
// nothing else is.
TEST(RegistryTest, FindsListedKindsOnly) {
  for (const KindRules& k : Kinds()) {
    SCOPED_TRACE(std::string(k.group) + " " + std::string(k.kind));
    EXPECT_EQ(IsAdmittedKind(k.group, k.kind), k.admitted);
    EXPECT_EQ(FindKind(k.group, k.kind), &k);
    EXPECT_FALSE(k.mutate.empty() && k.validate.empty());
  }
  EXPECT_FALSE(IsAdmittedKind("apps", "Deployment"));
  EXPECT_FALSE(IsAdmittedKind("kubevirt.io", "Pod"));  // the group counts
  EXPECT_EQ(FindKind("", "ConfigMap"), nullptr);
  // CDI's VolumeImportSource: its rules run on stored objects; no webhook sends it.
  ASSERT_NE(FindKind("cdi.kubevirt.io", "VolumeImportSource"), nullptr);
  EXPECT_FALSE(IsAdmittedKind("cdi.kubevirt.io", "VolumeImportSource"));
  EXPECT_TRUE(IsAdmittedKind("wisp.dev", "VolumeImportSource"));
}

// Tests that every rule has a name and a function, and that a name is not reused across paths
// of one kind.
TEST(RegistryTest, RulesAreComplete) {
  for (const KindRules& k : Kinds()) {
    std::set<std::string_view> names;
    for (const auto* list : {&k.mutate, &k.validate}) {
      for (const Rule& r : *list) {
        SCOPED_TRACE(std::string(k.kind) + " " + std::string(r.name));
        EXPECT_FALSE(r.name.empty());
        EXPECT_NE(r.evaluate, nullptr);
        EXPECT_TRUE(names.insert(r.name).second);
      }
    }
  }
}

// Tests that the validate path runs exactly the rules the registry lists for the kind (each
// reports an outcome), and that a kind not listed runs none.
TEST(RegistryTest, ValidateRunsTheKindsRules) {
  const std::string object = R"({"metadata":{"name":"x"},"spec":{}})";
  for (const KindRules& k : Kinds()) {
    SCOPED_TRACE(std::string(k.kind));
    AdmissionInput in = testing::Input(std::string(k.group), std::string(k.kind), "CREATE", object);
    Verdict v = EvaluateValidate(in, Policy{}, testing::NoRecords());
    std::set<std::string> expected, got;
    for (const Rule& r : k.validate) expected.emplace(r.name);
    for (const auto& [rule, outcome] : v.rule_outcomes) got.insert(rule);
    EXPECT_EQ(got, expected);
  }
  AdmissionInput other = testing::Input("apps", "Deployment", "CREATE", object);
  EXPECT_TRUE(EvaluateValidate(other, Policy{}, testing::NoRecords()).rule_outcomes.empty());
  EXPECT_TRUE(EvaluateMutate(other, Policy{}, testing::NoRecords()).rule_outcomes.empty());
}

// Tests that the mutate path of a pod runs the pod's mutate rules in the registry's order.
TEST(RegistryTest, MutateRunsThePodRules) {
  AdmissionInput pod = testing::Pod(R"({"metadata":{"name":"p"},"spec":{"containers":[]}})");
  Verdict v = EvaluateMutate(pod, Policy{}, testing::NoRecords());
  std::set<std::string> got;
  for (const auto& [rule, outcome] : v.rule_outcomes) got.insert(rule);
  std::set<std::string> expected;
  for (const Rule& r : FindKind("", "Pod")->mutate) expected.emplace(r.name);
  EXPECT_EQ(got, expected);
}

}  // namespace
}  // namespace wisp::policy
