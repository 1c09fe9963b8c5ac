#include "csi/bind_volumes.hpp"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include "csi/target_dir.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/fsutil/path_safety.hpp"
#include "wisp/log/log.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::gateway::csi {
namespace {

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

BindVolumes::BindVolumes(NodeOptions options, bus::Requester& requester, fsutil::Mounter& mounter)
    : options_(std::move(options)),
      requester_(requester),
      mounter_(mounter),
      logger_(log::Get("csi-node")) {}

absl::Status BindVolumes::Publish(const ::csi::v1::NodePublishVolumeRequest& request,
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

absl::Status BindVolumes::Unpublish(const std::string& target) {
  WISP_RETURN_IF_ERROR(ClearTarget(mounter_, target, /*token_volume=*/false));
  std::lock_guard lock(mu_);
  binds_.erase(target);
  return absl::OkStatus();
}

bool BindVolumes::Holds(const std::string& volume_id, const std::string& path) {
  {
    std::lock_guard lock(mu_);
    if (auto it = binds_.find(path); it != binds_.end() && it->second.volume_id == volume_id) {
      return true;
    }
  }
  return Adopt(volume_id, path);
}

bool BindVolumes::Adopt(const std::string& volume_id, const std::string& path) {
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

}  // namespace wisp::gateway::csi
