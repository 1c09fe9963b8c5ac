#include "wisp/config/file_reloader.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

namespace wisp::config {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class FileReloaderTest : public ::testing::Test {
 protected:
  FileReloaderTest() {
    dir_ = fs::temp_directory_path() /
           ("wisp-reloader-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::create_directories(dir_);
    path_ = (dir_ / "conf.yaml").string();
    Write("good: 1\n");
  }
  ~FileReloaderTest() override { fs::remove_all(dir_); }

  void Write(const std::string& text) {
    // A new file renamed over the old one (a new inode), as editors and ConfigMaps do.
    const std::string tmp = path_ + ".tmp";
    std::ofstream(tmp) << text;
    fs::rename(tmp, path_);
  }
  FileReloader::Options Opts(std::chrono::milliseconds interval = 20ms) {
    return {.path = path_, .interval = interval};
  }
  // Accepts bytes starting with "good", refuses the rest.
  FileReloader::Apply Apply() {
    return [this](const std::string& bytes) -> absl::Status {
      if (bytes.rfind("good", 0) != 0) return absl::InvalidArgumentError("bad: " + bytes);
      std::lock_guard lock(mu_);
      applied_.push_back(bytes);
      return absl::OkStatus();
    };
  }
  FileReloader::Observe Observe() {
    return [this](std::string_view trigger, const absl::Status& st) {
      std::lock_guard lock(mu_);
      outcomes_[std::string(trigger) + (st.ok() ? "/ok" : "/error")]++;
    };
  }
  int Outcome(const std::string& key) {
    std::lock_guard lock(mu_);
    return outcomes_[key];
  }
  std::vector<std::string> Applied() {
    std::lock_guard lock(mu_);
    return applied_;
  }
  template <typename Pred>
  bool Eventually(Pred pred) {
    for (int i = 0; i < 250; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(20ms);
    }
    return pred();
  }

  static inline int counter_ = 0;
  fs::path dir_;
  std::string path_;
  std::mutex mu_;
  std::vector<std::string> applied_;
  std::map<std::string, int> outcomes_;
};

// Tests that Reload applies a good file, refuses a bad or missing one without applying it, and
// reports every attempt with its trigger.
TEST_F(FileReloaderTest, ReloadAppliesOrRefusesAndReportsEachAttempt) {
  FileReloader r(Opts(), Apply(), Observe());
  Write("good: 2\n");
  ASSERT_TRUE(r.Reload("sighup").ok());
  Write("bad\n");
  auto st = r.Reload("sighup");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  fs::remove(path_);
  st = r.Reload("manual");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(st.message()).find(path_), std::string::npos) << st;
  EXPECT_EQ(Applied(), std::vector<std::string>{"good: 2\n"});
  EXPECT_EQ(Outcome("sighup/ok"), 1);
  EXPECT_EQ(Outcome("sighup/error"), 1);
  EXPECT_EQ(Outcome("manual/error"), 1);
}

// Tests that ReloadIfChanged skips the bytes loaded at construction and the last attempt's bytes
// (also a refused file's), and treats a missing file as no change.
TEST_F(FileReloaderTest, ReloadIfChangedOnlyOnNewBytes) {
  FileReloader r(Opts(), Apply(), Observe());
  EXPECT_TRUE(r.ReloadIfChanged("file-change").ok());
  Write("good: 1\n");  // a new inode, the same bytes
  EXPECT_TRUE(r.ReloadIfChanged("file-change").ok());
  EXPECT_TRUE(Applied().empty());
  Write("bad\n");
  EXPECT_FALSE(r.ReloadIfChanged("file-change").ok());
  EXPECT_TRUE(r.ReloadIfChanged("file-change").ok());  // refused once, not retried unchanged
  EXPECT_EQ(Outcome("file-change/error"), 1);
  fs::remove(path_);
  EXPECT_TRUE(r.ReloadIfChanged("file-change").ok());
  Write("good: 3\n");
  EXPECT_TRUE(r.ReloadIfChanged("file-change").ok());
  EXPECT_EQ(Applied(), std::vector<std::string>{"good: 3\n"});
  EXPECT_EQ(Outcome("file-change/ok"), 1);
}

// Tests that the watcher thread reloads a changed file with the change trigger and runs on_tick
// after every check, and that Stop ends it.
TEST_F(FileReloaderTest, WatcherReloadsChangesAndTicks) {
  std::atomic<int> ticks{0};
  auto o = Opts();
  o.change_trigger = "file changed";
  o.on_tick = [&] { ticks++; };
  FileReloader r(o, Apply(), Observe());
  r.Start();
  Write("good: watched\n");
  EXPECT_TRUE(Eventually([&] { return Outcome("file changed/ok") == 1; }));
  EXPECT_TRUE(Eventually([&] { return ticks.load() >= 3; }));
  r.Stop();
  const int after_stop = ticks.load();
  std::this_thread::sleep_for(60ms);
  EXPECT_EQ(ticks.load(), after_stop);
  EXPECT_EQ(Applied(), std::vector<std::string>{"good: watched\n"});
}

// Tests that with take_sighup the watcher reloads on SIGHUP even when the file is unchanged, and
// that Stop wakes it at once although the interval is long.
TEST_F(FileReloaderTest, WatcherTakesSighup) {
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  {
    auto o = Opts(10s);
    o.take_sighup = true;
    FileReloader r(o, Apply(), Observe());
    r.Start();
    kill(getpid(), SIGHUP);
    EXPECT_TRUE(Eventually([&] { return Outcome("sighup/ok") == 1; }));
    const auto t0 = std::chrono::steady_clock::now();
    r.Stop();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  EXPECT_EQ(Applied(), std::vector<std::string>{"good: 1\n"});
}

}  // namespace
}  // namespace wisp::config
