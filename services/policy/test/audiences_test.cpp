#include <gtest/gtest.h>

#include "wisp/policy/rules.hpp"
#include "test_util.hpp"
#include "wisp/k8s/objects.hpp"

namespace wisp::policy {
namespace {

using k8s::Json;

std::string TokenPod(const std::string& audience, int64_t exp) {
  return R"({"metadata":{"name":"p"},"spec":{"serviceAccountName":"sa",
    "containers":[{"name":"app","image":"a"}],
    "volumes":[{"name":"t","projected":{"sources":[{"serviceAccountToken":{"audience":")" +
         audience + R"(","expirationSeconds":)" + std::to_string(exp) +
         R"(,"path":"token"}}]}}]}})";
}

// Tests that a pod wisp mutated (the token sidecar: three volumes added) is refused naming the
// field as the user wrote it: the validating webhook sees the mutated pod, and wisp's volumes go
// after the user's, so spec.volumes[0] is still the user's first volume.
TEST(PodTokenAudiencesTest, RefusalAfterTheSidecarNamesTheUsersIndex) {
  Policy p;
  p.audiences["ml"] = {"vault", "wisp"};
  Json pod = Json::parse(TokenPod("s3", 3600));
  pod["metadata"]["annotations"]["wisp.dev/token-sidecar"] = "true";
  pod["spec"]["hostNetwork"] = true;  // the default policy's sidecars are for hostNetwork pods
  AdmissionInput in = testing::Pod(pod.dump(), "ml");
  Verdict mutated = EvaluateTokenSidecar(in, p);
  ASSERT_TRUE(mutated.allowed) << mutated.message;
  Json out = testing::Apply(in, mutated);
  ASSERT_EQ(out["spec"]["volumes"].size(), 4u);
  Verdict v = EvaluatePodTokenAudiences(testing::Pod(out.dump(), "ml"), p);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(
      v.message,
      "spec.volumes[0].projected.sources[0].serviceAccountToken.audience: Forbidden: audience "
      "\"s3\" is not allowed in namespace \"ml\" (allowed: \"vault\", \"wisp\")");
}

// Tests the namespace allow-list and the lifetime cap on every projected token source.
TEST(PodTokenAudiencesTest, AllowListAndLifetime) {
  Policy p;
  p.audiences["ml"] = {"vault"};
  p.audiences["*"] = {"wisp"};
  struct Case {
    std::string ns;
    std::string audience;
    int64_t exp;
    std::string message;  // "" = allowed
  } cases[] = {
      {"ml", "vault", 3600, ""},
      {"ml", "wisp", 3600,
       "spec.volumes[0].projected.sources[0].serviceAccountToken.audience: Forbidden: audience "
       "\"wisp\" is not allowed in namespace \"ml\" (allowed: \"vault\")"},
      {"other", "wisp", 3600, ""},
      {"other", "vault", 3600,
       "spec.volumes[0].projected.sources[0].serviceAccountToken.audience: Forbidden: audience "
       "\"vault\" is not allowed in namespace \"other\" (allowed: \"wisp\")"},
      {"ml", "", 3600, ""},  // the API server's own audience
      {"ml", "vault", 90000,
       "spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid "
       "value: 90000: may not specify a duration larger than the policy's maximum token lifetime "
       "of 86400 seconds"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.ns + " " + c.audience);
    Verdict v = EvaluatePodTokenAudiences(testing::Pod(TokenPod(c.audience, c.exp), c.ns), p);
    EXPECT_EQ(v.allowed, c.message.empty());
    EXPECT_EQ(v.message, c.message);
    if (!c.message.empty()) {
      EXPECT_EQ(v.code, 403);
    }
  }
  // No list at all: unrestricted.
  EXPECT_TRUE(
      EvaluatePodTokenAudiences(testing::Pod(TokenPod("anything", 3600), "x"), Policy{}).allowed);
}

// Tests that wisp CSI token volumes are held to the same list through their attributes.
TEST(PodTokenAudiencesTest, WispCsiVolumeAttributes) {
  Policy p;
  p.audiences["*"] = {"vault"};
  auto pod = [](const std::string& attrs) {
    return testing::Pod(R"({"metadata":{"name":"p"},"spec":{"containers":[{"name":"a","image":"a"}],
      "volumes":[{"name":"v","csi":{"driver":"csi.wisp.dev","volumeAttributes":{)" +
                            attrs + R"(}}}]}})",
                        "team");
  };
  EXPECT_TRUE(
      EvaluatePodTokenAudiences(pod(R"("audience":"vault","expirationSeconds":"900")"), p).allowed);
  EXPECT_EQ(EvaluatePodTokenAudiences(pod(R"("audience":"s3")"), p).message,
            "spec.volumes[0].csi.volumeAttributes.audience: Forbidden: audience \"s3\" is not "
            "allowed in namespace \"team\" (allowed: \"vault\")");
  EXPECT_EQ(
      EvaluatePodTokenAudiences(pod(R"("audience":"vault","expirationSeconds":"300")"), p).message,
      "spec.volumes[0].csi.volumeAttributes.expirationSeconds: Invalid value: 300: may not "
      "specify a duration less than 10 minutes");
  EXPECT_EQ(
      EvaluatePodTokenAudiences(pod(R"("audience":"vault","expirationSeconds":"1h")"), p).message,
      "spec.volumes[0].csi.volumeAttributes.expirationSeconds: Invalid value: \"1h\": must be "
      "a whole number of seconds");
}

// Tests that causes name the volume and source by their index in the pod, elements the rule
// skips included, and that the answer is the same with the pod's tree deferred (as wisp-policy
// reads pods).
TEST(PodTokenAudiencesTest, FieldsNameTheirIndex) {
  Policy p;
  p.audiences["*"] = {"wisp"};
  auto in = testing::Pod(R"({"metadata":{"name":"p"},"spec":{"containers":[{"name":"a"}],
    "volumes":[7,{"name":"t","projected":{"sources":[{"configMap":{"name":"c"}},
      {"serviceAccountToken":{"audience":"bad","expirationSeconds":3600,"path":"t"}}]}},
      {"name":"c","csi":{"driver":"csi.wisp.dev","volumeAttributes":{"audience":"wisp",
        "expirationSeconds":"60"}}}]}})",
                         "ml");
  Verdict v = EvaluatePodTokenAudiences(in, p);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.code, 403);
  EXPECT_EQ(v.message,
            "spec.volumes[1].projected.sources[1].serviceAccountToken.audience: Forbidden: "
            "audience \"bad\" is not allowed in namespace \"ml\" (allowed: \"wisp\"), "
            "spec.volumes[2].csi.volumeAttributes.expirationSeconds: Invalid value: 60: may not "
            "specify a duration less than 10 minutes");
  auto deferred = AdmissionInput::FromCall(in.call, in.now_unix, AdmissionInput::PodTree::kDefer);
  ASSERT_TRUE(deferred.ok()) << deferred.status();
  Verdict d = EvaluateValidate(*deferred, p, testing::NoRecords());
  EXPECT_EQ(d.message, v.message);
  EXPECT_TRUE(deferred->object.is_null());
}

// Tests that the mutate path records in the audit log which ServiceAccount annotations the
// gateway delivered (keys, sorted), and nothing when it found no ServiceAccount.
TEST(DispatchTest, AuditsTheServiceAccountAnnotationsItWasGiven) {
  auto in = testing::Pod(R"({"metadata":{"name":"p"},"spec":{"containers":[{"name":"a"}]}})");
  EXPECT_EQ(EvaluateMutate(in, Policy{}, testing::NoRecords())
                .audit_annotations.count("serviceaccount-annotations"),
            0u);
  in.call.set_service_account_found(true);
  EXPECT_EQ(EvaluateMutate(in, Policy{}, testing::NoRecords())
                .audit_annotations.at("serviceaccount-annotations"),
            "(none)");
  (*in.call.mutable_service_account_annotations())["eks.amazonaws.com/role-arn"] = "arn:x";
  (*in.call.mutable_service_account_annotations())["azure.workload.identity/client-id"] = "c";
  EXPECT_EQ(EvaluateMutate(in, Policy{}, testing::NoRecords())
                .audit_annotations.at("serviceaccount-annotations"),
            "azure.workload.identity/client-id,eks.amazonaws.com/role-arn");
}

// Tests that the mutate path chains rules and the validate path dispatches by kind.
TEST(DispatchTest, MutateAndValidate) {
  auto in =
      testing::Pod(R"({"metadata":{"name":"p","annotations":{"wisp.dev/token-sidecar":"true"}},
    "spec":{"hostNetwork":true,"containers":[{"name":"app","image":"a"}]}})");
  Verdict m = EvaluateMutate(in, Policy{}, testing::NoRecords());
  EXPECT_TRUE(m.allowed);
  EXPECT_EQ(m.rule_outcomes.at("token_sidecar"), "mutated");
  EXPECT_EQ(m.rule_outcomes.at("virt_launcher"), "skipped");
  Json out = testing::Apply(in, m);
  // The mutated pod passes validation under a policy allowing the injected audience.
  Policy p;
  p.audiences["*"] = {"wisp"};
  Verdict val = EvaluateValidate(testing::Rerun(in, out), p, testing::NoRecords());
  EXPECT_TRUE(val.allowed) << val.message;
  EXPECT_EQ(val.rule_outcomes.at("pod_token_audiences"), "allowed");
  v1::AdmissionVerdict proto = ToProto(m);
  EXPECT_TRUE(proto.allowed());
  EXPECT_EQ(proto.patch(), m.patch);
  EXPECT_EQ(proto.rule_outcomes().at("token_sidecar"), "mutated");
}

// Tests that two mutating rules chain: the second sees the first's output, one patch covers both.
TEST(DispatchTest, ChainsTwoMutations) {
  // The launcher pod of a VMI asking for a token (the annotation virt-controller copies).
  const RecordLookup lookup = testing::NoRecords();
  auto in = testing::Pod(
      R"({"metadata":{"name":"virt-launcher-vm-x","labels":{"kubevirt.io":"virt-launcher"},
    "annotations":{"wisp.dev/token-sidecar":"true","wisp.dev/token.t":"{\"path\":\"token\"}"},
    "ownerReferences":[{"kind":"VirtualMachineInstance","name":"vm"}]},
    "spec":{"hostNetwork":true,"containers":[{"name":"compute","image":"launcher:1"}]}})",
      "vms");
  Verdict m = EvaluateMutate(in, Policy{}, lookup);
  EXPECT_EQ(m.rule_outcomes.at("token_sidecar"), "mutated");
  EXPECT_EQ(m.rule_outcomes.at("virt_launcher"), "mutated");
  Json out = testing::Apply(in, m);
  // wisp-policy defers the pod's tree; the virt-launcher rule builds it and applies the first
  // patch.
  auto deferred = AdmissionInput::FromCall(in.call, in.now_unix, AdmissionInput::PodTree::kDefer);
  ASSERT_TRUE(deferred.ok()) << deferred.status();
  EXPECT_EQ(EvaluateMutate(*deferred, Policy{}, lookup).patch, m.patch);
  EXPECT_NE(k8s::FindNamed(out["spec"]["initContainers"], "wisp-sidecar"), nullptr);
  EXPECT_NE(k8s::FindNamed(out["spec"]["containers"], "virtiofs-t"), nullptr);
  // The launcher's compute container also got the sidecar's socket (the first rule ran first).
  EXPECT_EQ(out["spec"]["containers"][0]["env"][0]["name"], "WISP_TOKEN_URL");
  EXPECT_TRUE(EvaluateMutate(testing::Rerun(in, out), Policy{}, lookup).patch.empty());
}

// Tests that a denial on the mutate path answers without a patch or an object, also when the
// rule edits the pod in place (a user-declared sidecar with an unparsable image is refused before
// it is removed).
TEST(DispatchTest, DenialCarriesNoPatch) {
  Verdict m = EvaluateMutate(
      testing::Pod(R"({"metadata":{"name":"p","annotations":{"wisp.dev/token-sidecar":"true"}},
        "spec":{"hostNetwork":true,"containers":[{"name":"app","image":"app:1"},
                                                 {"name":"wisp-sidecar","image":"Bad Image"}]}})"),
      Policy{}, testing::NoRecords());
  EXPECT_FALSE(m.allowed);
  EXPECT_EQ(m.rule_outcomes.at("token_sidecar"), "denied");
  EXPECT_TRUE(m.patch.empty()) << m.patch;
  EXPECT_FALSE(m.mutated.has_value());
}

}  // namespace
}  // namespace wisp::policy
