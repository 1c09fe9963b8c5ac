#pragma once
// Mounter: the mount (and loop device) operations wisp's CSI node service needs, behind an
// interface so the handlers are unit-tested with FakeMounter
// (testing/wisp/fsutil/testing/fake_mounter.hpp) and run against mount(2) in production
// (SystemMounter, needs CAP_SYS_ADMIN).
//
// Contract:
//   - Every call is idempotent where that makes sense: Unmount of a path that is not a mount point
//     is OK; mounting onto a path that is already a mount point is the caller's decision (check
//     IsMountPoint first).
//   - Errors carry the errno text and the path: "mount tmpfs on /x: Operation not permitted".
//
// Example:
//   fsutil::SystemMounter mounter;
//   WISP_ASSIGN_OR_RETURN(bool mounted, mounter.IsMountPoint(target));
//   if (!mounted) WISP_RETURN_IF_ERROR(mounter.MountTmpfs(target, 1 << 20, 0755));
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "wisp/status/status.hpp"

namespace wisp::fsutil {

class Mounter {
 public:
  virtual ~Mounter() = default;
  // A tmpfs of `size_bytes` with root directory mode `mode` (nosuid, nodev, noexec).
  virtual absl::Status MountTmpfs(const std::string& target, uint64_t size_bytes,
                                  uint32_t mode) = 0;
  // Bind-mounts `source` onto `target`, read-only when asked (bind, then remount ro).
  virtual absl::Status BindMount(const std::string& source, const std::string& target,
                                 bool read_only) = 0;
  // Unmounts `target`; OK when it is not a mount point.
  virtual absl::Status Unmount(const std::string& target) = 0;
  // True when `path` is the root of a mount (bind mounts of the same filesystem included).
  // NotFound when `path` does not exist.
  virtual absl::StatusOr<bool> IsMountPoint(const std::string& path) = 0;
  // Attaches `file` to a free loop device (read-only when asked; direct I/O off, no autoclear)
  // and returns the device's path, /dev/loopN.
  virtual absl::StatusOr<std::string> AttachLoop(const std::string& file, bool read_only) = 0;
  // Detaches loop device `device`; OK when nothing is attached to it.
  virtual absl::Status DetachLoop(const std::string& device) = 0;
  // The file loop device `device` is attached to; "" when none.
  virtual absl::StatusOr<std::string> LoopBackingFile(const std::string& device) = 0;
};

// mount(2)/umount2(2).
class SystemMounter final : public Mounter {
 public:
  absl::Status MountTmpfs(const std::string& target, uint64_t size_bytes, uint32_t mode) override;
  absl::Status BindMount(const std::string& source, const std::string& target,
                         bool read_only) override;
  absl::Status Unmount(const std::string& target) override;
  absl::StatusOr<bool> IsMountPoint(const std::string& path) override;
  absl::StatusOr<std::string> AttachLoop(const std::string& file, bool read_only) override;
  absl::Status DetachLoop(const std::string& device) override;
  absl::StatusOr<std::string> LoopBackingFile(const std::string& device) override;
};

// "/dev/loopN" for a block device number of the loop driver (major 7), "" for any other.
std::string LoopDeviceOf(dev_t rdev);

}  // namespace wisp::fsutil
