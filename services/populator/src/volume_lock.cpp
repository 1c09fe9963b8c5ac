#include "volume_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace wisp::populator {

absl::StatusOr<VolumeLock> VolumeLock::TryAcquire(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError("creating " + dir + ": " + ec.message());
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError("opening " + dir + ": " + std::strerror(errno));
  VolumeLock lock(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(dir +
                                           " is being written by another worker on this node");
    }
    return absl::InternalError("locking " + dir + ": " + std::strerror(err));
  }
  return lock;
}

VolumeLock& VolumeLock::operator=(VolumeLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

VolumeLock::~VolumeLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor drops the flock
}

}  // namespace wisp::populator
