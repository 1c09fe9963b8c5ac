// Admission end to end: AdmissionReview documents built from the manifests users write (GCSFuse,
// KubeVirt, CDI shapes, integration/admission/manifests) POSTed over HTTPS, verified against the
// test CA, to the running gateway + wisp-policy + nats-server. Every returned patch is applied by
// an independent implementation (python3-jsonpatch) and the result validated against the
// Kubernetes schema (npm kubernetes-models, plus the unknown-field check of tools/k8s-fields.mjs).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "wisp/integration/stack.hpp"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

std::string Dir() { return SourceDir() + "/integration/admission"; }

Json Manifest(const std::string& name) {
  auto r = RunCommand(
      "/usr/bin/python3 -c 'import json,sys,yaml; "
      "print(json.dumps(yaml.safe_load(sys.stdin)))' < " +
      Dir() + "/manifests/" + name + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return Json::parse(r.output);
}

std::string Review(const Json& object, const std::string& uid,
                   const std::string& operation = "CREATE") {
  std::string api = object.value("apiVersion", "");
  auto slash = api.find('/');
  std::string group = slash == std::string::npos ? "" : api.substr(0, slash);
  std::string version = slash == std::string::npos ? api : api.substr(slash + 1);
  Json review = {{"apiVersion", "admission.k8s.io/v1"},
                 {"kind", "AdmissionReview"},
                 {"request",
                  {{"uid", uid},
                   {"kind", {{"group", group}, {"version", version}, {"kind", object["kind"]}}},
                   {"operation", operation},
                   {"namespace", object["metadata"].value("namespace", "default")},
                   {"name", object["metadata"].value("name", "")},
                   {"userInfo", {{"username", "kubernetes-admin"}, {"groups", {"system:masters"}}}},
                   {"object", object},
                   {"dryRun", false}}}};
  return review.dump();
}

class AdmissionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto stack = Stack::Start({.populator = false});
    ASSERT_TRUE(stack.ok()) << stack.status();
    stack_ = std::move(*stack);
  }
  static void TearDownTestSuite() { stack_.reset(); }

  // POSTs the object's AdmissionReview; checks the envelope and returns response.
  Json Admit(const std::string& webhook, const Json& object, const std::string& uid) {
    auto resp = stack_->Https("POST", "/" + webhook + "?timeout=5s", Review(object, uid),
                              {{"Content-Type", "application/json"}});
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return Json();
    EXPECT_EQ(resp->status, 200) << resp->body;
    Json review = Json::parse(resp->body);
    EXPECT_EQ(review["apiVersion"], "admission.k8s.io/v1");
    EXPECT_EQ(review["kind"], "AdmissionReview");
    EXPECT_EQ(review["response"]["uid"], uid);
    last_review_ = review;
    return review["response"];
  }

  // Applies the last answer's patch to `object` with python3-jsonpatch.
  Json ApplyIndependently(const Json& object) {
    const std::string in = stack_->dir() + "/apply-in.json";
    std::ofstream(in) << Json{{"object", object}, {"review", last_review_}}.dump();
    auto r = RunCommand("/usr/bin/python3 " + Dir() + "/apply_patch.py < " + in + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0 ? Json::parse(r.output) : Json();
  }

  // Schema check of a core/v1 object with kubernetes-models.
  std::string Validate(const Json& object) {
    const std::string in = stack_->dir() + "/validate-in.json";
    std::ofstream(in) << object.dump();
    auto r = RunCommand("node " + Dir() + "/validate_k8s.mjs < " + in + " 2>&1");
    return r.exit_code == 0 ? "ok" : r.output;
  }

  static std::unique_ptr<Stack> stack_;
  Json last_review_;
};
std::unique_ptr<Stack> AdmissionTest::stack_;

const Json* Named(const Json& list, const std::string& name) {
  for (const auto& item : list) {
    if (item.value("name", "") == name) return &item;
  }
  return nullptr;
}

// Tests scenario 1: the hostNetwork loader gets the sidecar and the projected token, the patched
// pod is a valid Pod, passes /validate, and a reinvocation adds nothing.
TEST_F(AdmissionTest, HostNetworkPodGetsSidecarAndToken) {
  Json pod = Manifest("loader-pod.yaml");
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

// Tests scenario 1 step 4: without hostNetwork nothing changes and a warning says why.
TEST_F(AdmissionTest, PodNetworkPodIsLeftAlone) {
  Json resp = Admit("mutate", Manifest("loader-pod-no-hostnetwork.yaml"), "it-pod-4");
  EXPECT_EQ(resp["allowed"], true);
  EXPECT_FALSE(resp.contains("patch"));
  ASSERT_EQ(resp["warnings"].size(), 1u);
  EXPECT_NE(resp["warnings"][0].get<std::string>().find("does not use hostNetwork"),
            std::string::npos);
}

// Tests scenario 2: the IRSA VMI is accepted, a 300 s one refused with Kubernetes' message, and the
// virt-launcher pod gets the projected token and the virtiofs container.
TEST_F(AdmissionTest, VmiTokenVolumeReachesLauncherPod) {
  Json ok = Admit("validate", Manifest("vmi-irsa.yaml"), "it-vmi-1");
  EXPECT_EQ(ok["allowed"], true) << ok.dump();
  Json denied = Admit("validate", Manifest("vmi-short-lifetime.yaml"), "it-vmi-2");
  EXPECT_EQ(denied["allowed"], false);
  EXPECT_EQ(denied["status"]["message"],
            "spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid "
            "value: 300: may not specify a duration less than 10 minutes");

  Json launcher = Manifest("virt-launcher-pod.yaml");
  Json resp = Admit("mutate", launcher, "it-vmi-3");
  ASSERT_EQ(resp["allowed"], true);
  Json out = ApplyIndependently(launcher);
  EXPECT_EQ(Validate(out), "ok");
  const Json* fs = Named(out["spec"]["containers"], "virtiofs-irsa");
  ASSERT_NE(fs, nullptr) << out.dump(2);
  EXPECT_EQ((*fs)["args"][0], "--socket-path=/var/run/kubevirt/virtiofs-containers/irsa.sock");
  EXPECT_EQ((*fs)["securityContext"]["runAsUser"], 107);
  const Json* vol = Named(out["spec"]["volumes"], "irsa");
  ASSERT_NE(vol, nullptr);
  EXPECT_EQ((*vol)["projected"]["sources"][0]["serviceAccountToken"]["audience"],
            "sts.amazonaws.com");
  EXPECT_FALSE(Admit("mutate", out, "it-vmi-4").contains("patch"));
}

// Tests scenario 3's admission side: CDI's DataVolume rules, and a PVC that names a
// VolumeImportSource only after that source was admitted.
TEST_F(AdmissionTest, DataVolumesAndImportSources) {
  EXPECT_EQ(Admit("validate", Manifest("datavolume-http.yaml"), "it-dv-1")["allowed"], true);
  Json cross = Admit("validate", Manifest("datavolume-cross-namespace.yaml"), "it-dv-2");
  EXPECT_EQ(cross["allowed"], false);
  EXPECT_EQ(cross["status"]["message"], "Invalid value: DataSourceRef namespace not supported");

  Json pvc = Manifest("pvc-import.yaml");
  EXPECT_EQ(Validate(pvc), "ok");
  Json early = Admit("validate", pvc, "it-pvc-1");
  EXPECT_EQ(early["allowed"], false);
  EXPECT_NE(early["status"]["message"].get<std::string>().find("\"cirros\""), std::string::npos);
  EXPECT_EQ(Admit("validate", Manifest("volumeimportsource.yaml"), "it-vis-1")["allowed"], true);
  Json late = Admit("validate", pvc, "it-pvc-2");
  EXPECT_EQ(late["allowed"], true) << late.dump();
  EXPECT_EQ(late["auditAnnotations"]["population-record"], "vms.PersistentVolumeClaim.vm-disk");
}

// Tests that malformed requests get 400 naming the problem.
TEST_F(AdmissionTest, BadRequestsGet400) {
  auto wrong_type = stack_->Https("POST", "/mutate", Review(Manifest("loader-pod.yaml"), "x"),
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
  auto unknown =
      stack_->Https("POST", "/mutate", Review(deploy, "y"), {{"Content-Type", "application/json"}});
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->status, 400);
  EXPECT_NE(unknown->body.find("is not admitted by wisp"), std::string::npos);
}

// Tests fail-closed when wisp-policy is gone: a denial naming the cause, well inside ?timeout=.
TEST_F(AdmissionTest, FailsClosedWithoutPolicy) {
  stack_->Kill("wisp-policy");
  auto start = std::chrono::steady_clock::now();
  Json resp = Admit("mutate", Manifest("loader-pod.yaml"), "it-down-1");
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
