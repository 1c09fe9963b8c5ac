#include "csi/node_service.hpp"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "csi/grpc_call.hpp"
#include "csi/strip_secrets.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/fsutil/atomic_writer.hpp"
#include "wisp/fsutil/path_safety.hpp"
#include "wisp/log/log.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::gateway::csi {
namespace fs = std::filesystem;
using ::csi::v1::VolumeCapability;

namespace {

constexpr char kSourceWisp[] = "wisp";
constexpr char kSourceKubelet[] = "kubelet";

absl::Status CheckCapability(const ::csi::v1::NodePublishVolumeRequest& request) {
  if (!request.has_volume_capability()) {
    return absl::InvalidArgumentError("volume_capability is required");
  }
  const VolumeCapability& cap = request.volume_capability();
  if (cap.has_block()) {
    return absl::InvalidArgumentError("volume_capability: block access is not supported");
  }
  if (!cap.has_mount()) {
    return absl::InvalidArgumentError("volume_capability: access_type mount is required");
  }
  if (!cap.has_access_mode() || cap.access_mode().mode() == VolumeCapability::AccessMode::UNKNOWN) {
    return absl::InvalidArgumentError("volume_capability.access_mode is required");
  }
  return absl::OkStatus();
}

bool ReadOnlyMode(const VolumeCapability& cap) {
  const auto mode = cap.access_mode().mode();
  return mode == VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY ||
         mode == VolumeCapability::AccessMode::MULTI_NODE_READER_ONLY;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// True when `target` shows the directory `source` (same device and inode), as a bind mount of
// `source` on `target` does.
bool ShowsDirectory(const std::string& target, const std::string& source) {
  struct stat t, s;
  return ::stat(target.c_str(), &t) == 0 && ::stat(source.c_str(), &s) == 0 && S_ISDIR(t.st_mode) &&
         t.st_dev == s.st_dev && t.st_ino == s.st_ino;
}

bool MountedReadOnly(const std::string& path) {
  struct statvfs vfs;
  return ::statvfs(path.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY) != 0;
}

}  // namespace

NodeService::NodeService(NodeOptions options, bus::Requester& requester, TokenIssuer& issuer,
                         ProjectionStore& store, fsutil::Mounter& mounter, const Clock& clock,
                         CsiMetrics& metrics)
    : options_(std::move(options)),
      requester_(requester),
      issuer_(issuer),
      store_(store),
      mounter_(mounter),
      clock_(clock),
      metrics_(metrics),
      logger_(log::Get("csi-node")),
      scheduler_(
          clock, [this](const std::vector<std::string>& ids) { RotateDue(ids); },
          BusTokenIssuer::kMaxBatch) {}

NodeService::~NodeService() { scheduler_.Stop(); }

std::mutex& NodeService::VolumeLock(const std::string& volume_id) {
  return volume_locks_[std::hash<std::string>{}(volume_id) % volume_locks_.size()];
}

size_t NodeService::token_volume_count() const {
  std::lock_guard lock(mu_);
  return tokens_.size();
}

void NodeService::UpdateGauge() {
  metrics_.token_volumes.Set(static_cast<double>(token_volume_count()));
}

int64_t NodeService::JitteredRotation(int64_t issued_unix, int64_t expires_unix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const auto max_jitter = MaxJitterFor(expires_unix - issued_unix);
  std::uniform_int_distribution<int64_t> dist(0, std::max<int64_t>(max_jitter.count() - 1, 0));
  return NextRotationUnix(issued_unix, expires_unix, std::chrono::milliseconds(dist(rng)));
}

void NodeService::ScheduleNext(v1::TokenProjection& projection) {
  if (projection.token_source() != kSourceWisp) return;  // kubelet tokens: refreshed by republish
  scheduler_.Schedule(projection.volume_id(), projection.next_rotation_unix());
}

absl::Status NodeService::Recover() {
  WISP_ASSIGN_OR_RETURN(std::vector<v1::TokenProjection> projections, store_.List());
  int recovered = 0;
  for (v1::TokenProjection& p : projections) {
    auto mounted = mounter_.IsMountPoint(p.target_path());
    if (!mounted.ok() || !*mounted) {
      // The pod went away while we were down (or the node rebooted): nothing left to rotate.
      SPDLOG_LOGGER_INFO(logger_, "dropping projection of {}: target {} is gone", p.volume_id(),
                         p.target_path());
      store_.Delete(p.volume_id()).IgnoreError();
      continue;
    }
    {
      std::lock_guard lock(mu_);
      tokens_[p.volume_id()] = p;
    }
    ScheduleNext(p);
    ++recovered;
  }
  UpdateGauge();
  SPDLOG_LOGGER_INFO(logger_, "recovered {} token volume(s) on node {}", recovered,
                     options_.node_id);
  return absl::OkStatus();
}

// ---- NodePublishVolume ------------------------------------------------------------------------

absl::StatusOr<::csi::v1::NodePublishVolumeResponse> NodeService::Publish(
    const ::csi::v1::NodePublishVolumeRequest& request, std::chrono::milliseconds budget) {
  if (request.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (request.target_path().empty()) return absl::InvalidArgumentError("target_path is required");
  WISP_RETURN_IF_ERROR(CheckCapability(request));
  WISP_RETURN_IF_ERROR(
      fsutil::CheckPathUnder("target_path", request.target_path(), options_.target_roots));
  if (!request.staging_target_path().empty()) {
    WISP_RETURN_IF_ERROR(fsutil::CheckPathUnder(
        "staging_target_path", request.staging_target_path(), options_.target_roots));
  }
  std::lock_guard volume_lock(VolumeLock(request.volume_id()));
  if (IsEphemeral(request.volume_context())) {
    WISP_RETURN_IF_ERROR(PublishToken(request));
  } else {
    const bool read_only = request.readonly() || ReadOnlyMode(request.volume_capability());
    if (budget.count() <= 0) budget = options_.bus_timeout;
    WISP_RETURN_IF_ERROR(PublishPersistent(request, read_only, budget));
  }
  return ::csi::v1::NodePublishVolumeResponse();
}

absl::Status NodeService::PrepareTarget(const std::string& target) {
  struct stat st;
  if (::stat(target.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError("target_path " + target + " is not a directory");
    }
    return absl::OkStatus();
  }
  // The CO creates the parent; the plugin creates the target itself.
  if (::mkdir(target.c_str(), 0750) != 0 && errno != EEXIST) {
    return absl::InternalError("creating target_path " + target + ": " + std::strerror(errno));
  }
  return absl::OkStatus();
}

absl::Status NodeService::WriteToken(const std::string& target, const std::string& file,
                                     const std::string& token, uint32_t mode) {
  fsutil::AtomicWriter writer(target, clock_);
  auto changed = writer.Write({{file, fsutil::FileProjection{token, mode}}});
  return changed.ok() ? absl::OkStatus() : Annotate(changed.status(), "writing token");
}

absl::Status NodeService::PublishToken(const ::csi::v1::NodePublishVolumeRequest& request) {
  const std::string& id = request.volume_id();
  const std::string target = fsutil::CleanPath(request.target_path());
  WISP_ASSIGN_OR_RETURN(TokenVolumeSpec spec, ParseTokenVolume(request.volume_context(),
                                                               options_.min_expiration_seconds));
  spec.subject.set_node_name(options_.node_id);

  // Take the kubelet's token before touching the disk, so a bad request changes nothing.
  std::optional<KubeletToken> kubelet_token;
  if (spec.source == TokenSource::kKubelet) {
    WISP_ASSIGN_OR_RETURN(KubeletToken t, KubeletTokenFor(request.volume_context(), spec.audience));
    kubelet_token = std::move(t);
  }
  // The kubelet's token for the pod, forwarded as proof of its identity (docs/security.md, G3).
  // Absent when the CSIDriver has no tokenRequests for that audience: wisp-token then decides
  // (its policy's issue.requirePodProof). Never logged.
  std::string proof;
  if (!options_.pod_proof_audience.empty() &&
      request.volume_context().count(kServiceAccountTokensKey) > 0) {
    auto t = KubeletTokenFor(request.volume_context(), options_.pod_proof_audience);
    if (t.ok()) {
      proof = std::move(t->token);
    } else {
      SPDLOG_LOGGER_DEBUG(logger_, "no pod proof for {}: {}", id,
                          std::string(t.status().message()));
    }
  }

  std::optional<v1::TokenProjection> existing;
  {
    std::lock_guard lock(mu_);
    if (auto it = tokens_.find(id); it != tokens_.end()) existing = it->second;
  }
  if (existing && existing->target_path() != target) {
    return absl::AlreadyExistsError("volume " + id + " is already published at " +
                                    existing->target_path());
  }
  if (existing) {
    auto mounted = mounter_.IsMountPoint(target);
    if (mounted.ok() && *mounted) {
      // Republish: refresh contents only, never a new mount.
      if (!proof.empty()) {
        std::lock_guard lock(mu_);
        proofs_[id] = proof;  // the kubelet's fresh token, for this and the next rotations
      }
      if (kubelet_token) {
        WISP_RETURN_IF_ERROR(WriteToken(target, spec.path, kubelet_token->token, spec.file_mode));
        v1::TokenProjection updated = *existing;
        updated.set_issued_unix(clock_.NowUnixSeconds());
        updated.set_expires_unix(kubelet_token->expires_unix);
        if (updated.expires_unix() != existing->expires_unix()) {
          WISP_RETURN_IF_ERROR(store_.Put(updated));
          std::lock_guard lock(mu_);
          tokens_[id] = updated;
        }
      } else if (existing->next_rotation_unix() <= clock_.NowUnixSeconds() ||
                 !Exists(target + "/" + existing->path())) {
        // Overdue (or the file went missing): rotate now rather than wait for the timer.
        scheduler_.Cancel(id);
        WISP_RETURN_IF_ERROR(RotateLocked(id));
      }
      return absl::OkStatus();
    }
    // Our record says published but the mount is gone (someone unmounted it): start afresh.
    scheduler_.Cancel(id);
    std::lock_guard lock(mu_);
    tokens_.erase(id);
  }

  // Fresh publish: get the token first (nothing to undo if wisp-token is down).
  IssuedToken token;
  if (kubelet_token) {
    token = IssuedToken{kubelet_token->token, clock_.NowUnixSeconds(), kubelet_token->expires_unix};
  } else {
    WISP_ASSIGN_OR_RETURN(
        token, issuer_.Issue(spec.subject, spec.audience, spec.expiration_seconds, proof));
  }

  WISP_RETURN_IF_ERROR(PrepareTarget(target));
  auto mounted = mounter_.IsMountPoint(target);
  if (!mounted.ok()) return mounted.status();
  bool mounted_here = false;
  if (!*mounted) {
    WISP_RETURN_IF_ERROR(mounter_.MountTmpfs(target, options_.tmpfs_size_bytes, 0755));
    mounted_here = true;
  }
  auto undo = [&] {
    if (mounted_here) mounter_.Unmount(target).IgnoreError();
    RemoveTarget(target, true).IgnoreError();
  };
  if (absl::Status st = WriteToken(target, spec.path, token.token, spec.file_mode); !st.ok()) {
    undo();
    return st;
  }

  v1::TokenProjection projection;
  projection.set_volume_id(id);
  projection.set_node(options_.node_id);
  projection.set_target_path(target);
  *projection.mutable_subject() = spec.subject;
  projection.set_audience(spec.audience);
  projection.set_expiration_seconds(spec.expiration_seconds);
  projection.set_path(spec.path);
  projection.set_file_mode(spec.file_mode);
  projection.set_token_source(kubelet_token ? kSourceKubelet : kSourceWisp);
  projection.set_issued_unix(token.issued_unix);
  projection.set_expires_unix(token.expires_unix);
  if (!kubelet_token) {
    projection.set_next_rotation_unix(JitteredRotation(token.issued_unix, token.expires_unix));
  }
  if (absl::Status st = store_.Put(projection); !st.ok()) {
    // Without the record a restart would forget to rotate: refuse, the kubelet retries.
    undo();
    return absl::UnavailableError("recording token volume: " + std::string(st.message()));
  }
  {
    std::lock_guard lock(mu_);
    tokens_[id] = projection;
    if (!proof.empty()) proofs_[id] = std::move(proof);
  }
  ScheduleNext(projection);
  UpdateGauge();
  SPDLOG_LOGGER_INFO(logger_, "published token volume at {} (audience \"{}\", source {}, {}s)",
                     target, spec.audience, projection.token_source(), spec.expiration_seconds);
  return absl::OkStatus();
}

absl::Status NodeService::PublishPersistent(const ::csi::v1::NodePublishVolumeRequest& request,
                                            bool read_only, std::chrono::milliseconds budget) {
  const std::string& id = request.volume_id();
  const std::string target = fsutil::CleanPath(request.target_path());

  v1::GetVolumeRequest get;
  get.set_volume_id(id);
  auto got = bus::Call<v1::GetVolumeResponse>(requester_, bus::subjects::kVolumeGet, get, budget);
  if (!got.ok()) {
    if (got.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError("volume " + id + " does not exist");
    }
    return Annotate(got.status(), "looking up volume " + id);
  }
  const v1::VolumeStatus& volume = got->volume();
  if (volume.phase() != v1::SUCCEEDED) {
    return absl::FailedPreconditionError("volume " + id + " is not ready (phase " +
                                         v1::VolumePhase_Name(volume.phase()) + ")");
  }
  if (!volume.spec().node().empty() && volume.spec().node() != options_.node_id) {
    return absl::FailedPreconditionError("volume " + id + " lives on node " + volume.spec().node() +
                                         ", not " + options_.node_id);
  }
  // The populator's path must stay inside our volume root, whatever it says.
  WISP_RETURN_IF_ERROR(
      fsutil::CheckPathUnder("volume path", volume.path(), {options_.volume_root}));
  struct stat st;
  if (::stat(volume.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError("volume " + id + " has no directory on this node: " + volume.path());
  }

  WISP_RETURN_IF_ERROR(PrepareTarget(target));
  WISP_ASSIGN_OR_RETURN(bool mounted, mounter_.IsMountPoint(target));
  if (mounted) {
    std::lock_guard lock(mu_);
    auto it = binds_.find(target);
    if (it == binds_.end()) {
      // A mount we do not remember (the gateway restarted): ours only if it shows this volume's
      // directory, the way asked; never report someone else's mount as published.
      if (!ShowsDirectory(target, volume.path())) {
        return absl::AlreadyExistsError("target_path " + target +
                                        " is a mount point that does not hold volume " + id);
      }
      const bool mounted_read_only = MountedReadOnly(target);
      if (mounted_read_only != read_only) {
        return absl::AlreadyExistsError("volume " + id + " is already published at " + target +
                                        (mounted_read_only ? " read-only" : " read-write"));
      }
      binds_[target] = BindState{id, read_only};
      return absl::OkStatus();
    }
    if (it->second.volume_id != id) {
      return absl::AlreadyExistsError("target_path " + target + " already holds volume " +
                                      it->second.volume_id);
    }
    if (it->second.read_only != read_only) {
      return absl::AlreadyExistsError("volume " + id + " is already published at " + target +
                                      (it->second.read_only ? " read-only" : " read-write"));
    }
    return absl::OkStatus();
  }
  WISP_RETURN_IF_ERROR(mounter_.BindMount(volume.path(), target, read_only));
  std::lock_guard lock(mu_);
  binds_[target] = BindState{id, read_only};
  SPDLOG_LOGGER_INFO(logger_, "bind-mounted {} on {}{}", volume.path(), target,
                     read_only ? " (read-only)" : "");
  return absl::OkStatus();
}

// ---- NodeUnpublishVolume ----------------------------------------------------------------------

absl::Status NodeService::RemoveTarget(const std::string& target, bool token_volume) {
  if (!Exists(target)) return absl::OkStatus();
  if (token_volume) {
    // Only our token files can be left here (the tmpfs is gone); never recurse through a mount.
    auto mounted = mounter_.IsMountPoint(target);
    if (mounted.ok() && *mounted) {
      return absl::FailedPreconditionError("target_path " + target + " is still mounted");
    }
    std::error_code ec;
    fs::remove_all(target, ec);
    if (ec) return absl::InternalError("removing " + target + ": " + ec.message());
    return absl::OkStatus();
  }
  if (::rmdir(target.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError("removing target_path " + target + ": " +
                                         std::strerror(errno));
  }
  return absl::OkStatus();
}

absl::StatusOr<::csi::v1::NodeUnpublishVolumeResponse> NodeService::Unpublish(
    const ::csi::v1::NodeUnpublishVolumeRequest& request) {
  if (request.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (request.target_path().empty()) return absl::InvalidArgumentError("target_path is required");
  WISP_RETURN_IF_ERROR(
      fsutil::CheckPathUnder("target_path", request.target_path(), options_.target_roots));
  const std::string& id = request.volume_id();
  const std::string target = fsutil::CleanPath(request.target_path());
  std::lock_guard volume_lock(VolumeLock(id));

  bool token_volume = false;
  {
    std::lock_guard lock(mu_);
    auto it = tokens_.find(id);
    token_volume = it != tokens_.end() && it->second.target_path() == target;
  }
  if (!token_volume) {
    auto stored = store_.Get(id);
    token_volume = stored.ok() && stored->target_path() == target;
  }
  if (token_volume) scheduler_.Cancel(id);

  if (Exists(target)) {
    for (int i = 0; i < 8; ++i) {  // stacked mounts come off one at a time
      auto mounted = mounter_.IsMountPoint(target);
      if (!mounted.ok()) {
        if (mounted.status().code() == absl::StatusCode::kNotFound) break;
        return mounted.status();
      }
      if (!*mounted) break;
      WISP_RETURN_IF_ERROR(mounter_.Unmount(target));
    }
    WISP_RETURN_IF_ERROR(RemoveTarget(target, token_volume));
  }

  if (token_volume) {
    WISP_RETURN_IF_ERROR(store_.Delete(id));
    {
      std::lock_guard lock(mu_);
      tokens_.erase(id);
      proofs_.erase(id);
    }
    UpdateGauge();
    SPDLOG_LOGGER_INFO(logger_, "unpublished token volume at {}", target);
  } else {
    std::lock_guard lock(mu_);
    binds_.erase(target);
  }
  return ::csi::v1::NodeUnpublishVolumeResponse();
}

// ---- Rotation ---------------------------------------------------------------------------------

absl::Status NodeService::RotateNow(const std::string& volume_id) {
  std::lock_guard volume_lock(VolumeLock(volume_id));
  return RotateLocked(volume_id);
}

void NodeService::RotateDue(const std::vector<std::string>& volume_ids) {
  if (volume_ids.size() == 1) {
    RotateNow(volume_ids[0]).IgnoreError();
    return;
  }
  // No volume lock is held over the bus call: Publish and Unpublish of these volumes (and of
  // every volume sharing their lock stripes) go on meanwhile, and FinishRotation checks under the
  // volume's lock that it is still the volume the token was asked for.
  std::vector<Rotation> due;
  for (const auto& id : volume_ids) {
    auto r = PrepareRotation(id);
    if (r.ok() && r->from_wisp) due.push_back(*std::move(r));
  }
  if (due.empty()) return;
  std::vector<IssueSpec> specs;
  specs.reserve(due.size());
  for (const Rotation& r : due) {
    specs.push_back({r.projection.subject(), r.projection.audience(),
                     r.projection.expiration_seconds(), r.proof});
  }
  auto tokens = issuer_.IssueBatch(specs);
  for (size_t i = 0; i < due.size(); ++i) {
    const std::string& id = due[i].projection.volume_id();
    std::lock_guard volume_lock(VolumeLock(id));
    log::ScopedRequestId rid(id);
    FinishRotation(due[i], i < tokens.size() ? std::move(tokens[i])
                                             : absl::InternalError("issuer answered too few"))
        .IgnoreError();
  }
}

absl::StatusOr<NodeService::Rotation> NodeService::PrepareRotation(const std::string& volume_id) {
  Rotation r;
  std::lock_guard lock(mu_);
  auto it = tokens_.find(volume_id);
  if (it == tokens_.end()) return absl::NotFoundError("no token volume " + volume_id);
  r.projection = it->second;
  if (auto p = proofs_.find(volume_id); p != proofs_.end()) r.proof = p->second;
  r.from_wisp = r.projection.token_source() == kSourceWisp;
  return r;
}

absl::Status NodeService::RotateLocked(const std::string& volume_id) {
  WISP_ASSIGN_OR_RETURN(Rotation r, PrepareRotation(volume_id));
  if (!r.from_wisp) return absl::OkStatus();
  log::ScopedRequestId rid(volume_id);
  const auto& p = r.projection;
  return FinishRotation(r,
                        issuer_.Issue(p.subject(), p.audience(), p.expiration_seconds(), r.proof));
}

absl::Status NodeService::FinishRotation(const Rotation& asked, absl::StatusOr<IssuedToken> token) {
  const std::string& volume_id = asked.projection.volume_id();
  v1::TokenProjection projection;
  {
    // Unpublished, or published again for another pod or target, since the token was asked
    // for: that token is not this volume's any more, and the new publish scheduled its own.
    std::lock_guard lock(mu_);
    auto it = tokens_.find(volume_id);
    if (it == tokens_.end() || it->second.target_path() != asked.projection.target_path() ||
        it->second.token_source() != asked.projection.token_source() ||
        it->second.subject().SerializeAsString() !=
            asked.projection.subject().SerializeAsString()) {
      SPDLOG_LOGGER_INFO(logger_,
                         "dropping the new token of {}: unpublished or published again meanwhile",
                         volume_id);
      return absl::AbortedError("token volume " + volume_id + " changed during its rotation");
    }
    projection = it->second;
  }
  auto fail = [&](const absl::Status& st) {
    metrics_.rotations_error.Increment();
    const int64_t now = clock_.NowUnixSeconds();
    const int64_t left = projection.expires_unix() - now;
    if (left <= 0) {
      SPDLOG_LOGGER_ERROR(logger_, "token of {} expired and refresh failed: {}", volume_id,
                          std::string(st.message()));
    } else {
      SPDLOG_LOGGER_WARN(logger_, "couldn't update token of {} (current one valid {}s more): {}",
                         volume_id, left, std::string(st.message()));
    }
    // Retry soon, sooner for short lifetimes, while keeping the current (still valid) token.
    const int64_t retry = std::clamp<int64_t>(left / 10, 1, 30);
    scheduler_.Schedule(volume_id, now + retry);
    return st;
  };

  if (!token.ok()) return fail(token.status());
  if (absl::Status st = WriteToken(projection.target_path(), projection.path(), token->token,
                                   projection.file_mode());
      !st.ok()) {
    return fail(st);
  }
  projection.set_issued_unix(token->issued_unix);
  projection.set_expires_unix(token->expires_unix);
  projection.set_next_rotation_unix(JitteredRotation(token->issued_unix, token->expires_unix));
  projection.set_rotations(projection.rotations() + 1);
  if (absl::Status st = store_.Put(projection); !st.ok()) {
    // The new token is on disk; only the restart record is stale, and a restarted gateway would
    // rotate early, which is harmless.
    SPDLOG_LOGGER_WARN(logger_, "recording rotation of {}: {}", volume_id,
                       std::string(st.message()));
  }
  {
    std::lock_guard lock(mu_);
    tokens_[volume_id] = projection;
  }
  ScheduleNext(projection);
  metrics_.rotations_ok.Increment();
  SPDLOG_LOGGER_INFO(logger_, "rotated token of {} (rotation {}), next at {}", volume_id,
                     projection.rotations(), projection.next_rotation_unix());
  return absl::OkStatus();
}

// ---- Stats, capabilities, info ----------------------------------------------------------------

absl::StatusOr<::csi::v1::NodeGetVolumeStatsResponse> NodeService::VolumeStats(
    const ::csi::v1::NodeGetVolumeStatsRequest& request) {
  if (request.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (request.volume_path().empty()) return absl::InvalidArgumentError("volume_path is required");
  const std::string& id = request.volume_id();
  const std::string path = fsutil::CleanPath(request.volume_path());
  bool known = false;
  {
    std::lock_guard lock(mu_);
    if (auto it = tokens_.find(id); it != tokens_.end()) known = it->second.target_path() == path;
    if (auto it = binds_.find(path); it != binds_.end())
      known = known || it->second.volume_id == id;
  }
  if (!known) known = AdoptBind(id, path);
  if (!known) return absl::NotFoundError("volume " + id + " is not published at " + path);
  struct statvfs vfs;
  if (::statvfs(path.c_str(), &vfs) != 0) {
    return absl::NotFoundError("volume_path " + path + ": " + std::strerror(errno));
  }
  ::csi::v1::NodeGetVolumeStatsResponse response;
  auto* bytes = response.add_usage();
  bytes->set_unit(::csi::v1::VolumeUsage::BYTES);
  bytes->set_total(static_cast<int64_t>(vfs.f_blocks * vfs.f_frsize));
  bytes->set_available(static_cast<int64_t>(vfs.f_bavail * vfs.f_frsize));
  bytes->set_used(static_cast<int64_t>((vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize));
  auto* inodes = response.add_usage();
  inodes->set_unit(::csi::v1::VolumeUsage::INODES);
  inodes->set_total(static_cast<int64_t>(vfs.f_files));
  inodes->set_available(static_cast<int64_t>(vfs.f_favail));
  inodes->set_used(static_cast<int64_t>(vfs.f_files - vfs.f_ffree));
  return response;
}

bool NodeService::AdoptBind(const std::string& volume_id, const std::string& path) {
  // Only a plain volume id names a directory in the volume root, and only a mount point under
  // the target roots can be a publication.
  auto dir = fsutil::JoinUnder("volume_id", options_.volume_root, volume_id);
  if (!dir.ok()) return false;
  if (!fsutil::CheckPathUnder("volume_path", path, options_.target_roots).ok()) return false;
  auto mounted = mounter_.IsMountPoint(path);
  if (!mounted.ok() || !*mounted) return false;
  if (!ShowsDirectory(path, *dir)) return false;
  std::lock_guard lock(mu_);
  binds_[path] = BindState{volume_id, MountedReadOnly(path)};
  return true;
}

::csi::v1::NodeGetCapabilitiesResponse NodeService::Capabilities() const {
  ::csi::v1::NodeGetCapabilitiesResponse response;
  response.add_capabilities()->mutable_rpc()->set_type(
      ::csi::v1::NodeServiceCapability::RPC::GET_VOLUME_STATS);
  return response;
}

::csi::v1::NodeGetInfoResponse NodeService::Info() const {
  ::csi::v1::NodeGetInfoResponse response;
  response.set_node_id(options_.node_id);
  (*response.mutable_accessible_topology()->mutable_segments())[kTopologyKey] = options_.node_id;
  return response;
}

absl::StatusOr<std::pair<int64_t, int64_t>> NodeService::Capacity() const {
  struct statvfs vfs;
  if (::statvfs(options_.volume_root.c_str(), &vfs) != 0) {
    return absl::UnavailableError("volume root " + options_.volume_root + ": " +
                                  std::strerror(errno));
  }
  return std::make_pair(static_cast<int64_t>(vfs.f_bavail * vfs.f_frsize),
                        static_cast<int64_t>(vfs.f_blocks * vfs.f_frsize));
}

// ---- gRPC -------------------------------------------------------------------------------------

grpc::Status NodeService::NodePublishVolume(grpc::ServerContext* context,
                                            const ::csi::v1::NodePublishVolumeRequest* request,
                                            ::csi::v1::NodePublishVolumeResponse* response) {
  return Instrument(metrics_, logger_, "NodePublishVolume", request->volume_id(), *request,
                    response,
                    [&] { return Publish(*request, Budget(context, options_.bus_timeout)); });
}

grpc::Status NodeService::NodeUnpublishVolume(grpc::ServerContext*,
                                              const ::csi::v1::NodeUnpublishVolumeRequest* request,
                                              ::csi::v1::NodeUnpublishVolumeResponse* response) {
  return Instrument(metrics_, logger_, "NodeUnpublishVolume", request->volume_id(), *request,
                    response, [&] { return Unpublish(*request); });
}

grpc::Status NodeService::NodeGetVolumeStats(grpc::ServerContext*,
                                             const ::csi::v1::NodeGetVolumeStatsRequest* request,
                                             ::csi::v1::NodeGetVolumeStatsResponse* response) {
  return Instrument(metrics_, logger_, "NodeGetVolumeStats", request->volume_id(), *request,
                    response, [&] { return VolumeStats(*request); });
}

grpc::Status NodeService::NodeGetCapabilities(grpc::ServerContext*,
                                              const ::csi::v1::NodeGetCapabilitiesRequest* request,
                                              ::csi::v1::NodeGetCapabilitiesResponse* response) {
  return Instrument(
      metrics_, logger_, "NodeGetCapabilities", "", *request, response,
      [&]() -> absl::StatusOr<::csi::v1::NodeGetCapabilitiesResponse> { return Capabilities(); });
}

grpc::Status NodeService::NodeGetInfo(grpc::ServerContext*,
                                      const ::csi::v1::NodeGetInfoRequest* request,
                                      ::csi::v1::NodeGetInfoResponse* response) {
  return Instrument(metrics_, logger_, "NodeGetInfo", "", *request, response,
                    [&]() -> absl::StatusOr<::csi::v1::NodeGetInfoResponse> { return Info(); });
}

}  // namespace wisp::gateway::csi
