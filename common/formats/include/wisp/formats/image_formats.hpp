#pragma once
// The image formats wisp imports, in one place: the disk formats a user may declare (a
// VolumeImportSource's spec.format, the StorageClass parameter wisp.dev/source-format) and the
// compression layers the populator detects and strips. wisp-policy and wisp-populator both check
// and name formats with these lists, so their messages agree.
//
// Contract:
//   - kDiskFormats lists what a volume may declare and what the importer writes out, in the order
//     messages name them; kCompressions what the importer detects around a disk format (never
//     declared: detection is by content, as CDI's format readers do).
//   - Adding a format: its name goes here, its magic into the populator's DetectFormat and its
//     conversion into the importer (docs/architecture.md, "Add an image format").
//
// Example:
//   if (!formats::IsDiskFormat(format)) {
//     return "spec.format: Unsupported value: ...: supported values: " + formats::QuotedList();
//   }
#include <array>
#include <string>
#include <string_view>

namespace wisp::formats {

inline constexpr std::string_view kRaw = "raw";
inline constexpr std::string_view kQcow2 = "qcow2";
inline constexpr std::string_view kGzip = "gz";
inline constexpr std::string_view kXz = "xz";
inline constexpr std::string_view kZstd = "zst";

inline constexpr std::array kDiskFormats{kRaw, kQcow2};
inline constexpr std::array kCompressions{kGzip, kXz, kZstd};

constexpr bool IsDiskFormat(std::string_view name) {
  for (std::string_view f : kDiskFormats) {
    if (f == name) return true;
  }
  return false;
}

// "\"raw\", \"qcow2\"" (Kubernetes' "supported values" style).
inline std::string QuotedList() {
  std::string out;
  for (std::string_view f : kDiskFormats) {
    if (!out.empty()) out += ", ";
    out.append("\"").append(f).append("\"");
  }
  return out;
}

// "raw or qcow2".
inline std::string PlainList() {
  std::string out;
  for (size_t i = 0; i < kDiskFormats.size(); ++i) {
    if (i > 0) out += i + 1 == kDiskFormats.size() ? " or " : ", ";
    out.append(kDiskFormats[i]);
  }
  return out;
}

}  // namespace wisp::formats
