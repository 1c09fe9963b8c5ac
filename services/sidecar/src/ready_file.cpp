#include "ready_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "token_server.hpp"
#include "wisp/fsutil/read_file.hpp"

namespace wisp::sidecar {

absl::Status ReadyFile::Publish(std::chrono::system_clock::time_point expiry) const {
  const std::string line =
      std::to_string(
          std::chrono::duration_cast<std::chrono::seconds>(expiry.time_since_epoch()).count()) +
      "\n";
  const std::string tmp = path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError("ready file " + tmp + ": " + std::strerror(errno));
  }
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::fchmod(fd, 0644);  // whatever the umask
  ::close(fd);
  if (!written || std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return absl::UnavailableError("ready file " + path_ + ": " + why);
  }
  return absl::OkStatus();
}

void ReadyFile::Clear() const { ::unlink(path_.c_str()); }

absl::Status CheckReady(const std::string& path, std::chrono::system_clock::time_point now) {
  absl::StatusOr<std::string> read = fsutil::ReadTrimmedFile(path, 64);
  if (absl::IsNotFound(read.status())) {
    return absl::FailedPreconditionError("no token yet (" + path + " does not exist)");
  }
  if (!read.ok()) return absl::InvalidArgumentError(std::string(read.status().message()));
  const std::string& text = *read;
  long long seconds = 0;
  size_t used = 0;
  try {
    seconds = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    return absl::InvalidArgumentError(path + ": not an expiry in Unix seconds");
  }
  const std::chrono::system_clock::time_point expiry{std::chrono::seconds(seconds)};
  if (expiry <= now) {
    return absl::FailedPreconditionError("the token expired at " + FormatRfc3339Nano(expiry));
  }
  return absl::OkStatus();
}

}  // namespace wisp::sidecar
