#pragma once
// FakeMounter: an in-memory Mounter for unit tests. It records mounts instead of making them; the
// target directories stay ordinary directories, so files written "into the tmpfs" land on disk.
//
// Example:
//   fsutil::testing::FakeMounter mounter;
//   NodeService node(..., mounter, ...);
//   EXPECT_TRUE(mounter.IsMounted(target));
#include <map>
#include <mutex>
#include <string>
#include <sys/stat.h>
#include <utility>

#include "wisp/fsutil/mounter.hpp"

namespace wisp::fsutil::testing {

class FakeMounter final : public Mounter {
 public:
  struct Mount {
    std::string kind;    // "tmpfs" | "bind"
    std::string source;  // bind source
    bool read_only = false;
    uint64_t size_bytes = 0;
    uint32_t mode = 0;
  };

  absl::Status MountTmpfs(const std::string& target, uint64_t size_bytes, uint32_t mode) override {
    std::lock_guard lock(mu_);
    if (!fail_next_.ok()) return std::exchange(fail_next_, absl::OkStatus());
    mounts_[target] = Mount{"tmpfs", "", false, size_bytes, mode};
    ++mount_calls_;
    return absl::OkStatus();
  }
  absl::Status BindMount(const std::string& source, const std::string& target,
                         bool read_only) override {
    std::lock_guard lock(mu_);
    if (!fail_next_.ok()) return std::exchange(fail_next_, absl::OkStatus());
    mounts_[target] = Mount{"bind", source, read_only, 0, 0};
    ++mount_calls_;
    return absl::OkStatus();
  }
  absl::Status Unmount(const std::string& target) override {
    std::lock_guard lock(mu_);
    if (mounts_.erase(target) > 0) ++unmount_calls_;
    return absl::OkStatus();
  }
  absl::StatusOr<bool> IsMountPoint(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return absl::NotFoundError("no such path: " + path);
    std::lock_guard lock(mu_);
    return mounts_.count(path) > 0;
  }

  absl::StatusOr<std::string> AttachLoop(const std::string& file, bool read_only) override {
    std::lock_guard lock(mu_);
    if (!fail_next_.ok()) return std::exchange(fail_next_, absl::OkStatus());
    const std::string device = "/dev/loop" + std::to_string(100 + next_loop_++);
    loops_[device] = {file, read_only};
    return device;
  }
  absl::Status DetachLoop(const std::string& device) override {
    std::lock_guard lock(mu_);
    loops_.erase(device);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> LoopBackingFile(const std::string& device) override {
    std::lock_guard lock(mu_);
    auto it = loops_.find(device);
    return it == loops_.end() ? std::string() : it->second.first;
  }
  // Attached loop devices: device -> (file, read-only).
  std::map<std::string, std::pair<std::string, bool>> Loops() const {
    std::lock_guard lock(mu_);
    return loops_;
  }

  bool IsMounted(const std::string& path) const {
    std::lock_guard lock(mu_);
    return mounts_.count(path) > 0;
  }
  Mount Get(const std::string& path) const {
    std::lock_guard lock(mu_);
    auto it = mounts_.find(path);
    return it == mounts_.end() ? Mount{} : it->second;
  }
  size_t Count() const {
    std::lock_guard lock(mu_);
    return mounts_.size();
  }
  int mount_calls() const {
    std::lock_guard lock(mu_);
    return mount_calls_;
  }
  int unmount_calls() const {
    std::lock_guard lock(mu_);
    return unmount_calls_;
  }
  // The next mount call fails with `status`.
  void FailNextMount(absl::Status status) {
    std::lock_guard lock(mu_);
    fail_next_ = std::move(status);
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, Mount> mounts_;
  std::map<std::string, std::pair<std::string, bool>> loops_;
  int next_loop_ = 0;
  int mount_calls_ = 0;
  int unmount_calls_ = 0;
  absl::Status fail_next_ = absl::OkStatus();
};

static_assert(std::is_base_of_v<Mounter, FakeMounter>);

}  // namespace wisp::fsutil::testing
