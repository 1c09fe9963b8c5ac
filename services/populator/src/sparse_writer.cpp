#include "sparse_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace wisp::populator {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  int err = errno;
  std::string msg = what + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

}  // namespace

bool IsZero(const uint8_t* p, size_t n) {
  auto word = [p](size_t at) {
    uint64_t v;
    std::memcpy(&v, p + at, 8);
    return v;
  };
  // Data fails on its first or last word almost always; zeros are OR-ed 128 bytes per test (one
  // branch per 8 vector loads: a 4 KiB zero block costs about as much as reading it).
  if (n >= 8 && (word(0) | word(n - 8)) != 0) return false;
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 128 <= n; i += 128) {
    const auto* v = reinterpret_cast<const __m128i*>(p + i);
    __m128i acc =
        _mm_or_si128(_mm_or_si128(_mm_or_si128(_mm_loadu_si128(v), _mm_loadu_si128(v + 1)),
                                  _mm_or_si128(_mm_loadu_si128(v + 2), _mm_loadu_si128(v + 3))),
                     _mm_or_si128(_mm_or_si128(_mm_loadu_si128(v + 4), _mm_loadu_si128(v + 5)),
                                  _mm_or_si128(_mm_loadu_si128(v + 6), _mm_loadu_si128(v + 7))));
    if (_mm_movemask_epi8(_mm_cmpeq_epi8(acc, _mm_setzero_si128())) != 0xFFFF) return false;
  }
#endif
  for (; i + 64 <= n; i += 64) {
    uint64_t acc = 0;
    for (size_t k = 0; k < 64; k += 8) acc |= word(i + k);
    if (acc != 0) return false;
  }
  for (; i + 8 <= n; i += 8) {
    if (word(i) != 0) return false;
  }
  for (; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<SparseWriter>> SparseWriter::Create(const std::string& temp_path,
                                                                   uint64_t start_offset,
                                                                   uint64_t limit) {
  int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) return Errno("creating", temp_path);
  // Anything past start_offset is from an attempt that never reached a checkpoint; drop it so
  // the holes we skip over read back as zeros.
  if (::ftruncate(fd, static_cast<off_t>(start_offset)) != 0) {
    auto st = Errno("truncating", temp_path);
    ::close(fd);
    return st;
  }
  return std::unique_ptr<SparseWriter>(new SparseWriter(fd, temp_path, start_offset, limit));
}

SparseWriter::~SparseWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !keep_) ::unlink(temp_path_.c_str());
}

absl::Status WritebackWriter::PWrite(const uint8_t* data, size_t n, uint64_t at) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, data, n, static_cast<off_t>(at));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno("writing", path_);
    }
    data += w;
    n -= static_cast<size_t>(w);
    at += static_cast<uint64_t>(w);
    unflushed_ += static_cast<uint64_t>(w);
  }
  if (unflushed_ >= kWritebackBytes) {
    ::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
    unflushed_ = 0;
  }
  return absl::OkStatus();
}

absl::Status SparseWriter::Write(const uint8_t* data, size_t n) {
  if (offset_ + n > limit_) {
    return absl::OutOfRangeError("image is larger than the volume capacity of " +
                                 std::to_string(limit_) + " bytes");
  }
  // Walk block-aligned (relative to the file) runs; write each run of non-zero blocks at once.
  size_t pos = 0;
  while (pos < n) {
    size_t to_boundary = kSparseBlock - static_cast<size_t>((offset_ + pos) % kSparseBlock);
    size_t run_start = pos;
    bool zero = IsZero(data + pos, std::min(to_boundary, n - pos));
    size_t end = pos + std::min(to_boundary, n - pos);
    while (end < n) {
      size_t len = std::min(kSparseBlock, n - end);
      if (IsZero(data + end, len) != zero) break;
      end += len;
    }
    if (!zero) {
      WISP_RETURN_IF_ERROR(out_.PWrite(data + run_start, end - run_start, offset_ + run_start));
      bytes_written_ += end - run_start;
    }
    pos = end;
  }
  offset_ += n;
  return absl::OkStatus();
}

absl::Status SparseWriter::Skip(uint64_t n) {
  if (offset_ + n > limit_) {
    return absl::OutOfRangeError("image is larger than the volume capacity of " +
                                 std::to_string(limit_) + " bytes");
  }
  offset_ += n;
  return absl::OkStatus();
}

absl::Status SparseWriter::Sync() {
  // Trailing holes do not extend a file; a checkpoint must see the whole offset as its size.
  if (::ftruncate(fd_, static_cast<off_t>(offset_)) != 0) return Errno("sizing", temp_path_);
  if (::fdatasync(fd_) != 0) return Errno("syncing", temp_path_);
  return absl::OkStatus();
}

absl::Status SparseWriter::Commit(const std::string& dest, uint64_t final_size) {
  if (final_size < offset_) {
    return absl::OutOfRangeError("image of " + std::to_string(offset_) +
                                 " bytes is larger than the volume capacity of " +
                                 std::to_string(final_size) + " bytes");
  }
  if (::ftruncate(fd_, static_cast<off_t>(final_size)) != 0) return Errno("sizing", temp_path_);
  if (::fsync(fd_) != 0) return Errno("syncing", temp_path_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    return Errno("closing", temp_path_);
  }
  fd_ = -1;
  if (::rename(temp_path_.c_str(), dest.c_str()) != 0) return Errno("renaming into", dest);
  committed_ = true;
  return SyncParentDir(dest);
}

absl::Status SyncParentDir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Errno("opening directory", dir);
  int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0) return Errno("syncing directory", dir);
  return absl::OkStatus();
}

absl::Status CopySparse(const std::string& src, SparseWriter& writer) {
  int fd = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("opening", src);
  struct stat st {};
  ::fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::vector<uint8_t> buf(1 << 20);
  absl::Status status = absl::OkStatus();
  uint64_t pos = 0;
  while (pos < size && status.ok()) {
    off_t data = ::lseek(fd, static_cast<off_t>(pos), SEEK_DATA);
    uint64_t data_start = data < 0 ? size : static_cast<uint64_t>(data);
    if (data_start > pos) {
      status = writer.Skip(data_start - pos);
      pos = data_start;
    }
    if (pos >= size || !status.ok()) break;
    off_t hole = ::lseek(fd, static_cast<off_t>(pos), SEEK_HOLE);
    uint64_t data_end = hole < 0 ? size : static_cast<uint64_t>(hole);
    while (pos < data_end && status.ok()) {
      size_t len = static_cast<size_t>(std::min<uint64_t>(buf.size(), data_end - pos));
      ssize_t got = ::pread(fd, buf.data(), len, static_cast<off_t>(pos));
      if (got <= 0) {
        status = got == 0 ? absl::DataLossError("clone source " + src + " shrank while copying")
                          : Errno("reading", src);
        break;
      }
      status = writer.Write(buf.data(), static_cast<size_t>(got));
      pos += static_cast<uint64_t>(got);
    }
  }
  ::close(fd);
  return status;
}

}  // namespace wisp::populator
