#include "csi/csi_server.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <grpcpp/grpcpp.h>

#include "csi/controller_service.hpp"
#include "csi/csi_metrics.hpp"
#include "csi/identity_service.hpp"
#include "csi/marker_purger.hpp"
#include "csi/node_service.hpp"
#include "csi/projection_store.hpp"
#include "csi/token_issuer.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/fsutil/path_safety.hpp"
#include "wisp/log/log.hpp"
#include "wisp/v1/node.pb.h"

namespace wisp::gateway::csi {

absl::StatusOr<Role> ParseRole(std::string_view text) {
  if (text == "node") return Role::kNode;
  if (text == "controller") return Role::kController;
  if (text == "both") return Role::kBoth;
  return absl::InvalidArgumentError("csi-role must be node, controller or both, got \"" +
                                    std::string(text) + "\"");
}

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kNode:
      return "node";
    case Role::kController:
      return "controller";
    case Role::kBoth:
      return "both";
  }
  return "both";
}

struct CsiServer::Impl {
  CsiServerOptions options;
  bus::Bus& bus;
  const Clock& clock;
  fsutil::Mounter& mounter;
  CsiMetrics metrics;
  std::shared_ptr<spdlog::logger> logger = log::Get("csi");
  std::string socket_path;

  std::unique_ptr<BusTokenIssuer> issuer;
  std::unique_ptr<KvProjectionStore> store;
  bus::KeyValuePtr purge_kv;  // a handle of its own for the purger's thread
  std::unique_ptr<MarkerPurger> purger;
  std::unique_ptr<NodeService> node;
  std::unique_ptr<ControllerService> controller;
  std::unique_ptr<IdentityService> identity;
  bus::SubscriptionPtr capacity_sub;
  std::unique_ptr<grpc::Server> server;

  Impl(CsiServerOptions o, bus::Bus& b, const Clock& c, fsutil::Mounter& m, prometheus::Registry& r)
      : options(std::move(o)), bus(b), clock(c), mounter(m), metrics(r) {}

  bool node_role() const { return options.role != Role::kController; }
  bool controller_role() const { return options.role != Role::kNode; }

  absl::Status Validate() {
    constexpr std::string_view kScheme = "unix://";
    if (options.endpoint.compare(0, kScheme.size(), kScheme) != 0) {
      return absl::InvalidArgumentError("csi-endpoint must be unix:///absolute/path, got \"" +
                                        options.endpoint + "\"");
    }
    socket_path = options.endpoint.substr(kScheme.size());
    if (absl::Status st = fsutil::CheckAbsolute("csi-endpoint", socket_path); !st.ok()) return st;
    if (socket_path.size() >= 108) {
      return absl::InvalidArgumentError("csi-endpoint: socket path longer than 107 bytes");
    }
    if (node_role()) {
      if (options.node_id.empty()) {
        return absl::InvalidArgumentError("node-id is required for csi-role " +
                                          std::string(RoleName(options.role)));
      }
      WISP_RETURN_IF_ERROR(fsutil::CheckAbsolute("volume-root", options.volume_root));
      for (const std::string& root : options.target_roots) {
        WISP_RETURN_IF_ERROR(fsutil::CheckAbsolute("csi-target-roots", root));
      }
      WISP_RETURN_IF_ERROR(ValidateMarkerPurgerOptions(PurgerOptions()));
    }
    return absl::OkStatus();
  }

  MarkerPurgerOptions PurgerOptions() const {
    return {.interval = options.projection_purge_interval,
            .older_than = options.projection_purge_age};
  }

  absl::Status PrepareSocket() {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(socket_path).parent_path(), ec);
    if (ec) return absl::InternalError("creating " + socket_path + " directory: " + ec.message());
    struct stat st;
    if (::lstat(socket_path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        return absl::FailedPreconditionError("csi-endpoint " + socket_path +
                                             " exists and is not a socket");
      }
      ::unlink(socket_path.c_str());  // left over from an earlier run
    }
    return absl::OkStatus();
  }
};

CsiServer::CsiServer(CsiServerOptions options, bus::Bus& bus, const Clock& clock,
                     fsutil::Mounter& mounter, prometheus::Registry& registry)
    : impl_(std::make_unique<Impl>(std::move(options), bus, clock, mounter, registry)) {}

CsiServer::~CsiServer() { Stop(); }

const std::string& CsiServer::socket_path() const { return impl_->socket_path; }

absl::Status CsiServer::Start() {
  Impl& s = *impl_;
  if (s.server) return absl::FailedPreconditionError("CSI server already started");
  WISP_RETURN_IF_ERROR(s.Validate());

  IdentityOptions identity_options;
  identity_options.controller = s.controller_role();
  identity_options.needed_services = s.options.probe_services;
  if (identity_options.needed_services.empty()) {
    if (s.node_role()) identity_options.needed_services.emplace_back(bus::services::kToken);
    if (s.controller_role()) {
      identity_options.needed_services.emplace_back(bus::services::kPopulator);
    }
  }
  std::erase(identity_options.needed_services, std::string());
  s.identity = std::make_unique<IdentityService>(identity_options, s.bus, s.metrics);

  if (s.node_role()) {
    bus::BucketConfig bucket;
    bucket.name = std::string(bus::buckets::kProjections);
    auto open_bucket = [&s](const bus::BucketConfig& config) {
      return s.options.open_bucket ? s.options.open_bucket(config) : s.bus.OpenBucket(config);
    };
    WISP_ASSIGN_OR_RETURN(bus::KeyValuePtr kv, open_bucket(bucket));
    s.store = std::make_unique<KvProjectionStore>(std::move(kv), s.options.node_id);
    s.issuer = std::make_unique<BusTokenIssuer>(s.bus, s.options.bus_timeout);
    NodeOptions node_options;
    node_options.node_id = s.options.node_id;
    node_options.volume_root = s.options.volume_root;
    node_options.target_roots = s.options.target_roots;
    node_options.min_expiration_seconds = s.options.min_token_expiration_seconds;
    node_options.tmpfs_size_bytes = s.options.tmpfs_size_bytes;
    node_options.bus_timeout = s.options.bus_timeout;
    node_options.pod_proof_audience = s.options.pod_proof_audience;
    s.node = std::make_unique<NodeService>(node_options, s.bus, *s.issuer, *s.store, s.mounter,
                                           s.clock, s.metrics);
    WISP_RETURN_IF_ERROR(Annotate(s.node->Recover(), "recovering token volumes"));
    NodeService* node = s.node.get();
    WISP_ASSIGN_OR_RETURN(s.capacity_sub,
                          s.bus.Serve(bus::subjects::Node(s.options.node_id, "csi.capacity"), "",
                                      [node](const bus::Request&) -> bus::Reply {
                                        auto cap = node->Capacity();
                                        if (!cap.ok()) return bus::Reply::Error(cap.status());
                                        v1::NodeCapacityResponse resp;
                                        resp.set_available_bytes(cap->first);
                                        resp.set_total_bytes(cap->second);
                                        return bus::ProtoReply(resp);
                                      }));
    s.node->StartRotation();
    WISP_ASSIGN_OR_RETURN(s.purge_kv, open_bucket(bucket));
    s.purger = std::make_unique<MarkerPurger>(*s.purge_kv, s.clock, s.PurgerOptions(), s.metrics);
    s.purger->Start();
  }
  if (s.controller_role()) {
    ControllerOptions controller_options;
    controller_options.default_node =
        s.options.default_node.empty() ? s.options.node_id : s.options.default_node;
    controller_options.bus_timeout = s.options.bus_timeout;
    controller_options.read_source_ca = s.options.read_source_ca;
    s.controller =
        std::make_unique<ControllerService>(controller_options, s.bus, s.clock, s.metrics, &s.bus);
  }

  WISP_RETURN_IF_ERROR(s.PrepareSocket());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + s.socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(s.identity.get());
  if (s.node) builder.RegisterService(s.node.get());
  if (s.controller) builder.RegisterService(s.controller.get());
  s.server = builder.BuildAndStart();
  if (!s.server) {
    if (s.node) s.node->StopRotation();
    if (s.purger) s.purger->Stop();
    return absl::UnavailableError("cannot listen on " + s.options.endpoint);
  }
  if (::chmod(s.socket_path.c_str(), 0660) != 0) {
    SPDLOG_LOGGER_WARN(s.logger, "chmod 0660 {}: {}", s.socket_path, std::strerror(errno));
  }
  SPDLOG_LOGGER_INFO(s.logger, "CSI {} serving on {} (node {})", RoleName(s.options.role),
                     s.options.endpoint, s.options.node_id);
  return absl::OkStatus();
}

void CsiServer::Stop() {
  Impl& s = *impl_;
  if (s.server) {
    s.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    s.server->Wait();
    s.server.reset();
    ::unlink(s.socket_path.c_str());
  }
  if (s.capacity_sub) {
    s.capacity_sub->Drain().IgnoreError();
    s.capacity_sub.reset();
  }
  if (s.node) s.node->StopRotation();
  if (s.purger) s.purger->Stop();
}

}  // namespace wisp::gateway::csi
