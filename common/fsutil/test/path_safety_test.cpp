#include "wisp/fsutil/path_safety.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace wisp::fsutil {
namespace {
using ::testing::HasSubstr;

// Tests that CleanPath matches Go's filepath.Clean on the usual shapes.
TEST(PathSafetyTest, CleanPathMatchesGoClean) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "."},        {"/", "/"},  {"/a//b/./c/", "/a/b/c"}, {"a/../b", "b"}, {"/../a", "/a"},
      {"../a", "../a"}, {"./", "."}, {"a/b/..", "a"},
  };
  for (const auto& [in, want] : cases) {
    SCOPED_TRACE(in);
    EXPECT_EQ(CleanPath(in), want);
  }
}

// Tests that CheckPathUnder accepts paths below a root and names the field when it refuses.
TEST(PathSafetyTest, CheckPathUnderRoots) {
  const std::vector<std::string> roots = {"/var/lib/kubelet", "/tmp/csi/"};
  struct Case {
    std::string path;
    bool ok;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"/var/lib/kubelet/pods/u/volumes/x/mount", true, ""},
      {"/tmp/csi", true, ""},
      {"/var/lib/kubelet2/x", false,
       "target_path /var/lib/kubelet2/x is not under an allowed root"},
      {"/var/lib/kubelet/../../etc", false, "target_path must not contain '..'"},
      {"relative/x", false, "target_path must be an absolute path: relative/x"},
      {"", false, "target_path is required"},
      {std::string("/tmp/csi/a\0b", 12), false, "target_path must not contain NUL bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    absl::Status st = CheckPathUnder("target_path", c.path, roots);
    EXPECT_EQ(st.ok(), c.ok) << st;
    if (!c.ok) {
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(st.message()), HasSubstr(c.message));
    }
  }
  EXPECT_TRUE(CheckPathUnder("target_path", "/anything", {}).ok());
}

// Tests that JoinUnder refuses names that could escape the root.
TEST(PathSafetyTest, JoinUnderRefusesEscapes) {
  EXPECT_EQ(*JoinUnder("volume_id", "/vols", "pvc-1"), "/vols/pvc-1");
  EXPECT_EQ(*JoinUnder("volume_id", "/vols/", "pvc-1"), "/vols/pvc-1");
  const std::vector<std::string> bads = {
      "", ".", "..", "a/b", "../etc", "a\nb", std::string(256, 'x')};
  for (const std::string& bad : bads) {
    SCOPED_TRACE(bad);
    auto joined = JoinUnder("volume_id", "/vols", bad);
    ASSERT_FALSE(joined.ok());
    EXPECT_EQ(joined.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(joined.status().message()), HasSubstr("volume_id"));
  }
}

// Tests HasDotDot on element boundaries.
TEST(PathSafetyTest, HasDotDotOnlyMatchesWholeElements) {
  EXPECT_TRUE(HasDotDot("/a/../b"));
  EXPECT_TRUE(HasDotDot(".."));
  EXPECT_FALSE(HasDotDot("/a/..b/c.."));
}

}  // namespace
}  // namespace wisp::fsutil
