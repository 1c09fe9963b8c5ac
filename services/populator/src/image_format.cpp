#include "image_format.hpp"

#include <cctype>
#include <cstdio>
#include <cstring>

namespace wisp::populator {
namespace {

bool StartsWith(const uint8_t* data, size_t n, std::string_view magic, size_t offset = 0) {
  return n >= offset + magic.size() && std::memcmp(data + offset, magic.data(), magic.size()) == 0;
}

uint64_t BigEndian(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

bool LooksLikeHtml(const uint8_t* data, size_t n) {
  size_t i = 0;
  while (i < n && std::isspace(data[i])) ++i;
  std::string head;
  for (; i < n && head.size() < 15; ++i) head.push_back(static_cast<char>(std::tolower(data[i])));
  return head.rfind("<!doctype html", 0) == 0 || head.rfind("<html", 0) == 0;
}

}  // namespace

bool IsCompression(FormatKind kind) {
  return kind == FormatKind::kGzip || kind == FormatKind::kXz || kind == FormatKind::kZstd;
}

ImageFormat DetectFormat(const uint8_t* data, size_t n) {
  using namespace std::string_view_literals;
  if (StartsWith(data, n, "\x1f\x8b"sv)) return {FormatKind::kGzip, std::string(formats::kGzip)};
  if (StartsWith(data, n,
                 "\xfd"
                 "7zXZ\x00"sv))
    return {FormatKind::kXz, std::string(formats::kXz)};
  if (StartsWith(data, n, "\x28\xb5\x2f\xfd"sv)) {
    return {FormatKind::kZstd, std::string(formats::kZstd)};
  }
  if (StartsWith(data, n, "QFI\xfb"sv)) return {FormatKind::kQcow2, std::string(formats::kQcow2)};
  if (StartsWith(data, n, "KDMV"sv)) return {FormatKind::kUnsupported, "vmdk"};
  if (StartsWith(data, n, "<<< Oracle VM VirtualBox Disk Image >>>"sv) ||
      StartsWith(data, n, "\x7f\x10\xda\xbe"sv, 64)) {
    return {FormatKind::kUnsupported, "vdi"};
  }
  if (StartsWith(data, n, "vhdxfile"sv)) return {FormatKind::kUnsupported, "vhdx"};
  if (StartsWith(data, n, "conectix"sv)) return {FormatKind::kUnsupported, "vhd"};
  if (StartsWith(data, n, "BZh"sv) && n > 3 && data[3] >= '1' && data[3] <= '9') {
    return {FormatKind::kUnsupported, "bzip2"};
  }
  if (StartsWith(data, n, "PK\x03\x04"sv)) return {FormatKind::kUnsupported, "zip"};
  if (LooksLikeHtml(data, n)) return {FormatKind::kUnsupported, "html (a web page, not an image)"};
  return {FormatKind::kRaw, std::string(formats::kRaw)};
}

absl::StatusOr<Qcow2Header> ParseQcow2Header(const uint8_t* data, size_t n) {
  if (n < 72 || !StartsWith(data, n, std::string_view("QFI\xfb", 4))) {
    return absl::InvalidArgumentError("qcow2 header is truncated or missing its magic");
  }
  Qcow2Header h;
  h.version = static_cast<uint32_t>(BigEndian(data + 4, 4));
  if (h.version != 2 && h.version != 3) {
    return absl::InvalidArgumentError("qcow2 version " + std::to_string(h.version) +
                                      " is not supported (want 2 or 3)");
  }
  h.has_backing_file = BigEndian(data + 8, 8) != 0;
  h.virtual_size = BigEndian(data + 24, 8);
  const uint32_t cluster_bits = static_cast<uint32_t>(BigEndian(data + 20, 4));
  if (cluster_bits < 9 || cluster_bits > 21) {
    return absl::InvalidArgumentError("qcow2 cluster_bits " + std::to_string(cluster_bits) +
                                      " is out of range");
  }
  h.cluster_bits = cluster_bits;
  h.crypt_method = static_cast<uint32_t>(BigEndian(data + 32, 4));
  h.l1_size = static_cast<uint32_t>(BigEndian(data + 36, 4));
  h.l1_table_offset = BigEndian(data + 40, 8);
  if (h.version == 3) {
    // Version 3 headers are at least 104 bytes; incompatible_features is the u64 at offset 72.
    // An external data file (bit 2) would make qemu-img read a host path named by the image, so
    // a user could copy any file the populator can read into their volume: never accepted.
    if (n < 104) return absl::InvalidArgumentError("qcow2 version 3 header is truncated");
    const uint64_t incompatible = BigEndian(data + 72, 8);
    constexpr uint64_t kDirty = 1u << 0, kCorrupt = 1u << 1, kExternalData = 1u << 2,
                       kCompressionType = 1u << 3, kExtendedL2 = 1u << 4;
    if (incompatible & kExternalData) {
      return absl::InvalidArgumentError(
          "qcow2 image uses an external data file; only self-contained images can be imported");
    }
    if (incompatible & kCorrupt) {
      return absl::InvalidArgumentError("qcow2 image is marked corrupt");
    }
    if (const uint64_t unknown = incompatible & ~(kDirty | kCompressionType | kExtendedL2)) {
      return absl::InvalidArgumentError("qcow2 image has unknown incompatible features 0x" + [&] {
        char buf[24];
        std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(unknown));
        return std::string(buf);
      }());
    }
    h.incompatible_features = incompatible;
    // The compression type byte exists only in headers of 105 bytes or more (header_length).
    if ((incompatible & kCompressionType) && BigEndian(data + 100, 4) >= 105 && n >= 105) {
      h.compression_type = data[104];
    }
  }
  return h;
}

}  // namespace wisp::populator
