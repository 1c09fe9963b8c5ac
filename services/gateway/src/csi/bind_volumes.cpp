#include "csi/bind_volumes.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

  if (request.volume_capability().has_block()) {
    return PublishBlock(id, volume.path() + "/" + kImageName, target, read_only);
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
      binds_[target] = BindState{id, read_only, ""};
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
  binds_[target] = BindState{id, read_only, ""};
  SPDLOG_LOGGER_INFO(logger_, "bind-mounted {} on {}{}", volume.path(), target,
                     read_only ? " (read-only)" : "");
  return absl::OkStatus();
}

absl::Status BindVolumes::PublishBlock(const std::string& id, const std::string& image,
                                       const std::string& target, bool read_only) {
  struct stat st;
  if (::stat(image.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::NotFoundError("volume " + id + " has no " + kImageName +
                               " on this node: " + image);
  }
  if (PathExists(target)) {
    WISP_ASSIGN_OR_RETURN(bool mounted, mounter_.IsMountPoint(target));
    if (mounted) {
      std::lock_guard lock(mu_);
      auto it = binds_.find(target);
      if (it != binds_.end() && it->second.volume_id != id) {
        return absl::AlreadyExistsError("target_path " + target + " already holds volume " +
                                        it->second.volume_id);
      }
      if (it != binds_.end() && it->second.read_only != read_only) {
        return absl::AlreadyExistsError("volume " + id + " is already published at " + target +
                                        (it->second.read_only ? " read-only" : " read-write"));
      }
      if (it != binds_.end()) return absl::OkStatus();
    }
    if (mounted) {
      // From before a restart: ours only when it shows a loop device attached to this image.
      const std::string device = LoopDeviceAt(target);
      auto backing = device.empty() ? absl::StatusOr<std::string>(std::string())
                                    : mounter_.LoopBackingFile(device);
      if (!backing.ok() || *backing != image) {
        return absl::AlreadyExistsError("target_path " + target +
                                        " is a mount point that does not hold volume " + id);
      }
      std::lock_guard lock(mu_);
      binds_[target] = BindState{id, read_only, device};
      return absl::OkStatus();
    }
    if (::stat(target.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError("target_path " + target +
                                           " is a directory; a block volume needs a file there");
    }
  } else {
    // The CO makes the parent; the plugin makes the file the device is mounted on.
    const int fd = ::open(target.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) {
      return absl::InternalError("creating target_path " + target + ": " + std::strerror(errno));
    }
    if (fd >= 0) ::close(fd);
  }
  WISP_ASSIGN_OR_RETURN(std::string device, mounter_.AttachLoop(image, read_only));
  if (absl::Status s = mounter_.BindMount(device, target, read_only); !s.ok()) {
    (void)mounter_.DetachLoop(device);
    return s;
  }
  std::lock_guard lock(mu_);
  binds_[target] = BindState{id, read_only, device};
  SPDLOG_LOGGER_INFO(logger_, "attached {} to {} and bind-mounted it on {}{}", image, device,
                     target, read_only ? " (read-only)" : "");
  return absl::OkStatus();
}

std::string BindVolumes::LoopDeviceAt(const std::string& target) {
  struct stat st;
  if (::stat(target.c_str(), &st) != 0 || !S_ISBLK(st.st_mode)) return "";
  return fsutil::LoopDeviceOf(st.st_rdev);
}

absl::Status BindVolumes::Unpublish(const std::string& target) {
  // A block publication's device, known before the mount that shows it comes off.
  std::string device;
  {
    std::lock_guard lock(mu_);
    if (auto it = binds_.find(target); it != binds_.end()) device = it->second.loop_device;
  }
  if (device.empty()) device = LoopDeviceAt(target);
  WISP_RETURN_IF_ERROR(ClearTarget(mounter_, target, /*token_volume=*/false));
  if (!device.empty()) {
    WISP_RETURN_IF_ERROR(mounter_.DetachLoop(device));
    SPDLOG_LOGGER_INFO(logger_, "detached {} after unmounting {}", device, target);
  }
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
  if (const std::string device = LoopDeviceAt(path); !device.empty()) {
    auto backing = mounter_.LoopBackingFile(device);
    if (!backing.ok() || *backing != *dir + "/" + kImageName) return false;
    std::lock_guard lock(mu_);
    binds_[path] = BindState{volume_id, MountedReadOnly(path), device};
    return true;
  }
  if (!ShowsDirectory(path, *dir)) return false;
  std::lock_guard lock(mu_);
  binds_[path] = BindState{volume_id, MountedReadOnly(path), ""};
  return true;
}

}  // namespace wisp::gateway::csi
