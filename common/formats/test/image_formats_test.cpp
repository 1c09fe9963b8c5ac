#include "wisp/formats/image_formats.hpp"

#include <gtest/gtest.h>

namespace wisp::formats {
namespace {

// Tests that declared formats are exactly the disk formats, never a compression layer.
TEST(ImageFormatsTest, DiskFormatsOnly) {
  EXPECT_TRUE(IsDiskFormat("raw"));
  EXPECT_TRUE(IsDiskFormat("qcow2"));
  EXPECT_FALSE(IsDiskFormat("gz"));
  EXPECT_FALSE(IsDiskFormat("vmdk"));
  EXPECT_FALSE(IsDiskFormat(""));
  static_assert(IsDiskFormat(kQcow2));
}

// Tests the two ways messages name the list.
TEST(ImageFormatsTest, Lists) {
  EXPECT_EQ(QuotedList(), "\"raw\", \"qcow2\"");
  EXPECT_EQ(PlainList(), "raw or qcow2");
}

}  // namespace
}  // namespace wisp::formats
