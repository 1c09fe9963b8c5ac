#include "token_file.hpp"

#include <sys/stat.h>

#include "wisp/fsutil/read_file.hpp"

namespace wisp::sidecar {

int TokenFile::loads() const {
  std::lock_guard lock(mu_);
  return loads_;
}

absl::StatusOr<std::string> TokenFile::Read() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    return absl::FailedPreconditionError("token file " + path_ + " cannot be read");
  }
  const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  std::lock_guard lock(mu_);
  if (loads_ > 0 && st.st_ino == inode_ && st.st_size == size_ && mtime_ns == mtime_ns_) {
    return content_;
  }
  auto read = fsutil::ReadFile(path_);
  if (!read.ok()) {
    return absl::FailedPreconditionError("token file " + std::string(read.status().message()));
  }
  std::string text = *std::move(read);
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!text.empty() && ws(text.back())) text.pop_back();
  size_t start = 0;
  while (start < text.size() && ws(text[start])) ++start;
  text.erase(0, start);
  if (text.empty()) return absl::FailedPreconditionError("token file " + path_ + " is empty");
  content_ = std::move(text);
  inode_ = st.st_ino;
  size_ = st.st_size;
  mtime_ns_ = mtime_ns;
  ++loads_;
  return content_;
}

}  // namespace wisp::sidecar
