#include "csi/target_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace wisp::gateway::csi {

bool PathExists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

absl::Status PrepareTarget(const std::string& target) {
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

absl::Status RemoveTarget(fsutil::Mounter& mounter, const std::string& target, bool token_volume) {
  if (!PathExists(target)) return absl::OkStatus();
  if (token_volume) {
    // Only our token files can be left here (the tmpfs is gone); never recurse through a mount.
    auto mounted = mounter.IsMountPoint(target);
    if (mounted.ok() && *mounted) {
      return absl::FailedPreconditionError("target_path " + target + " is still mounted");
    }
    std::error_code ec;
    std::filesystem::remove_all(target, ec);
    if (ec) return absl::InternalError("removing " + target + ": " + ec.message());
    return absl::OkStatus();
  }
  struct stat st;
  if (::lstat(target.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    // A block publication's target: the file its device was mounted on.
    if (::unlink(target.c_str()) != 0 && errno != ENOENT) {
      return absl::FailedPreconditionError("removing target_path " + target + ": " +
                                           std::strerror(errno));
    }
    return absl::OkStatus();
  }
  if (::rmdir(target.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError("removing target_path " + target + ": " +
                                         std::strerror(errno));
  }
  return absl::OkStatus();
}

absl::Status ClearTarget(fsutil::Mounter& mounter, const std::string& target, bool token_volume) {
  if (!PathExists(target)) return absl::OkStatus();
  for (int i = 0; i < 8; ++i) {  // stacked mounts come off one at a time
    auto mounted = mounter.IsMountPoint(target);
    if (!mounted.ok()) {
      if (mounted.status().code() == absl::StatusCode::kNotFound) break;
      return mounted.status();
    }
    if (!*mounted) break;
    WISP_RETURN_IF_ERROR(mounter.Unmount(target));
  }
  return RemoveTarget(mounter, target, token_volume);
}

}  // namespace wisp::gateway::csi
