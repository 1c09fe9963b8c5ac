#include "admit.hpp"

#include <gtest/gtest.h>

#include "wisp/policy/rules.hpp"

namespace wisp::wispctl {
namespace {

using k8s::Json;

// Tests that YAML scalars get their YAML 1.2 core types and quoted ones stay strings.
TEST(AdmitTest, ParsesManifestsWithTypes) {
  auto docs = ParseManifests(R"(
apiVersion: v1
kind: Pod
metadata:
  annotations: {wisp.dev/token-sidecar: "true", n: "3600"}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 30
  x: 0.5
  y: ~
  z: 0755
---
{"apiVersion": "v1", "kind": "PersistentVolumeClaim"}
)");
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 2u);
  const Json& pod = (*docs)[0];
  EXPECT_EQ(pod["metadata"]["annotations"]["wisp.dev/token-sidecar"], "true");
  EXPECT_EQ(pod["metadata"]["annotations"]["n"], "3600");
  EXPECT_EQ(pod["spec"]["hostNetwork"], true);
  EXPECT_EQ(pod["spec"]["terminationGracePeriodSeconds"], 30);
  EXPECT_EQ(pod["spec"]["x"], 0.5);
  EXPECT_TRUE(pod["spec"]["y"].is_null());
  EXPECT_EQ(pod["spec"]["z"], "0755");
  EXPECT_EQ((*docs)[1]["kind"], "PersistentVolumeClaim");
  // What ToYaml writes reads back as the same JSON.
  auto again = ParseManifests(ToYaml(pod));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0], pod);
  EXPECT_FALSE(ParseManifests("- a\n- b\n").ok());
  EXPECT_FALSE(ParseManifests("a: [1, 2").ok());
}

// Tests that strings a YAML 1.1 reader (PyYAML, kubectl's go-yaml) would take for numbers or
// booleans are written quoted: a CSI fileMode "0600" must stay a string.
TEST(AdmitTest, QuotesStringsYaml11ReadsAsOtherTypes) {
  const Json attrs = {{"fileMode", "0600"}, {"on", "off"}, {"v", "2.17.0"}, {"plain", "token"}};
  const std::string yaml = ToYaml(attrs);
  EXPECT_NE(yaml.find("fileMode: \"0600\""), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("on: \"off\""), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("plain: token"), std::string::npos) << yaml;
  auto again = ParseManifests(yaml);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0], attrs);
}

// Tests that a pod's call carries the annotations of its ServiceAccount when an earlier
// document is that ServiceAccount, and not another namespace's of the same name.
TEST(AdmitTest, PodCallCarriesItsServiceAccountsAnnotations) {
  auto docs = ParseManifests(R"(
apiVersion: v1
kind: ServiceAccount
metadata: {name: s3-reader, namespace: other, annotations: {x: "1"}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: s3-reader, namespace: apps, annotations: {eks.amazonaws.com/role-arn: a}}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: apps}
spec: {serviceAccountName: s3-reader, containers: [{name: app, image: busybox}]}
---
apiVersion: v1
kind: Pod
metadata: {name: q, namespace: apps}
spec: {containers: [{name: app, image: busybox}]}
)");
  ASSERT_TRUE(docs.ok()) << docs.status();
  std::vector<v1::AdmissionCall> calls;
  Decider decide = [&](const v1::AdmissionCall& call,
                       bool) -> absl::StatusOr<v1::AdmissionVerdict> {
    calls.push_back(call);
    v1::AdmissionVerdict v;
    v.set_allowed(true);
    return v;
  };
  AdmitManifests(*docs, {}, decide);
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_TRUE(calls[2].service_account_found());
  ASSERT_EQ(calls[2].service_account_annotations().size(), 1u);
  EXPECT_EQ(calls[2].service_account_annotations().at("eks.amazonaws.com/role-arn"), "a");
  EXPECT_FALSE(calls[3].service_account_found()) << "no ServiceAccount default in apps";
}

// Tests the local run: a VMI gets its token annotation, and its launcher pod (carrying the
// annotation, as virt-controller copies it) the token volume; a denial sets all_allowed false.
TEST(AdmitTest, LocalRunAdmitsVmiAndLauncherPod) {
  auto docs = ParseManifests(R"(
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: s3-vm, namespace: vms}
spec:
  domain: {devices: {filesystems: [{name: irsa, virtiofs: {}}]}}
  volumes:
  - name: irsa
    serviceAccount:
      serviceAccountName: s3-reader
      serviceAccountToken: {audience: sts.amazonaws.com, expirationSeconds: 3600, path: token}
---
apiVersion: v1
kind: Pod
metadata:
  name: virt-launcher-s3-vm-x
  namespace: vms
  labels: {kubevirt.io: virt-launcher}
  annotations:
    wisp.dev/token.irsa: '{"audience":"sts.amazonaws.com","expirationSeconds":3600,"path":"token"}'
  ownerReferences: [{kind: VirtualMachineInstance, name: s3-vm}]
spec:
  containers: [{name: compute, image: "launcher:1"}]
)");
  ASSERT_TRUE(docs.ok()) << docs.status();
  policy::Policy policy;
  std::map<std::string, std::string> records;
  Decider decide = [&](const v1::AdmissionCall& call,
                       bool mutate) -> absl::StatusOr<v1::AdmissionVerdict> {
    WISP_ASSIGN_OR_RETURN(policy::AdmissionInput in, policy::AdmissionInput::FromCall(call));
    policy::RecordLookup lookup =
        [&](std::string_view b, std::string_view k) -> absl::StatusOr<std::optional<std::string>> {
      auto it = records.find(std::string(b) + "/" + std::string(k));
      if (it == records.end()) return std::optional<std::string>();
      return std::optional(it->second);
    };
    policy::Verdict v = mutate ? policy::EvaluateMutate(in, policy, lookup)
                               : policy::EvaluateValidate(in, policy, lookup);
    for (const auto& w : v.writes) records[w.bucket + "/" + w.key] = w.value;
    return policy::ToProto(v);
  };
  AdmitResult result = AdmitManifests(*docs, {.validate = true}, decide);
  EXPECT_TRUE(result.all_allowed) << result.output;
  EXPECT_NE(result.output.find("wisp.dev/token.irsa"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("virtiofs-irsa"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("--translate-uid=host:107:0:1"), std::string::npos);

  (*docs)[0]["spec"]["volumes"][0]["serviceAccount"]["serviceAccountToken"]["expirationSeconds"] =
      300;
  records.clear();
  AdmitResult denied = AdmitManifests({(*docs)[0]}, {.validate = true}, decide);
  EXPECT_FALSE(denied.all_allowed);
  EXPECT_NE(denied.output.find("may not specify a duration less than 10 minutes"),
            std::string::npos)
      << denied.output;
}

}  // namespace
}  // namespace wisp::wispctl
