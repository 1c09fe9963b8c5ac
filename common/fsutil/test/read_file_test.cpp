#include "wisp/fsutil/read_file.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace wisp::fsutil {
namespace {

namespace fs = std::filesystem;

class ReadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("wisp-read-file-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  fs::path dir_;
};

// Tests that the bytes come back as written, NUL and CR included, and through a symlink.
TEST_F(ReadFileTest, ReadsBytesAsWritten) {
  const std::string bytes = std::string("a\0b\r\n", 5) + std::string(100000, 'x');
  const std::string path = Write("f", bytes);
  auto got = ReadFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bytes);
  fs::create_symlink(path, dir_ / "link");
  EXPECT_EQ(ReadFile(dir_ / "link").value_or(""), bytes);
  EXPECT_EQ(ReadFile(Write("empty", "")).value_or("x"), "");
}

// Tests that /proc files, whose size says 0, are read to their end.
TEST_F(ReadFileTest, ReadsProcFiles) {
  auto stat = ReadFile("/proc/self/stat");
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_NE(stat->find(')'), std::string::npos);
}

// Tests that each failure has its code and names the path.
TEST_F(ReadFileTest, ErrorsNameThePath) {
  const std::string missing = (dir_ / "missing").string();
  auto st = ReadFile(missing).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(st.message(), missing + ": No such file or directory");
  st = ReadFile(dir_.string()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find(dir_.string()), std::string::npos);
  st = ReadFile(Write("big", std::string(1000, 'x')), 999).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("big: larger than 999 bytes"), std::string::npos) << st;
  EXPECT_TRUE(ReadFile(Write("fits", std::string(999, 'x')), 999).ok());
  EXPECT_EQ(ReadFile("").status().code(), absl::StatusCode::kInvalidArgument);
  if (::geteuid() != 0) {  // root reads anything
    const std::string locked = Write("locked", "secret");
    fs::permissions(locked, fs::perms::none);
    EXPECT_EQ(ReadFile(locked).status().code(), absl::StatusCode::kPermissionDenied);
  }
}

// Tests that ReadTrimmedFile drops the trailing newline and blanks, and nothing else.
TEST_F(ReadFileTest, TrimsTrailingNewlines) {
  EXPECT_EQ(ReadTrimmedFile(Write("p", " pass word\r\n \t\n")).value_or(""), " pass word");
  EXPECT_EQ(ReadTrimmedFile(Write("n", "\n\n")).value_or("x"), "");
  EXPECT_EQ(ReadTrimmedFile((dir_ / "none").string()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace wisp::fsutil
