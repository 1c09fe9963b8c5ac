// The foundation, end to end: four real services on a real nats-server (JetStream on, per-service
// users), discovered through the NATS service protocol, a request through the gateway to the
// policy service and back, and recovery from nats-server dying under them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "wisp/integration/stack.hpp"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;

std::string WispctlStatus(Stack& stack) {
  std::string cmd = BinaryPath("wispctl") +
                    " status --json --timeout 1s --expect "
                    "wisp-gateway,wisp-policy,wisp-token,wisp-populator";
  for (const auto& a : stack.WispctlArgs()) cmd += " '" + a + "'";
  auto r = RunCommand(cmd);
  return r.exit_code == 0 ? r.output : "exit " + std::to_string(r.exit_code) + ": " + r.output;
}

std::string Review(const std::string& uid) {
  nlohmann::json pod = {{"apiVersion", "v1"},
                        {"kind", "Pod"},
                        {"metadata", {{"name", "plain"}, {"namespace", "default"}}},
                        {"spec", {{"containers", {{{"name", "app"}, {"image", "busybox"}}}}}}};
  nlohmann::json review = {
      {"apiVersion", "admission.k8s.io/v1"},
      {"kind", "AdmissionReview"},
      {"request",
       {{"uid", uid},
        {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
        {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
        {"namespace", "default"},
        {"operation", "CREATE"},
        {"userInfo", {{"username", "system:serviceaccount:kube-system:replicaset-controller"}}},
        {"object", pod},
        {"dryRun", false}}}};
  return review.dump();
}

// Polls until `check` passes or the deadline passes; returns the last failure text.
template <typename F>
std::string Eventually(F check, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    last = check();
    if (last.empty()) return "";
    std::this_thread::sleep_for(200ms);
  }
  return last;
}

class StackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto stack = Stack::Start({.auth = true});
    ASSERT_TRUE(stack.ok()) << stack.status();
    stack_ = std::move(*stack);
  }

  // Empty when every service answers discovery with its name, version and endpoints.
  std::string AllServicesAnswer() {
    const std::string out = WispctlStatus(*stack_);
    auto parsed = nlohmann::json::parse(out, nullptr, false);
    if (parsed.is_discarded()) return out;
    std::set<std::string> names;
    for (const auto& i : parsed) {
      if (i.value("version", "").empty() || i["endpoints"].empty())
        return "incomplete: " + i.dump();
      names.insert(i.value("name", ""));
    }
    return names.size() == 4 ? "" : "only " + std::to_string(names.size()) + ": " + out;
  }

  // Empty when a validating admission call goes gateway -> policy -> back, allowed, uid echoed.
  std::string AdmissionRoundTrip(const std::string& uid) {
    auto resp = stack_->Https("POST", "/validate?timeout=5s", Review(uid));
    if (!resp.ok()) return std::string(resp.status().message());
    if (resp->status != 200) return "HTTP " + std::to_string(resp->status) + ": " + resp->body;
    auto j = nlohmann::json::parse(resp->body, nullptr, false);
    if (j.is_discarded() || !j.contains("response")) return "not an AdmissionReview: " + resp->body;
    if (j["response"].value("uid", "") != uid) return "uid not echoed: " + resp->body;
    if (!j["response"].value("allowed", false)) return "denied: " + resp->body;
    return "";
  }

  std::unique_ptr<Stack> stack_;
};

// Tests that every service registers as a NATS micro service and answers PING, INFO and STATS.
TEST_F(StackTest, EveryServiceAnswersDiscovery) {
  EXPECT_EQ(Eventually([&] { return AllServicesAnswer(); }, 10s), "");
}

// Tests that an admission request travels gateway -> NATS -> policy and back.
TEST_F(StackTest, RequestGoesThroughGatewayToPolicyAndBack) {
  EXPECT_EQ(AdmissionRoundTrip("3b7c1a52-0d7e-4c1f-9a55-1c2f3e4d5a6b"), "");
}

// Tests that after nats-server is killed and restarted on the same port, every service reconnects
// and serves again without being restarted itself.
TEST_F(StackTest, ServicesReconnectAfterNatsRestart) {
  ASSERT_EQ(Eventually([&] { return AllServicesAnswer(); }, 10s), "");
  std::map<std::string, pid_t> pids;
  for (const char* s : {"wisp-gateway", "wisp-policy", "wisp-token", "wisp-populator"}) {
    pids[s] = stack_->process(s).pid();
  }
  stack_->nats().Kill();
  // While NATS is down the gateway answers admission with the configured failure mode, promptly.
  auto during = stack_->Https("POST", "/validate?timeout=2s", Review("during-outage"));
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(during->status, 200) << during->body;
  EXPECT_NE(during->body.find("wisp policy unavailable"), std::string::npos) << during->body;

  ASSERT_TRUE(stack_->nats().Restart().ok());
  EXPECT_EQ(Eventually([&] { return AllServicesAnswer(); }, 30s), "");
  EXPECT_EQ(Eventually([&] { return AdmissionRoundTrip("after-restart"); }, 30s), "");
  for (const auto& [name, pid] : pids) {
    EXPECT_EQ(stack_->process(name).pid(), pid) << name << " was restarted";
    EXPECT_TRUE(stack_->process(name).Running()) << name;
  }
}

// Tests that every service drains and exits 0 on SIGTERM, promptly.
TEST_F(StackTest, EveryServiceExitsZeroOnSigterm) {
  ASSERT_EQ(AdmissionRoundTrip("before-stop"), "");
  for (const char* s : {"wisp-gateway", "wisp-populator", "wisp-policy", "wisp-token"}) {
    SCOPED_TRACE(s);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(stack_->process(s).Terminate(std::chrono::seconds(15)), 0)
        << stack_->process(s).Log();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(12));
  }
}

// Tests that the services keeping state in KV (the gateway's CSI node role too) wait for JetStream
// (at most --bus-wait) instead of exiting when it does not answer, and serve once it does: here a
// nats-server without JetStream gives way to one with it on the same port. A JetStream too slow to
// answer on a loaded node is waited out the same way (it used to stop wisp-policy at start-up with
// "opening bucket wisp_pods: Timeout").
TEST(StartupTest, ServicesWaitForJetStream) {
  auto plain = NatsServer::Start({.jetstream = false});
  ASSERT_TRUE(plain.ok()) << plain.status();
  const int port = (*plain)->port();
  TempDir dir;
  const std::string kek = dir.path() + "/kek";
  ASSERT_EQ(RunCommand("head -c 32 /dev/urandom > " + kek + " && chmod 600 " + kek).exit_code, 0);
  struct Service {
    std::string name;
    std::vector<std::string> args;
    int metrics_port = FreePort();
    std::unique_ptr<Process> process;
  };
  std::vector<Service> services;
  services.push_back({.name = "wisp-policy",
                      .args = {"--policy-file", SourceDir() + "/deploy/local/policy.yaml"}});
  services.push_back(
      {.name = "wisp-token",
       .args = {"--key-encryption-key-file", kek, "--issuer-url", "https://localhost:8443"}});
  services.push_back({.name = "wisp-populator",
                      .args = {"--volume-root", dir.path() + "/volumes", "--node-name", "node-a"}});
  // The gateway's node role keeps its token volumes' records in KV (wisp_projections).
  services.push_back(
      {.name = "wisp-gateway",
       .args = {"--listen-address", "", "--csi-endpoint", "unix://" + dir.path() + "/csi.sock",
                "--csi-role", "node", "--node-name", "node-a", "--volume-root",
                dir.path() + "/gateway-volumes", "--target-root", dir.path() + "/targets"}});
  for (auto& s : services) {
    s.args.insert(s.args.end(),
                  {"--nats-url", (*plain)->url(), "--bus-wait", "60s", "--metrics-address",
                   "127.0.0.1:" + std::to_string(s.metrics_port)});
    auto started = Process::Start({.path = BinaryPath(s.name), .args = s.args});
    ASSERT_TRUE(started.ok()) << s.name << ": " << started.status();
    s.process = std::move(*started);
  }
  for (auto& s : services) {
    EXPECT_TRUE(s.process->WaitForLog("waiting for JetStream", 20s).ok()) << s.process->Log();
  }
  (*plain)->Kill();
  auto js = NatsServer::Start({.port = port});
  ASSERT_TRUE(js.ok()) << js.status();
  for (auto& s : services) {
    SCOPED_TRACE(s.name);
    EXPECT_TRUE(WaitForHttp("127.0.0.1", s.metrics_port, "/readyz", 30s).ok()) << s.process->Log();
    EXPECT_EQ(s.process->Terminate(15s), 0) << s.process->Log();
  }
}

}  // namespace
}  // namespace wisp::integration
