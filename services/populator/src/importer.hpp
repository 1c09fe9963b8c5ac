#pragma once
// Importer: fills one volume directory's disk.img from a source, the way CDI's importer does, with
// no NATS in sight (the service wraps it in durable jobs).
//
// Pipeline for an HTTP(S) source:
//   socket -> prefetch thread (chunk pool; when spec.sha256 asks, each chunk also goes to a hasher
//   thread: the bytes as served) -> detect format by content -> [gz|xz|zst
//   decompressor] -> detect again -> raw: SparseWriter into disk.img.part
//                                   qcow2: Qcow2StreamConverter into disk.img.part as the
//                                          bytes arrive (qcow2_stream.hpp); images it leaves
//                                          alone (extended L2, zstd clusters): scratch.qcow2,
//                                          then `qemu-img convert -O raw`
//   -> verify (sha256, sizes) -> extend to capacity, fsync, rename to disk.img.
// disk.img exists only once the import is complete and verified.
//
// Capacity: a raw image's Content-Length and a qcow2 header's virtual size are checked before a
// byte is written; a compressed raw image is checked as it is written.
// Resume: for an uncompressed raw image the importer checkpoints (fdatasync + disk.img.resume)
// every `checkpoint_bytes`; after a crash or a transient error the next Run() asks for
// "Range: bytes=<checkpoint>-" with If-Range and (to verify a sha256) re-hashes the prefix it
// already holds; a server that ignores Range makes it start over. Other formats restart cleanly.
// Errors carry codes that say whether retrying can help: see IsPermanent().
//
//   Importer importer(Importer::Options{});
//   ImportSpec spec{.kind = SourceKind::kHttp, .url = url, .capacity = 10 << 30, .dir = dir};
//   WISP_ASSIGN_OR_RETURN(ImportResult r, importer.Run(spec, [](const ImportProgress& p) {
//     std::cout << FormatProgress(p.Ratio()) << "\n"; return absl::OkStatus(); }));
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "byte_source.hpp"
#include "http_source.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::populator {

inline constexpr char kDiskImage[] = "disk.img";
inline constexpr char kDiskPart[] = "disk.img.part";
inline constexpr char kResumeFile[] = "disk.img.resume";
inline constexpr char kScratchQcow2[] = "scratch.qcow2";

enum class SourceKind { kHttp, kBlank, kClone, kStream };

struct ImportSpec {
  SourceKind kind = SourceKind::kHttp;
  std::string url;         // kHttp
  HttpOptions http;        // kHttp: ca_pem, headers, timeouts (range fields are the importer's)
  std::string clone_from;  // kClone: path of the source volume's disk.img
  ByteSource* stream = nullptr;         // kStream (upload): the body
  std::optional<uint64_t> stream_size;  // kStream: total bytes when known
  std::string format;     // "" (detect), "raw" or "qcow2": a declared format must match content
  std::string sha256;     // lower-case hex of the source bytes as served; empty = not checked
  uint64_t capacity = 0;  // bytes; disk.img ends up exactly this large
  std::string dir;        // volume directory
};

struct ImportProgress {
  std::string stage;              // "download", "convert", "verify"
  uint64_t bytes_read = 0;        // source bytes as served
  std::optional<uint64_t> total;  // source size when known
  uint64_t bytes_written = 0;     // data bytes written to the volume (holes excluded)
  std::optional<double> Ratio() const {
    if (!total || *total == 0) return std::nullopt;
    return static_cast<double>(bytes_read) / static_cast<double>(*total);
  }
};
// Called at start, every progress_interval and before the final rename. A non-OK return aborts the
// import with that status (shutdown, lost job lease); partial data is kept for a resume.
using ProgressFn = std::function<absl::Status(const ImportProgress&)>;

struct ImportResult {
  std::string format;       // "raw", "qcow2", "raw.gz", "qcow2.xz", "blank", "clone"
  std::string sha256;       // of the source bytes as served, when spec.sha256 asked (verified)
  uint64_t bytes_read = 0;  // in this run (a resumed run reads only the rest)
  uint64_t bytes_written = 0;
  uint64_t virtual_size = 0;  // image size before extending to capacity
  uint64_t resumed_from = 0;  // > 0 when an HTTP Range resume was used
};

// True for errors that a retry cannot fix: 404, TLS/certificate failure, bad checksum, image larger
// than the volume, unknown or mismatched format, corrupt data, bad input.
bool IsPermanent(const absl::Status& status);

class Importer {
 public:
  struct Options {
    std::string qemu_img = "qemu-img";
    // false: every qcow2 image goes through scratch.qcow2 and qemu-img (bench/populate compares).
    bool stream_qcow2 = true;
    size_t buffer_size = 1 << 20;
    uint64_t checkpoint_bytes = 64ull << 20;
    // And at least this long apart: each checkpoint is an fdatasync that stalls the download.
    std::chrono::milliseconds checkpoint_min_interval{0};
    std::chrono::milliseconds progress_interval{500};
    Clock* clock = nullptr;  // nullptr = SystemClock
  };
  explicit Importer(Options options);

  absl::StatusOr<ImportResult> Run(const ImportSpec& spec, const ProgressFn& progress);

  // Removes disk.img.part, the resume checkpoint and the scratch file (after a permanent failure).
  static void Cleanup(const std::string& dir);

 private:
  Options options_;
  Clock& clock_;
};

}  // namespace wisp::populator
