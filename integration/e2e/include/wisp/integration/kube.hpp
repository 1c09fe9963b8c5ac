#pragma once
// A real Kubernetes API for the e2e suite (label e2e, scripts/e2e): either a kube-apiserver this
// harness starts (etcd from Debian's etcd-server, kube-apiserver and, when present,
// kube-controller-manager from a directory of binaries), or any cluster a kubeconfig names.
//
// Contract:
//   - FromEnvironment() reads WISP_E2E_KUBE_BIN_DIR (a directory holding kube-apiserver and
//     optionally kube-controller-manager) or WISP_E2E_KUBECONFIG (an existing cluster; the current
//     context is used, with cluster-admin rights). Neither set: NotFound, whose message is the one
//     SKIP line telling how to run the suite.
//   - A started cluster: etcd and the apiserver on free loopback ports, a throwaway CA, an admin
//     client certificate (O=system:masters), a service-account issuer
//     https://kubernetes.default.svc.cluster.local signed by a fresh RSA key, RBAC+Node
//     authorization, the default admission plugins (ServiceAccount, ResourceQuota, ...), and an
//     audit log of pod creations (audit_log_file()).
//     Start() returns when /readyz answers ok. With kube-controller-manager, the serviceaccount,
//     namespace, garbage-collector, resource-quota, persistentvolume-binder (binds claims, hands
//     dynamic ones to external-provisioner) and pvc/pv-protection controllers run; without it,
//     CreateNamespace() creates the `default` ServiceAccount itself (the ServiceAccount
//     admission plugin needs it for pods).
//   - Kubectl() runs the real kubectl (WISP_KUBECTL, else build/tools/kubectl, which scripts/e2e
//     extracts) against the cluster, with stdin from `input`; never through a shell.
//   - The destructor stops what it started (process groups) and removes its files; an existing
//     cluster is left alone, except for the namespaces a test created and DeleteNamespaces()
//     removes.
//   - wisp on the cluster, as the e2e suite and bench/apiserver set it up: InstallCrds() (the real
//     KubeVirt and CDI CRDs and the chart's own), RenderChart() (`helm template` for the
//     cluster's version), WebhooksForLocalGateway() (the chart's two webhook configurations with
//     only clientConfig.service turned into url: at a gateway, caBundle its CA) and
//     RegisterWebhooks() (applies them and returns once the apiserver calls them).
//
// Example:
//   auto kube = KubeCluster::FromEnvironment();
//   if (!kube.ok()) return ExitCodeWithoutCluster(kube.status());
//   ASSERT_TRUE((*kube)->CreateNamespace("story1").ok());
//   CommandResult r = (*kube)->Kubectl({"create", "-f", "-"}, pod_yaml);
//   WISP_RETURN_IF_ERROR(InstallCrds(**kube));
//   WISP_ASSIGN_OR_RETURN(std::string chart, RenderChart(**kube));
//   WISP_RETURN_IF_ERROR(RegisterWebhooks(**kube, chart, *stack, WebhookHost()));
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/stack.hpp"

namespace wisp::integration {

class KubeCluster {
 public:
  static absl::StatusOr<std::unique_ptr<KubeCluster>> FromEnvironment();
  ~KubeCluster();
  KubeCluster(const KubeCluster&) = delete;
  KubeCluster& operator=(const KubeCluster&) = delete;

  // True when this harness started the apiserver (and so owns it); false for a given kubeconfig.
  bool started() const { return apiserver_ != nullptr; }
  bool has_controller_manager() const { return controller_manager_ != nullptr; }
  const std::string& kubeconfig() const { return kubeconfig_; }
  const std::string& kubectl() const { return kubectl_; }
  // The service-account issuer's public key (PEM) of a started cluster; "" for a given one.
  std::string service_account_public_key_file() const;
  // The audit log of a started cluster (pod creations at level Metadata, one JSON event a line);
  // "" for a given one.
  const std::string& audit_log_file() const { return audit_log_; }
  // What the apiserver's log says so far ("" for a given cluster): for failure messages.
  std::string ApiserverLogTail(size_t bytes = 4000) const;

  // kubectl ARGS... with --kubeconfig; stdout and stderr together, as RunCommand gives them.
  CommandResult Kubectl(const std::vector<std::string>& args, const std::string& input = "") const;
  // kubectl ... that must succeed: its output, or Internal with the command and its output.
  absl::StatusOr<std::string> MustKubectl(const std::vector<std::string>& args,
                                          const std::string& input = "") const;

  // Creates a namespace (with labels "k=v,..."), waits for its `default` ServiceAccount (creating
  // it without a controller-manager); remembered for DeleteNamespaces().
  absl::Status CreateNamespace(const std::string& name, const std::string& labels = "");
  void DeleteNamespaces();

 private:
  KubeCluster() = default;
  absl::Status Start(const std::string& bin_dir);

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<Process> etcd_;
  std::unique_ptr<Process> apiserver_;
  std::unique_ptr<Process> controller_manager_;
  std::string kubeconfig_;
  std::string kubectl_;
  std::string audit_log_;
  std::vector<std::string> namespaces_;
};

// What an e2e binary's main returns when FromEnvironment() failed: 77 (ctest's Skipped) after the
// one SKIP line when no cluster was given; 1 after the reason when one could not be started.
int ExitCodeWithoutCluster(const absl::Status& status);

// Runs argv[0] with argv[1..] (no shell), feeding `input` on stdin; stdout and stderr together,
// or (merge_stderr false) stdout alone, with stderr appended only when the command fails.
CommandResult RunArgv(const std::vector<std::string>& argv, const std::string& input = "",
                      bool merge_stderr = true);

// The real CRDs: integration/k8s/crds (KubeVirt v1.9.0 and CDI v1.66.0, copied from
// ../shared/k8s/crds; not the VEP 94 one, which stands for a patched KubeVirt) and the chart's
// own (deploy/helm/wisp/crds); returns when every CRD is Established. Already there is fine.
absl::Status InstallCrds(const KubeCluster& kube);

// `helm template wisp deploy/helm/wisp --namespace wisp-system --kube-version <the cluster's>`
// (helm: WISP_HELM, else build/tools/helm, which scripts/e2e extracts).
absl::StatusOr<std::string> RenderChart(const KubeCluster& kube);

// The chart's webhook configurations out of `rendered_chart`, pointed at a gateway outside the
// cluster: each webhook's clientConfig.service becomes url: https://HOST:PORT<path>, its caBundle
// the PEM file `ca_file`; everything else stays as rendered. Internal unless there are exactly
// two (one mutating, one validating).
absl::StatusOr<std::string> WebhooksForLocalGateway(const std::string& rendered_chart,
                                                    const std::string& ca_file,
                                                    const std::string& host, int port);

// Applies WebhooksForLocalGateway() for `stack`'s gateway (server-side apply) and waits, at most
// 30 s, until the apiserver calls them: a server-side dry run of
// integration/admission/manifests/loader-pod.yaml comes back with wisp's sidecar (so namespace ml
// and its service account data-loader must exist).
absl::Status RegisterWebhooks(const KubeCluster& kube, const std::string& rendered_chart,
                              const Stack& stack, const std::string& host);

// The address the apiserver calls webhooks at: WISP_E2E_WEBHOOK_HOST, else 127.0.0.1.
std::string WebhookHost();

// ---- population (issue 22): wisp's controllers with the real external-provisioner ----------
// The gateway flags that run wisp's populator and DataVolume controllers against `kube` (one
// replica, holding the Lease wisp-controllers in wisp-system, identity `identity`).
std::vector<std::string> ControllerGatewayArgs(const KubeCluster& kube,
                                               const std::string& identity = "e2e-gateway");
// Registers node `node` as the kubelet and wisp's node plugin would: a Node labelled
// topology.wisp.dev/node=<node> and a CSINode naming csi.wisp.dev with that topology key, so
// external-provisioner (Topology=true, as the chart runs it) provisions there.
absl::Status RegisterCsiNode(const KubeCluster& kube, const std::string& node);
// Applies the StorageClasses of `rendered_chart` (wisp-populated, WaitForFirstConsumer).
absl::Status ApplyChartStorageClasses(const KubeCluster& kube, const std::string& rendered_chart);
// external-provisioner (kubernetes-csi v5.2.0, built from its tag's vendor/) on `stack`'s CSI
// socket, with the chart's flags but one replica and no leader election. The binary:
// WISP_E2E_CSI_PROVISIONER, else csi-provisioner in WISP_E2E_KUBE_BIN_DIR; NotFound saying how to
// get one when neither exists, or when a started cluster has no kube-controller-manager (its
// persistentvolume-binder binds the claims).
absl::StatusOr<std::unique_ptr<Process>> StartExternalProvisioner(const KubeCluster& kube,
                                                                  const Stack& stack);

}  // namespace wisp::integration
