#include "wisp/fsutil/mounter.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "errno_status.hpp"

namespace wisp::fsutil {
namespace {

// Undoes the octal escapes of /proc/self/mountinfo (space, tab, newline, backslash).
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

absl::StatusOr<bool> InMountInfo(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return absl::InternalError("cannot read /proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, devno, root, mount_point;
    if (!(fields >> id >> parent >> devno >> root >> mount_point)) continue;
    if (Unescape(mount_point) == path) return true;
  }
  return false;
}

}  // namespace

absl::Status SystemMounter::MountTmpfs(const std::string& target, uint64_t size_bytes,
                                       uint32_t mode) {
  char options[64];
  std::snprintf(options, sizeof(options), "size=%llu,mode=%04o",
                static_cast<unsigned long long>(size_bytes), mode & 07777);
  if (::mount("tmpfs", target.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) != 0) {
    return ErrnoStatus("mount tmpfs on " + target, errno);
  }
  return absl::OkStatus();
}

absl::Status SystemMounter::BindMount(const std::string& source, const std::string& target,
                                      bool read_only) {
  if (::mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return ErrnoStatus("bind mount " + source + " on " + target, errno);
  }
  if (read_only) {
    // A bind mount ignores MS_RDONLY on the first call; the read-only flag needs a remount.
    if (::mount(nullptr, target.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
      const int err = errno;
      ::umount2(target.c_str(), MNT_DETACH);
      return ErrnoStatus("remount read-only " + target, err);
    }
  }
  return absl::OkStatus();
}

absl::Status SystemMounter::Unmount(const std::string& target) {
  if (::umount2(target.c_str(), UMOUNT_NOFOLLOW) == 0) return absl::OkStatus();
  const int err = errno;
  if (err == EINVAL || err == ENOENT) return absl::OkStatus();  // not a mount point
  return ErrnoStatus("unmount " + target, err);
}

absl::StatusOr<bool> SystemMounter::IsMountPoint(const std::string& path) {
  struct statx stx;
  if (::statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &stx) != 0) {
    return ErrnoStatus("stat " + path, errno);
  }
  if (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) {
    return (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
  }
  return InMountInfo(path);  // kernels before 5.8
}

}  // namespace wisp::fsutil
