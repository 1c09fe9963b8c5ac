#include "pod_proof.hpp"

#include <unistd.h>

#include <fstream>

#include <gtest/gtest.h>

#include "wisp/token/testing/test_env.hpp"

namespace wisp::token {
namespace {

constexpr const char* kCluster = "https://kubernetes.default.svc";

// A wisp-token whose policy requires pod proofs from a test "kube-apiserver" (a key and its JWKS
// file made here), plus a second trusted issuer that may exchange but not prove pods.
class PodProofTest : public ::testing::Test {
 protected:
  PodProofTest()
      : apiserver_(*jwt::PrivateKey::Generate(jwt::Algorithm::kES256)),
        idp_(*jwt::PrivateKey::Generate(jwt::Algorithm::kRS256)) {}

  void SetUp() override {
    env_ = std::make_unique<testing::Env>(Yaml(true).c_str());
    ASSERT_TRUE(env_->keys->Start().ok());
  }

  std::string Yaml(bool required) {
    const std::string cluster_jwks = WriteJwks(apiserver_, "apiserver-jwks.json");
    const std::string idp_jwks = WriteJwks(idp_, "idp-jwks.json");
    return std::string(
               "defaultAudiences: [wisp]\n"
               "namespaces: {ml: {audiences: [vault]}}\n"
               "trustedIssuers:\n"
               "  - {issuer: \"") +
           kCluster + "\", jwksFile: \"" + cluster_jwks +
           "\", audiences: [wisp-sts]}\n"
           "  - {issuer: \"https://idp.example\", jwksFile: \"" +
           idp_jwks +
           "\", audiences: [wisp-sts]}\n"
           "issue:\n"
           "  requirePodProof: " +
           (required ? "true" : "false") +
           "\n"
           "  podProofAudience: wisp\n"
           "  podProofIssuers: [\"" +
           kCluster + "\"]\n";
  }

  static std::string WriteJwks(const jwt::PrivateKey& key, const std::string& name) {
    jwt::KeySet set;
    set.Add(key.public_key());
    // Per process and test: ctest runs the tests of this file in parallel processes, each with
    // keys of its own.
    const std::string path = ::testing::TempDir() + "/" + std::to_string(::getpid()) + "-" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
                             name;
    std::ofstream(path) << set.ToJwks().dump();
    return path;
  }

  // The claims kube-apiserver puts in a pod-bound token the kubelet asks for.
  nlohmann::json KubeletClaims() {
    const int64_t now = env_->clock.NowUnixSeconds();
    return {{"iss", kCluster},
            {"sub", "system:serviceaccount:ml:loader"},
            {"aud", {"wisp"}},
            {"iat", now},
            {"nbf", now},
            {"exp", now + 600},
            {"kubernetes.io",
             {{"namespace", "ml"},
              {"node", {{"name", "node-a"}, {"uid", "node-a-uid"}}},
              {"pod", {{"name", "loader-0"}, {"uid", "pod-uid"}}},
              {"serviceaccount", {{"name", "loader"}, {"uid", "sa-uid"}}}}}};
  }

  v1::IssueRequest WithProof(const nlohmann::json& claims, const jwt::PrivateKey* key = nullptr) {
    v1::IssueRequest r = env_->Request();
    r.mutable_subject()->set_node_name("node-a");
    r.set_pod_proof(*jwt::Sign(key ? *key : apiserver_, claims.dump()));
    return r;
  }

  // The refusal for `claims`, which must be PermissionDenied.
  std::string Refusal(const v1::IssueRequest& r) {
    auto resp = env_->issuer->Issue(r);
    EXPECT_FALSE(resp.ok());
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kPermissionDenied) << resp.status();
    return std::string(resp.status().message());
  }

  jwt::PrivateKey apiserver_;
  jwt::PrivateKey idp_;
  std::unique_ptr<testing::Env> env_;
};

// Tests that a proof from the cluster issuer for the very pod asked for lets the token be issued.
TEST_F(PodProofTest, IssuesForTheProvenPod) {
  auto resp = env_->issuer->Issue(WithProof(KubeletClaims()));
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_FALSE(resp->token().empty());
  // A proof without the node claim (clusters before ServiceAccountTokenPodNodeInfo) is enough.
  auto claims = KubeletClaims();
  claims["kubernetes.io"].erase("node");
  EXPECT_TRUE(env_->issuer->Issue(WithProof(claims)).ok());
}

// Tests that a request without a proof is refused when the policy requires one.
TEST_F(PodProofTest, RefusesMissingProof) {
  EXPECT_NE(Refusal(env_->Request()).find("pod_proof: required"), std::string::npos);
  EXPECT_EQ(env_->metrics.IssueError("pod_proof").Value(), 1);
  v1::IssueRequest no_pod = WithProof(KubeletClaims());
  no_pod.mutable_subject()->clear_pod_uid();
  EXPECT_NE(Refusal(no_pod).find("subject.pod_name and subject.pod_uid"), std::string::npos);
}

// Tests that a proof for another pod, service account or node is refused naming the field.
TEST_F(PodProofTest, RefusesProofOfAnotherIdentity) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"other pod name", [](auto& c) { c["kubernetes.io"]["pod"]["name"] = "loader-1"; },
       "kubernetes.io.pod.name \"loader-1\" does not match subject.pod_name \"loader-0\""},
      {"other pod uid", [](auto& c) { c["kubernetes.io"]["pod"]["uid"] = "uid-2"; },
       "kubernetes.io.pod.uid \"uid-2\" does not match subject.pod_uid \"pod-uid\""},
      {"other service account", [](auto& c) { c["sub"] = "system:serviceaccount:ml:admin"; },
       "sub \"system:serviceaccount:ml:admin\" does not match subject.namespace/service_account"},
      {"other namespace", [](auto& c) { c["sub"] = "system:serviceaccount:kube-system:loader"; },
       "does not match subject.namespace/service_account"},
      {"other node", [](auto& c) { c["kubernetes.io"]["node"]["name"] = "node-b"; },
       "kubernetes.io.node.name \"node-b\" does not match subject.node_name \"node-a\""},
      {"other sa uid", [](auto& c) { c["kubernetes.io"]["serviceaccount"]["uid"] = "x"; },
       "kubernetes.io.serviceaccount.uid \"x\" does not match"},
      {"not pod-bound", [](auto& c) { c["kubernetes.io"].erase("pod"); },
       "kubernetes.io.pod is missing"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto claims = KubeletClaims();
    c.edit(claims);
    const std::string why = Refusal(WithProof(claims));
    EXPECT_NE(why.find(c.field), std::string::npos) << why;
  }
}

// Tests that a proof that does not verify (signer, audience, lifetime, issuer) is refused.
TEST_F(PodProofTest, RefusesProofThatDoesNotVerify) {
  auto claims = KubeletClaims();
  // Signed by another key than the cluster's JWKS holds.
  auto forged = *jwt::PrivateKey::Generate(jwt::Algorithm::kES256);
  EXPECT_NE(Refusal(WithProof(claims, &forged)).find("pod_proof: "), std::string::npos);
  // The kubelet's token for another audience.
  claims["aud"] = {"vault"};
  EXPECT_NE(Refusal(WithProof(claims)).find("pod_proof: "), std::string::npos);
  // Expired, beyond the leeway.
  claims = KubeletClaims();
  claims["exp"] = env_->clock.NowUnixSeconds() - 120;
  EXPECT_NE(Refusal(WithProof(claims)).find("expired"), std::string::npos);
  // A trusted issuer for exchanges that is not a pod-proof issuer.
  claims = KubeletClaims();
  claims["iss"] = "https://idp.example";
  EXPECT_NE(Refusal(WithProof(claims, &idp_))
                .find("\"https://idp.example\" is not one of "
                      "issue.podProofIssuers"),
            std::string::npos);
  // wisp's own tokens prove nothing (a token would otherwise renew itself for ever).
  auto own = testing::Env();
  ASSERT_TRUE(own.keys->Start().ok());
  v1::IssueRequest r = WithProof(KubeletClaims());
  r.set_pod_proof(own.issuer->Issue(own.Request("ml", "loader", {"wisp"}))->token());
  EXPECT_NE(Refusal(r).find("is not one of issue.podProofIssuers"), std::string::npos);
  // Not a JWT at all; the message never echoes the proof.
  r.set_pod_proof("secret-garbage");
  const std::string why = Refusal(r);
  EXPECT_EQ(why.find("secret-garbage"), std::string::npos) << why;
}

// Tests that without requirePodProof the proof is not needed (the default, the local stack).
TEST_F(PodProofTest, NotRequiredByDefault) {
  testing::Env optional(Yaml(false).c_str());
  ASSERT_TRUE(optional.keys->Start().ok());
  EXPECT_TRUE(optional.issuer->Issue(optional.Request()).ok());
  EXPECT_FALSE(Policy::Default().pod_proof.required);
}

// Tests that the policy names bad issue.* settings.
TEST(PodProofPolicyTest, ValidatesIssueSettings) {
  auto no_issuers = Policy::FromYaml("issue: {requirePodProof: true}");
  ASSERT_FALSE(no_issuers.ok());
  EXPECT_NE(no_issuers.status().message().find("issue.podProofIssuers: at least one"),
            std::string::npos);
  auto unknown = Policy::FromYaml("issue: {podProofIssuers: [https://nowhere]}");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("is not one of trustedIssuers"), std::string::npos);
  auto bad_bool = Policy::FromYaml("issue: {requirePodProof: maybe}");
  ASSERT_FALSE(bad_bool.ok());
  EXPECT_NE(bad_bool.status().message().find("issue.requirePodProof"), std::string::npos);
  auto empty_aud = Policy::FromYaml("issue: {podProofAudience: \"\"}");
  EXPECT_FALSE(empty_aud.ok());
}

}  // namespace
}  // namespace wisp::token
