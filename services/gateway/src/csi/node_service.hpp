#pragma once
// NodeService: the CSI Node service of wisp-gateway (role node or both), a thin layer over the
// node's two kinds of volume:
//   - token volumes (csi.storage.k8s.io/ephemeral=true): a small tmpfs on the target path holding
//     one rotating token file, handled by TokenVolumes (csi/token_volumes.hpp: publish, rotate,
//     recover, the pod proof sent with each issue).
//   - persistent volumes created by wisp-populator: the volume's directory bind-mounted onto the
//     target, read-only when asked, handled by BindVolumes (csi/bind_volumes.hpp).
// NodeService validates each request, takes the volume's lock and dispatches; it also answers
// NodeGetVolumeStats, NodeGetCapabilities, NodeGetInfo and the node's free capacity.
//
// Contract: handlers validate first (InvalidArgument naming the field), are idempotent (a second
// publish of the same volume at the same target refreshes contents only; unpublishing something
// that is not there is OK), and never log a token. Calls on the same volume are serialised.
//
// Example:
//   NodeService node(options, bus, issuer, store, mounter, clock, metrics);
//   WISP_RETURN_IF_ERROR(node.Recover());
//   node.StartRotation();
//   builder.RegisterService(&node);
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "csi/csi.grpc.pb.h"
#include "csi/bind_volumes.hpp"
#include "csi/csi_metrics.hpp"
#include "csi/node_options.hpp"
#include "csi/plugin.hpp"
#include "csi/projection_store.hpp"
#include "csi/rotation_scheduler.hpp"
#include "csi/token_issuer.hpp"
#include "csi/token_volume.hpp"
#include "csi/token_volumes.hpp"
#include "csi/volume_locks.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/fsutil/mounter.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::gateway::csi {

class NodeService final : public ::csi::v1::Node::Service {
 public:
  NodeService(NodeOptions options, bus::Requester& requester, TokenIssuer& issuer,
              ProjectionStore& store, fsutil::Mounter& mounter, const Clock& clock,
              CsiMetrics& metrics);
  ~NodeService() override;

  // Reloads this node's projections and schedules their rotation; drops records whose target
  // is gone. Call once before serving.
  absl::Status Recover();
  void StartRotation() { tokens_.scheduler().Start(); }
  void StopRotation() { tokens_.scheduler().Stop(); }

  // ---- Logic (what the gRPC overrides call; unit tests call these directly) ----
  absl::StatusOr<::csi::v1::NodePublishVolumeResponse> Publish(
      const ::csi::v1::NodePublishVolumeRequest& request,
      std::chrono::milliseconds budget = std::chrono::milliseconds(0));
  absl::StatusOr<::csi::v1::NodeUnpublishVolumeResponse> Unpublish(
      const ::csi::v1::NodeUnpublishVolumeRequest& request);
  absl::StatusOr<::csi::v1::NodeGetVolumeStatsResponse> VolumeStats(
      const ::csi::v1::NodeGetVolumeStatsRequest& request);
  ::csi::v1::NodeGetCapabilitiesResponse Capabilities() const;
  ::csi::v1::NodeGetInfoResponse Info() const;
  // Free space under the volume root (served on wisp.v1.node.<node>.csi.capacity).
  absl::StatusOr<std::pair<int64_t, int64_t>> Capacity() const;

  // Issues and writes a fresh token for a `wisp` token volume, then schedules the next rotation
  // (or a retry after a failure, keeping the current token). The scheduler calls it.
  absl::Status RotateNow(const std::string& volume_id);
  // Rotates every volume the scheduler found due with one wisp.v1.token.issue_batch (one bus
  // round trip, not one per volume); each then finishes as RotateNow would, a refused or failed
  // entry keeping its current token and retrying on its own.
  void RotateDue(const std::vector<std::string>& volume_ids);

  RotationScheduler& scheduler() { return tokens_.scheduler(); }
  size_t token_volume_count() const { return tokens_.count(); }

  // ---- gRPC ----
  grpc::Status NodePublishVolume(grpc::ServerContext* context,
                                 const ::csi::v1::NodePublishVolumeRequest* request,
                                 ::csi::v1::NodePublishVolumeResponse* response) override;
  grpc::Status NodeUnpublishVolume(grpc::ServerContext* context,
                                   const ::csi::v1::NodeUnpublishVolumeRequest* request,
                                   ::csi::v1::NodeUnpublishVolumeResponse* response) override;
  grpc::Status NodeGetVolumeStats(grpc::ServerContext* context,
                                  const ::csi::v1::NodeGetVolumeStatsRequest* request,
                                  ::csi::v1::NodeGetVolumeStatsResponse* response) override;
  grpc::Status NodeGetCapabilities(grpc::ServerContext* context,
                                   const ::csi::v1::NodeGetCapabilitiesRequest* request,
                                   ::csi::v1::NodeGetCapabilitiesResponse* response) override;
  grpc::Status NodeGetInfo(grpc::ServerContext* context,
                           const ::csi::v1::NodeGetInfoRequest* request,
                           ::csi::v1::NodeGetInfoResponse* response) override;

 private:
  NodeOptions options_;
  CsiMetrics& metrics_;
  std::shared_ptr<spdlog::logger> logger_;
  VolumeLocks locks_;    // shared with tokens_, whose rotations take them too
  TokenVolumes tokens_;  // owns the rotation scheduler
  BindVolumes binds_;
};

}  // namespace wisp::gateway::csi
