#include "sparse_writer.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "fresh_test_dir.hpp"
#include "wisp/populator/testing/test_http_server.hpp"

namespace wisp::populator {
namespace {

class SparseWriterTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = FreshTestDir("wisp-sparse"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

// Tests that zero blocks become holes, data lands at the right offsets and the size is final.
TEST_F(SparseWriterTest, ZeroBlocksBecomeHoles) {
  auto w = SparseWriter::Create(dir_ / "part", 0, 64 << 20);
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> zeros(4 << 20, 0), data(8192, 0xab);
  ASSERT_TRUE((*w)->Write(zeros.data(), zeros.size()).ok());
  ASSERT_TRUE((*w)->Write(data.data(), data.size()).ok());
  ASSERT_TRUE((*w)->Write(zeros.data(), zeros.size()).ok());
  EXPECT_EQ((*w)->bytes_written(), 8192u);
  ASSERT_TRUE((*w)->Commit(dir_ / "disk.img", 16 << 20).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ / "part"));
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "disk.img").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 16 << 20);
  EXPECT_LE(st.st_blocks * 512, 64 * 1024);
  std::string content = testing::ReadFileOrDie(dir_ / "disk.img");
  EXPECT_EQ(static_cast<uint8_t>(content[4 << 20]), 0xab);
  EXPECT_EQ(content[(4 << 20) - 1], 0);
  EXPECT_EQ(content[(4 << 20) + 8192], 0);
}

// Tests that writing past the limit fails before anything lands and nothing is renamed.
TEST_F(SparseWriterTest, RefusesWritesPastTheLimit) {
  {
    auto w = SparseWriter::Create(dir_ / "part", 0, 4096);
    ASSERT_TRUE(w.ok());
    std::vector<uint8_t> data(8192, 1);
    absl::Status st = (*w)->Write(data.data(), data.size());
    EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "part"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "disk.img"));
}

// Tests that a sparse copy keeps holes and content.
TEST_F(SparseWriterTest, CopySparseKeepsHoles) {
  std::string src = dir_ / "src.img";
  ASSERT_EQ(testing::Sh("truncate -s 32M " + src + " && printf hello | dd of=" + src +
                        " bs=1 seek=20000000 conv=notrunc status=none"),
            0);
  auto w = SparseWriter::Create(dir_ / "part", 0, 32 << 20);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(CopySparse(src, **w).ok());
  ASSERT_TRUE((*w)->Commit(dir_ / "disk.img", 32 << 20).ok());
  EXPECT_EQ(testing::ReadFileOrDie(dir_ / "disk.img"), testing::ReadFileOrDie(src));
  struct stat st {};
  ::stat((dir_ / "disk.img").c_str(), &st);
  EXPECT_LE(st.st_blocks * 512, 64 * 1024);
}

}  // namespace
}  // namespace wisp::populator
