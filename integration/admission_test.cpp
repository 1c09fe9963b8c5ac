// Admission end to end: AdmissionReview documents built from the manifests users write (GCSFuse,
// KubeVirt, CDI shapes, integration/admission/manifests) POSTed over HTTPS, verified against the
// test CA, to the running gateway + wisp-policy + nats-server. Every returned patch is applied by
// an independent implementation (python3-jsonpatch) and the result validated against the
// Kubernetes schema (npm kubernetes-models, plus the unknown-field check of tools/k8s-fields.mjs).
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <iterator>
#include <thread>
#include <nlohmann/json.hpp>

#include "admission/admission_review.hpp"
#include "wisp/integration/stack.hpp"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

class AdmissionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A copy of the local stack's policy, so the reload test can rewrite it.
    policy_dir_ = std::make_unique<TempDir>("wisp-it-policy");
    policy_file_ = policy_dir_->path() + "/policy.yaml";
    local_policy_ = fsutil::ReadFile(SourceDir() + "/deploy/local/policy.yaml").value_or("");
    std::ofstream(policy_file_) << local_policy_;
    auto stack = Stack::Start({.populator = false, .policy_file = policy_file_});
    ASSERT_TRUE(stack.ok()) << stack.status();
    stack_ = std::move(*stack);
  }
  static void TearDownTestSuite() {
    stack_.reset();
    policy_dir_.reset();
  }

  // POSTs the object's AdmissionReview; checks the envelope and returns response.
  Json Admit(const std::string& webhook, const Json& object, const std::string& uid) {
    Json review = PostAdmissionReview(*stack_, webhook, object, uid);
    if (review.is_null()) return Json();
    EXPECT_EQ(review["apiVersion"], "admission.k8s.io/v1");
    EXPECT_EQ(review["kind"], "AdmissionReview");
    EXPECT_EQ(review["response"]["uid"], uid);
    last_review_ = review;
    return review["response"];
  }

  // Stores `object` as the apiserver would after admitting it: `wispctl admit --bus` (its
  // stand-in for a committed object: wisp.v1.policy.record, as the gateway's watch sends).
  void Commit(const Json& object) {
    const std::string file = stack_->dir() + "/commit-in.json";
    std::ofstream(file) << object.dump();
    std::string cmd = BinaryPath("wispctl") + " admit --bus -f " + file;
    for (const auto& a : stack_->WispctlArgs()) cmd += " '" + a + "'";
    CommandResult r = RunCommand(cmd + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("recordWrites: 1"), std::string::npos) << r.output;
  }

  // Applies the last answer's patch to `object` with python3-jsonpatch.
  Json ApplyIndependently(const Json& object) {
    return ApplyPatchIndependently(object, last_review_, stack_->dir() + "/apply-in.json");
  }

  // The object after /mutate, its patch applied with python3-jsonpatch.
  Json Mutate(const Json& object, const std::string& uid) {
    Json resp = Admit("mutate", object, uid);
    EXPECT_EQ(resp["allowed"], true) << resp.dump();
    return ApplyIndependently(object);
  }

  // Schema check of a core/v1 object with kubernetes-models.
  std::string Validate(const Json& object) {
    const std::string in = stack_->dir() + "/validate-in.json";
    std::ofstream(in) << object.dump();
    auto r = RunCommand("node " + AdmissionManifestDir() + "/validate_k8s.mjs < " + in + " 2>&1");
    return r.exit_code == 0 ? "ok" : r.output;
  }

  static std::unique_ptr<Stack> stack_;
  static std::unique_ptr<TempDir> policy_dir_;
  static std::string policy_file_;
  static std::string local_policy_;
  Json last_review_;
};
std::unique_ptr<Stack> AdmissionTest::stack_;
std::unique_ptr<TempDir> AdmissionTest::policy_dir_;
std::string AdmissionTest::policy_file_;
std::string AdmissionTest::local_policy_;

const Json* Named(const Json& list, const std::string& name) {
  for (const auto& item : list) {
    if (item.value("name", "") == name) return &item;
  }
  return nullptr;
}

// Tests scenario 1: the hostNetwork loader gets the sidecar and the projected token, the patched
// pod is a valid Pod, passes /validate, and a reinvocation adds nothing.
TEST_F(AdmissionTest, HostNetworkPodGetsSidecarAndToken) {
  Json pod = LoadManifest("loader-pod.yaml");
  Json resp = Admit("mutate", pod, "it-pod-1");
  ASSERT_EQ(resp["allowed"], true) << resp.dump();
  ASSERT_EQ(resp["patchType"], "JSONPatch");
  Json out = ApplyIndependently(pod);
  EXPECT_EQ(Validate(out), "ok");
  const Json& init = out["spec"]["initContainers"];
  ASSERT_NE(Named(init, "wisp-sidecar"), nullptr) << out.dump(2);
  const Json& sidecar = *Named(init, "wisp-sidecar");
  EXPECT_EQ(sidecar["restartPolicy"], "Always");
  EXPECT_EQ(sidecar["resources"]["limits"]["memory"], "1Gi");
  EXPECT_FALSE(sidecar["resources"]["limits"].contains("cpu"));  // "0" = unlimited
  const Json* token = Named(out["spec"]["volumes"], "wisp-sa-token");
  ASSERT_NE(token, nullptr);
  EXPECT_EQ(
      (*token)["projected"]["sources"][0]["serviceAccountToken"],
      Json::parse(R"({"audience":"ml-pool.svc.id.goog","expirationSeconds":3600,"path":"token"})"));
  EXPECT_EQ(out["spec"]["containers"][0]["env"][0]["value"], "unix:///var/run/wisp/token.sock");
  EXPECT_EQ(resp["auditAnnotations"]["token-volume"], "wisp-sa-token audience=ml-pool.svc.id.goog");

  Json validated = Admit("validate", out, "it-pod-2");
  EXPECT_EQ(validated["allowed"], true) << validated.dump();
  Json again = Admit("mutate", out, "it-pod-3");
  EXPECT_EQ(again["allowed"], true);
  EXPECT_FALSE(again.contains("patch")) << again.dump();
}

// Tests issue 25 over HTTPS: a pod carrying IRSA's role annotation itself (the form that works
// before the gateway reads ServiceAccounts) gets the aws preset in the allowed container, and a
// second token for vault in `worker` only; the patched pod is a valid Pod (python3-jsonpatch,
// kubernetes-models), passes /validate (the audiences of namespace apps), and a reinvocation
// adds nothing. A malformed role ARN is refused naming the annotation.
TEST_F(AdmissionTest, IrsaAnnotatedPodGetsTheAwsPreset) {
  Json pod = LoadManifest("irsa-pod-annotation.yaml");
  Json out = Mutate(pod, "it-irsa-1");
  EXPECT_EQ(Validate(out), "ok");
  const Json& app = out["spec"]["containers"][0];
  const Json& worker = out["spec"]["containers"][1];
  auto env = [](const Json& c, const std::string& name) -> std::string {
    const Json list = c.value("env", Json::array());
    const Json* e = Named(list, name);
    return e == nullptr ? "" : (*e)["value"].get<std::string>();
  };
  EXPECT_EQ(env(app, "AWS_ROLE_ARN"), "arn:aws:iam::111122223333:role/s3-reader");
  EXPECT_EQ(env(app, "AWS_WEB_IDENTITY_TOKEN_FILE"),
            "/var/run/secrets/eks.amazonaws.com/serviceaccount/token");
  EXPECT_EQ(env(worker, "AWS_ROLE_ARN"), "");
  EXPECT_EQ(env(worker, "VAULT_JWT"), "/var/run/secrets/vault/token");
  EXPECT_EQ(env(app, "VAULT_JWT"), "");
  const Json* aws = Named(out["spec"]["volumes"], "aws-iam-token");
  ASSERT_NE(aws, nullptr) << out.dump(2);
  EXPECT_EQ((*aws)["csi"]["volumeAttributes"],
            Json::parse(R"({"audience":"sts.amazonaws.com","expirationSeconds":"86400",
                           "path":"token","fileOwner":"1000","fileMode":"0600"})"));
  const Json* vault = Named(out["spec"]["volumes"], "wisp-id-vault");
  ASSERT_NE(vault, nullptr);
  EXPECT_EQ((*vault)["csi"]["volumeAttributes"]["expirationSeconds"], "900");
  Json validated = Admit("validate", out, "it-irsa-2");
  EXPECT_EQ(validated["allowed"], true) << validated.dump();
  Json again = Admit("mutate", out, "it-irsa-3");
  EXPECT_EQ(again["allowed"], true);
  EXPECT_FALSE(again.contains("patch")) << again.dump();

  pod["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] = "s3-reader";
  Json bad = Admit("mutate", pod, "it-irsa-4");
  EXPECT_EQ(bad["allowed"], false);
  EXPECT_EQ(bad["status"]["code"], 400);
  EXPECT_EQ(bad["status"]["message"],
            "metadata.annotations[eks.amazonaws.com/role-arn]: Invalid value: \"s3-reader\": "
            "must be an IAM role ARN, arn:<partition>:iam::<12-digit account>:role/<name>");
}

// Tests scenario 1 step 4: without hostNetwork nothing changes and a warning says why.
TEST_F(AdmissionTest, PodNetworkPodIsLeftAlone) {
  Json resp = Admit("mutate", LoadManifest("loader-pod-no-hostnetwork.yaml"), "it-pod-4");
  EXPECT_EQ(resp["allowed"], true);
  EXPECT_FALSE(resp.contains("patch"));
  ASSERT_EQ(resp["warnings"].size(), 1u);
  EXPECT_NE(resp["warnings"][0].get<std::string>().find("does not use hostNetwork"),
            std::string::npos);
}

// Tests scenario 2 on stock KubeVirt: the annotated VMI passes /mutate (which adds only the
// containerPath's mount annotation) and /validate with its annotation intact, a 300 s request is
// refused naming the field, and the launcher pod virt-controller renders from it gets the
// projected token, its compute mount and the virtiofs container, from the pod alone.
TEST_F(AdmissionTest, VmiTokenAnnotationReachesLauncherPod) {
  const Json vmi = LoadManifest("vmi-token-annotation.yaml");
  const Json mutated = Mutate(vmi, "it-vmi-1");
  EXPECT_EQ(mutated["metadata"]["annotations"]["wisp.dev/token.aws-token"],
            vmi["metadata"]["annotations"]["wisp.dev/token.aws-token"]);
  EXPECT_EQ(mutated["metadata"]["annotations"]["wisp.dev/token-mount.aws-token"],
            "/var/run/secrets/eks.amazonaws.com/serviceaccount");
  Json ok = Admit("validate", mutated, "it-vmi-2");
  EXPECT_EQ(ok["allowed"], true) << ok.dump();
  Json short_lived = vmi;
  short_lived["metadata"]["annotations"]["wisp.dev/token.aws-token"] =
      R"({"audience":"sts.amazonaws.com","expirationSeconds":300,"path":"token"})";
  Json denied = Admit("validate", Mutate(short_lived, "it-vmi-3"), "it-vmi-4");
  EXPECT_EQ(denied["allowed"], false);
  EXPECT_EQ(denied["status"]["message"],
            "metadata.annotations[wisp.dev/token.aws-token].expirationSeconds: Invalid value: 300: "
            "must be at least 600 (10 minutes)");

  Json launcher = LoadManifest("virt-launcher-pod-token-annotation.yaml");
  EXPECT_EQ(Validate(launcher), "ok");
  EXPECT_EQ(launcher["metadata"]["annotations"]["wisp.dev/token-mount.aws-token"],
            mutated["metadata"]["annotations"]["wisp.dev/token-mount.aws-token"])
      << "the fixture carries the VMI's annotations as virt-controller copies them";
  Json resp = Admit("mutate", launcher, "it-vmi-5");
  ASSERT_EQ(resp["allowed"], true) << resp.dump();
  Json out = ApplyIndependently(launcher);
  EXPECT_EQ(Validate(out), "ok");
  const Json* vol = Named(out["spec"]["volumes"], "wisp-token-aws-token");
  ASSERT_NE(vol, nullptr) << out.dump(2);
  EXPECT_EQ((*vol)["projected"]["sources"][0]["serviceAccountToken"],
            Json::parse(R"({"audience":"sts.amazonaws.com","expirationSeconds":3600,
                            "path":"token"})"));
  const Json* fs = Named(out["spec"]["containers"], "virtiofs-aws-token");
  ASSERT_NE(fs, nullptr) << out.dump(2);
  EXPECT_EQ((*fs)["args"][0], "--socket-path=/var/run/kubevirt/virtiofs-containers/aws-token.sock");
  EXPECT_EQ((*fs)["args"].back(), "--translate-uid=host:107:0:1");
  EXPECT_EQ((*fs)["securityContext"]["runAsUser"], 107);
  EXPECT_EQ((*fs)["volumeMounts"][1],
            Json::parse(R"({"name":"wisp-token-aws-token","mountPath":"/virtiofs-data/aws-token",
                            "readOnly":true})"));
  const Json* compute = Named(out["spec"]["containers"], "compute");
  ASSERT_NE(compute, nullptr);
  EXPECT_EQ((*compute)["volumeMounts"].back(), Json::parse(R"({"name":"wisp-token-aws-token",
                            "mountPath":"/var/run/secrets/eks.amazonaws.com/serviceaccount",
                            "readOnly":true})"));
  EXPECT_EQ(Admit("validate", out, "it-vmi-6")["allowed"], true);  // rule f: audience allowed
  EXPECT_FALSE(Admit("mutate", out, "it-vmi-7").contains("patch"));
}

// Tests scenario 2 on a KubeVirt with VEP 94: the serviceAccountToken VMI gets the equivalent
// annotation and is accepted, a 300 s one is refused with Kubernetes' message, and
// virt-controller's virtiofs-irsa container (the API-audience token) is pointed at the
// requested token.
TEST_F(AdmissionTest, Vep94VmiTokenVolumeReachesLauncherPod) {
  const Json vmi = Mutate(LoadManifest("vmi-irsa.yaml"), "it-vep94-1");
  EXPECT_EQ(vmi["metadata"]["annotations"]["wisp.dev/token.irsa"],
            R"({"audience":"sts.amazonaws.com","expirationSeconds":3600,"path":"token"})");
  Json ok = Admit("validate", vmi, "it-vep94-2");
  EXPECT_EQ(ok["allowed"], true) << ok.dump();
  Json denied = Admit("validate", LoadManifest("vmi-short-lifetime.yaml"), "it-vep94-3");
  EXPECT_EQ(denied["allowed"], false);
  EXPECT_EQ(denied["status"]["message"],
            "spec.volumes[0].serviceAccount.serviceAccountToken.expirationSeconds: Invalid "
            "value: 300: may not specify a duration less than 10 minutes");

  Json launcher = LoadManifest("virt-launcher-pod.yaml");
  Json resp = Admit("mutate", launcher, "it-vep94-4");
  ASSERT_EQ(resp["allowed"], true) << resp.dump();
  Json out = ApplyIndependently(launcher);
  EXPECT_EQ(Validate(out), "ok");
  const Json* fs = Named(out["spec"]["containers"], "virtiofs-irsa");
  ASSERT_NE(fs, nullptr) << out.dump(2);
  EXPECT_EQ((*fs)["args"][0], "--socket-path=/var/run/kubevirt/virtiofs-containers/irsa.sock");
  EXPECT_EQ((*fs)["args"][1], "--shared-dir=/virtiofs-data/irsa");
  EXPECT_EQ((*fs)["securityContext"]["runAsUser"], 107);
  const Json* vol = Named(out["spec"]["volumes"], "wisp-token-irsa");
  ASSERT_NE(vol, nullptr);
  EXPECT_EQ((*vol)["projected"]["sources"][0]["serviceAccountToken"]["audience"],
            "sts.amazonaws.com");
  EXPECT_EQ(resp["auditAnnotations"]["virtiofs-containers-rewritten"], "virtiofs-irsa");
  EXPECT_FALSE(Admit("mutate", out, "it-vep94-5").contains("patch"));
}

// Tests scenario 3's admission side: CDI's DataVolume rules, and a PVC that names a
// VolumeImportSource before it exists (allowed with a warning, as Kubernetes lets it) and after.
TEST_F(AdmissionTest, DataVolumesAndImportSources) {
  EXPECT_EQ(Admit("validate", LoadManifest("datavolume-http.yaml"), "it-dv-1")["allowed"], true);
  Json cross = Admit("validate", LoadManifest("datavolume-cross-namespace.yaml"), "it-dv-2");
  EXPECT_EQ(cross["allowed"], false);
  EXPECT_EQ(cross["status"]["message"], "Invalid value: DataSourceRef namespace not supported");

  Json pvc = LoadManifest("pvc-import.yaml");
  EXPECT_EQ(Validate(pvc), "ok");
  Json early = Admit("validate", pvc, "it-pvc-1");
  EXPECT_EQ(early["allowed"], true) << early.dump();
  ASSERT_EQ(early["warnings"].size(), 1u) << early.dump();
  EXPECT_NE(early["warnings"][0].get<std::string>().find("does not exist yet"), std::string::npos);
  Json vis = LoadManifest("volumeimportsource.yaml");
  EXPECT_EQ(Admit("validate", vis, "it-vis-1")["allowed"], true);
  Commit(vis);
  Json late = Admit("validate", pvc, "it-pvc-2");
  EXPECT_FALSE(late.contains("warnings")) << late.dump();
  EXPECT_EQ(late["allowed"], true) << late.dump();
  EXPECT_EQ(late["auditAnnotations"]["population-record"], "vms.PersistentVolumeClaim.vm-disk");
}

// Tests CDI's own VolumeImportSource on the local stack: `wispctl admit` commits it as the
// gateway's watch would (no webhook sends it on a cluster), and a PVC whose dataSourceRef names it
// is then admitted through the gateway with its source found (no "does not exist yet" warning).
TEST_F(AdmissionTest, CdiVolumeImportSourceIsRecordedAndNamed) {
  const Json vis = Json::parse(R"({"apiVersion":"cdi.kubevirt.io/v1beta1",
    "kind":"VolumeImportSource","metadata":{"name":"cdi-golden","namespace":"vms"},
    "spec":{"source":{"http":{"url":"https://images.example/cirros.img"}}}})");
  Commit(vis);
  Json pvc = LoadManifest("pvc-import.yaml");
  pvc["metadata"]["name"] = "cdi-disk";
  pvc["spec"]["dataSourceRef"] = {
      {"apiGroup", "cdi.kubevirt.io"}, {"kind", "VolumeImportSource"}, {"name", "cdi-golden"}};
  EXPECT_EQ(Validate(pvc), "ok");
  Json resp = Admit("validate", pvc, "it-cdi-1");
  EXPECT_EQ(resp["allowed"], true) << resp.dump();
  EXPECT_FALSE(resp.contains("warnings")) << resp.dump();
  EXPECT_EQ(resp["auditAnnotations"]["population-record"], "vms.PersistentVolumeClaim.cdi-disk");
}

// Tests VEP 165 without a wisp token: the containerPath VMI is accepted, one into libvirt's
// directory is refused, and its launcher pod (with the token volume another webhook injected) is
// left to KubeVirt's own launcher-pod mutator; asking wisp for a token at that same path is
// refused with the reason.
TEST_F(AdmissionTest, ContainerPathVolumeReachesLauncherPod) {
  Json ok = Admit("validate", LoadManifest("vmi-containerpath.yaml"), "it-cp-1");
  EXPECT_EQ(ok["allowed"], true) << ok.dump();
  Json reserved = Admit("validate", LoadManifest("vmi-containerpath-reserved.yaml"), "it-cp-2");
  EXPECT_EQ(reserved["allowed"], false);
  EXPECT_EQ(reserved["status"]["message"],
            "ContainerPath volume 'libvirt' uses reserved path prefix '/var/run/libvirt'");

  Json launcher = LoadManifest("virt-launcher-pod-containerpath.yaml");
  EXPECT_EQ(Validate(launcher), "ok");
  Json resp = Admit("mutate", launcher, "it-cp-3");
  ASSERT_EQ(resp["allowed"], true) << resp.dump();
  EXPECT_FALSE(resp.contains("patch")) << "KubeVirt's mutator serves a containerPath wisp was "
                                          "not asked for";
  Json clash = launcher;
  clash["metadata"]["annotations"]["wisp.dev/token.aws-token"] =
      R"({"audience":"sts.amazonaws.com","expirationSeconds":3600,"path":"token"})";
  clash["metadata"]["annotations"]["wisp.dev/token-mount.aws-token"] =
      "/var/run/secrets/eks.amazonaws.com/serviceaccount";
  Json refused = Admit("mutate", clash, "it-cp-4");
  EXPECT_EQ(refused["allowed"], false);
  EXPECT_NE(refused["status"]["message"].get<std::string>().find(
                "already mounts volume \"aws-iam-token\""),
            std::string::npos)
      << refused.dump();
}

// Tests CDI's destination-PVC rule: a PVC only admitted (never stored) does not block a
// DataVolume of its name; once stored, it does.
TEST_F(AdmissionTest, DataVolumeOverExistingPvcIsRefused) {
  Json pvc = LoadManifest("pvc-existing.yaml");
  EXPECT_EQ(Admit("validate", pvc, "it-dvp-1")["allowed"], true);
  EXPECT_EQ(Admit("validate", LoadManifest("datavolume-existing-pvc.yaml"), "it-dvp-2")["allowed"],
            true);
  Commit(pvc);
  Json dv = Admit("validate", LoadManifest("datavolume-existing-pvc.yaml"), "it-dvp-3");
  EXPECT_EQ(dv["allowed"], false);
  EXPECT_EQ(dv["status"]["message"], "Destination PVC vms/scratch already exists");
}

// Tests the privately hosted sidecar image: the declared wisp-sidecar is replaced by the injected
// one, which keeps its image.
TEST_F(AdmissionTest, UserDeclaredSidecarImage) {
  Json pod = LoadManifest("pod-custom-sidecar-image.yaml");
  Json resp = Admit("mutate", pod, "it-img-1");
  ASSERT_EQ(resp["allowed"], true) << resp.dump();
  Json out = ApplyIndependently(pod);
  EXPECT_EQ(Validate(out), "ok");
  EXPECT_EQ(out["spec"]["containers"].size(), 1u);
  const Json* sidecar = Named(out["spec"]["initContainers"], "wisp-sidecar");
  ASSERT_NE(sidecar, nullptr) << out.dump(2);
  EXPECT_EQ((*sidecar)["image"], "registry.corp.example/mirror/wisp-sidecar:0.1.0");
}

// Tests SIGHUP: a new policy file takes effect without a restart, and a broken one is refused
// while the policy in force keeps answering.
TEST_F(AdmissionTest, PolicyReloadsOnSighup) {
  Json request = LoadManifest("vmi-token-annotation.yaml");
  request["metadata"]["name"] = "reload-vm";
  request["metadata"]["annotations"]["wisp.dev/token.aws-token"] =
      R"({"audience":"reloaded","expirationSeconds":3600,"path":"token"})";
  const Json vmi = Mutate(request, "it-reload-0");
  ASSERT_EQ(Admit("validate", vmi, "it-reload-1")["allowed"], false);

  auto admit_until = [&](bool want) {
    for (int i = 0; i < 50; ++i) {
      if (Admit("validate", vmi, "it-reload-" + std::to_string(i + 2))["allowed"] == want) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  std::string widened = local_policy_;
  widened.replace(widened.find("vms: [wisp,"), 11, "vms: [reloaded, wisp,");
  std::ofstream(policy_file_) << widened;
  stack_->process("wisp-policy").Signal(SIGHUP);
  EXPECT_TRUE(admit_until(true));
  EXPECT_TRUE(stack_->process("wisp-policy").WaitForLog("policy reloaded from", 5s).ok());

  std::ofstream(policy_file_) << "rules: {tokenSidecar: maybe}\n";
  stack_->process("wisp-policy").Signal(SIGHUP);
  EXPECT_TRUE(
      stack_->process("wisp-policy").WaitForLog("refused, keeping the policy in force", 5s).ok());
  EXPECT_EQ(Admit("validate", vmi, "it-reload-99")["allowed"], true);  // still the widened policy

  std::ofstream(policy_file_) << local_policy_;
  stack_->process("wisp-policy").Signal(SIGHUP);
  EXPECT_TRUE(admit_until(false));
}

// Tests that malformed requests get 400 naming the problem.
TEST_F(AdmissionTest, BadRequestsGet400) {
  auto wrong_type =
      stack_->Https("POST", "/mutate", AdmissionReviewFor(LoadManifest("loader-pod.yaml"), "x"),
                    {{"Content-Type", "text/plain"}});
  ASSERT_TRUE(wrong_type.ok());
  EXPECT_EQ(wrong_type->status, 400);
  EXPECT_NE(wrong_type->body.find("is not application/json"), std::string::npos);
  auto bad_json = stack_->Https("POST", "/validate",
                                "{\"apiVersion\":", {{"Content-Type", "application/json"}});
  ASSERT_TRUE(bad_json.ok());
  EXPECT_EQ(bad_json->status, 400);
  EXPECT_NE(bad_json->body.find("body is not valid JSON"), std::string::npos);
  Json deploy = {{"apiVersion", "apps/v1"}, {"kind", "Deployment"}, {"metadata", {{"name", "d"}}}};
  auto unknown = stack_->Https("POST", "/mutate", AdmissionReviewFor(deploy, "y"),
                               {{"Content-Type", "application/json"}});
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->status, 400);
  EXPECT_NE(unknown->body.find("is not admitted by wisp"), std::string::npos);
}

// Tests fail-closed when wisp-policy is gone: a denial naming the cause, well inside ?timeout=.
TEST_F(AdmissionTest, FailsClosedWithoutPolicy) {
  stack_->Kill("wisp-policy");
  auto start = std::chrono::steady_clock::now();
  Json resp = Admit("mutate", LoadManifest("loader-pod.yaml"), "it-down-1");
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(resp["allowed"], false);
  EXPECT_EQ(resp["status"]["message"].get<std::string>().rfind("wisp policy unavailable: ", 0), 0u)
      << resp.dump();
  EXPECT_LT(took, 5s);
  ASSERT_TRUE(stack_->StartService("wisp-policy").ok());
  ASSERT_TRUE(stack_->WaitReady("wisp-policy").ok());
}

}  // namespace
}  // namespace wisp::integration
