#pragma once
// TokenFile: the pod's projected service-account token, re-read when kubelet replaces it.
//
// Contract: Read() returns the trimmed content of `path`. kubelet's AtomicWriter publishes a new
// token by swapping the ..data symlink, so `path` (token -> ..data/token) resolves to a new file:
// Read() stats the resolved file each call and re-reads it when its inode, size or mtime changed.
// A missing, empty or unreadable file is FailedPrecondition naming the path (never the content).
//
//   TokenFile file("/var/run/secrets/wisp/token");
//   WISP_ASSIGN_OR_RETURN(std::string jwt, file.Read());
#include <cstdint>
#include <mutex>
#include <string>

#include "wisp/status/status.hpp"

namespace wisp::sidecar {

class TokenFile {
 public:
  explicit TokenFile(std::string path) : path_(std::move(path)) {}
  absl::StatusOr<std::string> Read();
  const std::string& path() const { return path_; }
  // How many times the file content was (re)loaded; for tests and logs.
  int loads() const;

 private:
  const std::string path_;
  mutable std::mutex mu_;
  uint64_t inode_ = 0;
  int64_t size_ = -1;
  int64_t mtime_ns_ = 0;
  std::string content_;
  int loads_ = 0;
};

}  // namespace wisp::sidecar
