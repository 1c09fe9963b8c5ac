#include "wisp/fsutil/mounter.hpp"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

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

namespace {

constexpr unsigned kLoopMajor = 7;

// Closes a file descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string LoopDeviceOf(dev_t rdev) {
  if (major(rdev) != kLoopMajor) return "";
  return "/dev/loop" + std::to_string(minor(rdev));
}

absl::StatusOr<std::string> SystemMounter::AttachLoop(const std::string& file, bool read_only) {
  const int mode = (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
  Fd backing{::open(file.c_str(), mode)};
  if (backing.fd < 0) return ErrnoStatus("open " + file, errno);
  Fd control{::open("/dev/loop-control", O_RDWR | O_CLOEXEC)};
  if (control.fd < 0) return ErrnoStatus("open /dev/loop-control", errno);
  // Another process may take the free device between GET_FREE and CONFIGURE: try the next one.
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int n = ::ioctl(control.fd, LOOP_CTL_GET_FREE);
    if (n < 0) return ErrnoStatus("finding a free loop device", errno);
    const std::string device = "/dev/loop" + std::to_string(n);
    Fd loop{::open(device.c_str(), mode)};
    if (loop.fd < 0 && errno == ENOENT) {
      // A container's /dev may lack the node the kernel just made: make it.
      if (::mknod(device.c_str(), S_IFBLK | 0660, makedev(kLoopMajor, n)) != 0 && errno != EEXIST) {
        return ErrnoStatus("mknod " + device, errno);
      }
      loop.fd = ::open(device.c_str(), mode);
    }
    if (loop.fd < 0) return ErrnoStatus("open " + device, errno);
    loop_info64 info{};
    info.lo_flags = read_only ? LO_FLAGS_READ_ONLY : 0;
    std::strncpy(reinterpret_cast<char*>(info.lo_file_name), file.c_str(), LO_NAME_SIZE - 1);
    if (::ioctl(loop.fd, LOOP_SET_FD, backing.fd) != 0) {
      if (errno == EBUSY) continue;
      return ErrnoStatus("attaching " + file + " to " + device, errno);
    }
    if (::ioctl(loop.fd, LOOP_SET_STATUS64, &info) != 0) {
      const int err = errno;
      ::ioctl(loop.fd, LOOP_CLR_FD, 0);
      return ErrnoStatus("setting up " + device + " for " + file, err);
    }
    return device;
  }
  return absl::UnavailableError("no free loop device for " + file + " after 16 tries");
}

absl::Status SystemMounter::DetachLoop(const std::string& device) {
  Fd loop{::open(device.c_str(), O_RDONLY | O_CLOEXEC)};
  if (loop.fd < 0) {
    if (errno == ENOENT || errno == ENXIO) return absl::OkStatus();
    return ErrnoStatus("open " + device, errno);
  }
  if (::ioctl(loop.fd, LOOP_CLR_FD, 0) != 0 && errno != ENXIO) {
    return ErrnoStatus("detaching " + device, errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SystemMounter::LoopBackingFile(const std::string& device) {
  const std::string name = device.substr(device.rfind('/') + 1);
  std::ifstream in("/sys/block/" + name + "/loop/backing_file");
  if (!in) return std::string();  // nothing attached (the loop directory exists only then)
  std::string file;
  std::getline(in, file);
  return file;
}

}  // namespace wisp::fsutil
