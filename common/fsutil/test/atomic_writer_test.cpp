#include "wisp/fsutil/atomic_writer.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <regex>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "wisp/fsutil/read_file.hpp"
#include "wisp/status/fake_clock.hpp"

namespace wisp::fsutil {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;

class AtomicWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/wisp-atomic-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Read(const std::string& rel) { return ReadFile(dir_ + "/" + rel).value_or(""); }
  std::string Link(const std::string& rel) { return fs::read_symlink(dir_ + "/" + rel).string(); }
  uint32_t Mode(const std::string& rel) {
    struct stat st;
    EXPECT_EQ(::stat((dir_ + "/" + rel).c_str(), &st), 0);
    return st.st_mode & 07777;
  }
  std::set<std::string> Entries() {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.insert(e.path().filename().string());
    return out;
  }

  std::string dir_;
  // 2026-12-02 15:04:05 UTC.
  FakeClock clock_{std::chrono::system_clock::time_point(std::chrono::seconds(1796223845))};
};

// Tests that a first write creates the timestamped directory, ..data and a relative visible link.
TEST_F(AtomicWriterTest, WritesTimestampedDirDataLinkAndVisibleSymlinks) {
  AtomicWriter writer(dir_, clock_);
  auto changed = writer.Write({{"token", {"abc", 0640}}});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);

  const std::string ts = Link("..data");
  EXPECT_TRUE(std::regex_match(ts, std::regex(R"(\.\.2026_12_02_15_04_05\.\w{6})"))) << ts;
  EXPECT_EQ(Mode(ts), 0755u);
  EXPECT_EQ(Link("token"), "..data/token");
  EXPECT_EQ(Read("token"), "abc");
  EXPECT_EQ(Mode(ts + "/token"), 0640u);
  EXPECT_EQ(Entries(), (std::set<std::string>{"..data", ts, "token"}));
  EXPECT_EQ(*writer.CurrentDataDir(), ts);
}

// Tests that the file mode is exactly the payload's even under a restrictive umask.
TEST_F(AtomicWriterTest, AppliesModeDespiteUmask) {
  const mode_t old = ::umask(0077);
  AtomicWriter writer(dir_, clock_);
  auto changed = writer.Write({{"token", {"abc", 0644}}});
  ::umask(old);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(Mode("token"), 0644u);
  EXPECT_EQ(Mode(Link("..data")), 0755u);
}

// Tests that an unchanged payload is not rewritten and keeps the same data directory.
TEST_F(AtomicWriterTest, SkipsWriteWhenUnchanged) {
  AtomicWriter writer(dir_, clock_);
  ASSERT_TRUE(writer.Write({{"token", {"abc", 0644}}}).ok());
  const std::string ts = Link("..data");
  clock_.Advance(std::chrono::seconds(5));
  auto changed = writer.Write({{"token", {"abc", 0644}}});
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(Link("..data"), ts);
}

// Tests that a skipped write still restores a missing visible symlink.
TEST_F(AtomicWriterTest, UnchangedWriteEnsuresVisibleSymlinks) {
  AtomicWriter writer(dir_, clock_);
  ASSERT_TRUE(writer.Write({{"token", {"abc", 0644}}}).ok());
  fs::remove(dir_ + "/token");
  auto changed = writer.Write({{"token", {"abc", 0644}}});
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(Link("token"), "..data/token");
}

// Tests that a mode change alone produces a new data directory.
TEST_F(AtomicWriterTest, RewritesWhenModeChanges) {
  AtomicWriter writer(dir_, clock_);
  ASSERT_TRUE(writer.Write({{"token", {"abc", 0644}}}).ok());
  auto changed = writer.Write({{"token", {"abc", 0600}}});
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  EXPECT_EQ(Mode("token"), 0600u);
}

// Tests that new content swaps ..data, removes the old directory and stale visible entries.
TEST_F(AtomicWriterTest, ReplacesContentAndRemovesStalePaths) {
  AtomicWriter writer(dir_, clock_);
  ASSERT_TRUE(writer.Write({{"token", {"one", 0644}}, {"old", {"x", 0644}}}).ok());
  const std::string first = Link("..data");
  clock_.Advance(std::chrono::seconds(1));
  auto changed = writer.Write({{"token", {"two", 0644}}});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  const std::string second = Link("..data");
  EXPECT_NE(first, second);
  EXPECT_EQ(Read("token"), "two");
  EXPECT_EQ(Entries(), (std::set<std::string>{"..data", second, "token"}));
}

// Tests that nested keys get parent directories and one visible link per top-level entry.
TEST_F(AtomicWriterTest, NestedPathsGetTopLevelLinkOnly) {
  AtomicWriter writer(dir_, clock_);
  ASSERT_TRUE(writer.Write({{"certs/ca.crt", {"ca", 0644}}, {"./token", {"t", 0644}}}).ok());
  EXPECT_EQ(Link("certs"), "..data/certs");
  EXPECT_EQ(Link("token"), "..data/token");
  EXPECT_EQ(Read("certs/ca.crt"), "ca");
  // Dropping a nested file keeps the others; dropping the directory removes its visible link.
  ASSERT_TRUE(writer.Write({{"token", {"t", 0644}}}).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ + "/certs")));
}

// Tests that a ..data_tmp left behind by a crash does not block the next write.
TEST_F(AtomicWriterTest, RecoversFromLeftoverDataTmp) {
  ASSERT_EQ(::symlink("..nowhere", (dir_ + "/..data_tmp").c_str()), 0);
  AtomicWriter writer(dir_, clock_);
  auto changed = writer.Write({{"token", {"abc", 0644}}});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(Read("token"), "abc");
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ + "/..data_tmp")));
}

// Tests kubelet's validatePath messages, and that a rejected payload writes nothing.
TEST_F(AtomicWriterTest, RejectsInvalidPathsWithKubeletMessages) {
  struct Case {
    std::string path;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "invalid path: must not be empty: \"\""},
      {"/abs", "invalid path: must be relative path: /abs"},
      {std::string(4097, 'a'), "invalid path: must be less than or equal to 4096 characters"},
      {"a/../b", "invalid path: must not contain '..': a/../b"},
      {"..", "invalid path: must not contain '..': .."},
      {std::string(256, 'f'),
       "invalid path: filenames must be less than or equal to 255 characters"},
      {"..data/x", "invalid path: must not start with '..': ..data/x"},
      {"...", "invalid path: must not start with '..': ..."},
  };
  AtomicWriter writer(dir_, clock_);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path.substr(0, 20));
    auto changed = writer.Write({{"good", {"g", 0644}}, {c.path, {"x", 0644}}});
    ASSERT_FALSE(changed.ok());
    EXPECT_EQ(changed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(changed.status().message()), c.message);
  }
  EXPECT_TRUE(Entries().empty());
  EXPECT_TRUE(ValidatePath("a/..b").ok());
  EXPECT_TRUE(ValidatePath("..").code() == absl::StatusCode::kInvalidArgument);
}

// Tests that a reader looping over the file during rotations only ever sees a complete token.
TEST_F(AtomicWriterTest, ReaderNeverSeesPartialOrMixedToken) {
  AtomicWriter writer(dir_, clock_);
  // Distinct lengths and bytes so a torn or mixed read cannot look like a valid one.
  std::vector<std::string> tokens;
  for (int i = 0; i < 8; ++i)
    tokens.push_back(std::string(1000 + 997 * i, static_cast<char>('a' + i)));
  const std::set<std::string> valid(tokens.begin(), tokens.end());
  ASSERT_TRUE(writer.Write({{"token", {tokens[0], 0644}}}).ok());

  std::atomic<bool> stop{false};
  std::atomic<int> reads{0}, bad{0};
  std::thread reader([&] {
    while (!stop.load()) {
      auto got = ReadFile(dir_ + "/token");
      if (!got.ok())
        continue;  // the old directory vanished between path lookups: retry, never partial
      ++reads;
      if (!valid.count(*got)) ++bad;
    }
  });
  for (int round = 1; round <= 400; ++round) {
    ASSERT_TRUE(writer.Write({{"token", {tokens[round % tokens.size()], 0644}}}).ok());
  }
  while (reads.load() < 200) std::this_thread::yield();
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_EQ(Read("token"), tokens[400 % tokens.size()]);
  EXPECT_EQ(Entries().size(), 3u);  // ..data, one timestamped dir, token
}

}  // namespace
}  // namespace wisp::fsutil
