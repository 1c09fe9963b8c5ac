#pragma once
// Content-based image format detection (never by file name), as CDI's format readers do.
//
// Detect() looks at the first bytes of a stream: compression layers (gz, xz, zst) first, then
// disk formats (qcow2; raw is everything we do not recognise as another known format). Formats we
// recognise but do not convert (vmdk, vdi, vhd, vhdx, bzip2, zip, an HTML page) come back as
// kUnsupported with their name, so the volume fails with "unsupported image format vmdk" instead of
// being written out as a raw disk full of the wrong bytes.
//
//   uint8_t head[kDetectBytes]; ... ImageFormat f = DetectFormat(head, got);
//   if (f.kind == FormatKind::kQcow2) { WISP_ASSIGN_OR_RETURN(auto h, ParseQcow2Header(head, got));
//   }
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "wisp/formats/image_formats.hpp"
#include "wisp/status/status.hpp"

namespace wisp::populator {

// Enough bytes for every magic we look at (vhd's footer copy at offset 0, the qcow2 header).
inline constexpr size_t kDetectBytes = 512;

enum class FormatKind { kRaw, kQcow2, kGzip, kXz, kZstd, kUnsupported };

struct ImageFormat {
  FormatKind kind = FormatKind::kRaw;
  // A name of wisp/formats/image_formats.hpp, or the unsupported format's name.
  std::string name;
};

bool IsCompression(FormatKind kind);
ImageFormat DetectFormat(const uint8_t* data, size_t n);

struct Qcow2Header {
  uint32_t version = 0;
  uint64_t virtual_size = 0;
  bool has_backing_file = false;
  // The fields a reader of the cluster tables needs (qcow2_stream.hpp).
  uint32_t cluster_bits = 0;
  uint32_t crypt_method = 0;  // 0 none, 1 AES, 2 LUKS
  uint32_t l1_size = 0;       // L1 entries
  uint64_t l1_table_offset = 0;
  uint64_t incompatible_features = 0;  // v3 only
  uint8_t compression_type = 0;        // v3 with incompatible bit 3: 0 zlib, 1 zstd
};
inline constexpr uint64_t kQcow2IncompatExtendedL2 = 1u << 4;
// InvalidArgument when the header is not a usable qcow2 header.
absl::StatusOr<Qcow2Header> ParseQcow2Header(const uint8_t* data, size_t n);

}  // namespace wisp::populator
