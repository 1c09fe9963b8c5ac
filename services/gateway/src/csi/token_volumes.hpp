#pragma once
// TokenVolumes: the token volumes of the CSI node (csi.storage.k8s.io/ephemeral=true): publish,
// unpublish, rotate and recover. NodeService validates each request and hands it here.
//
// A token volume is a small tmpfs on the target path holding one token file written with kubelet
// AtomicWriter semantics. `wisp` tokens come from TokenIssuer and are rotated by the
// RotationScheduler at 80% of their lifetime (or 24h) with jitter; `kubelet` tokens come from the
// volume context and are refreshed by republish. Each published volume is recorded in the
// ProjectionStore so a restarted gateway carries on (Recover()).
// Each issue for a pod carries the kubelet's own token for that pod (audience
// NodeOptions::pod_proof_audience, when the kubelet sends one) as proof of its identity, so
// wisp-token can refuse requests for pods this node does not run (docs/security.md, G3). The
// latest proof of each volume is kept in memory only (never in the ProjectionStore, never logged);
// republish refreshes it, and rotations use it.
//
// Contract:
//   - Publish() and Unpublish() run with the volume's lock (VolumeLocks) held by the caller, on a
//     request NodeService has validated. A second publish of the same volume at the same target
//     refreshes contents only (never a new mount); at another target it is AlreadyExists.
//   - RotateNow() and RotateDue() take the volume locks themselves; RotateDue() holds none over
//     its one bus round trip, and drops (Aborted) a new token whose volume was unpublished or
//     published again differently meanwhile.
//   - A failed rotation keeps the current token and retries within 1 to 30 s. Tokens are never
//     logged.
//
// Example:
//   VolumeLocks locks;
//   TokenVolumes tokens(options, issuer, store, mounter, clock, metrics, locks);
//   WISP_RETURN_IF_ERROR(tokens.Recover());
//   tokens.scheduler().Start();
//   std::lock_guard volume_lock(locks.For(request.volume_id()));
//   WISP_RETURN_IF_ERROR(tokens.Publish(request));
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "csi/csi.grpc.pb.h"
#include "csi/csi_metrics.hpp"
#include "csi/node_options.hpp"
#include "csi/projection_store.hpp"
#include "csi/rotation_scheduler.hpp"
#include "csi/token_issuer.hpp"
#include "csi/volume_locks.hpp"
#include "wisp/fsutil/mounter.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::gateway::csi {

class TokenVolumes {
 public:
  TokenVolumes(NodeOptions options, TokenIssuer& issuer, ProjectionStore& store,
               fsutil::Mounter& mounter, const Clock& clock, CsiMetrics& metrics,
               VolumeLocks& locks);
  ~TokenVolumes();  // stops the scheduler first: its thread calls back into this object
  TokenVolumes(const TokenVolumes&) = delete;
  TokenVolumes& operator=(const TokenVolumes&) = delete;

  // Reloads this node's projections and schedules their rotation; drops records whose target
  // is gone.
  absl::Status Recover();

  // Volume lock held.
  absl::Status Publish(const ::csi::v1::NodePublishVolumeRequest& request);
  // True when `target` holds token volume `volume_id`, as this process remembers it or as the
  // ProjectionStore recorded it (a publication from before a restart). Volume lock held.
  bool Holds(const std::string& volume_id, const std::string& target);
  // Cancels the rotation, unmounts and removes the target, forgets the volume. Volume lock held.
  absl::Status Unpublish(const std::string& volume_id, const std::string& target);
  // True when this process published `volume_id` at `path` (what NodeGetVolumeStats may report).
  bool PublishedAt(const std::string& volume_id, const std::string& path) const;

  absl::Status RotateNow(const std::string& volume_id);
  void RotateDue(const std::vector<std::string>& volume_ids);

  RotationScheduler& scheduler() { return scheduler_; }
  size_t count() const;

 private:
  // What a rotation needs, read under mu_.
  struct Rotation {
    v1::TokenProjection projection;
    std::string proof;  // "" after a gateway restart until the kubelet's next republish
    bool from_wisp = false;
  };

  absl::Status RotateLocked(const std::string& volume_id);  // volume lock held
  absl::StatusOr<Rotation> PrepareRotation(const std::string& volume_id);
  // Writes the new token and schedules the next rotation, or keeps the current token and
  // schedules a retry; Aborted (nothing written) when the volume was unpublished or published
  // again differently since `asked` was read. Volume lock held.
  absl::Status FinishRotation(const Rotation& asked, absl::StatusOr<IssuedToken> token);
  // Writes the token and the files beside it (gcp credential configuration) as one atomic set,
  // with the projection's mode and owner.
  absl::Status WriteToken(const v1::TokenProjection& projection, const std::string& token);
  void ScheduleNext(v1::TokenProjection& projection);
  int64_t JitteredRotation(int64_t issued_unix, int64_t expires_unix);
  void UpdateGauge();

  NodeOptions options_;
  TokenIssuer& issuer_;
  ProjectionStore& store_;
  fsutil::Mounter& mounter_;
  const Clock& clock_;
  CsiMetrics& metrics_;
  VolumeLocks& locks_;
  std::shared_ptr<spdlog::logger> logger_;

  mutable std::mutex mu_;                              // guards the maps below
  std::map<std::string, v1::TokenProjection> tokens_;  // volume id -> published token volume
  std::map<std::string, std::string> proofs_;          // volume id -> kubelet's token (proof)
  RotationScheduler scheduler_;                        // last: its thread uses the above
};

}  // namespace wisp::gateway::csi
