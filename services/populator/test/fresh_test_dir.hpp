#pragma once
// FreshTestDir: a directory of the running test's own for the populator's unit tests.
//
// Contract: $TMPDIR/<prefix>-<pid>-<test name>, emptied and made anew on each call; the caller
// removes it (TearDown). Call it from a test or its SetUp (it reads gtest's current test name).
//
// Example:
//   void SetUp() override { dir_ = FreshTestDir("wisp-sparse"); }
//   void TearDown() override { std::filesystem::remove_all(dir_); }
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace wisp::populator {

inline std::string FreshTestDir(const std::string& prefix) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          (prefix + "-" + std::to_string(::getpid()) + "-" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace wisp::populator
