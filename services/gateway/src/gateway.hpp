#pragma once
// wisp-gateway: the only door between Kubernetes and wisp. One HTTPS server carries admission
// (/mutate, /validate), OIDC discovery (/.well-known/openid-configuration, /openid/v1/jwks), STS
// (/v1/token) and uploads (/v1/upload/<volume>); one unix socket carries CSI. Everything behind
// them is a bus request to wisp-policy, wisp-token or wisp-populator. With --in-cluster or
// --kubeconfig it also opens the third door, a watch of the apiserver whose stored objects become
// bus requests (cluster/committed_objects.hpp), and a cache of ServiceAccounts whose annotations
// pod admissions carry to wisp-policy (cluster/service_account_cache.hpp).
//
// Gateway owns the servers and the parts; main.cpp only parses GatewaySettings and runs it.
#include <chrono>
#include <memory>
#include <string>

#include "wisp/config/flags.hpp"
#include "wisp/http/server.hpp"
#include "wisp/runtime/runtime.hpp"

namespace wisp::gateway {

struct GatewaySettings {
  std::string listen_address = "0.0.0.0:8443";
  std::string tls_cert;
  std::string tls_key;
  int64_t http_threads = 8;
  std::string node_name;
  // Admission
  std::string failure_mode = "closed";
  std::chrono::milliseconds admission_timeout = std::chrono::seconds(10);
  std::string kubernetes_version = "1.29";
  bool admission_bus_per_thread = true;  // one NATS connection per HTTPS I/O thread
  // CSI
  std::string csi_endpoint;
  std::string csi_role = "both";
  std::string volume_root = "/var/lib/wisp/volumes";
  std::string target_root = "/var/lib/kubelet";
  std::string staging_root;
  std::string default_node;
  // Uploads (PUT /v1/upload/<volume>)
  int64_t upload_max_bytes = 1ll << 40;
  int64_t upload_max_concurrent = 8;
  std::chrono::milliseconds upload_finish_timeout = std::chrono::minutes(10);
  // Delete markers of wisp_projections (one per pod ever published on this node)
  std::chrono::milliseconds projection_purge_interval = std::chrono::hours(1);
  std::chrono::milliseconds projection_purge_age = std::chrono::minutes(10);
  // Proof of pod identity forwarded on wisp.v1.token.issue (docs/security.md, G3)
  std::string pod_proof_audience = "wisp";
  // The Kubernetes API (cluster/committed_objects.hpp): watched with the pod's service account
  // (in_cluster) or a kubeconfig; neither = no watch (the local stack, compose).
  bool in_cluster = false;
  std::string kubeconfig;
  std::string kube_context;
  // The controllers run with that access (cluster/populate_controller.hpp): "" or a comma list of
  // populator, datavolumes.
  std::string controllers;
  // Client-side limit of the shared Kubernetes client (the controllers, the watches, CreateVolume's
  // reads), as client-go's --kube-api-qps / --kube-api-burst; qps 0: none.
  int64_t kube_api_qps = 50;
  int64_t kube_api_burst = 100;
  std::string volume_name_prefix = "pvc";  // external-provisioner's --volume-name-prefix
  // One leading replica runs the controllers (kube/leader_election.hpp); "" namespace = the
  // service account's namespace in cluster, else no election.
  bool leader_election = false;
  std::string leader_election_namespace;
  std::string leader_election_identity;  // default: node name and pid
  // Pod admission reads the pod's ServiceAccount (cluster/service_account_cache.hpp) with that
  // access: a watch-fed cache, a live GET on a miss.
  bool service_account_cache = true;
  std::chrono::milliseconds service_account_get_timeout = std::chrono::seconds(1);
  std::chrono::milliseconds service_account_cache_ttl = std::chrono::seconds(5);
  std::chrono::milliseconds service_account_missing_ttl = std::chrono::seconds(1);
  std::string service_account_failure_mode = "open";
};

void AddGatewayFlags(config::Flags& flags, GatewaySettings& settings);
// Cross-field checks Flags cannot express; InvalidArgument naming the setting.
absl::Status ValidateGatewaySettings(const GatewaySettings& settings);

class Gateway {
 public:
  static absl::StatusOr<std::unique_ptr<Gateway>> Start(const GatewaySettings& settings,
                                                        runtime::Process& process);
  ~Gateway();
  uint16_t https_port() const;
  void Stop();

  struct Parts;

 private:
  Gateway() = default;
  GatewaySettings settings_;
  std::unique_ptr<Parts> parts_;
  http::ServerPtr https_;
};

}  // namespace wisp::gateway
