#pragma once
// CsiServer: wisp-gateway's CSI endpoint. Builds the Identity service and, by role, the Node
// and/or Controller services, and serves them with gRPC on a unix socket (mode 0660).
//
// Contract:
//   - Start() validates the options (InvalidArgument naming the flag: csi-endpoint, csi-role,
//     node-id, volume-root), opens KV bucket wisp_projections (node role), reloads the token
//     volumes this node had published and resumes their rotation, serves
//     wisp.v1.node.<node>.csi.capacity (node role), starts the purge of wisp_projections' old
//     delete markers (node role, MarkerPurger), then listens. A stale socket file is replaced.
//   - Stop() stops accepting calls, waits for in-flight ones (up to 5 s), stops rotation and
//     and the purge, and removes the socket. The destructor calls Stop().
//
// Example (services/gateway/main.cpp):
//   csi::CsiServerOptions options;
//   options.endpoint = "unix:///var/lib/kubelet/plugins/csi.wisp.dev/csi.sock";
//   WISP_ASSIGN_OR_RETURN(options.role, csi::ParseRole("both"));
//   options.node_id = "node-a";
//   options.volume_root = "/var/lib/wisp/volumes";
//   options.target_roots = {"/var/lib/kubelet"};
//   csi::CsiServer server(options, bus, SystemClock::Instance(), mounter, metrics::Registry());
//   WISP_RETURN_IF_ERROR(server.Start());
//   ...
//   server.Stop();
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <prometheus/registry.h>

#include "csi/source_ca_reader.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/fsutil/mounter.hpp"
#include "wisp/status/clock.hpp"
#include "wisp/status/status.hpp"

namespace wisp::gateway::csi {

enum class Role { kNode, kController, kBoth };

// "node" | "controller" | "both"; InvalidArgument naming csi-role otherwise.
absl::StatusOr<Role> ParseRole(std::string_view text);
std::string_view RoleName(Role role);

struct CsiServerOptions {
  std::string endpoint;  // unix:///absolute/path.sock
  Role role = Role::kBoth;
  std::string node_id;                         // required for node and both
  std::string volume_root;                     // required for node and both
  std::vector<std::string> target_roots;       // allowed target paths (empty = any absolute path)
  std::string default_node;                    // controller: node when CreateVolume has no topology
                                               // ("" = node_id)
  int64_t min_token_expiration_seconds = 600;  // lower only for tests
  uint64_t tmpfs_size_bytes = 1 << 20;
  std::chrono::milliseconds bus_timeout{5000};
  // NATS micro services Probe needs ("" entries ignored). Empty = by role: wisp-token (node),
  // wisp-populator (controller).
  std::vector<std::string> probe_services;
  // Node role: how often to purge wisp_projections' delete markers, and how old a marker must be
  // to go (csi/marker_purger.hpp; flags projection-purge-interval and projection-purge-age).
  std::chrono::milliseconds projection_purge_interval = std::chrono::hours(1);  // 0 = never
  std::chrono::milliseconds projection_purge_age = std::chrono::minutes(10);
  // Node role: the kubelet token audience forwarded as proof of the pod (NodeOptions).
  std::string pod_proof_audience = "wisp";
  // Opens the node role's KV bucket. Empty = the bus's OpenBucket; wisp-gateway passes
  // runtime::Process::OpenBucket, which waits for JetStream at start-up (--bus-wait).
  std::function<absl::StatusOr<bus::KeyValuePtr>(const bus::BucketConfig&)> open_bucket;
  // Controller role: reads the CA bundle a PVC's import source names (ControllerOptions).
  SourceCaReader read_source_ca;
};

class CsiServer {
 public:
  CsiServer(CsiServerOptions options, bus::Bus& bus, const Clock& clock, fsutil::Mounter& mounter,
            prometheus::Registry& registry);
  ~CsiServer();
  CsiServer(const CsiServer&) = delete;
  CsiServer& operator=(const CsiServer&) = delete;

  absl::Status Start();
  void Stop();

  // The socket path (without unix://), once started.
  const std::string& socket_path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wisp::gateway::csi
