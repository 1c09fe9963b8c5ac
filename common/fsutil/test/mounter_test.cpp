#include "wisp/fsutil/mounter.hpp"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "wisp/fsutil/testing/fake_mounter.hpp"

namespace wisp::fsutil {
namespace {

// Tests that SystemMounter recognises "/" as a mount root and a plain directory as not one.
TEST(MounterTest, SystemMounterIsMountPointWithoutPrivileges) {
  SystemMounter mounter;
  EXPECT_TRUE(*mounter.IsMountPoint("/"));
  char tmpl[] = "/tmp/wisp-mnt-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::filesystem::create_directory(std::string(tmpl) + "/sub");
  EXPECT_FALSE(*mounter.IsMountPoint(std::string(tmpl) + "/sub"));
  EXPECT_EQ(mounter.IsMountPoint(std::string(tmpl) + "/missing").status().code(),
            absl::StatusCode::kNotFound);
  // Unmounting something that is not a mount point is a no-op.
  EXPECT_TRUE(mounter.Unmount(std::string(tmpl) + "/sub").ok());
  std::filesystem::remove_all(tmpl);
}

// Tests that FakeMounter records mounts, reports them and forgets them on unmount.
TEST(MounterTest, FakeMounterRecordsMounts) {
  testing::FakeMounter mounter;
  char tmpl[] = "/tmp/wisp-fake-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  EXPECT_FALSE(*mounter.IsMountPoint(dir));
  ASSERT_TRUE(mounter.MountTmpfs(dir, 1 << 20, 0755).ok());
  EXPECT_TRUE(*mounter.IsMountPoint(dir));
  EXPECT_EQ(mounter.Get(dir).kind, "tmpfs");
  ASSERT_TRUE(mounter.Unmount(dir).ok());
  EXPECT_FALSE(mounter.IsMounted(dir));
  mounter.FailNextMount(absl::PermissionDeniedError("nope"));
  EXPECT_EQ(mounter.BindMount("/a", dir, true).code(), absl::StatusCode::kPermissionDenied);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace wisp::fsutil
