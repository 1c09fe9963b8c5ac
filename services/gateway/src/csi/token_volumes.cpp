#include "csi/token_volumes.hpp"

#include <algorithm>
#include <optional>
#include <random>

#include <google/protobuf/util/message_differencer.h>

#include "csi/strip_secrets.hpp"
#include "csi/target_dir.hpp"
#include "wisp/fsutil/atomic_writer.hpp"
#include "wisp/fsutil/path_safety.hpp"
#include "wisp/log/log.hpp"

namespace wisp::gateway::csi {
namespace {

constexpr char kSourceWisp[] = "wisp";
constexpr char kSourceKubelet[] = "kubelet";

}  // namespace

TokenVolumes::TokenVolumes(NodeOptions options, TokenIssuer& issuer, ProjectionStore& store,
                           fsutil::Mounter& mounter, const Clock& clock, CsiMetrics& metrics,
                           VolumeLocks& locks)
    : options_(std::move(options)),
      issuer_(issuer),
      store_(store),
      mounter_(mounter),
      clock_(clock),
      metrics_(metrics),
      locks_(locks),
      logger_(log::Get("csi-node")),
      scheduler_(
          clock, [this](const std::vector<std::string>& ids) { RotateDue(ids); },
          BusTokenIssuer::kMaxBatch) {}

TokenVolumes::~TokenVolumes() { scheduler_.Stop(); }

size_t TokenVolumes::count() const {
  std::lock_guard lock(mu_);
  return tokens_.size();
}

void TokenVolumes::UpdateGauge() { metrics_.token_volumes.Set(static_cast<double>(count())); }

int64_t TokenVolumes::JitteredRotation(int64_t issued_unix, int64_t expires_unix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const auto max_jitter = MaxJitterFor(expires_unix - issued_unix);
  std::uniform_int_distribution<int64_t> dist(0, std::max<int64_t>(max_jitter.count() - 1, 0));
  return NextRotationUnix(issued_unix, expires_unix, std::chrono::milliseconds(dist(rng)));
}

void TokenVolumes::ScheduleNext(v1::TokenProjection& projection) {
  if (projection.token_source() != kSourceWisp) return;  // kubelet tokens: refreshed by republish
  scheduler_.Schedule(projection.volume_id(), projection.next_rotation_unix());
}

absl::Status TokenVolumes::Recover() {
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

// ---- Publish and unpublish ---------------------------------------------------------------------

absl::Status TokenVolumes::WriteToken(const v1::TokenProjection& projection,
                                      const std::string& token) {
  fsutil::AtomicWriter writer(projection.target_path(), clock_);
  const int64_t uid = projection.has_file_uid() ? int64_t{projection.file_uid()} : -1;
  const int64_t gid = projection.has_file_gid() ? int64_t{projection.file_gid()} : -1;
  fsutil::Payload payload;
  payload[projection.path()] = fsutil::FileProjection{token, projection.file_mode(), uid, gid};
  for (const auto& [name, content] : projection.extra_files()) {
    // No secret in these, but the same owner; readable by the group and others unless owned.
    payload[name] =
        fsutil::FileProjection{content, uid >= 0 ? projection.file_mode() : 0644u, uid, gid};
  }
  auto changed = writer.Write(payload);
  return changed.ok() ? absl::OkStatus() : Annotate(changed.status(), "writing token");
}

absl::Status TokenVolumes::Publish(const ::csi::v1::NodePublishVolumeRequest& request) {
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
        // The file as this request asks for it (mode, owner, files beside it), as a first
        // publish would write it.
        v1::TokenProjection updated = *existing;
        updated.set_file_mode(spec.file_mode);
        if (spec.file_uid) {
          updated.set_file_uid(*spec.file_uid);
        } else {
          updated.clear_file_uid();
        }
        if (spec.file_gid) {
          updated.set_file_gid(*spec.file_gid);
        } else {
          updated.clear_file_gid();
        }
        updated.clear_extra_files();
        for (const auto& [name, content] : spec.extra_files)
          (*updated.mutable_extra_files())[name] = content;
        WISP_RETURN_IF_ERROR(WriteToken(updated, kubelet_token->token));
        updated.set_expires_unix(kubelet_token->expires_unix);
        // Stored when the expiry or the file's shape changed, not for every republish.
        const bool changed =
            !google::protobuf::util::MessageDifferencer::Equals(updated, *existing);
        updated.set_issued_unix(clock_.NowUnixSeconds());
        if (changed) {
          WISP_RETURN_IF_ERROR(store_.Put(updated));
          std::lock_guard lock(mu_);
          tokens_[id] = updated;
        }
      } else if (existing->next_rotation_unix() <= clock_.NowUnixSeconds() ||
                 !PathExists(target + "/" + existing->path())) {
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
    RemoveTarget(mounter_, target, /*token_volume=*/true).IgnoreError();
  };
  v1::TokenProjection projection;
  projection.set_volume_id(id);
  projection.set_node(options_.node_id);
  projection.set_target_path(target);
  *projection.mutable_subject() = spec.subject;
  projection.set_audience(spec.audience);
  projection.set_expiration_seconds(spec.expiration_seconds);
  projection.set_path(spec.path);
  projection.set_file_mode(spec.file_mode);
  if (spec.file_uid) projection.set_file_uid(*spec.file_uid);
  if (spec.file_gid) projection.set_file_gid(*spec.file_gid);
  for (const auto& [name, content] : spec.extra_files)
    (*projection.mutable_extra_files())[name] = content;
  if (absl::Status st = WriteToken(projection, token.token); !st.ok()) {
    undo();
    return st;
  }
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

bool TokenVolumes::Holds(const std::string& volume_id, const std::string& target) {
  {
    std::lock_guard lock(mu_);
    auto it = tokens_.find(volume_id);
    if (it != tokens_.end() && it->second.target_path() == target) return true;
  }
  auto stored = store_.Get(volume_id);
  return stored.ok() && stored->target_path() == target;
}

bool TokenVolumes::PublishedAt(const std::string& volume_id, const std::string& path) const {
  std::lock_guard lock(mu_);
  auto it = tokens_.find(volume_id);
  return it != tokens_.end() && it->second.target_path() == path;
}

absl::Status TokenVolumes::Unpublish(const std::string& volume_id, const std::string& target) {
  scheduler_.Cancel(volume_id);
  WISP_RETURN_IF_ERROR(ClearTarget(mounter_, target, /*token_volume=*/true));
  WISP_RETURN_IF_ERROR(store_.Delete(volume_id));
  {
    std::lock_guard lock(mu_);
    tokens_.erase(volume_id);
    proofs_.erase(volume_id);
  }
  UpdateGauge();
  SPDLOG_LOGGER_INFO(logger_, "unpublished token volume at {}", target);
  return absl::OkStatus();
}

// ---- Rotation ---------------------------------------------------------------------------------

absl::Status TokenVolumes::RotateNow(const std::string& volume_id) {
  std::lock_guard volume_lock(locks_.For(volume_id));
  return RotateLocked(volume_id);
}

void TokenVolumes::RotateDue(const std::vector<std::string>& volume_ids) {
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
    std::lock_guard volume_lock(locks_.For(id));
    log::ScopedRequestId rid(id);
    FinishRotation(due[i], i < tokens.size() ? std::move(tokens[i])
                                             : absl::InternalError("issuer answered too few"))
        .IgnoreError();
  }
}

absl::StatusOr<TokenVolumes::Rotation> TokenVolumes::PrepareRotation(const std::string& volume_id) {
  Rotation r;
  std::lock_guard lock(mu_);
  auto it = tokens_.find(volume_id);
  if (it == tokens_.end()) return absl::NotFoundError("no token volume " + volume_id);
  r.projection = it->second;
  if (auto p = proofs_.find(volume_id); p != proofs_.end()) r.proof = p->second;
  r.from_wisp = r.projection.token_source() == kSourceWisp;
  return r;
}

absl::Status TokenVolumes::RotateLocked(const std::string& volume_id) {
  WISP_ASSIGN_OR_RETURN(Rotation r, PrepareRotation(volume_id));
  if (!r.from_wisp) return absl::OkStatus();
  log::ScopedRequestId rid(volume_id);
  const auto& p = r.projection;
  return FinishRotation(r,
                        issuer_.Issue(p.subject(), p.audience(), p.expiration_seconds(), r.proof));
}

absl::Status TokenVolumes::FinishRotation(const Rotation& asked,
                                          absl::StatusOr<IssuedToken> token) {
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
  if (absl::Status st = WriteToken(projection, token->token); !st.ok()) {
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

}  // namespace wisp::gateway::csi
