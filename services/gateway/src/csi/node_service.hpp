#pragma once
// NodeService: the CSI Node service of wisp-gateway (role node or both).
//
// Two kinds of volume arrive at NodePublishVolume:
//   - token volumes (csi.storage.k8s.io/ephemeral=true): a small tmpfs on the target path holding
//     one token file written with kubelet AtomicWriter semantics; `wisp` tokens come from
//     TokenIssuer and are rotated by the RotationScheduler at 80% of their lifetime (or 24h) with
//     jitter, `kubelet` tokens come from the volume context and are refreshed by republish. Each
//     published token volume is recorded in the ProjectionStore so a restarted gateway carries on
//     (Recover()).
//     Each issue for a pod carries the kubelet's own token for that pod (audience
//     NodeOptions::pod_proof_audience, when the kubelet sends one) as proof of its identity, so
//     wisp-token can refuse requests for pods this node does not run (docs/security.md, G3). The
//     latest proof of each volume is kept in memory only (never in the ProjectionStore, never
//     logged); republish refreshes it, and rotations use it.
//   - persistent volumes created by wisp-populator: the volume's directory (VolumeStatus.path from
//     wisp.v1.volume.get, which must lie under the volume root) is bind-mounted onto the target,
//     read-only when asked.
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
#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "csi/csi.grpc.pb.h"
#include "csi/csi_metrics.hpp"
#include "csi/plugin.hpp"
#include "csi/projection_store.hpp"
#include "csi/rotation_scheduler.hpp"
#include "csi/token_issuer.hpp"
#include "csi/token_volume.hpp"
#include "wisp/bus/bus.hpp"
#include "wisp/fsutil/mounter.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::gateway::csi {

struct NodeOptions {
  std::string node_id;
  std::string volume_root;                // persistent volumes live below it
  std::vector<std::string> target_roots;  // allowed target/staging paths (empty = any)
  int64_t min_expiration_seconds = kMinExpirationSeconds;
  uint64_t tmpfs_size_bytes = 1 << 20;
  std::chrono::milliseconds bus_timeout{5000};
  // The audience of the kubelet's token (csi.storage.k8s.io/serviceAccount.tokens) forwarded with
  // every wisp.v1.token.issue of a pod as proof of its identity ("" = none; docs/security.md G3).
  std::string pod_proof_audience = "wisp";
};

class NodeService final : public ::csi::v1::Node::Service {
 public:
  NodeService(NodeOptions options, bus::Requester& requester, TokenIssuer& issuer,
              ProjectionStore& store, fsutil::Mounter& mounter, const Clock& clock,
              CsiMetrics& metrics);
  ~NodeService() override;

  // Reloads this node's projections and schedules their rotation; drops records whose target
  // is gone. Call once before serving.
  absl::Status Recover();
  void StartRotation() { scheduler_.Start(); }
  void StopRotation() { scheduler_.Stop(); }

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

  RotationScheduler& scheduler() { return scheduler_; }
  size_t token_volume_count() const;

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
  struct BindState {
    std::string volume_id;
    bool read_only = false;
  };

  // What a rotation needs, read under mu_.
  struct Rotation {
    v1::TokenProjection projection;
    std::string proof;  // "" after a gateway restart until the kubelet's next republish
    bool from_wisp = false;
  };

  std::mutex& VolumeLock(const std::string& volume_id);
  absl::Status RotateLocked(const std::string& volume_id);  // volume lock held
  absl::StatusOr<Rotation> PrepareRotation(const std::string& volume_id);
  // Writes the new token and schedules the next rotation, or keeps the current token and
  // schedules a retry; Aborted (nothing written) when the volume was unpublished or published
  // again differently since `asked` was read. Volume lock held.
  absl::Status FinishRotation(const Rotation& asked, absl::StatusOr<IssuedToken> token);
  absl::Status PublishToken(const ::csi::v1::NodePublishVolumeRequest& request);
  // A bind mount of `volume_id` at `path` this process does not remember (made before a restart):
  // recorded and true when `path` is a mount point under the target roots showing the volume's
  // directory in the volume root.
  bool AdoptBind(const std::string& volume_id, const std::string& path);
  absl::Status PublishPersistent(const ::csi::v1::NodePublishVolumeRequest& request, bool read_only,
                                 std::chrono::milliseconds budget);
  absl::Status WriteToken(const std::string& target, const std::string& file,
                          const std::string& token, uint32_t mode);
  absl::Status PrepareTarget(const std::string& target);
  absl::Status RemoveTarget(const std::string& target, bool token_volume);
  void ScheduleNext(v1::TokenProjection& projection);
  int64_t JitteredRotation(int64_t issued_unix, int64_t expires_unix);
  void UpdateGauge();

  NodeOptions options_;
  bus::Requester& requester_;
  TokenIssuer& issuer_;
  ProjectionStore& store_;
  fsutil::Mounter& mounter_;
  const Clock& clock_;
  CsiMetrics& metrics_;
  std::shared_ptr<spdlog::logger> logger_;

  std::array<std::mutex, 64> volume_locks_;
  mutable std::mutex mu_;                              // guards the maps below
  std::map<std::string, v1::TokenProjection> tokens_;  // volume id -> published token volume
  std::map<std::string, std::string> proofs_;          // volume id -> kubelet's token (proof)
  std::map<std::string, BindState> binds_;             // target path -> persistent volume
  RotationScheduler scheduler_;
};

}  // namespace wisp::gateway::csi
