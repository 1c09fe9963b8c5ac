#pragma once
// Streaming decompressors over a ByteSource: gzip (zlib, concatenated members allowed), xz
// (liblzma, concatenated streams), zstd (multiple frames). Each holds one input buffer; nothing is
// staged on disk, so a compressed raw image goes straight from the socket to the sparse writer.
//
// Errors: corrupt data is DataLoss "gz: invalid compressed data (...)"; an input that ends before
// the compressed stream does is DataLoss "xz: compressed stream is truncated".
//
//   WISP_ASSIGN_OR_RETURN(ByteSourcePtr raw, MakeDecompressor(FormatKind::kXz, body));
#include "byte_source.hpp"
#include "image_format.hpp"

namespace wisp::populator {

// `kind` must be kGzip, kXz or kZstd; `inner` must outlive the result.
absl::StatusOr<ByteSourcePtr> MakeDecompressor(FormatKind kind, ByteSource& inner);

}  // namespace wisp::populator
