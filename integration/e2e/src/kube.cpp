#include "wisp/integration/kube.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include "wisp/status/status.hpp"

extern char** environ;

namespace wisp::integration {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kSkip =
    "SKIP e2e: no Kubernetes API given; run `scripts/e2e --kube-bin DIR` (a directory with "
    "kube-apiserver [and kube-controller-manager]; etcd from etcd-server) or `scripts/e2e "
    "--kubeconfig FILE` (any cluster; see docs/operations.md, \"Running the e2e suite\")";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

absl::Status Sh(const std::string& command) {
  CommandResult r = RunCommand(command);
  if (r.exit_code != 0) {
    return absl::InternalError("`" + command + "` exited " + std::to_string(r.exit_code) + ": " +
                               r.output);
  }
  return absl::OkStatus();
}

std::string Tail(const std::string& s, size_t bytes) {
  return s.size() <= bytes ? s : s.substr(s.size() - bytes);
}

}  // namespace

CommandResult RunArgv(const std::vector<std::string>& argv, const std::string& input,
                      bool merge_stderr) {
  CommandResult result;
  if (argv.empty()) return result;
  // stdin from a file (no pipe to keep fed while reading the output), output through one pipe.
  char in_path[] = "/tmp/wisp-e2e-stdin-XXXXXX";
  const int in_fd = ::mkstemp(in_path);
  if (in_fd < 0) return result;
  ::unlink(in_path);
  if (!input.empty() &&
      ::write(in_fd, input.data(), input.size()) != static_cast<ssize_t>(input.size())) {
    ::close(in_fd);
    return result;
  }
  ::lseek(in_fd, 0, SEEK_SET);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in_fd);
    return result;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  // Without merging, stderr goes to a file read back only when the command fails.
  char err_path[] = "/tmp/wisp-e2e-stderr-XXXXXX";
  const int err_fd = merge_stderr ? -1 : ::mkstemp(err_path);
  if (err_fd >= 0) ::unlink(err_path);
  posix_spawn_file_actions_adddup2(&fa, err_fd >= 0 ? err_fd : out[1], 2);
  std::vector<char*> args;
  std::vector<std::string> copy = argv;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  ::close(in_fd);
  if (rc != 0) {
    ::close(out[0]);
    if (err_fd >= 0) ::close(err_fd);
    result.output = "cannot run " + argv[0] + ": " + std::strerror(rc);
    return result;
  }
  char buf[8192];
  ssize_t n;
  while ((n = ::read(out[0], buf, sizeof(buf))) > 0) result.output.append(buf, n);
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (err_fd >= 0) {
    if (result.exit_code != 0) {
      ::lseek(err_fd, 0, SEEK_SET);
      while ((n = ::read(err_fd, buf, sizeof(buf))) > 0) result.output.append(buf, n);
    }
    ::close(err_fd);
  }
  return result;
}

int ExitCodeWithoutCluster(const absl::Status& status) {
  if (absl::IsNotFound(status)) {
    std::cout << status.message() << std::endl;
    return 77;
  }
  std::cerr << "e2e: no cluster: " << status << std::endl;
  return 1;
}

absl::StatusOr<std::unique_ptr<KubeCluster>> KubeCluster::FromEnvironment() {
  const std::string bin_dir = Env("WISP_E2E_KUBE_BIN_DIR");
  const std::string given = Env("WISP_E2E_KUBECONFIG");
  if (bin_dir.empty() && given.empty()) return absl::NotFoundError(kSkip);
  auto kube = std::unique_ptr<KubeCluster>(new KubeCluster());
  kube->kubectl_ = Env("WISP_KUBECTL");
  if (kube->kubectl_.empty()) kube->kubectl_ = SourceDir() + "/build/tools/kubectl";
  if (::access(kube->kubectl_.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError("no kubectl at " + kube->kubectl_ +
                                         " (scripts/e2e extracts it; or set WISP_KUBECTL)");
  }
  if (!given.empty()) {
    if (!fs::exists(given)) {
      return absl::InvalidArgumentError("WISP_E2E_KUBECONFIG: no such file: " + given);
    }
    kube->kubeconfig_ = given;
    WISP_ASSIGN_OR_RETURN(std::string ready, kube->MustKubectl({"get", "--raw", "/readyz"}));
    if (ready.find("ok") == std::string::npos) {
      return absl::UnavailableError("the cluster of " + given + " is not ready: " + ready);
    }
    return kube;
  }
  WISP_RETURN_IF_ERROR(kube->Start(bin_dir));
  return kube;
}

absl::Status KubeCluster::Start(const std::string& bin_dir) {
  const std::string apiserver = bin_dir + "/kube-apiserver";
  if (::access(apiserver.c_str(), X_OK) != 0) {
    return absl::InvalidArgumentError("WISP_E2E_KUBE_BIN_DIR: no executable kube-apiserver in " +
                                      bin_dir);
  }
  const std::string etcd = Env("WISP_E2E_ETCD").empty() ? "/usr/bin/etcd" : Env("WISP_E2E_ETCD");
  if (::access(etcd.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError("no etcd at " + etcd +
                                         " (apt-get install etcd-server, or set WISP_E2E_ETCD)");
  }
  dir_ = std::make_unique<TempDir>("wisp-e2e-kube");
  const std::string d = dir_->path();
  const std::string pki = d + "/pki";
  fs::create_directories(pki);

  // The cluster's CA, the apiserver's serving certificate, an admin client certificate and the
  // service-account signing key (RSA: what kubelet-era clients and most OIDC verifiers expect).
  WISP_ASSIGN_OR_RETURN(TestCa ca, TestCa::Create(pki, "ca"));
  WISP_RETURN_IF_ERROR(
      ca.Issue("apiserver",
               "subjectAltName=DNS:localhost,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,"
               "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1\n"
               "extendedKeyUsage=serverAuth\n"));
  WISP_RETURN_IF_ERROR(
      ca.Issue("admin", "extendedKeyUsage=clientAuth\n", "/O=system:masters/CN=wisp-e2e-admin"));
  WISP_RETURN_IF_ERROR(Sh("cd '" + pki +
                          "' && openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in "
                          "sa.key -pubout -out sa.pub 2>/dev/null"));

  const int etcd_client = FreePort();
  const int etcd_peer = FreePort();
  const std::string client_url = "http://127.0.0.1:" + std::to_string(etcd_client);
  const std::string peer_url = "http://127.0.0.1:" + std::to_string(etcd_peer);
  WISP_ASSIGN_OR_RETURN(
      etcd_,
      Process::Start(
          {.path = etcd,
           .args = {"--name=e2e", "--data-dir=" + d + "/etcd", "--listen-client-urls=" + client_url,
                    "--advertise-client-urls=" + client_url, "--listen-peer-urls=" + peer_url,
                    "--initial-advertise-peer-urls=" + peer_url,
                    "--initial-cluster=e2e=" + peer_url, "--unsafe-no-fsync=true"},
           .env = {{"ETCD_UNSUPPORTED_ARCH", ""}}}));
  WISP_RETURN_IF_ERROR(WaitForTcp("127.0.0.1", etcd_client, 20s));

  // An audit log of pod creations (Metadata: the annotations webhooks return are in it), so a test
  // can see what wisp's webhooks recorded about a pod.
  std::ofstream(d + "/audit-policy.yaml")
      << "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n"
      << "- level: Metadata\n  verbs: [create]\n  resources: [{group: \"\", resources: [pods]}]\n"
      << "- level: None\n";
  audit_log_ = d + "/audit.log";
  const int port = FreePort();
  WISP_ASSIGN_OR_RETURN(
      apiserver_,
      Process::Start(
          {.path = apiserver,
           .args = {"--etcd-servers=" + client_url, "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1", "--secure-port=" + std::to_string(port),
                    "--tls-cert-file=" + ca.cert_file("apiserver"),
                    "--tls-private-key-file=" + ca.key_file("apiserver"),
                    "--client-ca-file=" + ca.ca_file(),
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    "--service-account-key-file=" + pki + "/sa.pub",
                    "--service-account-signing-key-file=" + pki + "/sa.key",
                    "--authorization-mode=Node,RBAC", "--service-cluster-ip-range=10.96.0.0/16",
                    // No kube-proxy or node here: nothing would keep the kubernetes Service's
                    // endpoints right, and a loopback advertise address is refused by the
                    // default reconciler.
                    "--endpoint-reconciler-type=none", "--allow-privileged=true",
                    "--cert-dir=" + d + "/apiserver-certs", "--profiling=false",
                    "--audit-policy-file=" + d + "/audit-policy.yaml",
                    "--audit-log-path=" + audit_log_, "--audit-log-mode=blocking"}}));

  kubeconfig_ = d + "/admin.kubeconfig";
  std::ofstream(kubeconfig_)
      << "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n"
      << "    server: https://127.0.0.1:" << port << "\n"
      << "    certificate-authority: " << ca.ca_file() << "\n"
      << "users:\n- name: admin\n  user:\n"
      << "    client-certificate: " << ca.cert_file("admin") << "\n"
      << "    client-key: " << ca.key_file("admin") << "\n"
      << "contexts:\n- name: e2e\n  context: {cluster: e2e, user: admin}\ncurrent-context: e2e\n";

  const auto deadline = std::chrono::steady_clock::now() + 90s;
  std::string last;
  while (true) {
    CommandResult r = Kubectl({"get", "--raw", "/readyz"});
    if (r.exit_code == 0 && r.output.find("ok") != std::string::npos) break;
    last = r.output;
    if (!apiserver_->Running()) {
      return absl::InternalError("kube-apiserver exited: " + ApiserverLogTail());
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError("kube-apiserver not ready in 90 s: " + last + "\n" +
                                         ApiserverLogTail());
    }
    std::this_thread::sleep_for(250ms);
  }

  const std::string kcm = bin_dir + "/kube-controller-manager";
  if (::access(kcm.c_str(), X_OK) == 0) {
    WISP_ASSIGN_OR_RETURN(
        controller_manager_,
        Process::Start(
            {.path = kcm,
             .args = {"--kubeconfig=" + kubeconfig_,
                      "--controllers=serviceaccount,serviceaccount-token,namespace,"
                      "garbagecollector,resourcequota,persistentvolume-binder,pvc-protection,"
                      "pv-protection",
                      // Binds claims to volumes (and hands dynamic ones to
                      // external-provisioner); the default 15 s resync would only
                      // slow the retries of the population stories.
                      "--pvclaimbinder-sync-period=2s",
                      "--service-account-private-key-file=" + pki + "/sa.key",
                      "--root-ca-file=" + ca.ca_file(), "--leader-elect=false",
                      "--use-service-account-credentials=false", "--secure-port=0"}}));
  }
  return absl::OkStatus();
}

KubeCluster::~KubeCluster() {
  if (!started()) DeleteNamespaces();
  if (controller_manager_) controller_manager_->Kill();
  if (apiserver_) apiserver_->Terminate(5s);
  if (etcd_) etcd_->Terminate(5s);
}

std::string KubeCluster::service_account_public_key_file() const {
  return started() ? dir_->path() + "/pki/sa.pub" : "";
}

std::string KubeCluster::ApiserverLogTail(size_t bytes) const {
  return apiserver_ ? Tail(apiserver_->Log(), bytes) : "";
}

CommandResult KubeCluster::Kubectl(const std::vector<std::string>& args,
                                   const std::string& input) const {
  std::vector<std::string> argv = {kubectl_, "--kubeconfig=" + kubeconfig_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunArgv(argv, input);
}

absl::StatusOr<std::string> KubeCluster::MustKubectl(const std::vector<std::string>& args,
                                                     const std::string& input) const {
  CommandResult r = Kubectl(args, input);
  if (r.exit_code != 0) {
    std::string cmd = "kubectl";
    for (const auto& a : args) cmd += " " + a;
    return absl::InternalError("`" + cmd + "` exited " + std::to_string(r.exit_code) + ": " +
                               r.output);
  }
  return r.output;
}

absl::Status KubeCluster::CreateNamespace(const std::string& name, const std::string& labels) {
  WISP_RETURN_IF_ERROR(MustKubectl({"create", "namespace", name}).status());
  namespaces_.push_back(name);
  if (!labels.empty()) {
    std::vector<std::string> args = {"label", "namespace", name};
    std::stringstream ss(labels);
    std::string kv;
    while (std::getline(ss, kv, ',')) args.push_back(kv);
    WISP_RETURN_IF_ERROR(MustKubectl(args).status());
  }
  if (!controller_manager_ && started()) {
    return MustKubectl({"-n", name, "create", "serviceaccount", "default"}).status();
  }
  // A controller-manager (ours or the cluster's) creates `default`; pods need it.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (Kubectl({"-n", name, "get", "serviceaccount", "default"}).exit_code != 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError("no default ServiceAccount in " + name + " after 30 s");
    }
    std::this_thread::sleep_for(200ms);
  }
  return absl::OkStatus();
}

void KubeCluster::DeleteNamespaces() {
  for (const auto& ns : namespaces_) Kubectl({"delete", "namespace", ns, "--wait=false"});
  namespaces_.clear();
}

absl::Status InstallCrds(const KubeCluster& kube) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(SourceDir() + "/integration/k8s/crds")) {
    const std::string p = e.path().string();
    // The VEP 94 CRD stands for a patched KubeVirt; the e2e cluster runs the released one.
    if (e.path().extension() == ".yaml" && p.find("VEP94") == std::string::npos) files.push_back(p);
  }
  for (const auto& e : fs::directory_iterator(SourceDir() + "/deploy/helm/wisp/crds")) {
    files.push_back(e.path().string());
  }
  for (const auto& f : files) {
    // create, not apply: the VMI CRD is larger than apply's last-applied annotation allows.
    CommandResult r = kube.Kubectl({"create", "-f", f});
    if (r.exit_code != 0 && r.output.find("AlreadyExists") == std::string::npos) {
      return absl::InternalError("installing " + f + ": " + r.output);
    }
  }
  return kube.MustKubectl({"wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"})
      .status();
}

absl::StatusOr<std::string> RenderChart(const KubeCluster& kube) {
  std::string helm = Env("WISP_HELM");
  if (helm.empty()) helm = SourceDir() + "/build/tools/helm";
  WISP_ASSIGN_OR_RETURN(std::string out, kube.MustKubectl({"version", "-o", "json"}));
  const size_t brace = out.find('{');
  const nlohmann::json v = nlohmann::json::parse(
      brace == std::string::npos ? std::string() : out.substr(brace), nullptr, false);
  if (!v.is_object() || !v.contains("serverVersion")) {
    return absl::InternalError("kubectl version: " + out);
  }
  const std::string version = v["serverVersion"].value("gitVersion", "");
  CommandResult r = RunArgv({helm, "template", "wisp", SourceDir() + "/deploy/helm/wisp",
                             "--namespace", "wisp-system", "--kube-version", version},
                            "", /*merge_stderr=*/false);
  if (r.exit_code != 0) return absl::InternalError("helm template: " + r.output);
  return r.output;
}

absl::StatusOr<std::string> WebhooksForLocalGateway(const std::string& rendered_chart,
                                                    const std::string& ca_file,
                                                    const std::string& host, int port) {
  CommandResult b64 = RunArgv({"base64", "-w0", ca_file});
  if (b64.exit_code != 0) return absl::InternalError("base64: " + b64.output);
  YAML::Emitter out;
  int found = 0;
  for (YAML::Node doc : YAML::LoadAll(rendered_chart)) {
    if (!doc.IsMap() || !doc["kind"]) continue;
    const std::string kind = doc["kind"].as<std::string>();
    if (kind != "MutatingWebhookConfiguration" && kind != "ValidatingWebhookConfiguration") {
      continue;
    }
    for (YAML::Node hook : doc["webhooks"]) {
      YAML::Node cc = hook["clientConfig"];
      const std::string path = cc["service"]["path"].as<std::string>();
      cc.remove("service");
      cc["url"] = "https://" + host + ":" + std::to_string(port) + path;
      cc["caBundle"] = b64.output;
    }
    out << YAML::BeginDoc << doc;
    ++found;
  }
  if (found != 2) {
    return absl::InternalError("the rendered chart has " + std::to_string(found) +
                               " webhook configurations, want 2");
  }
  return std::string(out.c_str());
}

absl::Status RegisterWebhooks(const KubeCluster& kube, const std::string& rendered_chart,
                              const Stack& stack, const std::string& host) {
  WISP_ASSIGN_OR_RETURN(std::string hooks, WebhooksForLocalGateway(rendered_chart, stack.ca_file(),
                                                                   host, stack.gateway_port()));
  WISP_RETURN_IF_ERROR(kube.MustKubectl({"apply", "--server-side", "-f", "-"}, hooks).status());
  // The apiserver picks webhook configurations up from an informer: wait until a pod that asks for
  // the sidecar comes back mutated from a server-side dry run.
  const std::string probe =
      fsutil::ReadFile(SourceDir() + "/integration/admission/manifests/loader-pod.yaml")
          .value_or("");
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (true) {
    CommandResult r = kube.Kubectl({"create", "--dry-run=server", "-f", "-", "-o", "json"}, probe);
    if (r.exit_code == 0 && r.output.find("wisp-sidecar") != std::string::npos) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError("webhooks not in effect after 30 s: " + r.output);
    }
    std::this_thread::sleep_for(250ms);
  }
  return absl::OkStatus();
}

std::string WebhookHost() {
  const std::string host = Env("WISP_E2E_WEBHOOK_HOST");
  return host.empty() ? "127.0.0.1" : host;
}

std::vector<std::string> ControllerGatewayArgs(const KubeCluster& kube,
                                               const std::string& identity) {
  return {"--kubeconfig",
          kube.kubeconfig(),
          "--controllers",
          "populator,datavolumes",
          "--leader-election",
          "--leader-election-namespace",
          "wisp-system",
          "--leader-election-identity",
          identity};
}

absl::Status RegisterCsiNode(const KubeCluster& kube, const std::string& node) {
  const std::string manifest =
      "apiVersion: v1\nkind: Node\nmetadata:\n  name: " + node +
      "\n  labels: {kubernetes.io/hostname: " + node + ", topology.wisp.dev/node: " + node +
      "}\n---\napiVersion: storage.k8s.io/v1\nkind: CSINode\n"
      "metadata: {name: " +
      node + "}\nspec:\n  drivers:\n    - {name: csi.wisp.dev, nodeID: " + node +
      ", topologyKeys: [topology.wisp.dev/node]}\n";
  return kube.MustKubectl({"apply", "--server-side", "-f", "-"}, manifest).status();
}

absl::Status ApplyChartStorageClasses(const KubeCluster& kube, const std::string& rendered_chart) {
  std::string classes;
  for (const YAML::Node& doc : YAML::LoadAll(rendered_chart)) {
    if (doc.IsMap() && doc["kind"] && doc["kind"].as<std::string>() == "StorageClass") {
      YAML::Emitter e;
      e << doc;
      classes += std::string("---\n") + e.c_str() + "\n";
    }
  }
  if (classes.empty()) return absl::InternalError("the rendered chart has no StorageClass");
  return kube.MustKubectl({"apply", "--server-side", "-f", "-"}, classes).status();
}

absl::StatusOr<std::unique_ptr<Process>> StartExternalProvisioner(const KubeCluster& kube,
                                                                  const Stack& stack) {
  std::string bin = Env("WISP_E2E_CSI_PROVISIONER");
  if (bin.empty() && !Env("WISP_E2E_KUBE_BIN_DIR").empty()) {
    bin = Env("WISP_E2E_KUBE_BIN_DIR") + "/csi-provisioner";
  }
  if (bin.empty() || ::access(bin.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        "no external-provisioner: build kubernetes-csi/external-provisioner v5.2.0 "
        "(./cmd/csi-provisioner) and put it next to kube-apiserver or name it in "
        "WISP_E2E_CSI_PROVISIONER (docs/operations.md, \"Running the e2e suite\")");
  }
  if (kube.started() && !kube.has_controller_manager()) {
    return absl::NotFoundError(
        "no kube-controller-manager next to kube-apiserver: its persistentvolume-binder binds "
        "the claims");
  }
  // As the chart's controller Deployment runs it (deploy/helm/wisp/templates/
  // gateway-controller.yaml), but one replica and no leader election. It reads KUBECONFIG
  // before --kubeconfig: set both.
  return Process::Start(
      {.path = bin,
       .args = {"--csi-address=" + stack.csi_socket(), "--kubeconfig=" + kube.kubeconfig(),
                "--extra-create-metadata", "--feature-gates=Topology=true", "--timeout=300s",
                "--leader-election=false", "--v=3"},
       .env = {{"KUBECONFIG", kube.kubeconfig()}}});
}

}  // namespace wisp::integration
