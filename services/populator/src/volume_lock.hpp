#pragma once
// An exclusive lock on a volume's directory: one writer of a volume at a time on a node, among the
// populator's job workers, its upload sessions and any other populator process that shares the
// volume root. It is an flock(2) on the directory itself, so nothing appears inside the volume
// (which a pod may see through its bind mount), nothing is left to clean up, and the kernel drops
// it when its holder dies.
#include <string>

#include "absl/status/statusor.h"

namespace wisp::populator {

class VolumeLock {
 public:
  // Takes the lock on `dir`, creating the directory when it is missing. FailedPrecondition when
  // another holder has it (it is not waited for); Internal when the directory cannot be made,
  // opened or locked.
  static absl::StatusOr<VolumeLock> TryAcquire(const std::string& dir);

  VolumeLock(VolumeLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  VolumeLock& operator=(VolumeLock&& other) noexcept;
  VolumeLock(const VolumeLock&) = delete;
  VolumeLock& operator=(const VolumeLock&) = delete;
  ~VolumeLock();

 private:
  explicit VolumeLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace wisp::populator
