#pragma once
// ErrnoStatus: one mapping of a failed system call's errno to a Status code for fsutil's
// functions (Mounter, ReadFile), so the same failure has the same code whichever one met it.
//
// Contract: ENOENT and ENOTDIR are NotFound, EPERM and EACCES PermissionDenied, EBUSY and EISDIR
// FailedPrecondition, anything else Internal. The message is "<what>: <strerror(err)>".
//
// Example:
//   if (::umount2(target.c_str(), 0) != 0) return ErrnoStatus("unmount " + target, errno);
#include <cerrno>
#include <cstring>
#include <string>

#include "wisp/status/status.hpp"

namespace wisp::fsutil {

inline absl::Status ErrnoStatus(const std::string& what, int err) {
  const std::string msg = what + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EPERM:
    case EACCES:
      return absl::PermissionDeniedError(msg);
    case EBUSY:
    case EISDIR:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace wisp::fsutil
