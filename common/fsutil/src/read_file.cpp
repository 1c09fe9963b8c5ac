#include "wisp/fsutil/read_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "errno_status.hpp"

namespace wisp::fsutil {

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  if (path.empty()) return absl::InvalidArgumentError("file path is empty");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(path, errno);
  std::string data;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(path, err);  // EISDIR for a directory
    }
    if (n == 0) break;
    if (data.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      return absl::OutOfRangeError(path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

absl::StatusOr<std::string> ReadTrimmedFile(const std::string& path, size_t max_bytes) {
  WISP_ASSIGN_OR_RETURN(std::string text, ReadFile(path, max_bytes));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' ||
                           text.back() == '\t')) {
    text.pop_back();
  }
  return text;
}

}  // namespace wisp::fsutil
