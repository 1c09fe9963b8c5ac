#include "image_format.hpp"

#include <gtest/gtest.h>

#include <string>

#include "checksum.hpp"
#include "progress.hpp"

namespace wisp::populator {
namespace {

ImageFormat Detect(const std::string& s) {
  return DetectFormat(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// Tests that each magic is recognised by content and that anything else counts as raw.
TEST(ImageFormatTest, DetectsFormatsByMagic) {
  struct Case {
    std::string head;
    FormatKind kind;
    std::string name;
  };
  const Case cases[] = {
      {std::string("\x1f\x8b\x08\x00", 4), FormatKind::kGzip, "gz"},
      {std::string("\xfd"
                   "7zXZ\x00\x00",
                   7),
       FormatKind::kXz, "xz"},
      {std::string("\x28\xb5\x2f\xfd\x00", 5), FormatKind::kZstd, "zst"},
      {std::string("QFI\xfb\x00\x00\x00\x03", 8), FormatKind::kQcow2, "qcow2"},
      {"KDMV\x01", FormatKind::kUnsupported, "vmdk"},
      {"vhdxfile", FormatKind::kUnsupported, "vhdx"},
      {"conectix", FormatKind::kUnsupported, "vhd"},
      {"BZh91AY&SY", FormatKind::kUnsupported, "bzip2"},
      {"  <!DOCTYPE html><html>", FormatKind::kUnsupported, "html (a web page, not an image)"},
      {std::string(512, '\0'), FormatKind::kRaw, "raw"},
      {"hello world", FormatKind::kRaw, "raw"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ImageFormat f = Detect(c.head);
    EXPECT_EQ(f.kind, c.kind);
    EXPECT_EQ(f.name, c.name);
  }
}

// Tests that the qcow2 header yields the virtual size and rejects bad versions.
TEST(ImageFormatTest, ParsesQcow2Header) {
  std::string h(104, '\0');
  h.replace(0, 4, "QFI\xfb");
  h[7] = 3;      // version
  h[23] = 16;    // cluster_bits
  h[28] = 0x40;  // virtual size 0x40000000 = 1 GiB (bytes 24..31 big-endian)
  auto parsed = ParseQcow2Header(reinterpret_cast<const uint8_t*>(h.data()), h.size());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->virtual_size, 1ull << 30);
  EXPECT_FALSE(parsed->has_backing_file);
  h[7] = 9;
  EXPECT_FALSE(ParseQcow2Header(reinterpret_cast<const uint8_t*>(h.data()), h.size()).ok());
}

// Tests that a qcow2 image naming an external data file (a host path qemu-img would read) is
// refused, as are corrupt and unknown incompatible features; dirty images are accepted.
TEST(ImageFormatTest, RefusesQcow2ExternalDataFile) {
  std::string h(104, '\0');
  h.replace(0, 4, "QFI\xfb");
  h[7] = 3;
  h[23] = 16;
  auto parse = [&] {
    return ParseQcow2Header(reinterpret_cast<const uint8_t*>(h.data()), h.size());
  };
  h[79] = 0x04;  // incompatible_features bit 2: external data file
  auto st = parse().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "qcow2 image uses an external data file; only self-contained images can be imported");
  h[79] = 0x02;
  EXPECT_EQ(parse().status().message(), "qcow2 image is marked corrupt");
  h[79] = 0x20;
  EXPECT_EQ(parse().status().message(), "qcow2 image has unknown incompatible features 0x20");
  h[79] = 0x01;  // dirty: qemu-img repairs the refcounts on read
  EXPECT_TRUE(parse().ok());
  EXPECT_FALSE(ParseQcow2Header(reinterpret_cast<const uint8_t*>(h.data()), 80).ok());
}

// Tests that progress prints as CDI shows it and holds back 100 until the volume is complete.
TEST(ProgressTest, FormatsLikeCdi) {
  EXPECT_EQ(FormatProgress(0.453), "45.30%");
  EXPECT_EQ(FormatProgress(0.0), "0.00%");
  EXPECT_EQ(FormatProgress(1.0), "99.99%");
  EXPECT_EQ(FormatProgress(std::nullopt), "N/A");
}

// Tests that user checksums are normalised and malformed ones name the field.
TEST(ChecksumTest, NormalizesSha256) {
  std::string hex(64, 'A');
  auto ok = NormalizeSha256("sha256:" + hex, "wisp.dev/sha256");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, std::string(64, 'a'));
  auto bad = NormalizeSha256("xyz", "wisp.dev/sha256");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("wisp.dev/sha256"), std::string::npos);
  Sha256 sha;
  sha.Update(reinterpret_cast<const uint8_t*>("abc"), 3);
  EXPECT_EQ(sha.HexDigest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace wisp::populator
