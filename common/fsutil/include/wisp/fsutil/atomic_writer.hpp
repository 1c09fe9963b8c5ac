#pragma once
// AtomicWriter: publishes a set of files into a directory so that a reader sees either the whole
// old set or the whole new set, never a partial or mixed one (the kubelet AtomicWriter algorithm,
// as used for secret, configMap and projected volumes, and for wisp's CSI token volumes).
//
// Layout inside the target directory:
//   ..2026_12_02_15_04_05.123456/   the current timestamped data directory (mode 0755)
//   ..data -> ..2026_12_02_15_04_05.123456    swapped atomically by rename(2) of ..data_tmp
//   token -> ..data/token                     user-visible relative symlinks, top level only
//
// Contract:
//   - Write() validates every payload key (ValidatePath: relative, no "..", length limits) and
//     fails with InvalidArgument before touching the disk.
//   - When every file already holds the same bytes, mode and owner, nothing is rewritten (visible
//     symlinks are still ensured) and Write() returns false; otherwise it returns true.
//   - Files get exactly `mode` (chmod after write, so the umask has no say), and the owner
//     `uid`/`gid` when set (the writer must be allowed to chown: root, or CAP_CHOWN).
//   - Paths present in the old data directory but absent from the new payload disappear.
//   - One writer per target directory at a time (callers serialise); any number of readers.
//   - Consumers may watch the ..data symlink (inotify) to detect updates.
//
// Example:
//   fsutil::AtomicWriter writer("/var/lib/kubelet/pods/<uid>/volumes/.../mount", clock);
//   WISP_ASSIGN_OR_RETURN(bool changed, writer.Write({{"token", {jwt, 0644}}}));
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "wisp/status/clock.hpp"
#include "wisp/status/status.hpp"

namespace wisp::fsutil {

inline constexpr std::string_view kDataDirName = "..data";
inline constexpr std::string_view kNewDataDirName = "..data_tmp";
inline constexpr size_t kMaxFileNameLength = 255;
inline constexpr size_t kMaxPathLength = 4096;

struct FileProjection {
  std::string data;
  uint32_t mode = 0644;
  // Owner (chown after write, before the mode is set); -1 leaves the writer's own.
  int64_t uid = -1;
  int64_t gid = -1;
};

// Keys are relative paths ("token", "certs/ca.crt").
using Payload = std::map<std::string, FileProjection>;

// Checks one payload key with kubelet's rules and messages, e.g.
// "invalid path: must not contain '..': a/../b".
absl::Status ValidatePath(std::string_view path);

class AtomicWriter {
 public:
  // `target_dir` must exist; `clock` names the timestamped directories.
  AtomicWriter(std::string target_dir, const Clock& clock);

  // Publishes `payload`; true when the content changed on disk.
  absl::StatusOr<bool> Write(const Payload& payload);

  // The timestamped directory ..data points at ("" before the first write).
  absl::StatusOr<std::string> CurrentDataDir() const;

  const std::string& target_dir() const { return target_dir_; }

 private:
  std::string target_dir_;
  const Clock& clock_;
};

}  // namespace wisp::fsutil
