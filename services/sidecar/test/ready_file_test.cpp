#include "ready_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "wisp/fsutil/read_file.hpp"

namespace wisp::sidecar {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using std::chrono::system_clock;

class ReadyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ready_file_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "ready").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string path_;
};

// Tests that a published expiry is one line of Unix seconds, mode 0644, with no temporary left.
TEST_F(ReadyFileTest, PublishWritesTheExpiryAtomically) {
  ::umask(077);
  const system_clock::time_point expiry{seconds(1800000000)};
  ASSERT_TRUE(ReadyFile(path_).Publish(expiry).ok());
  EXPECT_EQ(fsutil::ReadFile(path_).value_or(""), "1800000000\n");
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
  ::umask(022);
}

// Tests each verdict of the probe: ready, expired, missing, garbage.
TEST_F(ReadyFileTest, CheckReadyVerdicts) {
  const system_clock::time_point now{seconds(1800000000)};
  absl::Status missing = CheckReady(path_, now);
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.message().find("no token yet"), std::string::npos) << missing;

  ASSERT_TRUE(ReadyFile(path_).Publish(now + seconds(60)).ok());
  EXPECT_TRUE(CheckReady(path_, now).ok());

  absl::Status expired = CheckReady(path_, now + seconds(61));
  EXPECT_EQ(expired.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(expired.message().find("expired at 2027-01-15T08:01:00Z"), std::string::npos)
      << expired;

  std::ofstream(path_) << "soon\n";
  absl::Status garbage = CheckReady(path_, now);
  EXPECT_EQ(garbage.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(garbage.message().find(path_), std::string::npos) << garbage;

  ReadyFile(path_).Clear();
  EXPECT_FALSE(fs::exists(path_));
}

// Tests that a directory that cannot take the file is an error naming it, not a crash.
TEST_F(ReadyFileTest, UnwritableDirectoryIsAnError) {
  absl::Status st = ReadyFile((dir_ / "missing" / "ready").string()).Publish(system_clock::now());
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("missing"), std::string::npos) << st;
}

}  // namespace
}  // namespace wisp::sidecar
