#include "wisp/kube/config.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "wisp/status/fake_clock.hpp"

namespace wisp::kube {
namespace {

namespace fs = std::filesystem;

class KubeconfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kube_config_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "certs");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

const char* kTwoContexts = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev-cluster
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: certs/ca.crt
    tls-server-name: kubernetes.default
- name: prod-cluster
  cluster:
    server: https://prod:443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev-user, namespace: team}
- name: prod
  context: {cluster: prod-cluster, user: prod-user}
users:
- name: dev-user
  user:
    client-certificate: certs/admin.crt
    client-key: /abs/admin.key
- name: prod-user
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
    tokenFile: token
)";

// Tests that the current context's cluster and user are read, relative paths resolved against the
// kubeconfig's directory and absolute ones kept.
TEST_F(KubeconfigTest, ReadsCurrentContextAndResolvesRelativePaths) {
  const std::string path = Write("config", kTwoContexts);
  auto c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://127.0.0.1:6443");
  EXPECT_EQ(c->tls.ca_file, (dir_ / "certs/ca.crt").string());
  EXPECT_EQ(c->tls.server_name, "kubernetes.default");
  EXPECT_EQ(c->tls.cert_file, (dir_ / "certs/admin.crt").string());
  EXPECT_EQ(c->tls.key_file, "/abs/admin.key");
  EXPECT_EQ(c->default_namespace, "team");
  EXPECT_TRUE(c->token.empty());
  EXPECT_NE(c->origin.find("context dev"), std::string::npos);
}

// Tests that -data fields are base64-decoded PEM and that a named context wins over the current.
TEST_F(KubeconfigTest, DecodesDataFieldsOfANamedContext) {
  const std::string path = Write("config", kTwoContexts);
  auto c = LoadKubeconfig(path, "prod");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://prod:443");
  EXPECT_EQ(c->tls.ca_pem, "-----BEGIN CERTIFICATE-----");
  EXPECT_TRUE(c->tls.ca_file.empty());
  EXPECT_EQ(c->tls.cert_pem, "CERT");
  EXPECT_EQ(c->tls.key_pem, "KEY");
  EXPECT_EQ(c->token_file, (dir_ / "token").string());
  EXPECT_EQ(c->default_namespace, "default");
}

// Tests that what wisp will not do is refused with a message naming the file and the entry.
TEST_F(KubeconfigTest, RefusesExecAuthProviderInsecureAndMissingEntries) {
  struct Case {
    std::string yaml;
    std::string context;
    std::string want;
  };
  const std::string head =
      "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n";
  const std::string cluster = "clusters:\n- name: k\n  cluster: {server: 'https://h'}\n";
  const std::vector<Case> cases = {
      {head + cluster + "users:\n- name: u\n  user:\n    exec:\n      command: aws\n", "",
       "user \"u\" authenticates with an exec credential plugin"},
      {head + cluster + "users:\n- name: u\n  user:\n    auth-provider: {name: gcp}\n", "",
       "user \"u\" authenticates with an auth-provider"},
      {head + cluster + "users:\n- name: u\n  user: {username: a, password: b}\n", "",
       "basic authentication"},
      {head +
           "clusters:\n- name: k\n  cluster: {server: 'https://h', insecure-skip-tls-verify: "
           "true}\n" +
           "users:\n- name: u\n  user: {token: t}\n",
       "", "insecure-skip-tls-verify is refused"},
      {head + "clusters:\n- name: k\n  cluster: {certificate-authority: x}\n", "", "has no server"},
      {head + cluster, "", "names user \"u\", which is not there"},
      {head + cluster, "other", "context \"other\" is not there"},
      {head + "clusters:\n- name: k\n  cluster: {server: 'https://h', certificate-authority-data: "
              "'!!'}\n",
       "", "certificate-authority-data is not valid base64"},
      {"- a list\n", "", "is not a kubeconfig"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.want);
    const std::string path = Write("bad", c.yaml);
    auto got = LoadKubeconfig(path, c.context);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_NE(got.status().message().find(c.want), std::string::npos) << got.status();
    EXPECT_NE(got.status().message().find(path), std::string::npos) << got.status();
  }
  EXPECT_EQ(LoadKubeconfig((dir_ / "absent").string()).status().code(),
            absl::StatusCode::kNotFound);
}

// Tests that KUBECONFIG listing several files reads the first and says so in the origin.
TEST_F(KubeconfigTest, KubeconfigVariableReadsTheFirstFile) {
  const std::string path = Write("config", kTwoContexts);
  const char* saved = std::getenv("KUBECONFIG");
  const std::string restore = saved != nullptr ? saved : "";
  ::setenv("KUBECONFIG", (path + ":/nonexistent/other").c_str(), 1);
  auto c = LoadFromEnvironment();
  if (saved != nullptr) {
    ::setenv("KUBECONFIG", restore.c_str(), 1);
  } else {
    ::unsetenv("KUBECONFIG");
  }
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://127.0.0.1:6443");
  EXPECT_NE(c->origin.find("first file of KUBECONFIG"), std::string::npos) << c->origin;
}

// Tests that in-cluster config takes the service host and port, the CA and token files and the
// namespace, and names what is missing.
TEST_F(KubeconfigTest, InClusterReadsServiceAccountFiles) {
  Write("token", "t1\n");
  Write("ca.crt", "PEM");
  Write("namespace", "wisp-system\n");
  InClusterPaths paths{.dir = dir_.string(), .host = "fd00::1", .port = "443"};
  auto c = LoadInCluster(paths);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://[fd00::1]:443");
  EXPECT_EQ(c->tls.ca_file, (dir_ / "ca.crt").string());
  EXPECT_EQ(c->token_file, (dir_ / "token").string());
  EXPECT_EQ(c->default_namespace, "wisp-system");
  EXPECT_EQ(c->origin, "in-cluster");

  paths.host = "";
  EXPECT_NE(LoadInCluster(paths).status().message().find("KUBERNETES_SERVICE_HOST"),
            std::string::npos);
  paths.host = "10.0.0.1";
  fs::remove(dir_ / "ca.crt");
  EXPECT_NE(LoadInCluster(paths).status().message().find("ca.crt is missing"), std::string::npos);
}

// Tests that a token file is re-read once the refresh period passed (kubelet rotated it), not
// before, and at once after Invalidate(); a vanished file keeps the last good token.
TEST_F(KubeconfigTest, TokenFileIsReReadAsItRotates) {
  const std::string path = Write("token", "first\n");
  FakeClock clock;
  TokenSource tokens("", path, &clock);
  EXPECT_EQ(*tokens.Token(), "first");
  Write("token", "second");
  clock.Advance(std::chrono::seconds(30));
  EXPECT_EQ(*tokens.Token(), "first");
  clock.Advance(std::chrono::seconds(31));
  EXPECT_EQ(*tokens.Token(), "second");
  Write("token", "third");
  tokens.Invalidate();
  EXPECT_EQ(*tokens.Token(), "third");
  fs::remove(path);
  clock.Advance(std::chrono::minutes(2));
  EXPECT_EQ(*tokens.Token(), "third");

  TokenSource never("", (dir_ / "nope").string(), &clock);
  EXPECT_EQ(never.Token().status().code(), absl::StatusCode::kUnavailable);
  TokenSource fixed("static");
  EXPECT_EQ(*fixed.Token(), "static");
}

}  // namespace
}  // namespace wisp::kube
