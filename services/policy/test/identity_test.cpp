// Rule g: identity presets (aws, azure, gcp, generic) and wisp.dev/tokens.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include "test_util.hpp"
#include "wisp/policy/registry.hpp"
#include "wisp/policy/rules.hpp"

namespace wisp::policy {
namespace {

using ::testing::HasSubstr;
using Json = k8s::Json;
using testing::Apply;
using testing::Rerun;

constexpr char kArn[] = "arn:aws:iam::111122223333:role/s3-reader";

// A pod of `containers` (names) with `annotations`, `spec_extra` merged into spec.
Json PodJson(const Json& annotations, const std::vector<std::string>& containers = {"app"},
             const Json& spec_extra = Json::object()) {
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "p"}, {"namespace", "default"}}},
              {"spec", {{"serviceAccountName", "s3-reader"}, {"containers", Json::array()}}}};
  if (!annotations.empty()) pod["metadata"]["annotations"] = annotations;
  for (const auto& c : containers) {
    pod["spec"]["containers"].push_back({{"name", c}, {"image", "busybox"}});
  }
  for (const auto& [k, v] : spec_extra.items()) pod["spec"][k] = v;
  return pod;
}

AdmissionInput In(const Json& pod, const std::map<std::string, std::string>& sa = {},
                  bool sa_found = true) {
  AdmissionInput in = testing::Pod(pod.dump());
  if (!sa.empty() || sa_found) {
    in.call.set_service_account_found(sa_found);
    for (const auto& [k, v] : sa) (*in.call.mutable_service_account_annotations())[k] = v;
  }
  return in;
}

const Json* Named(const Json& list, const std::string& name) {
  if (!list.is_array()) return nullptr;
  for (const auto& item : list) {
    if (item.value("name", "") == name) return &item;
  }
  return nullptr;
}

std::string EnvOf(const Json& container, const std::string& name) {
  const Json env = container.value("env", Json::array());
  const Json* e = Named(env, name);
  return e == nullptr ? "" : (*e)["value"].get<std::string>();
}

// Runs the rule, applies its patch, and checks that a rerun on the output adds nothing.
Json Mutated(const AdmissionInput& in, const Policy& policy = Policy()) {
  Verdict v = EvaluateIdentityPresets(in, policy);
  EXPECT_TRUE(v.allowed) << v.message;
  EXPECT_FALSE(v.patch.empty());
  Json out = Apply(in, v);
  Verdict again = EvaluateIdentityPresets(Rerun(in, out), policy);
  EXPECT_TRUE(again.allowed) << again.message;
  EXPECT_EQ(again.patch, "") << "a reinvocation adds nothing";
  return out;
}

std::string Denied(const AdmissionInput& in, const Policy& policy = Policy()) {
  Verdict v = EvaluateIdentityPresets(in, policy);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.code, 400);
  EXPECT_TRUE(v.patch.empty());
  return v.message;
}

// Tests that a ServiceAccount annotated as for IRSA gives the pod IRSA's variables, path and
// audience, from a csi.wisp.dev volume named as IRSA names its own.
TEST(IdentityPresetsTest, ServiceAccountRoleArnGetsTheIrsaWiring) {
  Json out = Mutated(In(PodJson(Json::object()), {{"eks.amazonaws.com/role-arn", kArn}}));
  const Json& app = out["spec"]["containers"][0];
  EXPECT_EQ(EnvOf(app, "AWS_ROLE_ARN"), kArn);
  EXPECT_EQ(EnvOf(app, "AWS_WEB_IDENTITY_TOKEN_FILE"),
            "/var/run/secrets/eks.amazonaws.com/serviceaccount/token");
  EXPECT_EQ(EnvOf(app, "AWS_STS_REGIONAL_ENDPOINTS"), "");  // off unless asked
  EXPECT_EQ(app["volumeMounts"][0], Json::parse(R"({"name":"aws-iam-token","readOnly":true,
                           "mountPath":"/var/run/secrets/eks.amazonaws.com/serviceaccount"})"));
  const Json* vol = Named(out["spec"]["volumes"], "aws-iam-token");
  ASSERT_NE(vol, nullptr) << out.dump(2);
  EXPECT_EQ((*vol)["csi"], Json::parse(R"({"driver":"csi.wisp.dev","readOnly":true,
      "volumeAttributes":{"audience":"sts.amazonaws.com","expirationSeconds":"86400",
                          "path":"token"}})"));
}

// Tests IRSA's other annotations: audience and regional STS from the ServiceAccount, the pod's
// token-expiration winning over the ServiceAccount's, skip-containers, and the policy's region.
TEST(IdentityPresetsTest, IrsaAnnotationsAndPolicyRegion) {
  Policy policy;
  policy.presets.aws_region = "eu-west-1";
  Json pod = PodJson({{"eks.amazonaws.com/token-expiration", "3600"},
                      {"eks.amazonaws.com/skip-containers", "istio-proxy, nothere"}},
                     {"app", "istio-proxy"});
  AdmissionInput in = In(pod, {{"eks.amazonaws.com/role-arn", kArn},
                               {"eks.amazonaws.com/audience", "sts.example"},
                               {"eks.amazonaws.com/sts-regional-endpoints", "true"},
                               {"eks.amazonaws.com/token-expiration", "7200"}});
  Verdict v = EvaluateIdentityPresets(in, policy);
  ASSERT_TRUE(v.allowed) << v.message;
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_THAT(v.warnings[0], HasSubstr("\"nothere\", which is not a container of this pod"));
  Json out = Apply(in, v);
  const Json& app = out["spec"]["containers"][0];
  EXPECT_EQ(EnvOf(app, "AWS_STS_REGIONAL_ENDPOINTS"), "regional");
  EXPECT_EQ(EnvOf(app, "AWS_REGION"), "eu-west-1");
  EXPECT_EQ(EnvOf(app, "AWS_DEFAULT_REGION"), "eu-west-1");
  EXPECT_FALSE(out["spec"]["containers"][1].contains("env")) << "istio-proxy is skipped";
  EXPECT_FALSE(out["spec"]["containers"][1].contains("volumeMounts"));
  const Json& attrs = (*Named(out["spec"]["volumes"], "aws-iam-token"))["csi"]["volumeAttributes"];
  EXPECT_EQ(attrs["audience"], "sts.example");
  EXPECT_EQ(attrs["expirationSeconds"], "3600");
  EXPECT_EQ(v.audit_annotations["identity-preset"],
            "aws (ServiceAccount default/s3-reader metadata.annotations[eks.amazonaws.com/"
            "role-arn])");
}

// Tests the pod-annotation form (before the gateway reads ServiceAccounts): the pod's own
// eks.amazonaws.com/role-arn selects aws; a container's own AWS_ROLE_ARN keeps its pair.
TEST(IdentityPresetsTest, PodAnnotationFormAndUserEnvKept) {
  Json pod = PodJson({{"eks.amazonaws.com/role-arn", kArn}}, {"app", "own"});
  pod["spec"]["containers"][1]["env"] = Json::parse(R"([{"name":"AWS_ROLE_ARN","value":"x"}])");
  Json out = Mutated(In(pod, {}, /*sa_found=*/false));
  EXPECT_EQ(EnvOf(out["spec"]["containers"][0], "AWS_ROLE_ARN"), kArn);
  const Json& own = out["spec"]["containers"][1];
  EXPECT_EQ(EnvOf(own, "AWS_ROLE_ARN"), "x");
  EXPECT_EQ(EnvOf(own, "AWS_WEB_IDENTITY_TOKEN_FILE"), "") << "IRSA adds the pair or neither";
  EXPECT_NE(Named(own["volumeMounts"], "aws-iam-token"), nullptr);
}

// Tests that bad input is refused naming the annotation and where it was read.
TEST(IdentityPresetsTest, RefusesBadInputNamingTheAnnotation) {
  EXPECT_EQ(Denied(In(PodJson(Json::object()), {{"eks.amazonaws.com/role-arn", "s3-reader"}})),
            "ServiceAccount default/s3-reader metadata.annotations[eks.amazonaws.com/role-arn]: "
            "Invalid value: \"s3-reader\": must be an IAM role ARN, arn:<partition>:iam::"
            "<12-digit account>:role/<name>");
  EXPECT_EQ(Denied(In(PodJson({{"wisp.dev/identity-preset", "vault"}}))),
            "metadata.annotations[wisp.dev/identity-preset]: Invalid value: \"vault\": unknown "
            "preset; must be one of aws, azure, gcp, generic");
  EXPECT_EQ(Denied(In(PodJson({{"wisp.dev/identity-preset", "aws"}}))),
            "the aws preset (metadata.annotations[wisp.dev/identity-preset]): Required value: "
            "the aws preset needs annotation \"eks.amazonaws.com/role-arn\" on the pod or on "
            "ServiceAccount default/s3-reader");
  EXPECT_EQ(Denied(In(PodJson(
                {{"eks.amazonaws.com/role-arn", kArn}, {"wisp.dev/containers", "app,worker"}}))),
            "metadata.annotations[wisp.dev/containers]: Invalid value: \"app,worker\": the pod "
            "has no container or init container named \"worker\"");
  EXPECT_THAT(Denied(In(PodJson({{"eks.amazonaws.com/role-arn", kArn},
                                 {"eks.amazonaws.com/sts-regional-endpoints", "yes"}}))),
              HasSubstr("[eks.amazonaws.com/sts-regional-endpoints]: Invalid value: \"yes\": "
                        "must be true or false"));
  EXPECT_THAT(Denied(In(PodJson({{"eks.amazonaws.com/role-arn", kArn},
                                 {"eks.amazonaws.com/token-expiration", "300"}}))),
              HasSubstr("metadata.annotations[eks.amazonaws.com/token-expiration]: Invalid "
                        "value: 300: may not specify a duration less than 10 minutes"));
  // A 200 KiB value (the apiserver allows 256 KiB of annotations) is refused by its length, not
  // by std::regex (which recurses per character and overflowed the stack), and quoted short.
  const std::string huge = std::string(kArn) + std::string(200 << 10, 'a');
  const std::string denied = Denied(In(PodJson({{"eks.amazonaws.com/role-arn", huge}})));
  EXPECT_THAT(denied, HasSubstr("(at most 2048 characters, got " + std::to_string(huge.size())));
  EXPECT_LT(denied.size(), 1024u);
}

// Tests the azure preset: the pod label opts in, the ServiceAccount gives client and tenant,
// azure's skip list (';'), its audience, path and variables.
TEST(IdentityPresetsTest, AzureWorkloadIdentity) {
  Json pod =
      PodJson({{"azure.workload.identity/skip-containers", "sidecar; other"}}, {"app", "sidecar"});
  pod["metadata"]["labels"] = {{"azure.workload.identity/use", "true"}};
  AdmissionInput in =
      In(pod, {{"azure.workload.identity/client-id", "00000000-1111-2222-3333-444444444444"},
               {"azure.workload.identity/tenant-id", "55555555-6666-7777-8888-999999999999"}});
  Json out = Mutated(in);
  const Json& app = out["spec"]["containers"][0];
  EXPECT_EQ(EnvOf(app, "AZURE_CLIENT_ID"), "00000000-1111-2222-3333-444444444444");
  EXPECT_EQ(EnvOf(app, "AZURE_TENANT_ID"), "55555555-6666-7777-8888-999999999999");
  EXPECT_EQ(EnvOf(app, "AZURE_FEDERATED_TOKEN_FILE"),
            "/var/run/secrets/azure/tokens/azure-identity-token");
  EXPECT_EQ(EnvOf(app, "AZURE_AUTHORITY_HOST"), "https://login.microsoftonline.com/");
  EXPECT_FALSE(out["spec"]["containers"][1].contains("env"));
  const Json& attrs =
      (*Named(out["spec"]["volumes"], "azure-identity-token"))["csi"]["volumeAttributes"];
  EXPECT_EQ(attrs["audience"], "api://AzureADTokenExchange");
  EXPECT_EQ(attrs["expirationSeconds"], "3600");
  EXPECT_EQ(attrs["path"], "azure-identity-token");

  pod["metadata"]["annotations"]["azure.workload.identity/service-account-token-expiration"] =
      "600";
  EXPECT_THAT(Denied(In(pod, {{"azure.workload.identity/client-id", "not-a-guid"}})),
              HasSubstr("token expiration 600 not valid. Expected value to be between 3600 and "
                        "86400"));
}

// Tests the gcp preset: the CSI node is asked to write the external-account file next to the
// token (from these attributes), and GOOGLE_APPLICATION_CREDENTIALS points at it.
TEST(IdentityPresetsTest, GcpExternalAccount) {
  const std::string provider =
      "//iam.googleapis.com/projects/123456/locations/global/workloadIdentityPools/pool/"
      "providers/k8s";
  Json pod = PodJson({{"wisp.dev/identity-preset", "gcp"}});
  Json out =
      Mutated(In(pod, {{"wisp.dev/gcp-workload-identity-provider", provider},
                       {"wisp.dev/gcp-service-account", "reader@proj.iam.gserviceaccount.com"}}));
  EXPECT_EQ(EnvOf(out["spec"]["containers"][0], "GOOGLE_APPLICATION_CREDENTIALS"),
            "/var/run/secrets/wisp/gcp/credential-configuration.json");
  const Json& attrs = (*Named(out["spec"]["volumes"], "wisp-gcp-token"))["csi"]["volumeAttributes"];
  EXPECT_EQ(attrs["audience"], "https:" + provider);
  EXPECT_EQ(attrs["gcpAudience"], provider);
  EXPECT_EQ(attrs["gcpTokenUrl"], "https://sts.googleapis.com/v1/token");
  EXPECT_EQ(attrs["gcpTokenPath"], "/var/run/secrets/wisp/gcp/token");
  EXPECT_EQ(attrs["gcpCredentialFile"], "credential-configuration.json");
  EXPECT_EQ(attrs["gcpServiceAccountImpersonationUrl"],
            "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/"
            "reader@proj.iam.gserviceaccount.com:generateAccessToken");
  EXPECT_THAT(Denied(In(pod, {{"wisp.dev/gcp-workload-identity-provider", "projects/1/x"}})),
              HasSubstr("must be a workload identity provider"));
}

// Tests the generic preset: wisp's own variables and the audience annotation, checked against
// the namespace's allowed audiences.
TEST(IdentityPresetsTest, GenericAndAudienceAllowList) {
  Json pod = PodJson({{"wisp.dev/identity-preset", "generic"}, {"wisp.dev/audience", "vault"}});
  Json out = Mutated(In(pod));
  const Json& app = out["spec"]["containers"][0];
  EXPECT_EQ(EnvOf(app, "WISP_TOKEN_FILE"), "/var/run/secrets/wisp/identity/token");
  EXPECT_EQ(EnvOf(app, "WISP_TOKEN_AUDIENCE"), "vault");
  Policy policy;
  policy.audiences["*"] = {"wisp"};
  EXPECT_THAT(Denied(In(pod), policy), HasSubstr("audience \"vault\" is not allowed"));
}

// Tests several tokens per pod: each its own audience, lifetime and path, to its containers
// only, with the variable naming its file; the preset's token beside them.
TEST(IdentityPresetsTest, SeveralTokensToChosenContainers) {
  Json pod = PodJson({{"eks.amazonaws.com/role-arn", kArn},
                      {"wisp.dev/containers", "app"},
                      {"wisp.dev/tokens",
                       R"([{"name":"vault","audience":"vault","expirationSeconds":900,
             "mountPath":"/var/run/secrets/vault","containers":["worker"],"env":"VAULT_JWT"},
            {"name":"db","audience":"db.example","mountPath":"/var/run/secrets/db",
             "path":"jwt"}])"}},
                     {"app", "worker"});
  pod["spec"]["initContainers"] = Json::parse(R"([{"name":"init","image":"busybox"}])");
  Json out = Mutated(In(pod));
  const Json& init = out["spec"]["initContainers"][0];
  const Json& app = out["spec"]["containers"][0];
  const Json& worker = out["spec"]["containers"][1];
  EXPECT_EQ(EnvOf(app, "AWS_ROLE_ARN"), kArn);
  EXPECT_EQ(EnvOf(worker, "AWS_ROLE_ARN"), "") << "wisp.dev/containers allows app only";
  EXPECT_EQ(EnvOf(init, "AWS_ROLE_ARN"), "");
  EXPECT_EQ(EnvOf(worker, "VAULT_JWT"), "/var/run/secrets/vault/token");
  EXPECT_EQ(Named(app["volumeMounts"], "wisp-id-vault"), nullptr);
  EXPECT_NE(Named(init["volumeMounts"], "wisp-id-db"), nullptr) << "no list: every container";
  EXPECT_NE(Named(worker["volumeMounts"], "wisp-id-db"), nullptr);
  const Json& vault = (*Named(out["spec"]["volumes"], "wisp-id-vault"))["csi"]["volumeAttributes"];
  EXPECT_EQ(vault, Json::parse(R"({"audience":"vault","expirationSeconds":"900","path":"token"})"));
  const Json& db = (*Named(out["spec"]["volumes"], "wisp-id-db"))["csi"]["volumeAttributes"];
  EXPECT_EQ(db["path"], "jwt");
  EXPECT_EQ(db["expirationSeconds"], "3600");
}

// Tests the refusals of wisp.dev/tokens, each naming its element and field.
TEST(IdentityPresetsTest, TokensRefusals) {
  auto deny = [](const std::string& tokens) {
    return Denied(In(PodJson({{"wisp.dev/tokens", tokens}})));
  };
  EXPECT_THAT(deny("{}"), HasSubstr("must be a JSON array of token requests"));
  EXPECT_THAT(deny(R"([{"name":"a","audience":"x","mountPath":"/a","containers":["nope"]}])"),
              HasSubstr("metadata.annotations[wisp.dev/tokens][0].containers[0]: Not found: "
                        "\"nope\": the pod has no container or init container of that name"));
  EXPECT_THAT(deny(R"([{"name":"a","audience":"x","mountPath":"/a","color":"red"}])"),
              HasSubstr("[0].color: Unsupported value: unknown field"));
  EXPECT_THAT(deny(R"([{"name":"a","mountPath":"/a"}])"),
              HasSubstr("[0].audience: Required value"));
  EXPECT_THAT(deny(R"([{"name":"A_B","audience":"x","mountPath":"/a"}])"),
              HasSubstr("must be a DNS-1123 label"));
  EXPECT_THAT(deny(R"([{"name":"a","audience":"x","mountPath":"rel"}])"),
              HasSubstr("[0].mountPath: Invalid value: \"rel\": must be an absolute path"));
  EXPECT_THAT(deny(R"([{"name":"a","audience":"x","mountPath":"/a","expirationSeconds":60}])"),
              HasSubstr("[0].expirationSeconds: Invalid value: 60: may not specify a duration "
                        "less than 10 minutes"));
  EXPECT_THAT(deny(R"([{"name":"a","audience":"x","mountPath":"/a"},
                       {"name":"b","audience":"y","mountPath":"/a"}])"),
              HasSubstr("[1].mountPath: Duplicate value: \"/a\""));
}

// Tests non-root containers: one user for every chosen container (its own securityContext or the
// pod's) makes the CSI node give the file to that user with 0600; differing users leave 0644 in
// the pod's own tmpfs.
TEST(IdentityPresetsTest, FileOwnerForNonRootContainers) {
  Json pod = PodJson({{"eks.amazonaws.com/role-arn", kArn}}, {"app", "helper"},
                     {{"securityContext", {{"runAsUser", 1000}, {"runAsGroup", 3000}}}});
  Json out = Mutated(In(pod));
  Json attrs = (*Named(out["spec"]["volumes"], "aws-iam-token"))["csi"]["volumeAttributes"];
  EXPECT_EQ(attrs["fileOwner"], "1000");
  EXPECT_EQ(attrs["fileGroup"], "3000");
  EXPECT_EQ(attrs["fileMode"], "0600");

  pod["spec"]["containers"][1]["securityContext"] = {{"runAsUser", 2000}};
  out = Mutated(In(pod));
  attrs = (*Named(out["spec"]["volumes"], "aws-iam-token"))["csi"]["volumeAttributes"];
  EXPECT_FALSE(attrs.contains("fileOwner")) << attrs.dump();
  EXPECT_FALSE(attrs.contains("fileMode"));

  // Skipping the container of the other user brings the owner back.
  pod["metadata"]["annotations"]["eks.amazonaws.com/skip-containers"] = "helper";
  out = Mutated(In(pod));
  attrs = (*Named(out["spec"]["volumes"], "aws-iam-token"))["csi"]["volumeAttributes"];
  EXPECT_EQ(attrs["fileOwner"], "1000");
}

// Tests that a pod asking for nothing, a ServiceAccount without IRSA's annotation, and the
// upstream annotations switched off leave the pod alone.
TEST(IdentityPresetsTest, SkipsPodsThatAskForNothing) {
  EXPECT_EQ(EvaluateIdentityPresets(In(PodJson(Json::object()), {{"other", "x"}}), Policy())
                .rule_outcomes[std::string(kRuleIdentityPresets)],
            "skipped");
  Policy off;
  off.presets.upstream_annotations = false;
  Verdict v = EvaluateIdentityPresets(
      In(PodJson(Json::object()), {{"eks.amazonaws.com/role-arn", kArn}}), off);
  EXPECT_TRUE(v.patch.empty());
  // A ServiceAccount the gateway did not find is not read.
  v = EvaluateIdentityPresets(
      In(PodJson(Json::object()), {{"eks.amazonaws.com/role-arn", kArn}}, false), Policy());
  EXPECT_TRUE(v.patch.empty());
}

// Tests a mount path another volume already uses: refused, naming the container's mount.
TEST(IdentityPresetsTest, RefusesAMountPathTakenByAnotherVolume) {
  Json pod = PodJson({{"eks.amazonaws.com/role-arn", kArn}});
  pod["spec"]["containers"][0]["volumeMounts"] = Json::parse(
      R"([{"name":"mine","mountPath":"/var/run/secrets/eks.amazonaws.com/serviceaccount"}])");
  EXPECT_THAT(Denied(In(pod)),
              HasSubstr("spec.containers[0].volumeMounts[0].mountPath: Invalid value: "
                        "\"/var/run/secrets/eks.amazonaws.com/serviceaccount\": already mounted "
                        "from volume \"mine\""));
}

// Tests the mutate path with the token sidecar: both rules' env and mounts survive in a container
// that had none (the identity rule reads the pod as the sidecar's patch left it).
TEST(IdentityPresetsTest, ChainsWithTheTokenSidecar) {
  Json pod = PodJson({{"eks.amazonaws.com/role-arn", kArn}, {"wisp.dev/token-sidecar", "true"}},
                     {"app"}, {{"hostNetwork", true}});
  AdmissionInput in = In(pod);
  Verdict v = EvaluateMutate(in, Policy(), testing::NoRecords());
  ASSERT_TRUE(v.allowed) << v.message;
  auto out = k8s::ApplyPatch(in.object, Json::parse(v.patch));
  ASSERT_TRUE(out.ok()) << out.status();
  const Json* app = Named((*out)["spec"]["containers"], "app");
  ASSERT_NE(app, nullptr);
  EXPECT_EQ(EnvOf(*app, "WISP_TOKEN_URL"), "unix:///var/run/wisp/token.sock");
  EXPECT_EQ(EnvOf(*app, "AWS_ROLE_ARN"), kArn);
  EXPECT_NE(Named((*app)["volumeMounts"], "aws-iam-token"), nullptr);
  EXPECT_NE(Named((*app)["volumeMounts"], "wisp-token-socket"), nullptr);
  EXPECT_EQ(v.rule_outcomes[std::string(kRuleIdentityPresets)], "mutated");
}

// Tests that rule g asks for the pod as the sidecar's patch left it only when it has something to
// do there: a sidecar pod that asks for no identity is answered from the pod's facts, with no tree
// to parse and patch; any way of asking (pod, ServiceAccount, azure's label) still gets it.
TEST(IdentityPresetsTest, ReadsThePatchedPodOnlyWhenThePodAsks) {
  const Json sidecar = {{"wisp.dev/token-sidecar", "true"}};
  EXPECT_FALSE(IdentityPresetsNeedObject(In(PodJson(sidecar)), Policy()));
  Json both = sidecar;
  both["wisp.dev/identity-preset"] = "generic";
  EXPECT_TRUE(IdentityPresetsNeedObject(In(PodJson(both)), Policy()));
  EXPECT_TRUE(IdentityPresetsNeedObject(
      In(PodJson(sidecar), {{"wisp.dev/tokens", R"([{"audience":"vault"}])"}}), Policy()));
  EXPECT_TRUE(IdentityPresetsNeedObject(
      In(PodJson(sidecar), {{"eks.amazonaws.com/role-arn", kArn}}), Policy()));
  Policy upstream_off;
  upstream_off.presets.upstream_annotations = false;
  EXPECT_FALSE(IdentityPresetsNeedObject(
      In(PodJson(sidecar), {{"eks.amazonaws.com/role-arn", kArn}}), upstream_off));
  Json azure = PodJson(sidecar);
  azure["metadata"]["labels"] = {{"azure.workload.identity/use", "false"}};
  EXPECT_FALSE(IdentityPresetsNeedObject(In(azure), Policy()));
  azure["metadata"]["labels"]["azure.workload.identity/use"] = "true";
  EXPECT_TRUE(IdentityPresetsNeedObject(In(azure), Policy()));
  // Without the sidecar there is no earlier patch to read through.
  EXPECT_FALSE(
      IdentityPresetsNeedObject(In(PodJson({{"wisp.dev/identity-preset", "generic"}})), Policy()));

  // The mutate path's answer for a sidecar pod that asks for no identity is the sidecar's alone.
  AdmissionInput in = In(PodJson(sidecar, {"app"}, {{"hostNetwork", true}}));
  Verdict v = EvaluateMutate(in, Policy(), testing::NoRecords());
  ASSERT_TRUE(v.allowed) << v.message;
  EXPECT_EQ(v.rule_outcomes[std::string(kRuleIdentityPresets)], "skipped");
  EXPECT_EQ(v.rule_outcomes[std::string(kRuleTokenSidecar)], "mutated");
  EXPECT_EQ(v.patch, EvaluateTokenSidecar(in, Policy()).patch);
}

// Tests the policy file's identityPresets keys and their refusals.
TEST(IdentityPresetsTest, PolicyKeys) {
  auto p = ParsePolicyYaml(R"(
identityPresets:
  upstreamAnnotations: false
  tokenSource: kubelet
  aws: {audience: sts.example, region: us-east-2, stsRegionalEndpoints: true, expirationSeconds: 2h}
  azure: {tenantId: t, authorityHost: "https://login.example/", expirationSeconds: 3600}
  gcp: {tokenUrl: "https://sts.example/v1/token"}
  generic: {audience: vault}
)");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->presets.upstream_annotations);
  EXPECT_EQ(p->presets.token_source, "kubelet");
  EXPECT_EQ(p->presets.aws_expiration_seconds, 7200);
  EXPECT_TRUE(p->presets.aws_sts_regional_endpoints);
  EXPECT_EQ(p->presets.gcp_token_url, "https://sts.example/v1/token");
  EXPECT_EQ(ParsePolicyYaml("identityPresets: {tokenSource: x}").status().message(),
            "identityPresets.tokenSource: \"x\" is not one of wisp, kubelet");
  EXPECT_EQ(ParsePolicyYaml("identityPresets: {gcp: {tokenUrl: http://x}}").status().message(),
            "identityPresets.gcp.tokenUrl: \"http://x\" is not an https URL");
  EXPECT_EQ(ParsePolicyYaml("maxTokenLifetime: 1h\nidentityPresets: {aws: {expirationSeconds: 2h}}")
                .status()
                .message(),
            "identityPresets.aws.expirationSeconds: exceeds maxTokenLifetime");
  EXPECT_EQ(ParsePolicyYaml("identityPresets: {vault: {}}").status().message(),
            "identityPresets.vault: unknown key");
  // A default above maxTokenLifetime is capped, not refused.
  auto capped = ParsePolicyYaml("maxTokenLifetime: 1h");
  ASSERT_TRUE(capped.ok());
  Json out = Mutated(In(PodJson({{"eks.amazonaws.com/role-arn", kArn}})), *capped);
  EXPECT_EQ((*Named(out["spec"]["volumes"],
                    "aws-iam-token"))["csi"]["volumeAttributes"]["expirationSeconds"],
            "3600");
}

}  // namespace
}  // namespace wisp::policy
