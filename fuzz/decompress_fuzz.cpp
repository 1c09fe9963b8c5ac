// Fuzzes the streaming decompressors (gz, xz, zst) over hostile compressed data, reading in odd
// chunk sizes. Output is capped at 64 MiB per input so a decompression bomb ends the run of one
// input instead of the fuzzer; the importer bounds real output by the volume size.
//
// Input: first byte picks the format (0 gz, 1 xz, 2 zst, otherwise by detection), second the
// read size; the rest is the compressed stream.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "byte_source.hpp"
#include "decompress.hpp"
#include "image_format.hpp"

namespace populator = wisp::populator;

namespace {
class MemorySource final : public populator::ByteSource {
 public:
  MemorySource(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) override {
    const size_t take = std::min(n, size_ - pos_);
    if (take > 0) std::memcpy(buf, data_ + pos_, take);
    pos_ += take;
    return take;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

constexpr size_t kMaxOutput = size_t{64} << 20;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  populator::FormatKind kind;
  switch (data[0]) {
    case 0:
      kind = populator::FormatKind::kGzip;
      break;
    case 1:
      kind = populator::FormatKind::kXz;
      break;
    case 2:
      kind = populator::FormatKind::kZstd;
      break;
    default:
      kind = populator::DetectFormat(data + 2, size - 2).kind;
      break;
  }
  if (!populator::IsCompression(kind)) return 0;
  const size_t chunk = 1 + data[1] * 257;
  MemorySource source(data + 2, size - 2);
  auto dec = populator::MakeDecompressor(kind, source);
  if (!dec.ok()) return 0;
  std::vector<uint8_t> buf(chunk);
  size_t total = 0;
  while (total < kMaxOutput) {
    auto got = (*dec)->Read(buf.data(), buf.size());
    if (!got.ok() || *got == 0) break;
    if (*got > buf.size()) abort();  // a decompressor wrote past what it was given
    total += *got;
  }
  return 0;
}
