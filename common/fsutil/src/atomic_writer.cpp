#include "wisp/fsutil/atomic_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>
#include <vector>

#include "wisp/fsutil/path_safety.hpp"

namespace wisp::fsutil {
namespace fs = std::filesystem;
namespace {

absl::Status ErrnoError(const std::string& what) {
  return absl::InternalError(what + ": " + std::strerror(errno));
}

// Reads one of our projected files and its mode, never through a link; NotFound when it does not
// exist.
absl::StatusOr<std::string> ReadProjectedFile(const std::string& path, uint32_t* mode,
                                              struct stat* owner = nullptr) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(path);
    return ErrnoError("open " + path);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return ErrnoError("stat " + path);
  }
  *mode = st.st_mode & 07777;
  if (owner != nullptr) *owner = st;
  std::string data;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return ErrnoError("read " + path);
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

absl::Status WriteFile(const std::string& path, const FileProjection& file) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                  file.mode & 07777);
  if (fd < 0) return ErrnoError("create " + path);
  size_t off = 0;
  while (off < file.data.size()) {
    ssize_t n = ::write(fd, file.data.data() + off, file.data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status st = ErrnoError("write " + path);
      ::close(fd);
      return st;
    }
    off += static_cast<size_t>(n);
  }
  if (file.uid >= 0 || file.gid >= 0) {
    // Before the mode: chown clears set-id bits.
    if (::fchown(fd, file.uid >= 0 ? static_cast<uid_t>(file.uid) : static_cast<uid_t>(-1),
                 file.gid >= 0 ? static_cast<gid_t>(file.gid) : static_cast<gid_t>(-1)) != 0) {
      absl::Status st = ErrnoError("chown " + path);
      ::close(fd);
      return st;
    }
  }
  // The umask may have narrowed the create mode; the payload's mode is the truth.
  if (::fchmod(fd, file.mode & 07777) != 0) {
    absl::Status st = ErrnoError("chmod " + path);
    ::close(fd);
    return st;
  }
  if (::close(fd) != 0) return ErrnoError("close " + path);
  return absl::OkStatus();
}

std::string TimestampPrefix(const Clock& clock) {
  const std::time_t t = std::chrono::system_clock::to_time_t(clock.Now());
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "..%Y_%m_%d_%H_%M_%S.", &tm);
  return buf;
}

}  // namespace

absl::Status ValidatePath(std::string_view path) {
  const std::string p(path);
  if (path.empty()) return absl::InvalidArgumentError("invalid path: must not be empty: \"\"");
  if (path.front() == '/') {
    return absl::InvalidArgumentError("invalid path: must be relative path: " + p);
  }
  if (path.size() > kMaxPathLength) {
    return absl::InvalidArgumentError(
        "invalid path: must be less than or equal to 4096 characters");
  }
  std::vector<std::string_view> items = SplitPath(path);
  for (std::string_view item : items) {
    if (item == "..") {
      return absl::InvalidArgumentError("invalid path: must not contain '..': " + p);
    }
    if (item.size() > kMaxFileNameLength) {
      return absl::InvalidArgumentError(
          "invalid path: filenames must be less than or equal to 255 characters");
    }
  }
  if (!items.empty() && items.front().size() > 2 && items.front().substr(0, 2) == "..") {
    return absl::InvalidArgumentError("invalid path: must not start with '..': " + p);
  }
  if (path.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("invalid path: must not contain NUL bytes");
  }
  return absl::OkStatus();
}

AtomicWriter::AtomicWriter(std::string target_dir, const Clock& clock)
    : target_dir_(std::move(target_dir)), clock_(clock) {}

absl::StatusOr<std::string> AtomicWriter::CurrentDataDir() const {
  const std::string link = target_dir_ + "/" + std::string(kDataDirName);
  char buf[4096];
  ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  if (n < 0) {
    if (errno == ENOENT) return std::string();
    return ErrnoError("readlink " + link);
  }
  return std::string(buf, static_cast<size_t>(n));
}

absl::StatusOr<bool> AtomicWriter::Write(const Payload& payload) {
  // (1) Validate and clean every key before touching the disk.
  Payload clean;
  for (const auto& [key, file] : payload) {
    WISP_RETURN_IF_ERROR(ValidatePath(key));
    clean[CleanPath(key)] = file;
  }

  // (2) Find the current timestamped directory.
  WISP_ASSIGN_OR_RETURN(std::string old_ts_name, CurrentDataDir());
  const std::string old_ts_dir = old_ts_name.empty() ? "" : target_dir_ + "/" + old_ts_name;

  // (3) Paths in the old directory that the new payload does not keep.
  std::set<std::string> to_remove;
  std::error_code ec;
  if (!old_ts_dir.empty() && fs::is_directory(old_ts_dir, ec)) {
    for (auto it = fs::recursive_directory_iterator(old_ts_dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      to_remove.insert(fs::relative(it->path(), old_ts_dir, ec).string());
    }
    if (ec) return absl::InternalError("walking " + old_ts_dir + ": " + ec.message());
  }
  for (const auto& [key, file] : clean) {
    // Keep the file and each of its parent directories.
    std::string sub = key;
    while (!sub.empty()) {
      to_remove.erase(sub);
      size_t slash = sub.rfind('/');
      sub = slash == std::string::npos ? "" : sub.substr(0, slash);
    }
  }

  // (4) Nothing changed: only make sure the visible symlinks exist.
  bool changed = old_ts_dir.empty() || !to_remove.empty();
  if (!changed) {
    for (const auto& [key, file] : clean) {
      uint32_t mode = 0;
      struct stat owner {};
      auto existing = ReadProjectedFile(old_ts_dir + "/" + key, &mode, &owner);
      if (!existing.ok() || *existing != file.data || mode != (file.mode & 07777) ||
          (file.uid >= 0 && owner.st_uid != static_cast<uid_t>(file.uid)) ||
          (file.gid >= 0 && owner.st_gid != static_cast<gid_t>(file.gid))) {
        changed = true;
        break;
      }
    }
  }

  if (changed) {
    // (5) New timestamped directory, 0755 whatever the umask.
    std::string tmpl = target_dir_ + "/" + TimestampPrefix(clock_) + "XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoError("mkdtemp in " + target_dir_);
    const std::string ts_dir = tmpl;
    const std::string ts_name = ts_dir.substr(target_dir_.size() + 1);
    auto cleanup = [&ts_dir] {
      std::error_code ignore;
      fs::remove_all(ts_dir, ignore);
    };
    if (::chmod(ts_dir.c_str(), 0755) != 0) {
      absl::Status st = ErrnoError("chmod " + ts_dir);
      cleanup();
      return st;
    }

    // (6) Files, with their parents.
    for (const auto& [key, file] : clean) {
      const std::string path = ts_dir + "/" + key;
      const size_t slash = key.rfind('/');
      if (slash != std::string::npos) {
        fs::create_directories(ts_dir + "/" + key.substr(0, slash), ec);
        if (ec) {
          cleanup();
          return absl::InternalError("mkdir for " + path + ": " + ec.message());
        }
      }
      if (absl::Status st = WriteFile(path, file); !st.ok()) {
        cleanup();
        return st;
      }
    }

    // (8) ..data_tmp -> new dir (a leftover from a crash is replaced), (9) renamed over ..data.
    const std::string tmp_link = target_dir_ + "/" + std::string(kNewDataDirName);
    const std::string data_link = target_dir_ + "/" + std::string(kDataDirName);
    ::unlink(tmp_link.c_str());
    if (::symlink(ts_name.c_str(), tmp_link.c_str()) != 0) {
      absl::Status st = ErrnoError("symlink " + tmp_link);
      cleanup();
      return st;
    }
    if (::rename(tmp_link.c_str(), data_link.c_str()) != 0) {
      absl::Status st = ErrnoError("rename " + tmp_link + " to " + data_link);
      ::unlink(tmp_link.c_str());
      cleanup();
      return st;
    }
  }

  // (10) Visible relative symlinks for top-level entries: <name> -> ..data/<name>.
  std::set<std::string> top_level;
  for (const auto& [key, file] : clean) top_level.insert(key.substr(0, key.find('/')));
  for (const std::string& name : top_level) {
    const std::string visible = target_dir_ + "/" + name;
    struct stat st;
    if (::lstat(visible.c_str(), &st) == 0) continue;
    const std::string dest = std::string(kDataDirName) + "/" + name;
    if (::symlink(dest.c_str(), visible.c_str()) != 0) return ErrnoError("symlink " + visible);
  }

  if (changed) {
    // (11) Stale visible paths (top level only; deeper ones vanish with the old directory).
    for (const std::string& rel : to_remove) {
      if (rel.find('/') != std::string::npos) continue;
      const std::string visible = target_dir_ + "/" + rel;
      if (::unlink(visible.c_str()) != 0 && errno != ENOENT) {
        return ErrnoError("remove " + visible);
      }
    }
    // (12) The old timestamped directory.
    if (!old_ts_dir.empty()) {
      fs::remove_all(old_ts_dir, ec);
      if (ec) return absl::InternalError("removing " + old_ts_dir + ": " + ec.message());
    }
  }
  return changed;
}

}  // namespace wisp::fsutil
