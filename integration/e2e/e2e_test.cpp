// The e2e suite (issue 27, label e2e, scripts/e2e): wisp behind a real kube-apiserver with the real
// KubeVirt v1.9.0 and CDI v1.66.0 CRDs. Nothing here is a document written to look like what
// Kubernetes sends: the apiserver decodes, validates, defaults and prunes each object, calls wisp's
// webhooks as the chart registers them, and the tests check what it stored or refused.
//
// Set-up, once for the whole run (main below):
//   - the cluster: KubeCluster (a kube-apiserver started from WISP_E2E_KUBE_BIN_DIR, or the cluster
//     of WISP_E2E_KUBECONFIG); neither given: one SKIP line, exit code 77 (ctest: Skipped);
//   - wisp: the local stack's binaries on free ports (integration/stack), as scripts/local-up runs
//     them, with deploy/local/policy.yaml;
//   - the real CRDs (integration/k8s/crds, copied from ../shared/k8s/crds, and the chart's own);
//   - the chart's own rendered webhook configurations (`helm template`), with only each webhook's
//     clientConfig.service turned into `url:` at the local gateway and the caBundle of its CA:
//     what an operator does to run wisp out of cluster against kind (docs/operations.md).
//
// A cluster given by kubeconfig must reach the gateway: WISP_E2E_WEBHOOK_HOST names the address
// it dials (default 127.0.0.1), and the gateway's certificate carries it.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include "wisp/fsutil/read_file.hpp"
#include "wisp/http/server.hpp"
#include "wisp/integration/kube.hpp"
#include "wisp/integration/stack.hpp"
#include "wisp/populator/testing/test_http_server.hpp"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

KubeCluster* g_kube = nullptr;
Stack* g_stack = nullptr;
std::string g_rendered_chart;  // `helm template` of deploy/helm/wisp, as rendered for this cluster

std::string Env(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : v;
}

std::string ReadManifest(const std::string& name) {
  return fsutil::ReadFile(SourceDir() + "/integration/admission/manifests/" + name).value_or("");
}

std::string E2eManifest(const std::string& name) {
  return fsutil::ReadFile(SourceDir() + "/integration/e2e/manifests/" + name).value_or("");
}

// kubectl create -f - -o json: the object as the apiserver stored it (after every webhook).
struct Created {
  int exit_code = -1;
  std::string output;  // kubectl's stderr + stdout (warnings first)
  Json object;         // the stored object when it was created
};

Created Create(const std::string& manifest, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"create", "-f", "-", "-o", "json"};
  args.insert(args.end(), extra.begin(), extra.end());
  CommandResult r = g_kube->Kubectl(args, manifest);
  Created c{r.exit_code, r.output, Json()};
  if (r.exit_code == 0) {
    // Warnings come before the JSON on the combined stream.
    const size_t brace = r.output.find("{\n");
    if (brace != std::string::npos) c.object = Json::parse(r.output.substr(brace), nullptr, false);
  }
  return c;
}

// The element of `list` (which must outlive the pointer) whose "name" is `name`.
const Json* FindByName(const Json& list, const std::string& name) {
  if (!list.is_array()) return nullptr;
  for (const auto& item : list) {
    if (item.value("name", "") == name) return &item;
  }
  return nullptr;
}

// ---- set-up ---------------------------------------------------------------------------------

// wisp-token's policy for this run: the local stack's, plus the cluster's own issuer as
// token.clusterIssuer renders it in cluster: the issuer from the apiserver's discovery, its keys
// from the apiserver's /openid/v1/jwks with a service-account token and the cluster CA.
absl::StatusOr<std::string> TokenPolicyTrustingTheCluster(const std::string& dir) {
  WISP_ASSIGN_OR_RETURN(std::string discovery,
                        g_kube->MustKubectl({"get", "--raw", "/.well-known/openid-configuration"}));
  const Json d = Json::parse(discovery, nullptr, false);
  if (!d.is_object() || !d.contains("issuer")) {
    return absl::InternalError("the apiserver's discovery document: " + discovery);
  }
  CommandResult server = g_kube->Kubectl(
      {"config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"});
  CommandResult ca_data =
      g_kube->Kubectl({"config", "view", "--minify", "--raw", "-o",
                       "jsonpath={.clusters[0].cluster.certificate-authority-data}"});
  CommandResult ca_path =
      g_kube->Kubectl({"config", "view", "--minify", "-o",
                       "jsonpath={.clusters[0].cluster.certificate-authority}"});
  if (server.exit_code != 0 || server.output.empty()) {
    return absl::InternalError("kubectl config view: " + server.output);
  }
  std::string ca_file = ca_path.output;
  if (!ca_data.output.empty()) {
    ca_file = dir + "/cluster-ca.pem";
    CommandResult pem = RunArgv({"base64", "-d"}, ca_data.output, false);
    if (pem.exit_code != 0) return absl::InternalError("certificate-authority-data: " + pem.output);
    std::ofstream(ca_file) << pem.output;
  }
  WISP_ASSIGN_OR_RETURN(
      std::string sa_token,
      g_kube->MustKubectl({"-n", "wisp-system", "create", "token", "default", "--duration", "2h"}));
  const std::string token_file = dir + "/jwks-reader-token";
  {
    std::ofstream out(token_file);
    out << sa_token;
  }
  ::chmod(token_file.c_str(), 0600);
  WISP_ASSIGN_OR_RETURN(std::string local,
                        fsutil::ReadFile(SourceDir() + "/deploy/local/token-policy.yaml"));
  std::ostringstream policy;
  policy << local << "trustedIssuers:\n"
         << "  - issuer: " << d["issuer"].get<std::string>() << "\n"
         << "    jwksUrl: " << server.output << "/openid/v1/jwks\n"
         << "    jwksCaFile: " << ca_file << "\n"
         << "    jwksBearerTokenFile: " << token_file << "\n"
         << "    audiences: [wisp]\n";
  const std::string path = dir + "/token-policy.yaml";
  std::ofstream(path) << policy.str();
  return path;
}

absl::Status CreateNamespaces() {
  for (const char* ns : {"ml", "vms", "apps", "plain", "quota", "wisp-system"}) {
    WISP_RETURN_IF_ERROR(g_kube->CreateNamespace(ns));
  }
  // Service accounts the stories' pods and VMIs run as.
  for (const auto& [ns, sa] : std::vector<std::pair<std::string, std::string>>{
           {"ml", "data-loader"}, {"ml", "loader"}, {"vms", "s3-reader"}, {"apps", "s3-reader"}}) {
    WISP_RETURN_IF_ERROR(g_kube->MustKubectl({"-n", ns, "create", "serviceaccount", sa}).status());
  }
  return absl::OkStatus();
}

// ---- the chart ------------------------------------------------------------------------------

// Every object the chart renders passes the real apiserver's strict validation (unknown or
// duplicate fields refused), as `helm install` would send them.
TEST(Chart, WholeRenderedChartPassesStrictServerSideDryRun) {
  CommandResult r = g_kube->Kubectl({"apply", "--dry-run=server", "--validate=strict",
                                     "--server-side", "-n", "wisp-system", "-f", "-"},
                                    g_rendered_chart);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("Warning"), std::string::npos) << r.output;
}

// ---- story 1: a hostNetwork pod reads a bucket -----------------------------------------------

TEST(Story1, HostNetworkPodGetsARunnableSidecarAndItsTokenVolume) {
  Created c = Create(ReadManifest("loader-pod.yaml"));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const Json& spec = c.object["spec"];
  // Kubernetes >= 1.29: a native sidecar (an init container that keeps running).
  const Json init = spec.value("initContainers", Json::array());
  const Json* sidecar = FindByName(init, "wisp-sidecar");
  ASSERT_NE(sidecar, nullptr) << spec.dump(2);
  EXPECT_EQ(sidecar->value("restartPolicy", ""), "Always");
  // It must start from the chart's image: a command (the image's CMD is wispctl --help).
  ASSERT_TRUE(sidecar->contains("command")) << sidecar->dump(2);
  EXPECT_NE((*sidecar)["command"].dump().find("wisp-sidecar"), std::string::npos)
      << sidecar->dump(2);
  EXPECT_NE(sidecar->dump().find("/v1/token"), std::string::npos)
      << "the sidecar is not told the STS URL: " << sidecar->dump(2);
  // hostNetwork: the projected token for the pool's audience.
  const Json* vol = FindByName(spec["volumes"], "wisp-sa-token");
  ASSERT_NE(vol, nullptr) << spec["volumes"].dump(2);
  EXPECT_NE(vol->dump().find("serviceAccountToken"), std::string::npos) << vol->dump(2);
  // Not started (native: the app containers wait) and not Ready before it holds a token.
  EXPECT_NE(sidecar->value("startupProbe", Json()).dump().find("--probe"), std::string::npos)
      << sidecar->dump(2);
}

TEST(Story1, PodWithoutHostNetworkIsLeftAsItWasWithAWarning) {
  Created c = Create(ReadManifest("loader-pod-no-hostnetwork.yaml"));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("Warning:"), std::string::npos) << c.output;
  const Json& spec = c.object["spec"];
  const Json init = spec.value("initContainers", Json::array());
  EXPECT_EQ(FindByName(init, "wisp-sidecar"), nullptr);
  EXPECT_EQ(FindByName(spec["containers"], "wisp-sidecar"), nullptr);
  EXPECT_EQ(FindByName(spec["volumes"], "wisp-sa-token"), nullptr);
}

// The STS trusts the cluster's own service-account issuer (its discovery and JWKS, fetched with
// a service-account token, as the chart's token.clusterIssuer does in cluster): a token the real
// apiserver minted for the pod's service account and audience is what the sidecar exchanges.
TEST(Story1, StsExchangesATokenTheApiserverMinted) {
  auto minted = g_kube->MustKubectl(
      {"-n", "ml", "create", "token", "loader", "--audience", "wisp", "--duration", "10m"});
  ASSERT_TRUE(minted.ok()) << minted.status();
  std::string token = *minted;
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
    token.pop_back();
  }
  // The subject token goes in on stdin (curl's @-), never on a command line.
  CommandResult r =
      RunArgv({"curl", "-sS", "--max-time", "20", "--cacert", g_stack->ca_file(), "-X", "POST",
               g_stack->gateway_url() + "/v1/token", "--data-urlencode",
               "grant_type=urn:ietf:params:oauth:grant-type:token-exchange", "--data-urlencode",
               "subject_token_type=urn:ietf:params:oauth:token-type:jwt", "--data-urlencode",
               "audience=wisp", "--data-urlencode", "subject_token@-"},
              token, /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Json answer = Json::parse(r.output, nullptr, false);
  ASSERT_TRUE(answer.is_object()) << r.output;
  EXPECT_EQ(answer.value("token_type", ""), "Bearer") << r.output;
  EXPECT_FALSE(answer.value("access_token", "").empty()) << r.output;
}

// ---- story 2: a VM calls AWS with IRSA ------------------------------------------------------

// The VEP 94 shape cannot exist on released KubeVirt: strict decoding refuses it before any
// webhook (the fact behind issue 27's first break); wisp's docs must not promise it there.
TEST(Story2, Vep94VmiIsRefusedByTheReleasedKubeVirtSchema) {
  Created c = Create(ReadManifest("vmi-irsa.yaml"));
  EXPECT_NE(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("unknown field \"spec.volumes[2].serviceAccount.serviceAccountToken\""),
            std::string::npos)
      << c.output;
}

// On stock KubeVirt: a containerPath volume the guest sees over virtiofs, and the token wisp is
// asked for in an annotation (wisp.dev/token.<volume>); the VMI survives the real schema and both
// webhooks, keeps the request on the object, and /mutate adds where the token is to be mounted.
TEST(Story2, StockKubeVirtVmiWithTokenAnnotationIsAdmitted) {
  Created c = Create(ReadManifest("vmi-token-annotation.yaml"));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const Json& annotations = c.object["metadata"]["annotations"];
  EXPECT_TRUE(annotations.contains("wisp.dev/token.aws-token")) << annotations.dump(2);
  EXPECT_EQ(annotations.value("wisp.dev/token-mount.aws-token", ""),
            "/var/run/secrets/eks.amazonaws.com/serviceaccount")
      << annotations.dump(2);
}

TEST(Story2, ShortLifetimeInTheAnnotationIsRefusedWithItsReason) {
  std::string vmi = ReadManifest("vmi-token-annotation.yaml");
  vmi.replace(vmi.find("name: irsa-annotated\n"), 21, "name: irsa-short\n");
  const size_t at = vmi.find("3600");
  ASSERT_NE(at, std::string::npos);
  vmi.replace(at, 4, "300");
  Created c = Create(vmi);
  EXPECT_NE(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("expirationSeconds"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("600"), std::string::npos) << c.output;
}

// The launcher pod as virt-controller v1.9.0 renders it for that VMI: every annotation of the
// stored VMI copied (template.go filterVMIAnnotationsForPod), compute and the virtiofs socket
// directory. It gets the custom-audience projected token at the containerPath, in compute and in
// the container virtiofsd runs in.
TEST(Story2, LauncherPodGetsTheCustomAudienceTokenWhereVirtiofsdReadsIt) {
  auto vmi = g_kube->MustKubectl({"-n", "vms", "get", "vmi", "irsa-annotated", "-o", "json"});
  ASSERT_TRUE(vmi.ok()) << vmi.status() << " (Story2.StockKubeVirtVmi... creates it)";
  const Json stored = Json::parse(*vmi);
  YAML::Node pod = YAML::Load(ReadManifest("virt-launcher-pod-token-annotation.yaml"));
  pod["metadata"].remove("annotations");
  for (const auto& [key, value] : stored["metadata"]["annotations"].items()) {
    if (key.rfind("kubectl.kubernetes.io", 0) == 0 ||
        key.rfind("kubevirt.io/storage-observed-api-version", 0) == 0 ||
        key.rfind("kubevirt.io/latest-observed-api-version", 0) == 0) {
      continue;
    }
    pod["metadata"]["annotations"][key] = value.get<std::string>();
  }
  pod["metadata"]["ownerReferences"][0]["uid"] = stored["metadata"]["uid"].get<std::string>();
  YAML::Emitter out;
  out << pod;
  Created c = Create(out.c_str());
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const Json& spec = c.object["spec"];
  const Json* vol = FindByName(spec["volumes"], "wisp-token-aws-token");
  ASSERT_NE(vol, nullptr) << spec["volumes"].dump(2);
  const std::string v = vol->dump();
  EXPECT_NE(v.find("sts.amazonaws.com"), std::string::npos) << v;
  EXPECT_NE(v.find("3600"), std::string::npos) << v;
  const Json* compute = FindByName(spec["containers"], "compute");
  ASSERT_NE(compute, nullptr);
  EXPECT_NE(compute->dump().find("/var/run/secrets/eks.amazonaws.com/serviceaccount"),
            std::string::npos)
      << compute->dump(2);
  const Json* virtiofs = FindByName(spec["containers"], "virtiofs-aws-token");
  ASSERT_NE(virtiofs, nullptr) << spec["containers"].dump(2);
  EXPECT_NE(virtiofs->dump().find("wisp-token-aws-token"), std::string::npos)
      << "virtiofsd's container does not mount the token: " << virtiofs->dump(2);
  EXPECT_NE(virtiofs->dump().find("--translate-uid=host:107:0:1"), std::string::npos)
      << virtiofs->dump(2);
}

// ---- story 3: a golden image becomes a VM disk -----------------------------------------------

TEST(Story3, HttpDataVolumeIsAdmitted) {
  Created c = Create(ReadManifest("datavolume-http.yaml"));
  EXPECT_EQ(c.exit_code, 0) << c.output;
}

TEST(Story3, CrossNamespaceDataSourceRefIsRefused) {
  Created c = Create(ReadManifest("datavolume-cross-namespace.yaml"));
  EXPECT_NE(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("DataSourceRef namespace not supported"), std::string::npos) << c.output;
}

TEST(Story3, PvcWithVolumeImportSourceIsAdmitted) {
  ASSERT_EQ(Create(ReadManifest("volumeimportsource.yaml")).exit_code, 0);
  Created c = Create(ReadManifest("pvc-import.yaml"));
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_EQ(c.object["spec"]["dataSourceRef"].value("kind", ""), "VolumeImportSource");
}

// Ghost records: a PVC refused after wisp's webhook said yes (here by ResourceQuota, the last
// admission plugin, after the validating webhooks; as well any storage failure) leaves nothing
// behind: a DataVolume that would own a PVC of that name is admitted afterwards.
TEST(Story3, PvcRefusedAfterAdmissionLeavesNoGhostRecord) {
  ASSERT_EQ(g_kube
                ->MustKubectl({"-n", "quota", "create", "quota", "no-pvcs",
                               "--hard=persistentvolumeclaims=0"})
                .status(),
            absl::OkStatus());
  // The quota's status (what admission checks) is the controller-manager's to fill; set it when
  // none runs.
  if (!g_kube->has_controller_manager()) {
    ASSERT_TRUE(g_kube
                    ->MustKubectl({"-n", "quota", "patch", "resourcequota", "no-pvcs",
                                   "--subresource=status", "--type=merge", "-p",
                                   R"({"status":{"hard":{"persistentvolumeclaims":"0"},)"
                                   R"("used":{"persistentvolumeclaims":"0"}}})"})
                    .ok());
  }
  std::string pvc = ReadManifest("pvc-import.yaml");
  pvc.replace(pvc.find("namespace: vms"), 14, "namespace: quota");
  std::string vis = ReadManifest("volumeimportsource.yaml");
  vis.replace(vis.find("namespace: vms"), 14, "namespace: quota");
  ASSERT_EQ(Create(vis).exit_code, 0);
  bool refused_by_quota = false;
  for (int i = 0; i < 40 && !refused_by_quota; ++i) {
    Created refused = Create(pvc);
    ASSERT_NE(refused.exit_code, 0) << "the quota let the PVC in: " << refused.output;
    refused_by_quota = refused.output.find("exceeded quota") != std::string::npos;
    if (!refused_by_quota) std::this_thread::sleep_for(250ms);
  }
  ASSERT_TRUE(refused_by_quota);
  ASSERT_EQ(g_kube->MustKubectl({"-n", "quota", "delete", "quota", "no-pvcs"}).status(),
            absl::OkStatus());
  // The DataVolume that would own a PVC "vm-disk": admitted, since no PVC of that name exists.
  std::string dv = ReadManifest("datavolume-existing-pvc.yaml");
  dv.replace(dv.find("name: scratch"), 13, "name: vm-disk");
  dv.replace(dv.find("namespace: vms"), 14, "namespace: quota");
  Created c = Create(dv);
  EXPECT_EQ(c.exit_code, 0) << c.output;
}

// A PVC no webhook is asked about (a plain one) is still known to wisp: the gateway's watch
// records what the apiserver stored, and a DataVolume of its name is refused as CDI refuses it.
// A server-side dry run asks the webhooks without storing anything, so the test can ask again
// until the watch has delivered the PVC.
TEST(Story3, DataVolumeOverAStoredPvcIsRefused) {
  std::string pvc = ReadManifest("pvc-existing.yaml");
  pvc.replace(pvc.find("name: scratch"), 13, "name: taken");
  ASSERT_EQ(Create(pvc).exit_code, 0);
  std::string dv = ReadManifest("datavolume-existing-pvc.yaml");
  dv.replace(dv.find("name: scratch"), 13, "name: taken");
  Created refused;
  for (int i = 0; i < 40; ++i) {
    refused = Create(dv, {"--dry-run=server"});
    if (refused.exit_code != 0) break;
    std::this_thread::sleep_for(250ms);
  }
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("Destination PVC vms/taken already exists"), std::string::npos)
      << refused.output;
  // Deleting the PVC frees the name (the watch's DELETED).
  ASSERT_TRUE(g_kube->MustKubectl({"-n", "vms", "delete", "pvc", "taken", "--wait=false"}).ok());
  // kubernetes.io/pvc-protection holds the PVC until its controller lets it go; without a
  // controller-manager, let it go here.
  if (g_kube->started() && !g_kube->has_controller_manager()) {
    (void)g_kube->Kubectl({"-n", "vms", "patch", "pvc", "taken", "--type=merge", "-p",
                           R"({"metadata":{"finalizers":null}})"});
  }
  Created allowed;
  for (int i = 0; i < 40; ++i) {
    allowed = Create(dv, {"--dry-run=server"});
    if (allowed.exit_code == 0) break;
    std::this_thread::sleep_for(250ms);
  }
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
}

// ---- story 3 for real: the volume populator protocol -----------------------------------------
//
// wisp's gateway runs its populator and DataVolume controllers against the apiserver; the real
// external-provisioner (kubernetes-csi v5.2.0, WISP_E2E_CSI_PROVISIONER or csi-provisioner next
// to kube-apiserver) provisions prime PVCs through wisp's CSI socket; kube-controller-manager's
// persistentvolume-binder binds the claims. Nothing here stands in for any of them.

std::unique_ptr<Process> g_provisioner;
std::string g_population_unavailable;  // why the population stories cannot run ("" = they can)
std::unique_ptr<populator::testing::TestHttpServer> g_images;
// The same image over HTTPS with a certificate of its own CA (the certificate itself), answering
// only requests that carry X-Mirror-Tenant: vms.
std::unique_ptr<populator::testing::TestHttpServer> g_mirror;
std::string g_mirror_ca_file;
std::string g_images_dir;

absl::Status StartPopulation(const std::string& dir) {
  WISP_ASSIGN_OR_RETURN(g_provisioner, StartExternalProvisioner(*g_kube, *g_stack));
  WISP_RETURN_IF_ERROR(RegisterCsiNode(*g_kube, "node-a"));
  WISP_RETURN_IF_ERROR(ApplyChartStorageClasses(*g_kube, g_rendered_chart));
  // The image: 64 MiB with five random MiBs, as qcow2, xz-compressed; qemu-img's own raw
  // conversion is what the volume must hold.
  g_images_dir = dir + "/images";
  std::filesystem::create_directories(g_images_dir);
  CommandResult made = RunArgv(
      {"sh", "-c",
       "cd " + g_images_dir +
           " && truncate -s 64M disk.raw"
           " && for m in 0 9 31 50 63; do dd if=/dev/urandom of=disk.raw bs=1M count=1 seek=$m"
           " conv=notrunc status=none; done"
           " && qemu-img convert -f raw -O qcow2 disk.raw disk.qcow2"
           " && qemu-img convert -f qcow2 -O raw disk.qcow2 expected.raw"
           " && xz -0 -T1 -c disk.qcow2 > disk.qcow2.xz"});
  if (made.exit_code != 0) return absl::InternalError("making the test image: " + made.output);
  g_images = std::make_unique<populator::testing::TestHttpServer>();
  g_images->Serve("/disk.qcow2.xz", g_images_dir + "/disk.qcow2.xz");
  // The same bytes at 1 MiB/s: an import long enough to kill a populator, or delete its claim,
  // in the middle of it.
  populator::testing::ServeOptions slow;
  slow.bytes_per_second = 1 << 20;
  g_images->Serve("/slow.qcow2.xz", g_images_dir + "/disk.qcow2.xz", slow);
  // The raw image (64 MiB) at 8 MiB/s: a raw download resumes where the bytes on disk end.
  slow.bytes_per_second = 8 << 20;
  g_images->Serve("/slow.raw", g_images_dir + "/expected.raw", slow);
  WISP_RETURN_IF_ERROR(g_images->Start());
  WISP_ASSIGN_OR_RETURN(populator::testing::TlsFiles tls,
                        populator::testing::MakeSelfSignedCert(g_images_dir));
  g_mirror_ca_file = tls.cert_pem_path;
  g_mirror = std::make_unique<populator::testing::TestHttpServer>(tls);
  populator::testing::ServeOptions tenant;
  tenant.required_headers = {{"X-Mirror-Tenant", "vms"}};
  g_mirror->Serve("/disk.qcow2.xz", g_images_dir + "/disk.qcow2.xz", tenant);
  return g_mirror->Start();
}

// kubectl get ... -o json, parsed; null when it fails (NotFound included).
Json GetJson(const std::vector<std::string>& args) {
  std::vector<std::string> a = {"get"};
  a.insert(a.end(), args.begin(), args.end());
  a.insert(a.end(), {"-o", "json"});
  CommandResult r = RunArgv(
      [&] {
        std::vector<std::string> argv = {g_kube->kubectl(), "--kubeconfig=" + g_kube->kubeconfig()};
        argv.insert(argv.end(), a.begin(), a.end());
        return argv;
      }(),
      "", false);
  if (r.exit_code != 0) return Json();
  return Json::parse(r.output, nullptr, false);
}

std::string Phase(const Json& object) {
  return object.is_object() ? object.value("/status/phase"_json_pointer, "") : "";
}

// The messages of external-provisioner's ProvisioningFailed events on prime PVC `prime` in vms,
// one a line (a JSON string, for WaitUntil).
Json ProvisioningFailures(const std::string& prime) {
  Json events = GetJson({"-n", "vms", "events", "--field-selector",
                         "involvedObject.name=" + prime + ",reason=ProvisioningFailed"});
  std::string messages;
  for (const auto& e : events.value("items", Json::array())) {
    messages += e.value("message", "") + "\n";
  }
  return Json(messages);
}

// Polls `get` until `done` holds or `timeout` passes; the phases of DataVolume `dv` seen meanwhile
// go to `phases` (in order, without repeats).
Json WaitUntil(const std::function<Json()>& get, const std::function<bool(const Json&)>& done,
               std::chrono::seconds timeout, std::vector<std::string>* phases = nullptr) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  Json last;
  while (std::chrono::steady_clock::now() < until) {
    last = get();
    if (phases != nullptr) {
      std::string p = Phase(last);
      if (!p.empty() && (phases->empty() || phases->back() != p)) phases->push_back(p);
    }
    if (done(last)) return last;
    std::this_thread::sleep_for(200ms);
  }
  return last;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : " -> ") + s;
  return out;
}

// The reasons of the events about `kind` `name` in vms, each followed by a space (the order is
// the events' creation second, not finer).
std::string EventReasons(const std::string& kind, const std::string& name) {
  Json events =
      GetJson({"-n", "vms", "events", "--sort-by=.metadata.creationTimestamp", "--field-selector",
               "involvedObject.kind=" + kind + ",involvedObject.name=" + name});
  std::string reasons;
  for (const auto& e : events.value("items", Json::array())) reasons += e.value("reason", "") + " ";
  return reasons;
}

std::string DataVolumeYaml(const std::string& name, const std::string& url,
                           const std::string& size = "64Mi") {
  return "apiVersion: cdi.kubevirt.io/v1beta1\nkind: DataVolume\nmetadata: {name: " + name +
         ", namespace: vms}\nspec:\n  source: {http: {url: \"" + url +
         "\"}}\n  storage:\n    storageClassName: wisp-populated\n"
         "    resources: {requests: {storage: " +
         size + "}}\n";
}

// What kube-scheduler does when it places the first pod that uses an unbound claim of a
// WaitForFirstConsumer class (the suite runs no scheduler): it names the node on the claim.
void ChooseNodeForClaim(const std::string& name) {
  ASSERT_TRUE(g_kube
                  ->MustKubectl({"-n", "vms", "annotate", "pvc", name,
                                 "volume.kubernetes.io/selected-node=node-a"})
                  .ok());
}

const Json* ConditionOf(const Json& object, const std::string& type) {
  if (!object.is_object() || !object.contains("status") ||
      !object["status"].contains("conditions")) {
    return nullptr;
  }
  for (const auto& c : object["status"]["conditions"]) {
    if (c.value("type", "") == type) return &c;
  }
  return nullptr;
}

TEST(Story3Population, HttpQcow2XzDataVolumeSucceedsHoldingQemuImgsBytes) {
  ASSERT_EQ(g_population_unavailable, "");
  const std::string url = g_images->Url("/disk.qcow2.xz");
  ASSERT_EQ(Create(DataVolumeYaml("golden", url)).exit_code, 0);
  auto dv = [] { return GetJson({"-n", "vms", "datavolume", "golden"}); };
  std::vector<std::string> phases;
  // The chart's class waits for the first consumer: nothing is imported before a node is chosen.
  Json pending = WaitUntil(
      dv, [](const Json& d) { return Phase(d) == "PendingPopulation"; }, 60s, &phases);
  ASSERT_EQ(Phase(pending), "PendingPopulation") << pending.dump(2);
  Json pvc = GetJson({"-n", "vms", "pvc", "golden"});
  ASSERT_TRUE(pvc.is_object());
  EXPECT_EQ(pvc["spec"]["dataSourceRef"],
            Json({{"apiGroup", "wisp.dev"}, {"kind", "VolumeImportSource"}, {"name", "golden"}}));
  EXPECT_EQ(pvc["metadata"]["ownerReferences"][0].value("kind", ""), "DataVolume");
  Json vis = GetJson({"-n", "vms", "volumeimportsources.wisp.dev", "golden"});
  ASSERT_TRUE(vis.is_object());
  EXPECT_EQ(vis["spec"]["source"]["http"].value("url", ""), url);

  ChooseNodeForClaim("golden");
  const auto t0 = std::chrono::steady_clock::now();
  Json done = WaitUntil(
      dv, [](const Json& d) { return Phase(d) == "Succeeded" || Phase(d) == "Failed"; }, 240s,
      &phases);
  std::cout << "golden: " << Join(phases) << " in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - t0)
                   .count()
            << " ms after the node was chosen" << std::endl;
  ASSERT_EQ(Phase(done), "Succeeded") << done.dump(2);
  EXPECT_EQ(done["status"].value("progress", ""), "100.0%");
  EXPECT_EQ(done["status"].value("claimName", ""), "golden");
  const Json* ready = ConditionOf(done, "Ready");
  ASSERT_NE(ready, nullptr) << done.dump(2);
  EXPECT_EQ(ready->value("status", ""), "True");
  const Json* bound = ConditionOf(done, "Bound");
  ASSERT_NE(bound, nullptr);
  EXPECT_EQ(bound->value("status", ""), "True");

  // The user's PVC holds the PV the prime was provisioned with; the prime is gone.
  pvc = GetJson({"-n", "vms", "pvc", "golden"});
  ASSERT_EQ(Phase(pvc), "Bound") << pvc.dump(2);
  const std::string pv_name = pvc["spec"].value("volumeName", "");
  Json pv = GetJson({"pv", pv_name});
  ASSERT_TRUE(pv.is_object());
  EXPECT_EQ(pv["spec"]["claimRef"].value("name", ""), "golden");
  EXPECT_EQ(pv["spec"]["claimRef"].value("uid", ""), pvc["metadata"].value("uid", ""));
  const std::string prime = "wisp-prime-" + pvc["metadata"].value("uid", "");
  Json gone = WaitUntil(
      [&] {
        return GetJson({"-n", "vms", "pvc", prime});
      },
      [](const Json& p) { return p.is_null(); }, 30s);
  EXPECT_TRUE(gone.is_null()) << "the prime PVC is still there: " << gone.dump(2);

  // The bytes: what `qemu-img convert -O raw` makes of the source.
  const std::string handle = pv["spec"]["csi"].value("volumeHandle", "");
  const std::string image = g_stack->volume_root() + "/" + handle + "/disk.img";
  CommandResult cmp = RunArgv({"cmp", g_images_dir + "/expected.raw", image});
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  // The controllers ran as the Lease's holder (the chart runs two replicas, one leading).
  Json lease = GetJson({"-n", "wisp-system", "lease", "wisp-controllers"});
  EXPECT_EQ(lease.value("/spec/holderIdentity"_json_pointer, ""), "e2e-gateway") << lease.dump(2);

  // Events where users look (kubectl describe dv).
  Json events = GetJson({"-n", "vms", "events", "--field-selector",
                         "involvedObject.kind=DataVolume,involvedObject.name=golden"});
  std::string reasons;
  for (const auto& e : events.value("items", Json::array())) reasons += e.value("reason", "") + " ";
  EXPECT_NE(reasons.find("ImportSucceeded"), std::string::npos) << reasons;
  // The PVC's own: wisp's two among the PV controller's and external-provisioner's.
  const std::string pvc_reasons = EventReasons("PersistentVolumeClaim", "golden");
  EXPECT_NE(pvc_reasons.find("Populating "), std::string::npos) << pvc_reasons;
  EXPECT_NE(pvc_reasons.find("Populated "), std::string::npos) << pvc_reasons;
}

double Percent(const Json& dv) {
  try {
    return std::stod(dv.value("/status/progress"_json_pointer, std::string("0")));
  } catch (...) {
    return 0;
  }
}

// volumeMode: Block goes the same way: the prime and the PV are Block, and the PV is handed to the
// DataVolume's PVC. (Publishing it, a loop device at the pod's path, is csi_integration_test's
// BlockVolumeThroughALoopDevice: no kubelet runs here.)
TEST(Story3Population, BlockDataVolumeSucceedsWithABlockVolume) {
  ASSERT_EQ(g_population_unavailable, "");
  std::string dv = DataVolumeYaml("raw-block", g_images->Url("/disk.qcow2.xz"));
  dv.replace(dv.find("    storageClassName"), 0, "    volumeMode: Block\n");
  ASSERT_EQ(Create(dv).exit_code, 0) << dv;
  ASSERT_TRUE(WaitUntil(
                  [] {
                    return GetJson({"-n", "vms", "pvc", "raw-block"});
                  },
                  [](const Json& p) { return p.is_object(); }, 60s)
                  .is_object());
  ChooseNodeForClaim("raw-block");
  Json done = WaitUntil(
      [] {
        return GetJson({"-n", "vms", "datavolume", "raw-block"});
      },
      [](const Json& d) { return Phase(d) == "Succeeded" || Phase(d) == "Failed"; }, 120s);
  ASSERT_EQ(Phase(done), "Succeeded") << done.dump(2);
  Json pvc = GetJson({"-n", "vms", "pvc", "raw-block"});
  EXPECT_EQ(pvc["spec"].value("volumeMode", ""), "Block");
  Json pv = GetJson({"pv", pvc["spec"].value("volumeName", "")});
  EXPECT_EQ(pv["spec"].value("volumeMode", ""), "Block") << pv.dump(2);
  const std::string image =
      g_stack->volume_root() + "/" + pv["spec"]["csi"].value("volumeHandle", "") + "/disk.img";
  CommandResult cmp = RunArgv({"cmp", g_images_dir + "/expected.raw", image});
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
}

// A populator killed in the middle of the import: its job is redelivered to the populator that
// starts in its place, which resumes a raw download where the bytes on disk end (an HTTP Range
// request; a compressed or qcow2 source starts again from byte 0), and the DataVolume ends
// Succeeded with the source's bytes.
TEST(Story3Population, KilledPopulatorResumesAndTheVolumeIsWhole) {
  ASSERT_EQ(g_population_unavailable, "");
  ASSERT_EQ(Create(DataVolumeYaml("resumed", g_images->Url("/slow.raw"))).exit_code, 0);
  auto dv = [] { return GetJson({"-n", "vms", "datavolume", "resumed"}); };
  ASSERT_TRUE(WaitUntil(
                  [] {
                    return GetJson({"-n", "vms", "pvc", "resumed"});
                  },
                  [](const Json& p) { return p.is_object(); }, 60s)
                  .is_object());
  ChooseNodeForClaim("resumed");
  Json midway = WaitUntil(
      dv, [](const Json& d) { return Percent(d) >= 20; }, 120s);
  ASSERT_GE(Percent(midway), 20) << midway.dump(2);
  ASSERT_LT(Percent(midway), 100) << "the import finished before the kill";
  const size_t ranges_before = g_images->RangeRequests().size();
  g_stack->Kill("wisp-populator");
  std::cout << "resumed: wisp-populator killed at " << midway["status"].value("progress", "")
            << std::endl;
  ASSERT_TRUE(g_stack->StartService("wisp-populator").ok());
  std::vector<std::string> phases;
  Json done = WaitUntil(
      dv, [](const Json& d) { return Phase(d) == "Succeeded" || Phase(d) == "Failed"; }, 240s,
      &phases);
  ASSERT_EQ(Phase(done), "Succeeded") << done.dump(2);
  std::string resumed_from;
  const auto ranges = g_images->RangeRequests();
  for (size_t i = ranges_before; i < ranges.size(); ++i) {
    if (ranges[i].rfind("bytes=", 0) == 0 && ranges[i] != "bytes=0-") resumed_from = ranges[i];
  }
  EXPECT_NE(resumed_from, "") << "the restarted populator began again from byte 0";
  std::cout << "resumed: " << Join(phases) << ", the new populator asked for " << resumed_from
            << std::endl;
  Json pvc = GetJson({"-n", "vms", "pvc", "resumed"});
  Json pv = GetJson({"pv", pvc["spec"].value("volumeName", "")});
  const std::string image =
      g_stack->volume_root() + "/" + pv["spec"]["csi"].value("volumeHandle", "") + "/disk.img";
  CommandResult cmp = RunArgv({"cmp", g_images_dir + "/expected.raw", image});
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
}

// A DataVolume deleted in the middle of its import takes its PVC and the prime PVC with it (the
// garbage collector, through the owner references), and no PersistentVolume is left behind for
// either: the one external-provisioner makes when the import ends is released and deleted.
TEST(Story3Population, DataVolumeDeletedMidImportLeavesNoClaimOrVolume) {
  ASSERT_EQ(g_population_unavailable, "");
  ASSERT_EQ(Create(DataVolumeYaml("doomed", g_images->Url("/slow.qcow2.xz"))).exit_code, 0);
  Json pvc = WaitUntil(
      [] {
        return GetJson({"-n", "vms", "pvc", "doomed"});
      },
      [](const Json& p) { return p.is_object(); }, 60s);
  ASSERT_TRUE(pvc.is_object());
  const std::string uid = pvc["metadata"].value("uid", "");
  const std::string prime = "wisp-prime-" + uid;
  ChooseNodeForClaim("doomed");
  Json midway = WaitUntil(
      [] {
        return GetJson({"-n", "vms", "datavolume", "doomed"});
      },
      [](const Json& d) { return Percent(d) >= 10; }, 120s);
  ASSERT_GE(Percent(midway), 10) << midway.dump(2);
  ASSERT_TRUE(
      g_kube->MustKubectl({"-n", "vms", "delete", "datavolume", "doomed", "--wait=false"}).ok());
  auto left = [&] {
    Json out = Json::array();
    for (const std::string& name : {std::string("doomed"), prime}) {
      if (Json p = GetJson({"-n", "vms", "pvc", name}); p.is_object()) out.push_back("pvc/" + name);
    }
    Json pvs = GetJson({"pv"});
    for (const auto& pv : pvs.value("items", Json::array())) {
      const std::string claim = pv.value("/spec/claimRef/name"_json_pointer, "");
      if (claim == "doomed" || claim == prime)
        out.push_back("pv/" + pv["metadata"].value("name", ""));
    }
    return out;
  };
  Json remaining = WaitUntil(
      left, [](const Json& l) { return l.empty(); }, 120s);
  EXPECT_TRUE(remaining.empty()) << "left behind: " << remaining.dump();
}

// Bad input ends Failed with the cause in the DataVolume's Ready condition and on the PVC's events,
// and nothing is bound to the partial data: a URL that answers 404, a checksum that does not match
// (CDI's spec.source.http.checksum), an image larger than the PVC.
TEST(Story3Population, BadSourcesFailNamingTheCauseAndBindNothing) {
  ASSERT_EQ(g_population_unavailable, "");
  struct Case {
    std::string name, url, size, checksum, cause;
  } cases[] = {
      {"missing", g_images->Url("/no-such-image.qcow2"), "64Mi", "", "404"},
      {"bad-sum", g_images->Url("/disk.qcow2.xz"), "64Mi", "sha256:" + std::string(64, '0'),
       "sha256"},
      {"too-big", g_images->Url("/disk.qcow2.xz"), "32Mi", "", "larger than the volume"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string dv = DataVolumeYaml(c.name, c.url, c.size);
    if (!c.checksum.empty()) {
      dv.replace(dv.find("url: "), 5, "checksum: \"" + c.checksum + "\", url: ");
    }
    ASSERT_EQ(Create(dv).exit_code, 0) << dv;
    Json pvc = WaitUntil(
        [&] {
          return GetJson({"-n", "vms", "pvc", c.name});
        },
        [](const Json& p) { return p.is_object(); }, 60s);
    ASSERT_TRUE(pvc.is_object());
    ChooseNodeForClaim(c.name);
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Json failed = WaitUntil(
        [&] {
          return GetJson({"-n", "vms", "datavolume", c.name});
        },
        [](const Json& d) { return Phase(d) == "Failed"; }, 120s);
    ASSERT_EQ(Phase(failed), "Failed") << failed.dump(2);
    const Json* ready = ConditionOf(failed, "Ready");
    ASSERT_NE(ready, nullptr);
    std::cout << c.name << ": " << ready->value("message", "") << std::endl;
    EXPECT_NE(ready->value("message", "").find(c.cause), std::string::npos) << failed.dump(2);
    Json pvc = GetJson({"-n", "vms", "pvc", c.name});
    EXPECT_EQ(Phase(pvc), "Pending") << "a PVC bound to a failed import: " << pvc.dump(2);
    Json warned =
        WaitUntil([&] { return Json(EventReasons("PersistentVolumeClaim", c.name)); },
                  [](const Json& r) {
                    return r.get<std::string>().find("PopulationFailed") != std::string::npos;
                  },
                  30s);
    EXPECT_NE(warned.get<std::string>().find("PopulationFailed"), std::string::npos) << warned;
  }
}

// wispctl as an operator runs it against this cluster: its NATS user (the only one wisp-token
// gives upload tokens to), the gateway's URL and CA, and the cluster's kubeconfig.
CommandResult Wispctl(std::vector<std::string> args, std::chrono::seconds timeout = 240s) {
  for (auto& a : g_stack->WispctlArgs()) args.push_back(a);
  args.insert(args.end(), {"--kubeconfig", g_kube->kubeconfig()});
  auto p = Process::Start({.path = BinaryPath("wispctl"),
                           .args = args,
                           .env = {{"WISP_GATEWAY_URL", g_stack->gateway_url()},
                                   {"WISP_CA_FILE", g_stack->ca_file()}}});
  if (!p.ok()) return {-1, std::string(p.status().message())};
  auto code = (*p)->Wait(timeout);
  return {code.value_or(-1), (*p)->Log()};
}

// A DataVolume with spec.source.upload, as CDI's users write it: wisp's DataVolume controller
// gives it an upload VolumeImportSource and its PVC; the prime, provisioned by the real
// external-provisioner, is a volume waiting for the bytes; the DataVolume goes UploadReady,
// annotated with that volume's id. An upload whose checksum does not match binds nothing and
// leaves it UploadReady; `wispctl datavolume upload` of the qcow2 image then fills it, the PV is
// handed over, and the DataVolume ends Succeeded holding what `qemu-img convert -O raw` makes of
// the image.
TEST(Story3Population, UploadDataVolumeSucceedsHoldingTheUploadedBytes) {
  ASSERT_EQ(g_population_unavailable, "");
  const std::string manifest =
      "apiVersion: cdi.kubevirt.io/v1beta1\nkind: DataVolume\nmetadata: {name: uploaded, "
      "namespace: vms}\nspec:\n  source: {upload: {}}\n  storage:\n"
      "    storageClassName: wisp-populated\n    resources: {requests: {storage: 64Mi}}\n";
  Created created = Create(manifest);
  ASSERT_EQ(created.exit_code, 0) << created.output;
  auto dv = [] { return GetJson({"-n", "vms", "datavolume", "uploaded"}); };
  std::vector<std::string> phases;
  Json pending = WaitUntil(
      dv, [](const Json& d) { return Phase(d) == "PendingPopulation"; }, 60s, &phases);
  ASSERT_EQ(Phase(pending), "PendingPopulation") << pending.dump(2);
  Json vis = GetJson({"-n", "vms", "volumeimportsources.wisp.dev", "uploaded"});
  ASSERT_TRUE(vis.is_object());
  EXPECT_EQ(vis["spec"]["source"], Json({{"upload", Json::object()}}));
  Json pvc = GetJson({"-n", "vms", "pvc", "uploaded"});
  ASSERT_TRUE(pvc.is_object());
  EXPECT_EQ(pvc["spec"]["dataSourceRef"],
            Json({{"apiGroup", "wisp.dev"}, {"kind", "VolumeImportSource"}, {"name", "uploaded"}}));

  ChooseNodeForClaim("uploaded");
  Json ready = WaitUntil(
      dv,
      [](const Json& d) {
        return Phase(d) == "UploadReady" &&
               !d.value("/metadata/annotations/wisp.dev~1upload-volume-id"_json_pointer, "")
                    .empty();
      },
      120s, &phases);
  ASSERT_EQ(Phase(ready), "UploadReady") << ready.dump(2);
  const std::string volume_id =
      ready.value("/metadata/annotations/wisp.dev~1upload-volume-id"_json_pointer, "");
  ASSERT_NE(volume_id, "") << ready.dump(2);
  std::cout << "uploaded: " << Join(phases) << ", uploads go to volume " << volume_id << std::endl;
  const Json* running = ConditionOf(ready, "Running");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->value("status", ""), "True") << ready.dump(2);

  // A checksum that does not match: refused, nothing bound, still UploadReady, a Warning.
  CommandResult bad = Wispctl({"datavolume", "upload", "vms/uploaded", g_images_dir + "/disk.qcow2",
                               "--sha256", std::string(64, '0')});
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  std::cout << "uploaded: a bad checksum: " << bad.output << std::endl;
  Json after_bad = WaitUntil(
      [] { return Json(EventReasons("DataVolume", "uploaded")); },
      [](const Json& r) { return r.get<std::string>().find("UploadFailed") != std::string::npos; },
      30s);
  EXPECT_NE(after_bad.get<std::string>().find("UploadFailed"), std::string::npos) << after_bad;
  EXPECT_EQ(Phase(dv()), "UploadReady");
  EXPECT_EQ(Phase(GetJson({"-n", "vms", "pvc", "uploaded"})), "Pending");

  const auto t0 = std::chrono::steady_clock::now();
  CommandResult up =
      Wispctl({"datavolume", "upload", "vms/uploaded", g_images_dir + "/disk.qcow2"});
  std::cout << "uploaded: wispctl datavolume upload exited " << up.exit_code << " after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - t0)
                   .count()
            << " ms:\n"
            << up.output << std::endl;
  ASSERT_EQ(up.exit_code, 0) << up.output;
  Json done = WaitUntil(
      dv, [](const Json& d) { return Phase(d) == "Succeeded" || Phase(d) == "Failed"; }, 60s,
      &phases);
  ASSERT_EQ(Phase(done), "Succeeded") << done.dump(2);
  std::cout << "uploaded: " << Join(phases) << std::endl;
  EXPECT_EQ(done["status"].value("progress", ""), "100.0%");
  const Json* ok = ConditionOf(done, "Ready");
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(ok->value("status", ""), "True");

  pvc = GetJson({"-n", "vms", "pvc", "uploaded"});
  ASSERT_EQ(Phase(pvc), "Bound") << pvc.dump(2);
  Json pv = GetJson({"pv", pvc["spec"].value("volumeName", "")});
  ASSERT_TRUE(pv.is_object());
  const std::string handle = pv["spec"]["csi"].value("volumeHandle", "");
  EXPECT_EQ(handle, volume_id);
  const std::string image = g_stack->volume_root() + "/" + handle + "/disk.img";
  CommandResult cmp = RunArgv({"cmp", g_images_dir + "/expected.raw", image});
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  const std::string prime = "wisp-prime-" + pvc["metadata"].value("uid", "");
  Json gone = WaitUntil(
      [&] {
        return GetJson({"-n", "vms", "pvc", prime});
      },
      [](const Json& p) { return p.is_null(); }, 30s);
  EXPECT_TRUE(gone.is_null()) << "the prime PVC is still there: " << gone.dump(2);

  const std::string reasons = EventReasons("DataVolume", "uploaded");
  for (const char* want : {"UploadReady ", "UploadFailed ", "UploadSucceeded "}) {
    EXPECT_NE(reasons.find(want), std::string::npos) << want << " in " << reasons;
  }
}

// CDI's certConfigMap and extraHeaders, applied: a DataVolume importing over HTTPS from a server
// whose CA is in a ConfigMap of the namespace, and which answers only requests carrying a header.
// The ConfigMap comes after the DataVolume: the import waits for it (external-provisioner's
// events name it), as CDI's importer pod does, then succeeds with qemu-img's bytes. Without
// certConfigMap the DataVolume fails naming the TLS cause; with secretRef it is refused at once.
TEST(Story3Population, CertConfigMapCaIsTrustedAndExtraHeadersAreSent) {
  ASSERT_EQ(g_population_unavailable, "");
  const std::string url = g_mirror->Url("/disk.qcow2.xz");
  auto with = [&](const std::string& name, const std::string& extra) {
    std::string dv = DataVolumeYaml(name, url);
    dv.replace(dv.find("url: "), 5, extra + "extraHeaders: [\"X-Mirror-Tenant: vms\"], url: ");
    return dv;
  };
  ASSERT_EQ(Create(with("mirror", "certConfigMap: mirror-ca, ")).exit_code, 0);
  ASSERT_EQ(Create(with("untrusted", "")).exit_code, 0);
  Created refused = Create(with("with-secret", "secretRef: mirror-auth, "));
  EXPECT_NE(refused.exit_code, 0);
  std::cout << "with-secret: " << refused.output << std::endl;
  EXPECT_NE(refused.output.find("spec.source.http.secretRef: Unsupported value: \"mirror-auth\": "
                                "wisp-populator does not fetch with credentials from Secrets"),
            std::string::npos)
      << refused.output;
  // wisp.dev's own kind: its CRD refuses the field before any webhook (CEL), never prunes it.
  Created vis_refused = Create(
      "apiVersion: wisp.dev/v1alpha1\nkind: VolumeImportSource\nmetadata: {name: with-secret, "
      "namespace: vms}\nspec:\n  source: {http: {url: \"" +
      url + "\", secretRef: mirror-auth}}\n");
  EXPECT_NE(vis_refused.exit_code, 0);
  std::cout << "wisp.dev with-secret: " << vis_refused.output << std::endl;
  EXPECT_NE(vis_refused.output.find("secretRef: Unsupported value: wisp-populator does not fetch "
                                    "with credentials from Secrets"),
            std::string::npos)
      << vis_refused.output;
  for (const char* name : {"mirror", "untrusted"}) {
    ASSERT_TRUE(WaitUntil(
                    [&] {
                      return GetJson({"-n", "vms", "pvc", name});
                    },
                    [](const Json& p) { return p.is_object(); }, 60s)
                    .is_object());
    ChooseNodeForClaim(name);
  }
  Json vis = GetJson({"-n", "vms", "volumeimportsources.wisp.dev", "mirror"});
  EXPECT_EQ(vis.value("/spec/source/http/certConfigMap"_json_pointer, ""), "mirror-ca")
      << vis.dump(2);

  // No ConfigMap yet: the prime's CreateVolume fails naming it, and nothing is fetched.
  Json pvc = GetJson({"-n", "vms", "pvc", "mirror"});
  const std::string prime = "wisp-prime-" + pvc["metadata"].value("uid", "");
  auto failures = [&] { return ProvisioningFailures(prime); };
  Json waiting = WaitUntil(
      failures,
      [](const Json& m) {
        return m.get<std::string>().find("ConfigMap vms/mirror-ca") != std::string::npos;
      },
      60s);
  std::cout << "mirror, before its ConfigMap: " << waiting.get<std::string>();
  EXPECT_NE(waiting.get<std::string>().find(
                "ConfigMap vms/mirror-ca, named by wisp.dev VolumeImportSource vms/mirror "
                "spec.source.http.certConfigMap, does not exist yet; retry"),
            std::string::npos)
      << waiting;
  EXPECT_NE(Phase(GetJson({"-n", "vms", "datavolume", "mirror"})), "Succeeded");

  ASSERT_TRUE(g_kube
                  ->MustKubectl({"-n", "vms", "create", "configmap", "mirror-ca",
                                 "--from-file=ca.crt=" + g_mirror_ca_file})
                  .ok());
  Json done = WaitUntil(
      [] {
        return GetJson({"-n", "vms", "datavolume", "mirror"});
      },
      [](const Json& d) { return Phase(d) == "Succeeded" || Phase(d) == "Failed"; }, 240s);
  ASSERT_EQ(Phase(done), "Succeeded") << done.dump(2);
  pvc = GetJson({"-n", "vms", "pvc", "mirror"});
  Json pv = GetJson({"pv", pvc["spec"].value("volumeName", "")});
  ASSERT_TRUE(pv.is_object()) << pvc.dump(2);
  const std::string image =
      g_stack->volume_root() + "/" + pv["spec"]["csi"].value("volumeHandle", "") + "/disk.img";
  CommandResult cmp = RunArgv({"cmp", g_images_dir + "/expected.raw", image});
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  Json failed = WaitUntil(
      [] {
        return GetJson({"-n", "vms", "datavolume", "untrusted"});
      },
      [](const Json& d) { return Phase(d) == "Failed"; }, 120s);
  ASSERT_EQ(Phase(failed), "Failed") << failed.dump(2);
  const Json* ready = ConditionOf(failed, "Ready");
  ASSERT_NE(ready, nullptr);
  std::cout << "untrusted: " << ready->value("message", "") << std::endl;
  EXPECT_NE(ready->value("message", "").find("certificate verify failed"), std::string::npos)
      << failed.dump(2);
  EXPECT_EQ(Phase(GetJson({"-n", "vms", "pvc", "untrusted"})), "Pending");
}

// KEP 1495: without the CrossNamespaceVolumeDataSource gate (alpha, off) the apiserver drops a
// PVC's dataSourceRef.namespace; wisp then sees, and populates from, a source of the PVC's own
// namespace only. (A DataVolume naming another namespace is refused: Story3 above.)
TEST(Story3Population, CrossNamespacePvcReferenceIsDroppedByTheApiserver) {
  std::string pvc = ReadManifest("pvc-import.yaml");
  pvc.replace(pvc.find("name: vm-disk"), 13, "name: elsewhere");
  const size_t ref = pvc.find("kind: VolumeImportSource");
  ASSERT_NE(ref, std::string::npos) << pvc;
  pvc.insert(ref, "namespace: ml\n    ");
  Created c = Create(pvc);
  ASSERT_EQ(c.exit_code, 0) << c.output << pvc;
  EXPECT_FALSE(c.object["spec"]["dataSourceRef"].contains("namespace")) << c.object["spec"].dump(2);
}

// CDI's own manifests, unchanged: a cdi.kubevirt.io VolumeImportSource with an http source and a
// sha256 checksum, and a PVC of the chart's class whose dataSourceRef names it, as CDI's
// populator documentation writes them. wisp populates it as it does a wisp.dev source: the PVC
// binds to a volume holding the source's bytes, and the prime is gone.
std::string CdiManifest(const std::string& source, const std::string& claim, const std::string& url,
                        const std::string& sha256) {
  return "apiVersion: cdi.kubevirt.io/v1beta1\n"
         "kind: VolumeImportSource\n"
         "metadata: {name: " +
         source +
         ", namespace: vms}\n"
         "spec:\n"
         "spec:\n"
         "  source:\n"
         "    http:\n"
         "      url: \"" +
         url +
         "\"\n"
         "      checksum: \"sha256:" +
         sha256 +
         "\"\n"
         "  contentType: kubevirt\n"
         "---\n"
         "apiVersion: v1\n"
         "kind: PersistentVolumeClaim\n"
         "metadata: {name: " +
         claim +
         ", namespace: vms}\n"
         "spec:\n"
         "  accessModes: [ReadWriteOnce]\n"
         "  storageClassName: wisp-populated\n"
         "  resources: {requests: {storage: 64Mi}}\n"
         "  dataSourceRef:\n"
         "    apiGroup: cdi.kubevirt.io\n"
         "    kind: VolumeImportSource\n"
         "    name: " +
         source + "\n";
}

TEST(Story3Population, CdiVolumeImportSourceManifestWorksUnchanged) {
  ASSERT_EQ(g_population_unavailable, "");
  CommandResult sum = RunArgv({"sha256sum", g_images_dir + "/disk.qcow2.xz"});
  ASSERT_EQ(sum.exit_code, 0) << sum.output;
  const std::string sha256 = sum.output.substr(0, 64);
  Created created =
      Create(CdiManifest("cdi-golden", "cdi-disk", g_images->Url("/disk.qcow2.xz"), sha256));
  ASSERT_EQ(created.exit_code, 0) << created.output;
  auto pvc = [] { return GetJson({"-n", "vms", "pvc", "cdi-disk"}); };
  ChooseNodeForClaim("cdi-disk");
  const auto t0 = std::chrono::steady_clock::now();
  Json bound = WaitUntil(
      pvc, [](const Json& p) { return Phase(p) == "Bound"; }, 240s);
  ASSERT_EQ(Phase(bound), "Bound") << bound.dump(2);
  std::cout << "cdi-disk: Bound in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - t0)
                   .count()
            << " ms after the node was chosen" << std::endl;
  // The user's PVC holds the PV the prime was provisioned with; the prime is gone.
  Json pv = GetJson({"pv", bound["spec"].value("volumeName", "")});
  ASSERT_TRUE(pv.is_object());
  EXPECT_EQ(pv["spec"]["claimRef"].value("uid", ""), bound["metadata"].value("uid", ""));
  const std::string prime = "wisp-prime-" + bound["metadata"].value("uid", "");
  Json gone = WaitUntil(
      [&] {
        return GetJson({"-n", "vms", "pvc", prime});
      },
      [](const Json& p) { return p.is_null(); }, 30s);
  EXPECT_TRUE(gone.is_null()) << "the prime PVC is still there: " << gone.dump(2);
  // The bytes: what `qemu-img convert -O raw` makes of the source.
  const std::string image =
      g_stack->volume_root() + "/" + pv["spec"]["csi"].value("volumeHandle", "") + "/disk.img";
  CommandResult cmp = RunArgv({"cmp", g_images_dir + "/expected.raw", image});
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  // The checksum is CDI's field, verified: the same source with another sha256 fails its import
  // naming the mismatch (external-provisioner's events on the prime), and the PVC binds nothing.
  ASSERT_EQ(Create(CdiManifest("cdi-bad-sum", "cdi-bad-disk", g_images->Url("/disk.qcow2.xz"),
                               std::string(64, '0')))
                .exit_code,
            0);
  ChooseNodeForClaim("cdi-bad-disk");
  Json bad = GetJson({"-n", "vms", "pvc", "cdi-bad-disk"});
  const std::string bad_prime = "wisp-prime-" + bad["metadata"].value("uid", "");
  auto failures = [&] { return ProvisioningFailures(bad_prime); };
  Json failed = WaitUntil(
      failures,
      [](const Json& m) {
        return m.get<std::string>().find("sha256 mismatch") != std::string::npos;
      },
      120s);
  EXPECT_NE(failed.get<std::string>().find("sha256 mismatch"), std::string::npos) << failed;
  EXPECT_EQ(Phase(GetJson({"-n", "vms", "pvc", "cdi-bad-disk"})), "Pending");
  // Gone with its claim (the prime is owned by it): external-provisioner stops retrying.
  EXPECT_TRUE(
      g_kube->MustKubectl({"-n", "vms", "delete", "pvc", "cdi-bad-disk", "--wait=false"}).ok());
}

// ---- story 4: any pod gets a token for any audience ------------------------------------------

TEST(Story4, PodWithInlineWispVolumeIsAdmitted) {
  Created c = Create(E2eManifest("pod-vault-token.yaml"));
  EXPECT_EQ(c.exit_code, 0) << c.output;
}

TEST(Story4, AudienceTheNamespaceMayNotUseIsRefusedNamingTheUsersField) {
  std::string pod = E2eManifest("pod-vault-token.yaml");
  pod.replace(pod.find("audience: vault"), 15, "audience: ml-pool.svc.id.goog");
  Created c = Create(pod);
  EXPECT_NE(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("spec.volumes[0]"), std::string::npos) << c.output;
}

// ---- issue 25: identity presets ----------------------------------------------------------------

// A pod written for IRSA (its role annotation on the pod, the form the chart's matchConditions
// send to wisp), created through the real apiserver and the chart's webhooks: stored with the aws
// preset's variables in `app`, the csi.wisp.dev volume aws-iam-token for sts.amazonaws.com owned
// by app's user, and the vault token in `worker` only; the apiserver's own validation accepts it.
TEST(Presets, IrsaAnnotatedPodIsStoredWithTheAwsPreset) {
  Created c = Create(ReadManifest("irsa-pod-annotation.yaml"));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const Json& spec = c.object["spec"];
  const Json* app = FindByName(spec["containers"], "app");
  const Json* worker = FindByName(spec["containers"], "worker");
  ASSERT_NE(app, nullptr) << spec.dump(2);
  ASSERT_NE(worker, nullptr);
  const Json app_env = app->value("env", Json::array());
  const Json* arn = FindByName(app_env, "AWS_ROLE_ARN");
  ASSERT_NE(arn, nullptr) << app->dump(2);
  EXPECT_EQ((*arn)["value"], "arn:aws:iam::111122223333:role/s3-reader");
  const Json* file = FindByName(app_env, "AWS_WEB_IDENTITY_TOKEN_FILE");
  ASSERT_NE(file, nullptr);
  EXPECT_EQ((*file)["value"], "/var/run/secrets/eks.amazonaws.com/serviceaccount/token");
  const Json worker_env = worker->value("env", Json::array());
  EXPECT_EQ(FindByName(worker_env, "AWS_ROLE_ARN"), nullptr);
  EXPECT_NE(FindByName(worker_env, "VAULT_JWT"), nullptr) << worker->dump(2);
  const Json* vol = FindByName(spec["volumes"], "aws-iam-token");
  ASSERT_NE(vol, nullptr) << spec["volumes"].dump(2);
  EXPECT_EQ((*vol)["csi"]["driver"], "csi.wisp.dev");
  EXPECT_EQ((*vol)["csi"]["volumeAttributes"]["audience"], "sts.amazonaws.com");
  EXPECT_EQ((*vol)["csi"]["volumeAttributes"]["fileOwner"], "1000");
  EXPECT_NE(FindByName(spec["volumes"], "wisp-id-vault"), nullptr);
}

// A malformed role ARN is refused by the apiserver with wisp's reason naming the annotation.
TEST(Presets, MalformedRoleArnIsRefusedNamingTheAnnotation) {
  std::string pod = ReadManifest("irsa-pod-annotation.yaml");
  pod.replace(pod.find("name: s3-lister-annotated"), 25, "name: s3-lister-bad-arn  ");
  pod.replace(pod.find("arn:aws:iam::111122223333:role/s3-reader"), 40,
              "s3-reader                               ");
  Created c = Create(pod);
  EXPECT_NE(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("metadata.annotations[eks.amazonaws.com/role-arn]: Invalid value"),
            std::string::npos)
      << c.output;
}

// ---- story 5: an outage blocks nothing that did not ask for wisp ------------------------------

TEST(Story5, GatewayDownBlocksOnlyWhatAskedForWisp) {
  g_stack->Kill("wisp-gateway");
  Created plain = Create(E2eManifest("plain-pod.yaml"));
  std::string sidecar = ReadManifest("loader-pod.yaml");
  sidecar.replace(sidecar.find("name: data-loader\n"), 18, "name: data-loader-outage\n");
  Created asked = Create(sidecar);
  ASSERT_TRUE(g_stack->StartService("wisp-gateway").ok());
  ASSERT_TRUE(g_stack->WaitReady("wisp-gateway").ok());
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(asked.exit_code, 0) << asked.output;
  EXPECT_NE(asked.output.find("failed calling webhook"), std::string::npos) << asked.output;
}

// With the gateway down, a VMI that asked for wisp still takes status updates (VMIs have no
// status subresource: each is an UPDATE), can be deleted, and its finalizer can be removed: none
// of these reaches wisp, so none hangs on it (it would hang Terminating otherwise).
TEST(Story5, GatewayDownBlocksNoStatusUpdateDeletionOrFinalizerRemoval) {
  std::string vmi = ReadManifest("vmi-token-annotation.yaml");
  vmi.replace(vmi.find("name: irsa-annotated\n"), 21,
              "name: finalized\n  finalizers: [wisp.dev/e2e]\n");
  Created c = Create(vmi);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  g_stack->Kill("wisp-gateway");
  CommandResult status = g_kube->Kubectl({"-n", "vms", "patch", "vmi", "finalized", "--type=merge",
                                          "-p", R"({"status":{"phase":"Scheduling"}})"});
  CommandResult del = g_kube->Kubectl({"-n", "vms", "delete", "vmi", "finalized", "--wait=false"});
  CommandResult unfinalize =
      g_kube->Kubectl({"-n", "vms", "patch", "vmi", "finalized", "--type=json", "-p",
                       R"([{"op":"remove","path":"/metadata/finalizers"}])"});
  ASSERT_TRUE(g_stack->StartService("wisp-gateway").ok());
  ASSERT_TRUE(g_stack->WaitReady("wisp-gateway").ok());
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_EQ(del.exit_code, 0) << del.output;
  EXPECT_EQ(unfinalize.exit_code, 0) << unfinalize.output;
  EXPECT_NE(g_kube->Kubectl({"-n", "vms", "get", "vmi", "finalized"}).output.find("NotFound"),
            std::string::npos)
      << "the VMI is gone once its finalizer is";
}

// ---- issue 25 item 3: race-free injection ---------------------------------------------------

// The sum of the samples of `name` in wisp-gateway's /metrics whose labels contain every one of
// `labels` (e.g. `source="get"`).
double GatewayMetric(const std::string& name, const std::vector<std::string>& labels = {}) {
  CommandResult r = RunArgv(
      {"curl", "-sS", "--max-time", "5",
       "http://127.0.0.1:" + std::to_string(g_stack->metrics_port("wisp-gateway")) + "/metrics"},
      "", false);
  double total = 0;
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    bool all = true;
    for (const auto& l : labels) all = all && line.find(l) != std::string::npos;
    if (all) total += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return total;
}

// The audit events (ResponseComplete) of the creation of pod `ns`/`name`, from a started
// cluster's audit log.
std::vector<Json> PodCreateAuditEvents(const std::string& ns, const std::string& name) {
  std::vector<Json> out;
  std::ifstream log(g_kube->audit_log_file());
  std::string line;
  while (std::getline(log, line)) {
    Json e = Json::parse(line, nullptr, false);
    if (!e.is_object() || e.value("stage", "") != "ResponseComplete" ||
        e.value("verb", "") != "create") {
      continue;
    }
    const Json ref = e.value("objectRef", Json::object());
    if (ref.value("resource", "") == "pods" && ref.value("namespace", "") == ns &&
        ref.value("name", "") == name && !ref.contains("subresource")) {
      out.push_back(e);
    }
  }
  return out;
}

std::string ServiceAccountAndPod(const std::string& ns, const std::string& name) {
  return "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: " + name +
         "\n  namespace: " + ns +
         "\n  annotations:\n    eks.amazonaws.com/role-arn: arn:aws:iam::111122223333:role/" +
         name + "\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\n  namespace: " + ns + "\nspec:\n  serviceAccountName: " + name +
         "\n  containers:\n  - name: app\n    image: registry.example/apps/app:1.0\n";
}

// A ServiceAccount and a pod using it, created by one `kubectl create` (the pod follows the
// ServiceAccount within milliseconds, IRSA's #174/#264): in a namespace labelled for identity by
// ServiceAccount, each pod reaches wisp (pods-by-serviceaccount.mutate.wisp.dev) although it asks
// nothing itself, and wisp-policy received the ServiceAccount's annotations: the gateway found
// every one (its metrics, by where the answer came from) and wisp-policy's audit annotation in
// the apiserver's audit log names the annotation. The same in a namespace without the label
// costs no lookup: the pod never reaches wisp.
TEST(ServiceAccountIdentity, PodCreatedRightAfterItsServiceAccountCarriesItsAnnotations) {
  ASSERT_TRUE(g_kube->CreateNamespace("sa-ids", "wisp.dev/serviceaccount-identity=enabled").ok());
  const std::string lookups = "wisp_gateway_service_account_lookups_total";
  const double found_before = GatewayMetric(lookups, {"result=\"found\""});
  const double get_before = GatewayMetric(lookups, {"source=\"get\"", "result=\"found\""});
  constexpr int kPods = 6;
  for (int i = 0; i < kPods; ++i) {
    CommandResult r = g_kube->Kubectl({"create", "-f", "-"},
                                      ServiceAccountAndPod("sa-ids", "app-" + std::to_string(i)));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const double found = GatewayMetric(lookups, {"result=\"found\""}) - found_before;
  const double by_get = GatewayMetric(lookups, {"source=\"get\"", "result=\"found\""}) - get_before;
  std::cout << "sa-ids: " << found << " of " << kPods
            << " pods' ServiceAccounts found by the gateway, " << by_get
            << " of them by a live GET (the watch had not delivered the ServiceAccount yet)"
            << std::endl;
  // At least one lookup per pod: a pod the aws preset mutated is sent to wisp once more
  // (reinvocationPolicy IfNeeded), which reads the same ServiceAccount again from the cache.
  EXPECT_GE(found, kPods);
  EXPECT_LE(found, 2 * kPods);
  EXPECT_EQ(GatewayMetric(lookups, {"result=\"error\""}), 0);
  // What the annotations chose: IRSA's role on the ServiceAccount alone gives each pod, as the
  // apiserver stored it, the aws preset (issue 25 item 1: a workload written for IRSA, unchanged).
  for (int i = 0; i < kPods; ++i) {
    const std::string name = "app-" + std::to_string(i);
    auto got = g_kube->MustKubectl({"-n", "sa-ids", "get", "pod", name, "-o", "json"});
    ASSERT_TRUE(got.ok()) << got.status();
    const Json pod = Json::parse(*got);
    const Json* app = FindByName(pod["spec"]["containers"], "app");
    ASSERT_NE(app, nullptr) << pod.dump(2);
    const Json env = app->value("env", Json::array());
    const Json* arn = FindByName(env, "AWS_ROLE_ARN");
    ASSERT_NE(arn, nullptr) << app->dump(2);
    EXPECT_EQ((*arn)["value"], "arn:aws:iam::111122223333:role/" + name);
    const Json* file = FindByName(env, "AWS_WEB_IDENTITY_TOKEN_FILE");
    ASSERT_NE(file, nullptr) << app->dump(2);
    EXPECT_EQ((*file)["value"], "/var/run/secrets/eks.amazonaws.com/serviceaccount/token");
    const Json* vol = FindByName(pod["spec"]["volumes"], "aws-iam-token");
    ASSERT_NE(vol, nullptr) << pod["spec"]["volumes"].dump(2);
    EXPECT_EQ((*vol)["csi"]["volumeAttributes"]["audience"], "sts.amazonaws.com");
  }

  if (g_kube->audit_log_file().empty()) {
    std::cout << "sa-ids: a given cluster's audit log is not readable here; the gateway's "
                 "metrics above are the evidence"
              << std::endl;
  } else {
    for (int i = 0; i < kPods; ++i) {
      const std::string name = "app-" + std::to_string(i);
      SCOPED_TRACE(name);
      std::vector<Json> events;
      for (int t = 0; t < 40 && events.empty(); ++t) {
        events = PodCreateAuditEvents("sa-ids", name);
        if (events.empty()) std::this_thread::sleep_for(250ms);
      }
      ASSERT_EQ(events.size(), 1u);
      const Json annotations = events[0].value("annotations", Json::object());
      EXPECT_EQ(annotations.value(
                    "pods-by-serviceaccount.mutate.wisp.dev/serviceaccount-annotations", ""),
                "eks.amazonaws.com/role-arn")
          << annotations.dump(2);
    }
  }

  // No label, no call: the same in namespace plain adds no lookup at all.
  const double all_before = GatewayMetric(lookups);
  CommandResult plain =
      g_kube->Kubectl({"create", "-f", "-"}, ServiceAccountAndPod("plain", "irsa"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(GatewayMetric(lookups), all_before);
}

// A second mutating webhook, registered after wisp's (configurations run in name order), adds a
// container to the pods it selects, as a service mesh or a log agent does. wisp's pods webhook
// (reinvocationPolicy IfNeeded) is called again and wires that container too: the sidecar's
// socket mount and WISP_TOKEN_URL, what it gives every container, once each, and the sidecar is
// not injected twice (azure-workload-identity's #791 is this case, left unwired).
TEST(Reinvocation, ContainerAddedByALaterWebhookGetsWispsWiring) {
  std::atomic<int> calls{0};
  auto server = http::Server::Create({.address = "0.0.0.0",
                                      .port = 0,
                                      .cert_file = g_stack->dir() + "/pki/gateway.pem",
                                      .key_file = g_stack->dir() + "/pki/gateway-key.pem",
                                      .threads = 1,
                                      .name = "later-webhook"});
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->Handle("POST", "/add-container", [&calls](const http::Request& r) {
    ++calls;
    const Json review = Json::parse(r.body, nullptr, false);
    if (!review.is_object() || !review.contains("request")) {
      return http::Response::Error(400, "not an AdmissionReview");
    }
    const Json& request = review["request"];
    Json response = {{"uid", request.value("uid", "")}, {"allowed", true}};
    const Json containers = request["object"]["spec"].value("containers", Json::array());
    if (FindByName(containers, "added-later") == nullptr) {
      const Json patch = Json::array(
          {{{"op", "add"},
            {"path", "/spec/containers/-"},
            {"value", {{"name", "added-later"}, {"image", "registry.example/agent:1.0"}}}}});
      CommandResult b64 = RunArgv({"base64", "-w0"}, patch.dump(), false);
      response["patchType"] = "JSONPatch";
      response["patch"] = b64.output;
    }
    return http::Response::Json(200, Json({{"apiVersion", "admission.k8s.io/v1"},
                                           {"kind", "AdmissionReview"},
                                           {"response", response}})
                                         .dump());
  });
  ASSERT_TRUE((*server)->Start().ok());
  CommandResult ca = RunArgv({"base64", "-w0", g_stack->ca_file()});
  ASSERT_EQ(ca.exit_code, 0) << ca.output;
  const std::string config =
      "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n"
      "metadata: {name: zz-e2e-later-webhook}\nwebhooks:\n"
      "- name: adds-container.e2e.wisp.dev\n  admissionReviewVersions: [v1]\n"
      "  clientConfig:\n    url: https://" +
      WebhookHost() + ":" + std::to_string((*server)->port()) +
      "/add-container\n    caBundle: " + ca.output +
      "\n  rules: [{apiGroups: [\"\"], apiVersions: [v1], resources: [pods], operations: "
      "[CREATE]}]\n"
      "  objectSelector: {matchLabels: {e2e.wisp.dev/later-webhook: \"true\"}}\n"
      "  sideEffects: None\n  failurePolicy: Fail\n  timeoutSeconds: 5\n"
      "  reinvocationPolicy: Never\n";
  ASSERT_TRUE(g_kube->MustKubectl({"apply", "--server-side", "-f", "-"}, config).ok());
  std::string pod = ReadManifest("loader-pod.yaml");
  pod.replace(pod.find("name: data-loader\n"), 18,
              "name: data-loader-reinvoked\n  labels: {e2e.wisp.dev/later-webhook: \"true\"}\n");
  // The apiserver picks the configuration up from an informer: wait until a dry run shows it.
  Created dry;
  for (int i = 0; i < 120; ++i) {
    dry = Create(pod, {"--dry-run=server"});
    if (dry.exit_code == 0 && dry.output.find("added-later") != std::string::npos) break;
    std::this_thread::sleep_for(250ms);
  }
  ASSERT_NE(dry.output.find("added-later"), std::string::npos) << dry.output;

  Created c = Create(pod);
  (void)g_kube->Kubectl({"delete", "mutatingwebhookconfiguration", "zz-e2e-later-webhook"});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const Json& spec = c.object["spec"];
  const Json* added = FindByName(spec["containers"], "added-later");
  ASSERT_NE(added, nullptr) << spec.dump(2);
  // wisp's socket mount, once (kube-apiserver's ServiceAccount plugin, run again after the
  // reinvocation, adds its kube-api-access mount beside it).
  int socket_mounts = 0;
  for (const auto& m : added->value("volumeMounts", Json::array())) {
    if (m == Json::parse(R"({"name":"wisp-token-socket","mountPath":"/var/run/wisp"})")) {
      ++socket_mounts;
    }
  }
  EXPECT_EQ(socket_mounts, 1) << added->dump(2);
  EXPECT_EQ(added->value("env", Json()),
            Json::parse(R"([{"name":"WISP_TOKEN_URL","value":"unix:///var/run/wisp/token.sock"}])"))
      << added->dump(2);
  // The user's container is wired once; the sidecar is there once.
  const Json* loader = FindByName(spec["containers"], "loader");
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->value("env", Json::array()).size(), 1u) << loader->dump(2);
  int sidecars = 0;
  for (const char* list : {"containers", "initContainers"}) {
    for (const auto& ctr : spec.value(list, Json::array())) {
      sidecars += ctr.value("name", "") == "wisp-sidecar" ? 1 : 0;
    }
  }
  EXPECT_EQ(sidecars, 1) << spec.dump(2);
  std::cout << "reinvocation: the later webhook was called " << calls.load()
            << " times (dry runs included); added-later wired by wisp's second call" << std::endl;
  (*server)->Stop();
}

}  // namespace
}  // namespace wisp::integration

int main(int argc, char** argv) {
  using namespace wisp::integration;
  ::testing::InitGoogleTest(&argc, argv);
  auto kube = KubeCluster::FromEnvironment();
  if (!kube.ok()) return ExitCodeWithoutCluster(kube.status());
  g_kube = kube->get();
  if (absl::Status s = CreateNamespaces(); !s.ok()) {
    std::cerr << "e2e set-up failed: " << s << "\n" << g_kube->ApiserverLogTail() << std::endl;
    return 1;
  }
  TempDir files("wisp-e2e");
  auto token_policy = TokenPolicyTrustingTheCluster(files.path());
  if (!token_policy.ok()) {
    std::cerr << "e2e set-up failed: " << token_policy.status() << std::endl;
    return 1;
  }
  StackOptions options;
  const std::string host = Env("WISP_E2E_WEBHOOK_HOST");
  if (!host.empty()) options.gateway_extra_sans = {host};
  options.extra_args["wisp-token"] = {"--policy-file", *token_policy};
  // The gateway watches the cluster as the chart's controller gateway does (--in-cluster there):
  // wisp's records follow what this apiserver stores, and its populator and DataVolume
  // controllers run.
  options.extra_args["wisp-gateway"] = ControllerGatewayArgs(*g_kube);
  // Checkpoints every 4 MiB (default 64 MiB): the resume story's 64 MiB image gets some.
  options.extra_args["wisp-populator"] = {"--checkpoint-interval", "4194304"};
  auto stack = Stack::Start(options);
  if (!stack.ok()) {
    std::cerr << "e2e: the wisp stack did not start: " << stack.status() << std::endl;
    return 1;
  }
  g_stack = stack->get();
  for (auto step :
       {+[] { return InstallCrds(*g_kube); },
        +[]() -> absl::Status {
          WISP_ASSIGN_OR_RETURN(g_rendered_chart, RenderChart(*g_kube));
          return absl::OkStatus();
        },
        +[] { return RegisterWebhooks(*g_kube, g_rendered_chart, *g_stack, WebhookHost()); }}) {
    if (absl::Status s = step(); !s.ok()) {
      std::cerr << "e2e set-up failed: " << s << "\n" << g_kube->ApiserverLogTail() << std::endl;
      return 1;
    }
  }
  if (absl::Status s = StartPopulation(files.path()); !s.ok()) {
    g_population_unavailable = std::string(s.message());
    std::cerr << "e2e: the population stories cannot run: " << s << std::endl;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = RUN_ALL_TESTS();
  std::cout << "e2e: " << (g_kube->started() ? "kube-apiserver started here" : "given cluster")
            << ", tests took "
            << std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() -
                                                                t0)
                   .count()
            << " s" << std::endl;
  return rc;
}
