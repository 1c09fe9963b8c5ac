// The harness itself: process groups, log waits, exit codes, nats-server restart on its port.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <thread>

#include "wisp/integration/harness.hpp"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;

// Dead: no such pid, or a zombie waiting for whoever inherited it to reap it.
bool Dead(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_s, comm, state;
  stat >> pid_s >> comm >> state;
  return state == "Z" || state == "X";
}

// Tests that a child's output lands in its log, WaitForLog sees it and the exit code is kept.
TEST(HarnessProcessTest, LogAndExitCode) {
  auto p = Process::Start({.path = "/bin/sh", .args = {"-c", "echo ready; echo oops >&2; exit 3"}});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->WaitForLog("oops", 5s).ok());
  EXPECT_EQ((*p)->Wait(5s), 3);
  EXPECT_NE((*p)->Log().find("ready"), std::string::npos);
}

// Tests that WaitForLog fails early, with the log tail, when the child exits first.
TEST(HarnessProcessTest, WaitForLogFailsWhenChildExits) {
  auto p = Process::Start({.path = "/bin/sh", .args = {"-c", "echo bye; exit 1"}});
  ASSERT_TRUE(p.ok());
  auto st = (*p)->WaitForLog("never", 10s);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("bye"), std::string::npos);
}

// Tests that destroying a Process kills its whole group, grandchildren included.
TEST(HarnessProcessTest, DestructorKillsProcessGroup) {
  pid_t grandchild = 0;
  {
    auto p = Process::Start({.path = "/bin/sh", .args = {"-c", "sleep 60 & echo pid=$!; wait"}});
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->WaitForLog("pid=", 5s).ok());
    std::this_thread::sleep_for(50ms);
    const std::string log = (*p)->Log();
    grandchild = static_cast<pid_t>(std::stoi(log.substr(log.find("pid=") + 4)));
    ASSERT_EQ(::kill(grandchild, 0), 0);
  }
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = Dead(grandchild);
    if (!gone) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(gone);
}

// Tests that Terminate delivers SIGTERM and reports the exit code, and env reaches the child.
TEST(HarnessProcessTest, TerminateAndEnv) {
  auto p = Process::Start({.path = "/bin/sh",
                           .args = {"-c",
                                    "trap 'exit 0' TERM; echo v=$WISP_IT_VALUE; "
                                    "while true; do sleep 0.05; done"},
                           .env = {{"WISP_IT_VALUE", "42"}}});
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->WaitForLog("v=42", 5s).ok());
  EXPECT_EQ((*p)->Terminate(5s), 0);
}

// Tests that nats-server restarts on the same port after SIGKILL, keeping its store dir.
TEST(HarnessNatsTest, KillAndRestartOnSamePort) {
  auto nats = NatsServer::Start();
  ASSERT_TRUE(nats.ok()) << nats.status();
  const int port = (*nats)->port();
  ASSERT_TRUE(WaitForTcp("127.0.0.1", port, 1s).ok());
  (*nats)->Kill();
  EXPECT_FALSE(WaitForTcp("127.0.0.1", port, 200ms).ok());
  ASSERT_TRUE((*nats)->Restart().ok());
  EXPECT_EQ((*nats)->port(), port);
  EXPECT_TRUE(WaitForTcp("127.0.0.1", port, 1s).ok());
  // nats-server's monitoring is off; HTTP readiness is exercised against a port nobody serves.
  EXPECT_FALSE(WaitForHttp("127.0.0.1", FreePort(), "/healthz", 200ms).ok());
}

// Tests that FreePort returns distinct usable ports.
TEST(HarnessPortTest, FreePortsAreUsable) {
  const int a = FreePort();
  const int b = FreePort();
  EXPECT_GT(a, 0);
  EXPECT_GT(b, 0);
  EXPECT_FALSE(WaitForTcp("127.0.0.1", a, 50ms).ok());
}

}  // namespace
}  // namespace wisp::integration
