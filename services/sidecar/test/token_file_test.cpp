#include "token_file.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace wisp::sidecar {
namespace {

namespace fs = std::filesystem;

// Writes a kubelet-style projection: ts dir, ..data symlink swapped by rename, token ->
// ..data/token.
void Publish(const fs::path& dir, const std::string& name, const std::string& content) {
  const fs::path ts = dir / ("..ts_" + name);
  fs::create_directories(ts);
  std::ofstream(ts / "token") << content;
  const fs::path tmp = dir / "..data_tmp";
  fs::remove(tmp);
  fs::create_symlink(ts.filename(), tmp);
  fs::rename(tmp, dir / "..data");
  if (!fs::exists(fs::symlink_status(dir / "token")))
    fs::create_symlink("..data/token", dir / "token");
}

// Tests that the file is read once, cached, and re-read when ..data is swapped.
TEST(TokenFileTest, RereadsWhenKubeletSwapsData) {
  const fs::path dir = fs::path(::testing::TempDir()) / "projected";
  fs::remove_all(dir);
  fs::create_directories(dir);
  Publish(dir, "1", "first-token\n");
  TokenFile file((dir / "token").string());
  EXPECT_EQ(*file.Read(), "first-token");
  EXPECT_EQ(*file.Read(), "first-token");
  EXPECT_EQ(file.loads(), 1);
  Publish(dir, "2", "second-token-longer");
  EXPECT_EQ(*file.Read(), "second-token-longer");
  EXPECT_EQ(file.loads(), 2);
}

// Tests that missing and empty files are errors naming the path, not content.
TEST(TokenFileTest, MissingOrEmptyIsAnError) {
  TokenFile missing("/nonexistent/token");
  EXPECT_EQ(missing.Read().status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string empty = ::testing::TempDir() + "/empty-token";
  std::ofstream(empty) << "  \n";
  auto st = TokenFile(empty).Read().status();
  EXPECT_NE(std::string(st.message()).find(empty), std::string::npos);
}

}  // namespace
}  // namespace wisp::sidecar
