// scripts/local-up end to end, with this build's binaries (WISP_SKIP_BUILD=1, WISP_BUILD_DIR),
// free ports and a temporary state directory:
//   - NATS serves TLS and verifies client certificates, every service connects over it, and
//     wispctl given only endpoints.env (as README says: set -a; . endpoints.env; set +a) sees all
//     four services answer;
//   - wispctl without the client certificate, or without the CA, is refused;
//   - SIGTERM stops everything with exit 0, and a second start reuses the CA and certificates;
//   - no NATS password is on the command line of nats-server or any service (/proc/<pid>/cmdline,
//     what `ps` shows every user);
//   - Ctrl-C (SIGINT to the script's process group, as a terminal sends it) stops everything in a
//     few seconds, every service draining while NATS is still up.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <utility>
#include <vector>

#include "wisp/integration/harness.hpp"
#include "wisp/integration/stack.hpp"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// True when a listening socket can bind 127.0.0.1:port now.
bool Bindable(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// A base port p such that p + each offset is free, below the kernel's ephemeral range, and not
// one of `taken`. local-up derives ports from its bases (metrics base + 0..3, NATS + 4000) and
// binds them seconds later, after making certificates; in the ephemeral range (where FreePort()
// picks) a concurrent test's outgoing connection can take one of them meanwhile, which made
// wisp-populator fail with "Address already in use" under ctest -j2.
int FreeBelowEphemeral(const std::vector<int>& offsets, std::vector<int>& taken) {
  int low = 32768;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low;
  const int span = *std::max_element(offsets.begin(), offsets.end());
  std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  std::uniform_int_distribution<int> pick(10000, std::max(10001, low - span - 1));
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int base = pick(rng);
    bool ok = true;
    for (int off : offsets) {
      const int port = base + off;
      ok = ok && port < low && std::find(taken.begin(), taken.end(), port) == taken.end() &&
           Bindable(port);
    }
    if (!ok) continue;
    for (int off : offsets) taken.push_back(base + off);
    return base;
  }
  return FreePort();
}

// Every process but this one whose command line mentions `needle`, with that command line (its
// arguments as /proc/<pid>/cmdline holds them, NUL-separated).
std::vector<std::pair<pid_t, std::string>> ProcessesMentioning(const std::string& needle) {
  std::vector<std::pair<pid_t, std::string>> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = ::readdir(proc)) {
    const std::string name = e->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == ::getpid()) continue;
    const std::string cmdline = fsutil::ReadFile("/proc/" + name + "/cmdline").value_or("");
    if (cmdline.find(needle) != std::string::npos) out.emplace_back(pid, cmdline);
  }
  ::closedir(proc);
  return out;
}

class LocalUpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = std::make_unique<TempDir>("wisp-local-up");
    build_dir_ = fs::path(BinaryPath("wispctl")).parent_path().parent_path().string();
    std::vector<int> taken;
    nats_port_ = FreeBelowEphemeral({0, 4000}, taken);
    metrics_base_ = FreeBelowEphemeral({0, 1, 2, 3}, taken);
    gateway_port_ = FreeBelowEphemeral({0}, taken);
  }
  // local-up's children run under setsid, out of the script's process group, so the harness's
  // group kill does not reach them: a failed test must not leave them running.
  void TearDown() override {
    for (const auto& [pid, cmdline] : ProcessesMentioning(state_->path())) ::kill(pid, SIGKILL);
  }
  absl::StatusOr<std::unique_ptr<Process>> Start(const std::string& log_name) {
    return Process::Start({.path = SourceDir() + "/scripts/local-up",
                           .env = {{"WISP_SKIP_BUILD", "1"},
                                   {"WISP_BUILD_DIR", build_dir_},
                                   {"WISP_LOCAL_DIR", state_->path()},
                                   {"WISP_NATS_PORT", std::to_string(nats_port_)},
                                   {"WISP_GATEWAY_PORT", std::to_string(gateway_port_)},
                                   {"WISP_METRICS_BASE", std::to_string(metrics_base_)}},
                           .log_path = RunDir() + "/" + log_name + ".log"});
  }
  // wispctl status with endpoints.env's variables, after `unset`ting the given ones.
  CommandResult Status(const std::string& unset = "") {
    return RunCommand("set -a; . " + state_->path() + "/endpoints.env; set +a; " +
                      (unset.empty() ? "" : "unset " + unset + "; ") + BinaryPath("wispctl") +
                      " status --timeout 5s");
  }

  std::unique_ptr<TempDir> state_;
  std::string build_dir_;
  int nats_port_ = 0, metrics_base_ = 0, gateway_port_ = 0;
};

// Tests that local-up runs every service over NATS TLS and that wispctl reaches them from
// endpoints.env alone.
TEST_F(LocalUpTest, RunsTheStackOverNatsTls) {
  auto up = Start("local-up-1");
  ASSERT_TRUE(up.ok()) << up.status();
  ASSERT_TRUE((*up)->WaitForLog("local-up: wisp is running", 120s).ok()) << (*up)->Log();

  const std::string env = fsutil::ReadFile(state_->path() + "/endpoints.env").value_or("");
  EXPECT_NE(env.find("WISP_NATS_URL=tls://127.0.0.1:" + std::to_string(nats_port_)),
            std::string::npos)
      << env;
  for (const char* key : {"WISP_NATS_CA=", "WISP_NATS_CERT=", "WISP_NATS_KEY="}) {
    EXPECT_NE(env.find(key), std::string::npos) << key;
  }
  const std::string conf = fsutil::ReadFile(state_->path() + "/nats.conf").value_or("");
  EXPECT_NE(conf.find("verify: true"), std::string::npos) << conf;

  auto status = Status();
  ASSERT_EQ(status.exit_code, 0) << status.output << "\n" << (*up)->Log();
  EXPECT_NE(status.output.find("4 services, 4 instances answered"), std::string::npos)
      << status.output;
  // Every service's connection is TLS (nats-server's /connz, on the monitoring port).
  auto connz = HttpGet("127.0.0.1", nats_port_ + 4000, "/connz", 5s);
  ASSERT_TRUE(connz.ok()) << connz.status();
  for (const char* svc : {"wisp-token", "wisp-policy", "wisp-populator", "wisp-gateway"}) {
    EXPECT_NE(connz->body.find(std::string("\"name\": \"") + svc + "\""), std::string::npos) << svc;
  }
  size_t tls = 0;
  for (size_t at = 0; (at = connz->body.find("\"tls_version\"", at)) != std::string::npos; ++at) {
    ++tls;
  }
  EXPECT_GE(tls, 4u) << connz->body;

  EXPECT_NE(Status("WISP_NATS_CERT WISP_NATS_KEY").exit_code, 0) << "no client certificate";
  EXPECT_NE(Status("WISP_NATS_CA").exit_code, 0) << "no CA";

  EXPECT_EQ((*up)->Terminate(30s), 0) << (*up)->Log();

  // A second start keeps the CA material and serves again.
  const std::string ca = fsutil::ReadFile(state_->path() + "/pki/ca.pem").value_or("");
  const std::string server = fsutil::ReadFile(state_->path() + "/pki/nats-server.pem").value_or("");
  auto again = Start("local-up-2");
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->WaitForLog("local-up: wisp is running", 120s).ok()) << (*again)->Log();
  EXPECT_EQ((*again)->Log().find("creating"), std::string::npos) << (*again)->Log();
  EXPECT_EQ(fsutil::ReadFile(state_->path() + "/pki/ca.pem").value_or(""), ca);
  EXPECT_EQ(fsutil::ReadFile(state_->path() + "/pki/nats-server.pem").value_or(""), server);
  status = Status();
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_EQ((*again)->Terminate(30s), 0) << (*again)->Log();
}

// Tests that no secret is on a command line of the stack local-up starts, and that Ctrl-C stops it
// in dependency order within seconds (services drain while NATS is up; nats-server last).
TEST_F(LocalUpTest, NoSecretOnACommandLineAndCtrlCStopsInOrder) {
  auto up = Start("local-up-ctrl-c");
  ASSERT_TRUE(up.ok()) << up.status();
  ASSERT_TRUE((*up)->WaitForLog("local-up: wisp is running", 120s).ok()) << (*up)->Log();

  std::vector<std::string> passwords;
  for (const auto& f : fs::directory_iterator(state_->path() + "/secrets")) {
    const std::string file = f.path().filename().string();
    if (file.rfind("nats-", 0) != 0) continue;
    const std::string pw = fsutil::ReadTrimmedFile(f.path().string()).value_or("");
    if (!pw.empty()) passwords.push_back(pw);
  }
  ASSERT_GE(passwords.size(), 5u) << "scripts/nats-auth made no passwords?";
  const auto procs = ProcessesMentioning(state_->path());
  for (const char* program :
       {"nats-server", "wisp-token", "wisp-policy", "wisp-populator", "wisp-gateway"}) {
    EXPECT_TRUE(
        std::any_of(procs.begin(), procs.end(),
                    [&](const auto& p) { return p.second.find(program) != std::string::npos; }))
        << program << " not found among the stack's processes";
  }
  for (const auto& [pid, cmdline] : procs) {
    std::string shown = cmdline;
    std::replace(shown.begin(), shown.end(), '\0', ' ');
    for (const std::string& pw : passwords) {
      EXPECT_EQ(cmdline.find(pw), std::string::npos) << "pid " << pid << ": " << shown;
    }
    // No secret flag with a value either, whatever the value (split on the NULs).
    size_t at = 0;
    while (at < cmdline.size()) {
      size_t end = cmdline.find('\0', at);
      if (end == std::string::npos) end = cmdline.size();
      const std::string arg = cmdline.substr(at, end - at);
      EXPECT_NE(arg, "--nats-password") << shown;
      EXPECT_NE(arg.rfind("--nats-password=", 0), 0u) << shown;
      at = end + 1;
    }
  }

  // Ctrl-C: SIGINT to the whole foreground process group, as a terminal sends it.
  const auto interrupted = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(-(*up)->pid(), SIGINT), 0);
  const auto code = (*up)->Wait(60s);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - interrupted).count();
  std::printf("local-up: Ctrl-C to all gone in %.1f s\n", took);
  RecordProperty("ctrl_c_stop_seconds", std::to_string(took));
  EXPECT_EQ(code, 0) << (*up)->Log();
  EXPECT_LT(took, 10.0) << (*up)->Log();
  EXPECT_NE((*up)->Log().find("local-up: stopped in "), std::string::npos) << (*up)->Log();
  EXPECT_TRUE(ProcessesMentioning(state_->path()).empty());
  for (const char* svc : {"wisp-gateway", "wisp-populator", "wisp-policy", "wisp-token"}) {
    const std::string log = fsutil::ReadFile(state_->path() + "/logs/" + svc + ".log").value_or("");
    EXPECT_EQ(log.find("did not finish in time"), std::string::npos) << svc << ":\n" << log;
    EXPECT_NE(log.find(std::string(svc) + " stopped"), std::string::npos) << svc << ":\n" << log;
  }
}

}  // namespace
}  // namespace wisp::integration
