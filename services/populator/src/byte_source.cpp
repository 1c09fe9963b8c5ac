#include "byte_source.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace wisp::populator {

absl::StatusOr<size_t> ReadFull(ByteSource& source, uint8_t* buf, size_t n) {
  size_t total = 0;
  while (total < n) {
    WISP_ASSIGN_OR_RETURN(size_t got, source.Read(buf + total, n - total));
    if (got == 0) break;
    total += got;
  }
  return total;
}

absl::StatusOr<size_t> PrefixedSource::Read(uint8_t* buf, size_t n) {
  if (pos_ < prefix_.size()) {
    size_t take = std::min(n, prefix_.size() - pos_);
    std::memcpy(buf, prefix_.data() + pos_, take);
    pos_ += take;
    return take;
  }
  return inner_.Read(buf, n);
}

absl::StatusOr<std::unique_ptr<FileSource>> FileSource::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string msg = "opening " + path + ": " + std::strerror(err);
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InternalError(msg);
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<FileSource>(new FileSource(fd, path));
}

FileSource::~FileSource() { ::close(fd_); }

absl::StatusOr<size_t> FileSource::Read(uint8_t* buf, size_t n) {
  for (;;) {
    ssize_t got = ::read(fd_, buf, n);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno == EINTR) continue;
    return absl::InternalError("reading " + path_ + ": " + std::strerror(errno));
  }
}

}  // namespace wisp::populator
