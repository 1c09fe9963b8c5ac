#pragma once
// Qcow2StreamConverter: turns a qcow2 image into its raw disk while the image is still arriving,
// reading it once, front to back (from the HTTP body or a decompressor), with no scratch copy and
// no qemu-img run.
//
// How: the header (checked by ParseQcow2Header) names the L1 table; when the stream reaches it,
// each L1 entry names an L2 table; when the stream reaches those, each L2 entry maps a guest
// cluster to a host offset. Host ranges still ahead of the stream are kept as pending requests
// and served as the bytes go past: data clusters go straight to the output at their guest offset
// (all-zero blocks skipped, so the output stays sparse), compressed clusters are inflated (raw
// deflate, as qemu writes them) first. Zero-flagged and unallocated clusters are never written:
// the output starts as a hole of the virtual size. Refcounts and snapshots are not read.
//
// Layouts where data comes before the table that maps it: bytes that no request has claimed yet
// are stashed (in memory up to `stash_memory`, then in the sparse `spill_path` file at their host
// offset) until every L2 table has been read. A request for bytes that were neither stashed nor
// still ahead (a host cluster mapped twice, metadata overlapping data) fails with
// InvalidArgument: the converter refuses an image rather than write a wrong disk.
//
// Every offset and size is checked: tables and data past the end of the stream, in the header
// cluster, overlapping the L1 or an L2 table, unaligned, or a guest offset past the virtual size
// are errors (InvalidArgument), as are an encrypted image and bad compressed data.
//
//   WISP_ASSIGN_OR_RETURN(auto conv, Qcow2StreamConverter::Create(head, n, writer, {}));
//   while (got = source.Read(buf, size)) WISP_RETURN_IF_ERROR(conv->Feed(buf, got));
//   WISP_RETURN_IF_ERROR(conv->Finish());
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <vector>

#include "byte_source.hpp"
#include "image_format.hpp"
#include "wisp/status/status.hpp"

namespace wisp::populator {

// Writes `n` bytes of the raw disk at `offset` (< virtual size; never all-zero blocks).
using RawWriteFn = std::function<absl::Status(uint64_t offset, const uint8_t* data, size_t n)>;

struct Qcow2StreamOptions {
  size_t stash_memory = 64 << 20;  // early bytes held in memory before spilling
  std::string spill_path;          // sparse scratch file beyond that; "" = fail instead
};

// True when the converter can stream this header; false for valid images it leaves to qemu-img
// (extended L2 entries, a compression type other than zlib). Call after ParseQcow2Header.
bool Qcow2Streamable(const Qcow2Header& header);

class Qcow2StreamConverter {
 public:
  // `head`: the first bytes of the image (at least the header). InvalidArgument for an image
  // that cannot be converted at all (bad header, encrypted, L1 table out of range),
  // Unimplemented for one that Qcow2Streamable() rejects.
  static absl::StatusOr<std::unique_ptr<Qcow2StreamConverter>> Create(const uint8_t* head, size_t n,
                                                                      RawWriteFn write,
                                                                      Qcow2StreamOptions options);
  ~Qcow2StreamConverter();

  // The image's bytes in order, from offset 0 (the head again included).
  absl::Status Feed(const uint8_t* data, size_t n);
  // At the end of the stream: fails when anything mapped was not found in it.
  absl::Status Finish();

  uint64_t virtual_size() const;
  uint64_t bytes_written() const;  // data bytes handed to `write`
  uint64_t stash_peak() const;     // most bytes stashed at once (memory and spill)

 private:
  struct Impl;
  explicit Qcow2StreamConverter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The importer's use: reads `image` (from offset 0, `head` being its first bytes) to the end and
// writes the raw disk into `part_path` (created afresh, sized to the virtual size, not synced),
// stashing into `spill_path` when needed. `on_chunk(bytes_written)` runs after every read
// (progress, cancellation). On error `part_path` and `spill_path` are removed.
struct Qcow2StreamResult {
  uint64_t virtual_size = 0;
  uint64_t bytes_written = 0;
};
absl::StatusOr<Qcow2StreamResult> ConvertQcow2Stream(
    ByteSource& image, const std::vector<uint8_t>& head, const std::string& part_path,
    const std::string& spill_path, std::vector<uint8_t>& buffer,
    const std::function<absl::Status(uint64_t bytes_written)>& on_chunk);

}  // namespace wisp::populator
