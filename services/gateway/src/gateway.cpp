#include "gateway.hpp"

#include <unistd.h>

#include <optional>

#include <nlohmann/json.hpp>

#include "admission/admission_handler.hpp"
#include "cluster/committed_objects.hpp"
#include "cluster/populate_controller.hpp"
#include "cluster/service_account_cache.hpp"
#include "cluster/source_ca.hpp"
#include "absl/algorithm/container.h"
#include "absl/strings/str_split.h"
#include "csi/csi_server.hpp"
#include "csi/plugin.hpp"
#include "oidc/oidc_routes.hpp"
#include "upload/upload_handler.hpp"
#include "wisp/bus/loop_requester.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/fsutil/mounter.hpp"
#include "wisp/kube/config.hpp"
#include "wisp/kube/leader_election.hpp"
#include "wisp/log/log.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::gateway {

// The parts behind the doors, each built from the bus and its settings.
struct Gateway::Parts {
  // The Kubernetes API (--in-cluster / --kubeconfig), and the ServiceAccounts admission reads
  // through it: before the admission handler, which points at them, so they outlive it.
  kube::ClientPtr kube;
  kube::ClientPtr kube_get;  // the ServiceAccount GETs': one try, the GET timeout
  std::unique_ptr<cluster::ServiceAccountCache> service_accounts;
  // Admission's bus requests over the HTTPS I/O threads' own connections (see Gateway::Stop).
  std::unique_ptr<bus::LoopRequester> admission_bus;
  std::unique_ptr<admission::AdmissionHandler> admission;
  std::unique_ptr<oidc::OidcRoutes> oidc;
  fsutil::SystemMounter mounter;
  std::unique_ptr<csi::CsiServer> csi;
  std::unique_ptr<upload::KeyCacheVerifier> upload_verifier;
  std::unique_ptr<upload::UploadHandler> upload;
  // The watch of the apiserver (--in-cluster / --kubeconfig).
  std::unique_ptr<cluster::CommittedObjects> committed;
  std::unique_ptr<cluster::PopulateController> populate;
  std::unique_ptr<kube::LeaderElector> elector;
};

void AddGatewayFlags(config::Flags& flags, GatewaySettings& s) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  s.node_name = host;
  flags.String("listen-address", &s.listen_address,
               "host:port of the HTTPS server (admission webhooks, OIDC discovery, STS, uploads). "
               "Empty: no HTTPS (a node-only gateway serving CSI).");
  flags.String("tls-cert", &s.tls_cert,
               "PEM certificate chain for HTTPS. Re-read when it changes, without a restart.");
  flags.String("tls-key", &s.tls_key, "PEM private key for --tls-cert.");
  flags.Int(
      "http-threads", &s.http_threads,
      "HTTPS I/O threads (each serves the connections handed to it; the admission webhooks run "
      "there), and as many worker threads for the blocking routes (OIDC discovery, JWKS, STS).",
      config::Flags::Between(1, 256));
  flags.String("node-name", &s.node_name,
               "This node's name: CSI node id, topology.wisp.dev/node, node-routed bus subjects. "
               "In a DaemonSet set it from spec.nodeName.");
  flags.Enum("failure-mode", &s.failure_mode, {"closed", "open"},
             "Admission answer when wisp-policy does not answer in time: closed denies with "
             "\"wisp policy unavailable: ...\", open allows with a warning.");
  flags.Duration("admission-timeout", &s.admission_timeout,
                 "Upper bound on a policy call; a shorter ?timeout= from kube-apiserver wins.");
  flags.String("kubernetes-version", &s.kubernetes_version,
               "major.minor of the cluster, for the native-sidecar choice (>= 1.29: initContainer "
               "with restartPolicy Always).");
  flags.Bool("admission-bus-per-thread", &s.admission_bus_per_thread,
             "Send the admission webhooks' policy calls over one more NATS connection per HTTPS "
             "I/O thread, read and written on that thread (nats.c's event-loop mode), so a "
             "review and its answer never change threads and each pass of the loop writes its "
             "requests at once (bench/admission: about 10% more peak, less CPU per review). The "
             "gateway then holds 1 + http-threads NATS connections. While one is down its "
             "thread's calls use the shared connection. --no-admission-bus-per-thread: every "
             "call over the shared connection.");
  flags.String("csi-endpoint", &s.csi_endpoint,
               "unix:///path of the CSI socket; empty disables CSI.");
  flags.Enum(
      "csi-role", &s.csi_role, {"node", "controller", "both"},
      "Which CSI services this gateway serves: node (DaemonSet), controller (Deployment with "
      "external-provisioner) or both (local stack).");
  flags.String("volume-root", &s.volume_root, "Directory holding populated volumes on this node.");
  flags.String("target-root", &s.target_root,
               "CSI target and staging paths must be under this directory (kubelet's root).");
  flags.String("staging-root", &s.staging_root, "Staging paths root; empty = --target-root.");
  flags.Int("upload-max-bytes", &s.upload_max_bytes,
            "Largest body PUT /v1/upload/<volume> accepts (each upload is also held to its "
            "volume's capacity). Bodies are streamed, never held in memory.",
            [](int64_t n) {
              return n > 0 ? absl::OkStatus() : absl::InvalidArgumentError("must be > 0");
            });
  flags.Int("upload-max-concurrent", &s.upload_max_concurrent,
            "Uploads this gateway streams at once (each on its own thread); 503 beyond.",
            config::Flags::Between(1, 256));
  flags.Duration("upload-finish-timeout", &s.upload_finish_timeout,
                 "How long the answer to an upload waits, after the last byte, for the populator "
                 "to convert and verify the image.");
  flags.String("default-node", &s.default_node,
               "Controller role: the node a CreateVolume without accessibility requirements goes "
               "to; empty = --node-name (right for the local stack, not for a controller "
               "Deployment, where external-provisioner sends topology).");
  flags.Duration("projection-purge-interval", &s.projection_purge_interval,
                 "Node role: how often to purge old delete markers from KV bucket "
                 "wisp_projections (each NodeUnpublishVolume leaves one, and volume ids are unique "
                 "per pod). Every node gateway does it; it is idempotent. 0 = never; else >= 1s.",
                 [](std::chrono::milliseconds d) {
                   return d.count() == 0 || d >= std::chrono::seconds(1)
                              ? absl::OkStatus()
                              : absl::InvalidArgumentError("must be 0 or at least 1s");
                 });
  flags.Duration("projection-purge-age", &s.projection_purge_age,
                 "Node role: a wisp_projections delete marker is purged once it is this old "
                 "(0 = every marker).",
                 [](std::chrono::milliseconds d) {
                   return d.count() >= 0 ? absl::OkStatus()
                                         : absl::InvalidArgumentError("must not be negative");
                 });
  flags.String("pod-proof-audience", &s.pod_proof_audience,
               "Node role: the audience of the kubelet's token (CSIDriver tokenRequests, "
               "csi.storage.k8s.io/serviceAccount.tokens) that NodePublishVolume forwards to "
               "wisp-token as proof of the pod's identity when it asks for the pod's tokens; "
               "wisp-token requires it with its policy's issue.requirePodProof. Must equal that "
               "policy's issue.podProofAudience. Empty = never forward one.");
  flags.Bool("in-cluster", &s.in_cluster,
             "Watch the Kubernetes API with this pod's service account (its token, re-read as "
             "the kubelet rotates it, and ca.crt under /var/run/secrets/kubernetes.io/"
             "serviceaccount; KUBERNETES_SERVICE_HOST/PORT). The gateway then sends every stored "
             "PersistentVolumeClaim, DataVolume and VolumeImportSource (wisp.dev and "
             "cdi.kubevirt.io) to wisp-policy, whose "
             "records follow what the apiserver committed. Needs list and watch on those "
             "(the chart's ClusterRole). With --csi-role controller, CreateVolume also reads "
             "the CA bundle of the ConfigMap an http import source names (certConfigMap): get "
             "on PVCs, DataVolumes, VolumeImportSources and ConfigMaps. Run it in one gateway "
             "Deployment, not on every node.");
  flags.String("kubeconfig", &s.kubeconfig,
               "Watch the Kubernetes API as this kubeconfig says (out of cluster; see "
               "--in-cluster). Empty with --in-cluster unset: no watch, records come only from "
               "`wispctl admit` (the local stack).");
  flags.String("kube-context", &s.kube_context,
               "The --kubeconfig context to use (default: its current-context).");
  flags.String(
      "controllers", &s.controllers,
      "Comma list of controllers to run with --in-cluster / --kubeconfig: `populator` (a PVC "
      "whose dataSourceRef names a wisp.dev or cdi.kubevirt.io VolumeImportSource, in a "
      "StorageClass of this CSI "
      "driver, is populated through a prime PVC that external-provisioner provisions, then its "
      "PersistentVolume is handed to the PVC: the volume populator protocol, KEP 1495) and "
      "`datavolumes` (a CDI DataVolume gets its VolumeImportSource and PVC, and CDI's status "
      "and events). Needs the chart's ClusterRole. Empty: none.",
      [](const std::string& v) -> absl::Status {
        const std::vector<std::string> list = absl::StrSplit(v, ',', absl::SkipEmpty());
        for (const std::string& c : list) {
          if (c != "populator" && c != "datavolumes") {
            return absl::InvalidArgumentError("\"" + c +
                                              "\" is not a controller (populator, datavolumes)");
          }
        }
        return absl::OkStatus();
      });
  flags.Int("kube-api-qps", &s.kube_api_qps,
            "Requests per second the gateway sends to the apiserver through its shared client "
            "(the controllers, the watches, CreateVolume's reads of a source's certConfigMap), "
            "as client-go's --kube-api-qps; requests beyond it wait their turn. A DataVolume "
            "costs the controllers about 20 requests (its PVC and VolumeImportSource, the prime "
            "PVC, status writes, events, the PV's hand-over): at 20 requests a second, four "
            "blank DataVolumes at a time took 3.1 s each instead of 1.2 s. Raise it, with "
            "--kube-api-burst, when many volumes populate at once. 0: no limit. (The live "
            "ServiceAccount GETs of pod admission have a client of their own, with no limit.)",
            config::Flags::Between(0, 100000));
  flags.Int("kube-api-burst", &s.kube_api_burst,
            "Requests the shared client may send at once beyond --kube-api-qps after a quiet "
            "spell, as client-go's --kube-api-burst.",
            config::Flags::Between(1, 100000));
  flags.String("volume-name-prefix", &s.volume_name_prefix,
               "external-provisioner's --volume-name-prefix: CreateVolume names the volume of a "
               "PVC <prefix>-<uid of the PVC>, which the DataVolume controller reads progress "
               "from.");
  flags.Bool("leader-election", &s.leader_election,
             "Run --controllers only while this replica holds the Lease wisp-controllers (in "
             "--leader-election-namespace), as client-go's leader election does: the other "
             "replicas keep their copies current and take over within about 15 s of a leader "
             "lost (at once when it stops cleanly). Needs get/create/update on leases there.");
  flags.String("leader-election-namespace", &s.leader_election_namespace,
               "Namespace of the Lease (default: the service account's with --in-cluster, else "
               "`default`).");
  flags.String("leader-election-identity", &s.leader_election_identity,
               "This replica's name in the Lease (default: the host name, which is the pod's "
               "name in Kubernetes).");
  flags.Bool(
      "service-account-cache", &s.service_account_cache,
      "With --in-cluster / --kubeconfig: every pod CREATE sent to the webhooks carries its "
      "ServiceAccount's annotations to wisp-policy (identity presets chosen per ServiceAccount, "
      "such as eks.amazonaws.com/role-arn), read from a watch of every ServiceAccount (no I/O "
      "per admission), or, for one the watch has not delivered yet (a pod created right after "
      "its ServiceAccount), with a live GET (--service-account-get-timeout). Needs get, list "
      "and watch on serviceaccounts (the chart's ClusterRole). --no-service-account-cache: "
      "neither; pod admissions carry no ServiceAccount annotations.");
  auto positive = [](std::chrono::milliseconds d) {
    return d.count() > 0 ? absl::OkStatus() : absl::InvalidArgumentError("must be > 0");
  };
  auto not_negative = [](std::chrono::milliseconds d) {
    return d.count() >= 0 ? absl::OkStatus() : absl::InvalidArgumentError("must not be negative");
  };
  flags.Duration("service-account-get-timeout", &s.service_account_get_timeout,
                 "Bound on the live GET of a ServiceAccount the watch has not delivered (one "
                 "try, no retry). Its time comes out of the webhook's timeoutSeconds: keep it "
                 "well below it.",
                 positive);
  flags.Duration("service-account-cache-ttl", &s.service_account_cache_ttl,
                 "How long the answer of a live GET that found the ServiceAccount is kept for "
                 "the next pods of it, until the watch delivers it (which replaces it at once). "
                 "0 = not kept.",
                 not_negative);
  flags.Duration("service-account-missing-ttl", &s.service_account_missing_ttl,
                 "How long a live GET's \"no such ServiceAccount\" is kept (the watch delivering "
                 "the ServiceAccount replaces it at once). 0 = not kept.",
                 not_negative);
  flags.Enum("service-account-failure-mode", &s.service_account_failure_mode, {"open", "closed"},
             "What a pod admission does when its ServiceAccount cannot be read (the GET failed "
             "or timed out): open admits the pod as it asks, without what its ServiceAccount's "
             "annotations would choose, with the warning \"wisp: ServiceAccount <ns>/<name> "
             "could not be read ...\"; closed denies it (code 500) with that message.");
}

absl::Status ValidateGatewaySettings(const GatewaySettings& s) {
  if (s.listen_address.empty() && s.csi_endpoint.empty()) {
    return absl::InvalidArgumentError(
        "listen-address: empty, and --csi-endpoint is empty too: this gateway would serve nothing");
  }
  if (!s.listen_address.empty()) {
    if (s.tls_cert.empty() != s.tls_key.empty()) {
      return absl::InvalidArgumentError(s.tls_cert.empty() ? "tls-cert: required with --tls-key"
                                                           : "tls-key: required with --tls-cert");
    }
    if (s.tls_cert.empty()) {
      return absl::InvalidArgumentError(
          "tls-cert: required while --listen-address is set (kube-apiserver and STS clients speak "
          "only HTTPS; scripts/local-up creates a local CA and certificate; a node-only gateway "
          "sets --listen-address \"\")");
    }
    WISP_RETURN_IF_ERROR(http::ParseHostPort("listen-address", s.listen_address).status());
  }
  if (s.node_name.empty()) return absl::InvalidArgumentError("node-name: required");
  if (s.in_cluster && !s.kubeconfig.empty()) {
    return absl::InvalidArgumentError(
        "kubeconfig: set together with --in-cluster; the gateway watches one cluster, choose one");
  }
  if (!s.kube_context.empty() && s.kubeconfig.empty()) {
    return absl::InvalidArgumentError("kube-context: needs --kubeconfig");
  }
  if (!s.controllers.empty() && !s.in_cluster && s.kubeconfig.empty()) {
    return absl::InvalidArgumentError("controllers: need --in-cluster or --kubeconfig");
  }
  if (s.leader_election && s.controllers.empty()) {
    return absl::InvalidArgumentError("leader-election: there are no --controllers to lead");
  }
  if (!s.csi_endpoint.empty() && s.csi_endpoint.rfind("unix://", 0) != 0) {
    return absl::InvalidArgumentError("csi-endpoint: \"" + s.csi_endpoint +
                                      "\" must be unix:///path");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Start(const GatewaySettings& settings,
                                                        runtime::Process& process) {
  WISP_RETURN_IF_ERROR(ValidateGatewaySettings(settings));
  auto gw = std::unique_ptr<Gateway>(new Gateway());
  gw->settings_ = settings;
  gw->parts_ = std::make_unique<Parts>();
  auto logger = log::Get("gateway");

  if (!settings.listen_address.empty()) {
    WISP_ASSIGN_OR_RETURN(http::HostPort listen,
                          http::ParseHostPort("listen-address", settings.listen_address));
    WISP_ASSIGN_OR_RETURN(gw->https_,
                          http::Server::Create({.address = listen.host,
                                                .port = listen.port,
                                                .cert_file = settings.tls_cert,
                                                .key_file = settings.tls_key,
                                                .threads = static_cast<int>(settings.http_threads),
                                                .name = "https"}));
  }

  // The gateway announces itself on the bus like every service, with one node-routed endpoint
  // that reports what this instance serves (wispctl status shows it; operators can ask a node).
  WISP_ASSIGN_OR_RETURN(bus::Service * micro,
                        process.RegisterService("the door: admission, OIDC, STS, CSI"));
  const std::string node = settings.node_name;
  const std::string role = settings.csi_endpoint.empty() ? "none" : settings.csi_role;
  WISP_RETURN_IF_ERROR(micro->AddEndpoint(
      "node-status", bus::subjects::Node(node, "gateway.status"), "",
      [node, role](const bus::Request&) {
        nlohmann::json j = {{"node", node}, {"csi_role", role}, {"version", WISP_VERSION}};
        return bus::Reply::Ok(j.dump());
      }));

  // The Kubernetes API, when given: pod admission reads ServiceAccounts through it, the CSI
  // controller the CA bundle of a source's certConfigMap; the watch and controllers below use it.
  std::optional<kube::Config> kube_config;
  if (settings.in_cluster || !settings.kubeconfig.empty()) {
    WISP_ASSIGN_OR_RETURN(kube_config,
                          settings.in_cluster
                              ? kube::LoadInCluster()
                              : kube::LoadKubeconfig(settings.kubeconfig, settings.kube_context));
    WISP_ASSIGN_OR_RETURN(
        gw->parts_->kube,
        kube::NewClient(*kube_config, {.qps = static_cast<double>(settings.kube_api_qps),
                                       .burst = static_cast<int>(settings.kube_api_burst)}));
  }
  WISP_ASSIGN_OR_RETURN(auto failure_mode, admission::ParseFailureMode(settings.failure_mode));
  WISP_ASSIGN_OR_RETURN(auto sa_failure_mode,
                        admission::ParseFailureMode(settings.service_account_failure_mode));
  if (!gw->parts_->kube) {
    SPDLOG_LOGGER_INFO(logger,
                       "no Kubernetes API client (--in-cluster / --kubeconfig unset): pod "
                       "admissions carry no ServiceAccount annotations");
  } else if (!settings.service_account_cache) {
    SPDLOG_LOGGER_INFO(logger,
                       "--no-service-account-cache: pod admissions carry no ServiceAccount "
                       "annotations");
  } else {
    // GETs on their own client: one try bounded by the GET timeout, and not queued behind the
    // controllers' requests in the shared client's rate limit.
    WISP_ASSIGN_OR_RETURN(
        gw->parts_->kube_get,
        kube::NewClient(*kube_config, {.qps = 0,
                                       .max_attempts = 1,
                                       .request_timeout = settings.service_account_get_timeout,
                                       .user_agent = "wisp-gateway/serviceaccounts"}));
    gw->parts_->service_accounts = std::make_unique<cluster::ServiceAccountCache>(
        *gw->parts_->kube, *gw->parts_->kube_get, process.registry(), SystemClock::Instance(),
        cluster::ServiceAccountCacheOptions{.fetched_ttl = settings.service_account_cache_ttl,
                                            .missing_ttl = settings.service_account_missing_ttl});
    gw->parts_->service_accounts->Start();
    SPDLOG_LOGGER_INFO(logger,
                       "pod admissions carry their ServiceAccount's annotations (watching "
                       "serviceaccounts; a GET of at most {} ms for one not seen yet, failure "
                       "mode {})",
                       settings.service_account_get_timeout.count(),
                       settings.service_account_failure_mode);
  }
  bus::Requester* admission_bus = &process.bus();
  if (gw->https_ && settings.admission_bus_per_thread) {
    WISP_ASSIGN_OR_RETURN(gw->parts_->admission_bus,
                          bus::LoopRequester::Connect(process.bus_options(),
                                                      gw->https_->IoContexts(), process.bus()));
    admission_bus = gw->parts_->admission_bus.get();
  }
  gw->parts_->admission = std::make_unique<admission::AdmissionHandler>(
      *admission_bus, process.registry(),
      admission::AdmissionOptions{.failure_mode = failure_mode,
                                  .max_timeout = settings.admission_timeout,
                                  .kubernetes_version = settings.kubernetes_version,
                                  .service_accounts = gw->parts_->service_accounts.get(),
                                  .service_account_failure_mode = sa_failure_mode});
  if (gw->https_) {
    admission::RegisterAdmissionRoutes(*gw->https_, *gw->parts_->admission);
    // Discovery and JWKS follow the key set from a local cache; STS goes to wisp-token.
    WISP_ASSIGN_OR_RETURN(gw->parts_->oidc,
                          oidc::RegisterOidcRoutes(*gw->https_, process.bus(), process.registry()));
    // Uploads check their token against the same cached key set.
    gw->parts_->upload_verifier = std::make_unique<upload::KeyCacheVerifier>(
        gw->parts_->oidc->key_cache(), SystemClock::Instance(), std::chrono::seconds(60));
    gw->parts_->upload = std::make_unique<upload::UploadHandler>(
        process.bus(), *gw->parts_->upload_verifier, process.registry(), SystemClock::Instance(),
        upload::UploadOptions{.finish_timeout = settings.upload_finish_timeout});
    upload::RegisterUploadRoute(
        *gw->https_, *gw->parts_->upload,
        {.max_body_bytes = static_cast<uint64_t>(settings.upload_max_bytes),
         .max_concurrent = static_cast<int>(settings.upload_max_concurrent)});
  }

  if (!settings.csi_endpoint.empty()) {
    csi::CsiServerOptions options;
    options.endpoint = settings.csi_endpoint;
    WISP_ASSIGN_OR_RETURN(options.role, csi::ParseRole(settings.csi_role));
    options.node_id = settings.node_name;
    options.volume_root = settings.volume_root;
    options.target_roots = {settings.target_root};
    options.default_node = settings.default_node;
    if (!settings.staging_root.empty()) options.target_roots.push_back(settings.staging_root);
    options.projection_purge_interval = settings.projection_purge_interval;
    options.projection_purge_age = settings.projection_purge_age;
    options.pod_proof_audience = settings.pod_proof_audience;
    options.open_bucket = [&process](const bus::BucketConfig& config) {
      return process.OpenBucket(config);
    };
    if (kube::Client* kube = gw->parts_->kube.get()) {
      options.read_source_ca = [kube](const std::string& ns, const std::string& pvc) {
        return cluster::ReadSourceCa(*kube, ns, pvc);
      };
    }
    gw->parts_->csi = std::make_unique<csi::CsiServer>(
        options, process.bus(), SystemClock::Instance(), gw->parts_->mounter, process.registry());
    WISP_RETURN_IF_ERROR(gw->parts_->csi->Start());
    SPDLOG_LOGGER_INFO(logger, "serving CSI ({}) on {}", settings.csi_role, settings.csi_endpoint);
  }

  if (gw->parts_->kube) {
    const kube::Config& config = *kube_config;
    gw->parts_->committed = std::make_unique<cluster::CommittedObjects>(
        *gw->parts_->kube, process.bus(), process.registry(), cluster::CommittedObjectsOptions{});
    gw->parts_->committed->Start();
    SPDLOG_LOGGER_INFO(logger, "watching {} ({}) for the objects wisp keeps records of",
                       config.server, config.origin);
    const std::vector<std::string> controllers =
        absl::StrSplit(settings.controllers, ',', absl::SkipEmpty());
    const bool populator = absl::c_linear_search(controllers, "populator");
    const bool datavolumes = absl::c_linear_search(controllers, "datavolumes");
    if (populator || datavolumes) {
      cluster::PopulateControllerOptions options;
      options.plan.driver_name = csi::kDriverName;
      options.datavolumes = datavolumes;
      options.populator = populator;
      options.volume_name_prefix = settings.volume_name_prefix;
      gw->parts_->populate = std::make_unique<cluster::PopulateController>(
          *gw->parts_->kube, process.bus(), process.registry(), options);
      if (settings.leader_election) {
        kube::LeaderElectionOptions le;
        le.namespace_name = settings.leader_election_namespace.empty()
                                ? config.default_namespace
                                : settings.leader_election_namespace;
        le.name = "wisp-controllers";
        le.identity = settings.leader_election_identity;
        if (le.identity.empty()) {
          char host[256] = {};
          gethostname(host, sizeof(host) - 1);
          le.identity = host;
        }
        gw->parts_->populate->SetLeading(false);
        cluster::PopulateController* populate = gw->parts_->populate.get();
        gw->parts_->elector = std::make_unique<kube::LeaderElector>(
            *gw->parts_->kube, le, [populate](bool leading) { populate->SetLeading(leading); });
        gw->parts_->elector->Start();
      }
      gw->parts_->populate->Start();
      SPDLOG_LOGGER_INFO(logger, "running controllers: {}{}", settings.controllers,
                         settings.leader_election ? " (while leading)" : "");
    }
  }

  if (gw->https_) {
    WISP_RETURN_IF_ERROR(gw->https_->Start());
    SPDLOG_LOGGER_INFO(logger, "serving HTTPS on {}", settings.listen_address);
  }
  return gw;
}

Gateway::~Gateway() { Stop(); }

uint16_t Gateway::https_port() const { return https_ ? https_->port() : 0; }

void Gateway::Stop() {
  if (parts_ && parts_->elector) parts_->elector->Stop();  // releases the Lease
  if (parts_ && parts_->populate) parts_->populate->Stop();
  if (parts_ && parts_->committed) parts_->committed->Stop();
  if (https_) {
    https_->Stop();  // in-flight admissions are answered over their loop connections
    // The loop connections live on the server's io_contexts: close them before those go.
    if (parts_ && parts_->admission_bus) parts_->admission_bus.reset();
    https_.reset();
  }
  // After the webhooks: a lookup still waiting is answered (an error) before the cache goes.
  if (parts_ && parts_->service_accounts) parts_->service_accounts->Stop();
  if (parts_ && parts_->csi) parts_->csi->Stop();
  parts_.reset();
}

}  // namespace wisp::gateway
