#include <gtest/gtest.h>

#include <fstream>

#include "wisp/policy/rules.hpp"
#include "test_util.hpp"
#include "wisp/k8s/objects.hpp"

namespace wisp::policy {
namespace {

using k8s::Json;
using testing::Apply;
using testing::Pod;
using testing::Rerun;

std::string LoaderPod(bool host_network,
                      const std::string& annotations = R"("wisp.dev/token-sidecar": "true")") {
  return R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"loader","namespace":"ml",
    "annotations":{)" +
         annotations + R"(}},
    "spec":{"hostNetwork":)" +
         (host_network ? "true" : "false") + R"(,
      "serviceAccountName":"loader",
      "containers":[{"name":"main","image":"loader:1","volumeMounts":[{"name":"data","mountPath":"/data"}]}],
      "volumes":[{"name":"data","csi":{"driver":"csi.wisp.dev","volumeAttributes":{"bucket":"b"}}}]}})";
}

// Tests that a hostNetwork pod gets the native sidecar, the socket and the projected token volume,
// that the patch reproduces exactly that object, and that a second run adds nothing.
TEST(TokenSidecarTest, InjectsIntoHostNetworkPodAndIsReinvocationSafe) {
  Policy policy;
  auto in = Pod(LoaderPod(true), "ml", "1.30");
  Verdict v = EvaluateTokenSidecar(in, policy);
  ASSERT_TRUE(v.allowed) << v.message;
  EXPECT_EQ(v.rule_outcomes.at("token_sidecar"), "mutated");
  Json out = Apply(in, v);

  Json expected_sidecar = Json::parse(R"({
    "name":"wisp-sidecar","image":"ghcr.io/wisp-dev/wisp-sidecar:0.1.0","imagePullPolicy":"IfNotPresent",
    "command":["wisp-sidecar"],
    "args":["--socket=/var/run/wisp/token.sock","--token-file=/var/run/wisp-sa-token/token",
            "--audience=wisp"],
    "env":[{"name":"NATIVE_SIDECAR","value":"TRUE"}],
    "restartPolicy":"Always",
    "startupProbe":{"exec":{"command":["wisp-sidecar","--probe","--ready-file=/var/run/wisp/ready"]},
                    "periodSeconds":1,"timeoutSeconds":2,"failureThreshold":300},
    "readinessProbe":{"exec":{"command":["wisp-sidecar","--probe","--ready-file=/var/run/wisp/ready"]},
                      "periodSeconds":10,"timeoutSeconds":2,"failureThreshold":3},
    "resources":{"requests":{"cpu":"250m","memory":"256Mi","ephemeral-storage":"5Gi"},
                 "limits":{"cpu":"250m","memory":"256Mi","ephemeral-storage":"5Gi"}},
    "securityContext":{"allowPrivilegeEscalation":false,"readOnlyRootFilesystem":true,
      "capabilities":{"drop":["ALL"]},"seccompProfile":{"type":"RuntimeDefault"},
      "runAsNonRoot":true,"runAsUser":65534,"runAsGroup":65534},
    "volumeMounts":[{"name":"wisp-token-socket","mountPath":"/var/run/wisp"},
                    {"name":"wisp-sa-token","mountPath":"/var/run/wisp-sa-token","readOnly":true},
                    {"name":"wisp-no-api-token",
                     "mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","readOnly":true}]})");
  EXPECT_EQ(out["spec"]["initContainers"], Json::array({expected_sidecar}));
  // The user's volume keeps index 0; wisp's follow it.
  EXPECT_EQ(out["spec"]["volumes"], Json::parse(R"([
    {"name":"data","csi":{"driver":"csi.wisp.dev","volumeAttributes":{"bucket":"b"}}},
    {"name":"wisp-sa-token","projected":{"sources":[{"serviceAccountToken":
      {"audience":"wisp","expirationSeconds":3600,"path":"token"}}]}},
    {"name":"wisp-token-socket","emptyDir":{"medium":"Memory"}},
    {"name":"wisp-no-api-token","emptyDir":{"medium":"Memory","sizeLimit":"1Ki"}}])"));
  EXPECT_EQ(out["spec"]["containers"], Json::parse(R"([{"name":"main","image":"loader:1",
    "volumeMounts":[{"name":"data","mountPath":"/data"},{"name":"wisp-token-socket","mountPath":"/var/run/wisp"}],
    "env":[{"name":"WISP_TOKEN_URL","value":"unix:///var/run/wisp/token.sock"}]}])"));
  EXPECT_EQ(v.audit_annotations.at("token-sidecar"), "wisp-sidecar (native sidecar)");
  EXPECT_EQ(v.audit_annotations.at("token-volume"), "wisp-sa-token audience=wisp");

  Verdict again = EvaluateTokenSidecar(Rerun(in, out), policy);
  EXPECT_TRUE(again.allowed);
  EXPECT_TRUE(again.patch.empty()) << again.patch;
  EXPECT_EQ(again.message, "The sidecar container was injected, no injection required.");
}

// Tests reinvocation after a later webhook added containers (reinvocationPolicy IfNeeded;
// azure-workload-identity's #791): each new container gets the socket mount and WISP_TOKEN_URL,
// what it has already is not added twice, the sidecar is not injected again, and a third pass
// changes nothing.
TEST(TokenSidecarTest, ContainersAddedByALaterWebhookAreWiredOnReinvocation) {
  for (auto mode : {NativeSidecarMode::kOn, NativeSidecarMode::kOff}) {
    SCOPED_TRACE(mode == NativeSidecarMode::kOn ? "native" : "classic");
    Policy policy;
    policy.native_sidecar = mode;
    auto in = Pod(LoaderPod(true), "ml", "1.30");
    Json out = Apply(in, EvaluateTokenSidecar(in, policy));
    // The later webhook: one bare container, one that already has the environment variable.
    out["spec"]["containers"].push_back(Json::parse(R"({"name":"mesh","image":"mesh:1"})"));
    out["spec"]["containers"].push_back(Json::parse(R"({"name":"agent","image":"agent:1",
      "env":[{"name":"WISP_TOKEN_URL","value":"unix:///custom.sock"}]})"));
    auto reinvoked = Rerun(in, out);
    Verdict v = EvaluateTokenSidecar(reinvoked, policy);
    ASSERT_TRUE(v.allowed) << v.message;
    EXPECT_EQ(v.rule_outcomes.at("token_sidecar"), "mutated");
    EXPECT_EQ(v.audit_annotations.at("token-sidecar-wired"), "mesh,agent");
    Json wired = Apply(reinvoked, v);
    const Json& containers = wired["spec"]["containers"];
    size_t sidecars = 0;
    const Json inits = wired["spec"].value("initContainers", Json::array());
    for (const Json* list : {&containers, &inits}) {
      if (!list->is_array()) continue;
      for (const auto& c : *list) sidecars += c["name"] == "wisp-sidecar" ? 1 : 0;
    }
    EXPECT_EQ(sidecars, 1u);
    const Json socket_mount =
        Json::parse(R"([{"name":"wisp-token-socket","mountPath":"/var/run/wisp"}])");
    const Json url_env =
        Json::parse(R"([{"name":"WISP_TOKEN_URL","value":"unix:///var/run/wisp/token.sock"}])");
    for (const auto& c : containers) {
      if (c["name"] == "mesh") {
        EXPECT_EQ(c["volumeMounts"], socket_mount) << c.dump();
        EXPECT_EQ(c["env"], url_env) << c.dump();
      } else if (c["name"] == "agent") {
        EXPECT_EQ(c["volumeMounts"], socket_mount) << c.dump();
        EXPECT_EQ(c["env"].size(), 1u) << c.dump();  // the container's own value is kept
        EXPECT_EQ(c["env"][0]["value"], "unix:///custom.sock");
      } else if (c["name"] == "main") {
        EXPECT_EQ(c["env"], url_env) << c.dump();  // not added twice
        EXPECT_EQ(c["volumeMounts"].size(), 2u) << c.dump();
      }
    }
    Verdict third = EvaluateTokenSidecar(Rerun(in, wired), policy);
    EXPECT_TRUE(third.patch.empty()) << third.patch;
    EXPECT_EQ(third.message, "The sidecar container was injected, no injection required.");
  }
}

// Tests the annotation handling: absent or false leaves the pod alone, other values are denied.
TEST(TokenSidecarTest, StrictAnnotationValues) {
  struct Case {
    std::string annotations;
    bool allowed;
    bool patched;
    std::string message;
  } cases[] = {
      {R"("other":"x")", true, false,
       "The annotation key \"wisp.dev/token-sidecar\" is not found, no injection required."},
      {R"("wisp.dev/token-sidecar":"false")", true, false,
       "The annotation key \"wisp.dev/token-sidecar\" is false, no injection required."},
      {R"("wisp.dev/token-sidecar":"False")", true, false,
       "The annotation key \"wisp.dev/token-sidecar\" is false, no injection required."},
      {R"("wisp.dev/token-sidecar":"True")", true, true, ""},
      {R"("wisp.dev/token-sidecar":"yes")", false, false,
       "the acceptable values for \"wisp.dev/token-sidecar\" are 'True', 'true', 'false' or "
       "'False'"},
      {R"("wisp.dev/token-sidecar":"TRUE")", false, false,
       "the acceptable values for \"wisp.dev/token-sidecar\" are 'True', 'true', 'false' or "
       "'False'"},
      {R"("wisp.dev/token-sidecar":"true","wisp.dev/enable-native-sidecar":"0")", false, false,
       "the acceptable values for \"wisp.dev/enable-native-sidecar\" are 'True', 'true', "
       "'false' or 'False'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.annotations);
    auto in = Pod(LoaderPod(true, c.annotations), "ml");
    Verdict v = EvaluateTokenSidecar(in, Policy{});
    EXPECT_EQ(v.allowed, c.allowed);
    EXPECT_EQ(!v.patch.empty(), c.patched);
    EXPECT_EQ(v.message, c.message);
    if (!c.allowed) {
      EXPECT_EQ(v.code, 400);
    }
  }
}

// Tests that without hostNetwork the default policy changes nothing and says why; "all" injects.
TEST(TokenSidecarTest, NonHostNetworkPodsFollowTokenVolumeFor) {
  auto in = Pod(LoaderPod(false), "ml");
  Verdict v = EvaluateTokenSidecar(in, Policy{});
  EXPECT_TRUE(v.allowed);
  EXPECT_TRUE(v.patch.empty());
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_EQ(v.warnings[0],
            "wisp: pod does not use hostNetwork, so it is left unchanged: the token sidecar and "
            "the projected token volume wisp-sa-token are injected only into hostNetwork pods "
            "(policy tokenSidecar.tokenVolumeFor: hostNetwork)");
  Policy all;
  all.token_volume_for = TokenVolumeFor::kAll;
  Verdict w = EvaluateTokenSidecar(in, all);
  Json out = Apply(in, w);
  EXPECT_EQ(out["spec"]["initContainers"][0]["args"][2], "--audience=wisp");
  EXPECT_NE(k8s::FindNamed(out["spec"]["volumes"], "wisp-sa-token"), nullptr);
}

// Tests that tokenSidecar.metricsPort gives the sidecar --metrics-address and a named port, and
// that without it the sidecar has neither (the pod shape stays as it was).
TEST(TokenSidecarTest, MetricsPort) {
  auto in = Pod(LoaderPod(true), "ml", "1.30");
  Json plain = Apply(in, EvaluateTokenSidecar(in, Policy{}));
  const Json& quiet = plain["spec"]["initContainers"][0];
  EXPECT_EQ(quiet["args"].size(), 3u);
  EXPECT_FALSE(quiet.contains("ports"));

  Policy policy;
  policy.sidecar_metrics_port = 9095;
  Verdict v = EvaluateTokenSidecar(in, policy);
  ASSERT_TRUE(v.allowed) << v.message;
  Json out = Apply(in, v);
  const Json& sidecar = out["spec"]["initContainers"][0];
  EXPECT_EQ(sidecar["args"].back(), "--metrics-address=0.0.0.0:9095");
  EXPECT_EQ(sidecar["ports"], Json::parse(R"([{"name":"wisp-metrics","containerPort":9095,
                                                "protocol":"TCP"}])"));
  EXPECT_TRUE(EvaluateTokenSidecar(Rerun(in, out), policy).patch.empty());
}

// Tests that the STS CA named by tokenSidecar.stsCaFile reaches the sidecar (env plus --ca-pem),
// for a classic sidecar too, and that an unreadable or non-PEM file is refused naming the key.
TEST(TokenSidecarTest, StsCaFromPolicyFile) {
  const std::string dir = ::testing::TempDir();
  const std::string ca = dir + "/sts-ca.pem";
  const std::string pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  {
    std::ofstream(ca) << pem;
    std::ofstream(dir + "/not-pem.txt") << "hello";
  }
  auto policy = ParsePolicyYaml(
      "tokenSidecar: {stsUrl: https://gw.wisp.svc/v1/token, "
      "stsCaFile: " +
      ca + ", nativeSidecar: \"off\"}");
  ASSERT_TRUE(policy.ok()) << policy.status();
  auto in = Pod(LoaderPod(true), "ml", "1.30");
  Verdict v = EvaluateTokenSidecar(in, *policy);
  ASSERT_TRUE(v.allowed) << v.message;
  Json out = Apply(in, v);
  const Json& sidecar = out["spec"]["containers"][0];
  ASSERT_EQ(sidecar["name"], "wisp-sidecar");
  EXPECT_EQ(sidecar["command"], Json::parse(R"(["wisp-sidecar"])"));
  EXPECT_EQ(sidecar["args"][3], "--sts-url=https://gw.wisp.svc/v1/token");
  EXPECT_EQ(sidecar["args"][4], "--ca-pem=$(WISP_STS_CA_PEM)");
  EXPECT_EQ(sidecar["env"], Json::parse(R"([{"name":"WISP_STS_CA_PEM","value":")" +
                                        std::string("-----BEGIN CERTIFICATE-----\\nMIIB\\n"
                                                    "-----END CERTIFICATE-----\\n") +
                                        R"("}])"));
  EXPECT_TRUE(EvaluateTokenSidecar(Rerun(in, out), *policy).patch.empty());

  for (const std::string& bad : {dir + "/absent.pem", dir + "/not-pem.txt"}) {
    auto refused = ParsePolicyYaml("tokenSidecar: {stsCaFile: " + bad + "}");
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("tokenSidecar.stsCaFile"), std::string::npos)
        << refused.status();
  }
}

// Tests where the sidecar goes for each server version, mode and annotation.
TEST(TokenSidecarTest, NativeSidecarSelection) {
  struct Case {
    std::string version;
    NativeSidecarMode mode;
    std::string extra_annotation;
    bool native;
    size_t warnings;
  } cases[] = {
      {"1.28", NativeSidecarMode::kAuto, "", false, 0},
      {"1.29", NativeSidecarMode::kAuto, "", true, 0},
      {"v1.31.2", NativeSidecarMode::kAuto, "", true, 0},
      {"1.29+", NativeSidecarMode::kAuto, "", true, 0},
      {"2.0", NativeSidecarMode::kAuto, "", true, 0},
      {"", NativeSidecarMode::kAuto, "", false, 1},
      {"1", NativeSidecarMode::kAuto, "", false, 1},
      {"one.29", NativeSidecarMode::kAuto, "", false, 1},
      {"1.20", NativeSidecarMode::kOn, "", true, 0},
      {"1.30", NativeSidecarMode::kOff, "", false, 0},
      {"1.30", NativeSidecarMode::kAuto, R"(,"wisp.dev/enable-native-sidecar":"false")", false, 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.version + " " + std::string(NativeSidecarModeName(c.mode)) + c.extra_annotation);
    Policy policy;
    policy.native_sidecar = c.mode;
    auto in = Pod(LoaderPod(true, R"("wisp.dev/token-sidecar":"true")" + c.extra_annotation), "ml",
                  c.version);
    Verdict v = EvaluateTokenSidecar(in, policy);
    Json out = Apply(in, v);
    EXPECT_EQ(v.warnings.size(), c.warnings);
    if (c.native) {
      EXPECT_EQ(out["spec"]["initContainers"][0]["name"], "wisp-sidecar");
      EXPECT_EQ(out["spec"]["initContainers"][0]["restartPolicy"], "Always");
      EXPECT_EQ(out["spec"]["containers"].size(), 1u);
    } else {
      EXPECT_FALSE(out["spec"].contains("initContainers"));
      EXPECT_EQ(out["spec"]["containers"][0]["name"], "wisp-sidecar");
      EXPECT_FALSE(out["spec"]["containers"][0].contains("restartPolicy"));
      EXPECT_FALSE(out["spec"]["containers"][0].contains("env"));
      // The app container (now second) still gets the socket and the URL.
      EXPECT_EQ(out["spec"]["containers"][1]["env"][0]["name"], "WISP_TOKEN_URL");
    }
  }
}

// Tests that the sidecar goes right after istio-proxy.
TEST(TokenSidecarTest, InsertsAfterIstioProxy) {
  auto in = Pod(R"({"metadata":{"name":"p","annotations":{"wisp.dev/token-sidecar":"true"}},
    "spec":{"hostNetwork":true,"initContainers":[{"name":"istio-proxy","image":"i"},{"name":"init","image":"x"}],
    "containers":[{"name":"app","image":"a"}]}})");
  Verdict v = EvaluateTokenSidecar(in, Policy{});
  Json out = Apply(in, v);
  ASSERT_EQ(out["spec"]["initContainers"].size(), 3u);
  EXPECT_EQ(out["spec"]["initContainers"][0]["name"], "istio-proxy");
  EXPECT_EQ(out["spec"]["initContainers"][1]["name"], "wisp-sidecar");
  EXPECT_EQ(out["spec"]["initContainers"][2]["name"], "init");
}

// Tests GCSFuse's resource defaulting rules through the annotations ("0" means unlimited).
TEST(TokenSidecarTest, ResourceAnnotations) {
  struct Case {
    std::string annotations;
    std::string resources;  // expected sidecar resources; "" = denied
    std::string message;
  } cases[] = {
      {"", R"({"requests":{"cpu":"250m","memory":"256Mi","ephemeral-storage":"5Gi"},
               "limits":{"cpu":"250m","memory":"256Mi","ephemeral-storage":"5Gi"}})",
       ""},
      {R"(,"wisp.dev/sidecar-cpu-limit":"0")",
       R"({"requests":{"cpu":"250m","memory":"256Mi","ephemeral-storage":"5Gi"},
           "limits":{"memory":"256Mi","ephemeral-storage":"5Gi"}})",
       ""},
      {R"(,"wisp.dev/sidecar-cpu-request":"1")",
       R"({"requests":{"cpu":"1","memory":"256Mi","ephemeral-storage":"5Gi"},
           "limits":{"cpu":"1","memory":"256Mi","ephemeral-storage":"5Gi"}})",
       ""},
      {R"(,"wisp.dev/sidecar-memory-limit":"1Gi")",
       R"({"requests":{"cpu":"250m","memory":"1Gi","ephemeral-storage":"5Gi"},
           "limits":{"cpu":"250m","memory":"1Gi","ephemeral-storage":"5Gi"}})",
       ""},
      {R"(,"wisp.dev/sidecar-memory-request":"0","wisp.dev/sidecar-memory-limit":"0",
          "wisp.dev/sidecar-ephemeral-storage-request":"1Gi","wisp.dev/sidecar-ephemeral-storage-limit":"0")",
       R"({"requests":{"cpu":"250m","ephemeral-storage":"1Gi"},"limits":{"cpu":"250m"}})", ""},
      {R"(,"wisp.dev/sidecar-cpu-request":"lots")", "",
       "failed to parse sidecar container resource allocation from pod annotation "
       "\"wisp.dev/sidecar-cpu-request\": quantities must match the regular expression "
       "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"},
      {R"(,"wisp.dev/sidecar-cpu-request":"2","wisp.dev/sidecar-cpu-limit":"500m")", "",
       "sidecar container cpu request 2 must be less than or equal to its limit 500m "
       "(\"wisp.dev/sidecar-cpu-request\", \"wisp.dev/sidecar-cpu-limit\")"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.annotations);
    auto in = Pod(LoaderPod(true, R"("wisp.dev/token-sidecar":"true")" + c.annotations), "ml");
    Verdict v = EvaluateTokenSidecar(in, Policy{});
    if (c.resources.empty()) {
      EXPECT_FALSE(v.allowed);
      EXPECT_EQ(v.message, c.message);
      EXPECT_TRUE(v.patch.empty());
      continue;
    }
    ASSERT_TRUE(v.allowed) << v.message;
    Json out = Apply(in, v);
    EXPECT_EQ(out["spec"]["initContainers"][0]["resources"], Json::parse(c.resources));
  }
}

// Tests the token audience: the wisp volume's identityProvider wins over the policy default, and
// an audience the namespace may not use is denied.
TEST(TokenSidecarTest, AudienceFromIdentityProviderAndAllowList) {
  const std::string pod =
      R"({"metadata":{"name":"p","annotations":{"wisp.dev/token-sidecar":"true"}},
    "spec":{"hostNetwork":true,"containers":[{"name":"app","image":"a"}],
    "volumes":[{"name":"v","csi":{"driver":"csi.wisp.dev","volumeAttributes":{"identityProvider":"https://idp.example"}}},
               {"name":"claim","persistentVolumeClaim":{"claimName":"wisp-pvc"}}]}})";
  auto in = Pod(pod, "ml");
  Verdict v = EvaluateTokenSidecar(in, Policy{});
  Json out = Apply(in, v);
  // wisp's volumes go after the user's, who keep their indices.
  EXPECT_EQ(out["spec"]["volumes"][0]["name"], "v");
  EXPECT_EQ(out["spec"]["volumes"][2]["projected"]["sources"][0]["serviceAccountToken"]["audience"],
            "https://idp.example");
  EXPECT_EQ(out["spec"]["initContainers"].size(), 1u);  // one sidecar for both volumes
  EXPECT_EQ(out["spec"]["initContainers"][0]["args"][2], "--audience=https://idp.example");

  Policy restricted;
  restricted.audiences["ml"] = {"wisp"};
  Verdict denied = EvaluateTokenSidecar(in, restricted);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.message,
            "spec.volumes[wisp-sa-token].projected.sources[0].serviceAccountToken.audience: "
            "Forbidden: audience \"https://idp.example\" is not allowed in namespace \"ml\" "
            "(allowed: \"wisp\")");
}

// Tests that only CREATE of a Pod is mutated and that a disabled rule does nothing.
TEST(TokenSidecarTest, OnlyPodCreate) {
  auto update = testing::Input("", "Pod", "UPDATE", LoaderPod(true), "ml");
  EXPECT_EQ(EvaluateTokenSidecar(update, Policy{}).rule_outcomes.at("token_sidecar"), "skipped");
  Policy off;
  off.rules.token_sidecar = false;
  Verdict v = EvaluateTokenSidecar(Pod(LoaderPod(true), "ml"), off);
  EXPECT_TRUE(v.patch.empty());
  EXPECT_EQ(v.rule_outcomes.at("token_sidecar"), "disabled");
}

// Tests GCSFuse's privately hosted sidecar image: a user-declared wisp-sidecar container is
// removed and only its image reused; an init container of that name is removed; a bad image is
// refused with upstream's message; a pod whose wisp-sidecar merely has the name is not
// "already injected".
TEST(TokenSidecarTest, UserDeclaredSidecarImage) {
  struct Case {
    std::string name;
    std::string containers;       // JSON array items appended after "main"
    std::string init_containers;  // JSON array
    std::string image;            // expected sidecar image; "" = denied
    std::string message;
  } cases[] = {
      {"custom image in containers",
       R"(,{"name":"wisp-sidecar","image":"registry.corp/wisp/sidecar:1.2","args":["--x"],
           "resources":{"limits":{"cpu":"9"}}})",
       "[]", "registry.corp/wisp/sidecar:1.2", ""},
      {"custom image and an init container of the name",
       R"(,{"name":"wisp-sidecar","image":"registry.corp:5000/wisp/sidecar@sha256:)" +
           std::string(64, 'a') + R"("})",
       R"([{"name":"wisp-sidecar","image":"ignored:1"},{"name":"setup","image":"busybox"}])",
       "registry.corp:5000/wisp/sidecar@sha256:" + std::string(64, 'a'), ""},
      {"only an init container of the name", "", R"([{"name":"wisp-sidecar","image":"ignored:1"}])",
       "ghcr.io/wisp-dev/wisp-sidecar:0.1.0", ""},
      {"upper-case repository", R"(,{"name":"wisp-sidecar","image":"Registry.corp/Wisp:1"})", "[]",
       "",
       "could not parse input image: \"Registry.corp/Wisp:1\", error: couldn't parse image name "
       "\"Registry.corp/Wisp:1\": invalid reference format: repository name (Wisp) must be "
       "lowercase"},
      {"bad reference", R"(,{"name":"wisp-sidecar","image":"wisp sidecar"})", "[]", "",
       "could not parse input image: \"wisp sidecar\", error: couldn't parse image name \"wisp "
       "sidecar\": invalid reference format"},
      {"empty image", R"(,{"name":"wisp-sidecar","image":""})", "[]", "",
       "could not parse input image: \"\", error: couldn't parse image name \"\": repository "
       "name must have at least one component"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Json pod = Json::parse(LoaderPod(true));
    Json extra = Json::parse("[" + (c.containers.empty() ? "" : c.containers.substr(1)) + "]");
    for (auto& e : extra) pod["spec"]["containers"].push_back(e);
    pod["spec"]["initContainers"] = Json::parse(c.init_containers);
    auto in = Pod(pod.dump(), "ml", "1.30");
    Verdict v = EvaluateTokenSidecar(in, Policy{});
    if (c.image.empty()) {
      EXPECT_FALSE(v.allowed);
      EXPECT_EQ(v.code, 400);
      EXPECT_EQ(v.message, c.message);
      continue;
    }
    ASSERT_TRUE(v.allowed) << v.message;
    Json out = Apply(in, v);
    // Exactly one wisp-sidecar remains: the injected native sidecar, first init container.
    ASSERT_EQ(out["spec"]["containers"].size(), 1u);
    EXPECT_EQ(out["spec"]["containers"][0]["name"], "main");
    const Json& inits = out["spec"]["initContainers"];
    EXPECT_EQ(inits[0]["name"], "wisp-sidecar");
    EXPECT_EQ(inits[0]["image"], c.image);
    EXPECT_EQ(inits[0]["restartPolicy"], "Always");
    EXPECT_EQ(inits[0]["resources"]["limits"]["cpu"], "250m");  // the user's fields are dropped
    EXPECT_EQ(inits[0]["args"].size(), 3u);
    size_t named = 0;
    for (const auto& i : inits) named += i["name"] == "wisp-sidecar" ? 1 : 0;
    EXPECT_EQ(named, 1u);
    Verdict again = EvaluateTokenSidecar(Rerun(in, out), Policy{});
    EXPECT_TRUE(again.patch.empty()) << again.patch;
    EXPECT_EQ(again.message, "The sidecar container was injected, no injection required.");
  }
}

// Tests the pod shapes the patch must build on: a pod without spec or lists gets them created, in
// the order the operations apply (a container with istio-proxy first and a user sidecar removed
// before it); members of the wrong type, which kube-apiserver never sends, are refused by name
// rather than overwritten.
TEST(TokenSidecarTest, PodShapes) {
  Policy off;
  off.native_sidecar = NativeSidecarMode::kOff;
  const std::string annotated = R"("metadata":{"annotations":{"wisp.dev/token-sidecar":"true"}})";
  {
    auto in = Pod("{" + annotated + R"(,"spec":{"hostNetwork":true}})");
    Json out = Apply(in, EvaluateTokenSidecar(in, Policy{}));
    EXPECT_EQ(out["spec"]["initContainers"][0]["name"], "wisp-sidecar");
    EXPECT_EQ(out["spec"]["volumes"].size(), 3u);
    EXPECT_EQ(out["spec"]["volumes"][1]["name"], "wisp-token-socket");
    EXPECT_EQ(out["spec"]["volumes"][2]["name"], "wisp-no-api-token");
    EXPECT_FALSE(out["spec"].contains("containers"));
    EXPECT_TRUE(EvaluateTokenSidecar(Rerun(in, out), Policy{}).patch.empty());
  }
  {
    Policy all = off;
    all.token_volume_for = TokenVolumeFor::kAll;
    auto in = Pod("{" + annotated + "}");
    Json out = Apply(in, EvaluateTokenSidecar(in, all));
    EXPECT_EQ(out["spec"]["containers"][0]["name"], "wisp-sidecar");
    EXPECT_EQ(out["spec"]["volumes"].size(), 3u);
  }
  {
    auto in = Pod("{" + annotated + R"(,"spec":{"hostNetwork":true,"containers":[
        {"name":"wisp-sidecar","image":"mine:1"},{"name":"istio-proxy","image":"istio"},
        {"name":"app","image":"a","env":[{"name":"X","value":"1"}]}]}})");
    Verdict v = EvaluateTokenSidecar(in, off);
    Json out = Apply(in, v);
    ASSERT_EQ(out["spec"]["containers"].size(), 3u) << out.dump();
    EXPECT_EQ(out["spec"]["containers"][0]["name"], "istio-proxy");
    EXPECT_EQ(out["spec"]["containers"][1]["name"], "wisp-sidecar");
    EXPECT_EQ(out["spec"]["containers"][1]["image"], "mine:1");
    EXPECT_EQ(out["spec"]["containers"][2]["env"][1]["name"], "WISP_TOKEN_URL");
    EXPECT_EQ(out["spec"]["containers"][0]["volumeMounts"][0]["name"], "wisp-token-socket");
    EXPECT_TRUE(EvaluateTokenSidecar(Rerun(in, out), off).patch.empty());
  }
  struct Case {
    std::string spec;
    std::string message;
  } cases[] = {
      {R"("spec":[])", "spec: Invalid value: must be an object"},
      {R"("spec":{"hostNetwork":true,"volumes":{}})",
       "spec.volumes: Invalid value: must be an array"},
      {R"("spec":{"hostNetwork":true,"containers":"app"})",
       "spec.containers: Invalid value: must be an array"},
      {R"("spec":{"hostNetwork":true,"initContainers":7})",
       "spec.initContainers: Invalid value: must be an array"},
      {R"("spec":{"hostNetwork":true,"containers":[{"name":"a"},"b"]})",
       "spec.containers[1]: Invalid value: must be an object"},
      {R"("spec":{"hostNetwork":true,"containers":[{"name":"a","volumeMounts":{}}]})",
       "spec.containers[0].volumeMounts: Invalid value: must be an array"},
      {R"("spec":{"hostNetwork":true,"containers":[{"name":"a","env":"X=1"}]})",
       "spec.containers[0].env: Invalid value: must be an array"},
  };
  Policy all;
  all.token_volume_for = TokenVolumeFor::kAll;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.spec);
    Verdict v = EvaluateTokenSidecar(Pod("{" + annotated + "," + c.spec + "}"), all);
    EXPECT_FALSE(v.allowed);
    EXPECT_EQ(v.code, 400);
    EXPECT_EQ(v.message, c.message);
    EXPECT_TRUE(v.patch.empty());
  }
}

// Tests that the mutate path gives the same answer whether the pod's tree was built or deferred
// (wisp-policy defers it), and that a deferred tree is built only for a virt-launcher pod.
TEST(TokenSidecarTest, DeferredTreeGivesTheSameAnswer) {
  auto parsed = Pod(LoaderPod(true), "ml", "1.30");
  auto deferred =
      AdmissionInput::FromCall(parsed.call, parsed.now_unix, AdmissionInput::PodTree::kDefer);
  ASSERT_TRUE(deferred.ok()) << deferred.status();
  EXPECT_TRUE(deferred->object.is_null());
  EXPECT_TRUE(deferred->object_deferred);
  Verdict a = EvaluateMutate(parsed, Policy{}, testing::NoRecords());
  Verdict b = EvaluateMutate(*deferred, Policy{}, testing::NoRecords());
  EXPECT_FALSE(a.patch.empty());
  EXPECT_EQ(a.patch, b.patch);
  EXPECT_EQ(a.rule_outcomes, b.rule_outcomes);
  EXPECT_EQ(a.audit_annotations, b.audit_annotations);
  EXPECT_EQ(b.rule_outcomes.at("virt_launcher"), "skipped");
  EXPECT_EQ(deferred->Namespace(), "ml");
  ASSERT_TRUE(deferred->ParseObject().ok());
  EXPECT_EQ(deferred->object, parsed.object);
}

}  // namespace
}  // namespace wisp::policy
