#include "sidecar_app.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "wisp/fsutil/read_file.hpp"

namespace wisp::sidecar {
namespace {

namespace fs = std::filesystem;

class OneTokenSts : public StsClient {
 public:
  absl::StatusOr<AccessToken> Exchange(const std::string& subject) override {
    if (subject != "projected-jwt") return absl::PermissionDeniedError("wrong subject token");
    return AccessToken{"access-1", "Bearer", std::chrono::seconds(1000)};
  }
};

// One HTTP/1.1 GET over the unix socket; the whole response text.
std::string Get(const std::string& socket_path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "";
  }
  const std::string req = "GET /token HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

absl::Status Parse(std::vector<const char*> args, SidecarSettings& settings) {
  config::Flags flags("wisp-sidecar", "test");
  AddSidecarFlags(flags, settings);
  args.insert(args.begin(), "wisp-sidecar");
  return flags.Parse(static_cast<int>(args.size()), args.data());
}

// Tests that the flags reach the settings and the STS options.
TEST(SidecarAppTest, FlagsAndStsOptions) {
  SidecarSettings s;
  ASSERT_TRUE(Parse({"--sts-url", "https://gw:8443/v1/token", "--audience", "a", "--scope", "x y",
                     "--ca-file", "/ca.pem"},
                    s)
                  .ok());
  EXPECT_EQ(s.socket, "/run/wisp/token.sock");
  StsOptions o = StsOptionsFrom(s);
  EXPECT_EQ(o.url, "https://gw:8443/v1/token");
  EXPECT_EQ(o.ca_file, "/ca.pem");
  EXPECT_EQ(o.audience, "a");
  EXPECT_EQ(o.scope, "x y");
}

// Tests that --sts-audience and --sts-scope (or their environment variables) ask the STS for an
// audience and scope other than the projected token's, overriding --audience and --scope.
TEST(SidecarAppTest, StsAudienceAndScopeOverrideAudienceAndScope) {
  constexpr const char* kProvider =
      "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/p/providers/q";
  SidecarSettings s;
  ASSERT_TRUE(Parse({"--sts-url", "https://gw:8443/v1/token", "--audience", "proj.svc.id.goog",
                     "--sts-audience", kProvider, "--sts-scope",
                     "https://www.googleapis.com/auth/cloud-platform"},
                    s)
                  .ok());
  StsOptions o = StsOptionsFrom(s);
  EXPECT_EQ(o.audience, kProvider);
  EXPECT_EQ(o.scope, "https://www.googleapis.com/auth/cloud-platform");

  SidecarSettings from_env;
  ::setenv("WISP_STS_AUDIENCE", kProvider, 1);
  ::setenv("WISP_STS_SCOPE", "a b", 1);
  const absl::Status parsed = Parse({"--audience", "proj.svc.id.goog", "--scope", "x"}, from_env);
  ::unsetenv("WISP_STS_AUDIENCE");
  ::unsetenv("WISP_STS_SCOPE");
  ASSERT_TRUE(parsed.ok()) << parsed;
  EXPECT_EQ(StsOptionsFrom(from_env).audience, kProvider);
  EXPECT_EQ(StsOptionsFrom(from_env).scope, "a b");

  SidecarSettings neither;
  ASSERT_TRUE(Parse({"--sts-url", "https://gw:8443/v1/token"}, neither).ok());
  auto sts = HttpStsClient::Create(StsOptionsFrom(neither));
  ASSERT_FALSE(sts.ok());
  EXPECT_EQ(sts.status().message(), "audience (or sts-audience): required");
}

// Tests that a started app answers on its socket with the token the STS exchanged for the
// projected token, and stops listening on Stop().
TEST(SidecarAppTest, ServesTheExchangedToken) {
  const fs::path dir = fs::temp_directory_path() / ("sidecar_app_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  SidecarSettings s;
  s.socket = (dir / "token.sock").string();
  s.token_file = (dir / "token").string();
  std::ofstream(s.token_file) << "projected-jwt";
  auto app = SidecarApp::Start(s, std::make_unique<OneTokenSts>());
  ASSERT_TRUE(app.ok()) << app.status();
  const std::string resp = Get(s.socket);
  EXPECT_NE(resp.find("200"), std::string::npos) << resp;
  EXPECT_NE(resp.find("\"access_token\":\"access-1\""), std::string::npos) << resp;
  (*app)->Stop();
  EXPECT_EQ(Get(s.socket), "");
  fs::remove_all(dir);
}

class NoSts : public StsClient {
 public:
  absl::StatusOr<AccessToken> Exchange(const std::string&) override {
    return absl::UnavailableError("connection refused");
  }
};

// Tests that the app exchanges at once, publishes the token's expiry (not the token) in the
// ready file beside the socket, that --probe then passes, and that Stop() clears the file.
TEST(SidecarAppTest, ReadyFileSaysWhenATokenIsHeld) {
  const fs::path dir =
      fs::temp_directory_path() / ("sidecar_ready_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  SidecarSettings s;
  s.socket = (dir / "token.sock").string();
  s.token_file = (dir / "token").string();
  std::ofstream(s.token_file) << "projected-jwt";
  EXPECT_EQ(ReadyFilePath(s), (dir / "ready").string());
  EXPECT_EQ(Probe(s), 1) << "no file yet";
  auto app = SidecarApp::Start(s, std::make_unique<OneTokenSts>());
  ASSERT_TRUE(app.ok()) << app.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!fs::exists(dir / "ready") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string text = fsutil::ReadFile(dir / "ready").value_or("");
  EXPECT_EQ(text.find("access-1"), std::string::npos) << "the token must never be written";
  const long long expiry = std::stoll(text);
  const long long now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  EXPECT_NEAR(expiry, now + 1000, 5);
  EXPECT_EQ(Probe(s), 0);
  (*app)->Stop();
  EXPECT_FALSE(fs::exists(dir / "ready"));
  EXPECT_EQ(Probe(s), 1);
  fs::remove_all(dir);
}

// Tests that without a token (the STS down) there is no ready file, and Stop() is prompt even
// while the refresher backs off.
TEST(SidecarAppTest, NoReadyFileWithoutAToken) {
  const fs::path dir =
      fs::temp_directory_path() / ("sidecar_noready_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  SidecarSettings s;
  s.socket = (dir / "token.sock").string();
  s.token_file = (dir / "token").string();
  s.ready_file = (dir / "probe-here").string();
  std::ofstream(s.token_file) << "projected-jwt";
  std::ofstream(s.ready_file) << "99999999999\n";  // a stale file from an earlier run
  auto app = SidecarApp::Start(s, std::make_unique<NoSts>());
  ASSERT_TRUE(app.ok()) << app.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(fs::exists(s.ready_file)) << "a stale file must not make a new start ready";
  EXPECT_EQ(Probe(s), 1);
  const auto t0 = std::chrono::steady_clock::now();
  (*app)->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace wisp::sidecar
