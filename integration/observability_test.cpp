// What operators scrape, checked on the real stack (issue 7, item 5): the stack runs with
// per-service NATS users, every flow is driven once through its real entry point (admission
// webhooks over HTTPS, OIDC discovery, STS, token issue/verify/exchange with wispctl, CSI over the
// unix socket, a volume import from an HTTP server), and then
//   - `promtool check metrics` passes on every service's /metrics (scripts/check-deploy metrics);
//   - every metric that a Prometheus rule or a Grafana dashboard queries is exported by some
//     service (scripts/check-deploy exported), so no panel or alert silently reads nothing.
// Labelled families (prometheus-cpp exports a family only once it has a series) are the reason
// the flows are driven first: an idle stack omits a dozen of them.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "csi_client.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/stack.hpp"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

std::string Quoted(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += " '" + w + "'";
  return out;
}

class ObservabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto stack = Stack::Start({.auth = true});
    ASSERT_TRUE(stack.ok()) << stack.status();
    stack_ = std::move(*stack);
  }

  // Runs wispctl with the stack's connection options; returns its output, expecting success.
  std::string Wispctl(const std::vector<std::string>& args) {
    std::vector<std::string> all = args;
    const auto conn = stack_->WispctlArgs();
    all.insert(all.end(), conn.begin(), conn.end());
    CommandResult r = RunCommand(BinaryPath("wispctl") + Quoted(all) + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << "wispctl" << Quoted(args) << ":\n" << r.output;
    return r.output;
  }

  std::vector<std::string> MetricsUrls() const {
    std::vector<std::string> urls;
    for (const char* s : {"wisp-gateway", "wisp-policy", "wisp-token", "wisp-populator"}) {
      urls.push_back("http://127.0.0.1:" + std::to_string(stack_->metrics_port(s)) + "/metrics");
    }
    return urls;
  }

  std::unique_ptr<Stack> stack_;
};

std::string PodReview(const std::string& uid) {
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", "loader"},
                {"namespace", "default"},
                {"annotations", {{"wisp.dev/token-sidecar", "true"}}}}},
              {"spec",
               {{"hostNetwork", true},
                {"serviceAccountName", "loader"},
                {"containers", {{{"name", "app"}, {"image", "busybox"}}}}}}};
  return Json{{"apiVersion", "admission.k8s.io/v1"},
              {"kind", "AdmissionReview"},
              {"request",
               {{"uid", uid},
                {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                {"operation", "CREATE"},
                {"namespace", "default"},
                {"name", "loader"},
                {"userInfo", {{"username", "kubernetes-admin"}}},
                {"object", pod},
                {"dryRun", false}}}}
      .dump();
}

// Tests that, once every flow has run, each service's /metrics passes promtool and every metric
// the rules and dashboards query is exported.
TEST_F(ObservabilityTest, EveryQueriedMetricIsExportedAfterEveryFlow) {
  // Admission: both webhooks (gateway admission metrics, policy rule decisions).
  for (const std::string webhook : {"mutate", "validate"}) {
    auto resp = stack_->Https("POST", "/" + webhook + "?timeout=5s", PodReview("uid-" + webhook),
                              {{"Content-Type", "application/json"}});
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_EQ(resp->status, 200) << resp->body;
  }
  // OIDC discovery and the JWKS.
  for (const std::string path : {"/.well-known/openid-configuration", "/openid/v1/jwks"}) {
    auto resp = stack_->Https("GET", path);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_EQ(resp->status, 200) << path << ": " << resp->body;
  }
  // Tokens: an issue, a refused issue, a review and an exchange on the bus, and the STS over HTTPS.
  const std::string token = Wispctl({"token", "issue", "--namespace", "default",
                                     "--service-account", "loader", "--audience", "wisp"});
  std::string jwt = token;
  while (!jwt.empty() && (jwt.back() == '\n' || jwt.back() == ' ')) jwt.pop_back();
  ASSERT_EQ(std::count(jwt.begin(), jwt.end(), '.'), 2) << token;
  CommandResult refused = RunCommand(
      BinaryPath("wispctl") + " token issue --namespace default --service-account loader" +
      " --expiration-seconds 10" + Quoted(stack_->WispctlArgs()) + " 2>&1");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("less than 10 minutes"), std::string::npos) << refused.output;
  // A token goes by file, never on a command line.
  TempDir dir("wisp-obs-token");
  const std::string token_file = dir.path() + "/token";
  std::ofstream(token_file) << jwt << "\n";
  Wispctl({"token", "verify", "--token-file", token_file, "--audience", "wisp"});
  (void)RunCommand(BinaryPath("wispctl") + " token exchange --token-file '" + token_file +
                   "' --audience storage.wisp.dev" + Quoted(stack_->WispctlArgs()) + " 2>&1");
  auto sts = stack_->Https("POST", "/v1/token", "grant_type=password",
                           {{"Content-Type", "application/x-www-form-urlencoded"}});
  ASSERT_TRUE(sts.ok()) << sts.status();
  EXPECT_EQ(sts->status, 400) << sts->body;

  // CSI: identity and node calls over the unix socket.
  {
    CsiClient csi(stack_->csi_socket());
    ::csi::v1::GetPluginInfoRequest req;
    ::csi::v1::GetPluginInfoResponse resp;
    ASSERT_TRUE(csi.identity->GetPluginInfo(CsiClient::Ctx().get(), req, &resp).ok());
    ::csi::v1::NodeGetInfoRequest info_req;
    ::csi::v1::NodeGetInfoResponse info;
    ASSERT_TRUE(csi.node->NodeGetInfo(CsiClient::Ctx().get(), info_req, &info).ok());
  }

  // Population: a raw image served over HTTP, imported to Succeeded.
  const std::string www = stack_->dir() + "/www";
  ASSERT_EQ(
      RunCommand("mkdir -p " + www + " && head -c 1048576 /dev/urandom > " + www + "/disk.raw")
          .exit_code,
      0);
  const int port = FreePort();
  auto http = Process::Start({.path = "/usr/bin/python3",
                              .args = {"-m", "http.server", std::to_string(port), "--bind",
                                       "127.0.0.1", "--directory", www}});
  ASSERT_TRUE(http.ok()) << http.status();
  ASSERT_TRUE(WaitForTcp("127.0.0.1", port, 10s).ok());
  const std::string created =
      Wispctl({"volume", "create", "observed", "--capacity", "4Mi", "--url",
               "http://127.0.0.1:" + std::to_string(port) + "/disk.raw", "--watch"});
  EXPECT_NE(created.find("Succeeded"), std::string::npos) << created;

  const auto urls = MetricsUrls();
  CommandResult lint =
      RunCommand(SourceDir() + "/scripts/check-deploy metrics" + Quoted(urls) + " 2>&1");
  EXPECT_EQ(lint.exit_code, 0) << lint.output;
  CommandResult exported =
      RunCommand(SourceDir() + "/scripts/check-deploy exported" + Quoted(urls) + " 2>&1");
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
}

}  // namespace
}  // namespace wisp::integration
