#pragma once
// SparseWriter: sequential writes into a temporary file where all-zero 4 KiB blocks become holes,
// then Commit(): extend to the final size, fsync, rename over the destination, fsync the
// directory. Until Commit() the destination is untouched, so a crash never leaves partial data
// under the final name. Abandon() (or destruction without Commit) removes the temporary file
// unless Keep() was asked for resuming.
//
//   WISP_ASSIGN_OR_RETURN(auto w, SparseWriter::Create(dir + "/disk.img.part", 0, capacity));
//   WISP_RETURN_IF_ERROR(w->Write(buf, n));          // repeatedly
//   WISP_RETURN_IF_ERROR(w->Commit(dir + "/disk.img", capacity));
#include <cstdint>
#include <memory>
#include <string>

#include "wisp/status/status.hpp"

namespace wisp::populator {

inline constexpr size_t kSparseBlock = 4096;

// Positional writes of whole buffers into a file being filled (EINTR and short writes retried),
// starting writeback of what was written every 16 MiB without waiting for it, so the disk works
// while the network does and the fsync before the rename has little left. SparseWriter and the
// qcow2 stream converter write through it. Does not own the descriptor.
class WritebackWriter {
 public:
  WritebackWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  absl::Status PWrite(const uint8_t* data, size_t n, uint64_t at);

 private:
  static constexpr uint64_t kWritebackBytes = 16ull << 20;
  int fd_;
  std::string path_;  // for error messages
  uint64_t unflushed_ = 0;
};

class SparseWriter {
 public:
  // Opens (creating) `temp_path` and truncates it to `start_offset` (0 = fresh; > 0 resumes
  // after bytes already fsynced there). Writing past `limit` bytes fails with OutOfRange.
  static absl::StatusOr<std::unique_ptr<SparseWriter>> Create(const std::string& temp_path,
                                                              uint64_t start_offset,
                                                              uint64_t limit);
  ~SparseWriter();

  absl::Status Write(const uint8_t* data, size_t n);
  // Advances over `n` zero bytes without touching the file (a hole).
  absl::Status Skip(uint64_t n);
  // Sizes the file to offset() and fdatasyncs: everything so far is durable (resume checkpoints).
  absl::Status Sync();
  // Sets the size to `final_size` (>= offset), fsyncs, renames to `dest`, fsyncs the directory.
  absl::Status Commit(const std::string& dest, uint64_t final_size);
  void Keep() { keep_ = true; }

  uint64_t offset() const { return offset_; }
  uint64_t bytes_written() const { return bytes_written_; }  // data actually written (not holes)
  const std::string& temp_path() const { return temp_path_; }

 private:
  SparseWriter(int fd, std::string temp_path, uint64_t offset, uint64_t limit)
      : fd_(fd),
        temp_path_(std::move(temp_path)),
        offset_(offset),
        limit_(limit),
        out_(fd, temp_path_) {}

  int fd_;
  std::string temp_path_;
  uint64_t offset_;
  uint64_t limit_;
  uint64_t bytes_written_ = 0;
  WritebackWriter out_;
  bool committed_ = false;
  bool keep_ = false;
};

// True when n bytes at p are all zero.
bool IsZero(const uint8_t* p, size_t n);

// fsyncs the directory holding `path` (makes a rename durable).
absl::Status SyncParentDir(const std::string& path);

// Copies a local file sparsely (SEEK_DATA/SEEK_HOLE, zero blocks skipped) into `writer`.
absl::Status CopySparse(const std::string& src, SparseWriter& writer);

}  // namespace wisp::populator
