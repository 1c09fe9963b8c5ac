// CSI end to end: the real wisp-gateway binary serving CSI on its unix socket, driven with gRPC
// from C++, with a real nats-server and (unless a test replaces it) the real wisp-token and
// wisp-populator. Runs as root: the gateway makes real tmpfs and bind mounts.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <nlohmann/json.hpp>

#include "csi_client.hpp"
#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/integration/nats_test.hpp"
#include "wisp/integration/stack.hpp"
#include "wisp/populator/testing/test_http_server.hpp"
#include "wisp/v1/token.pb.h"
#include "wisp/v1/volume.pb.h"

namespace wisp::integration {
namespace {

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// The token file a token volume holds at `target`; "" when there is none.
std::string TokenIn(const std::string& target) {
  return fsutil::ReadFile(target + "/token").value_or("");
}

bool IsTmpfs(const std::string& path) {
  struct statfs st;
  return ::statfs(path.c_str(), &st) == 0 && st.f_type == TMPFS_MAGIC;
}

bool IsMountPoint(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string a, b, c, root, mp;
    f >> a >> b >> c >> root >> mp;
    if (mp == path) return true;
  }
  return false;
}

// Stands in for wisp-token when a test needs lifetimes wisp-token refuses (< 600 s): answers
// wisp.v1.token.issue with "short-<n>" tokens living `lifetime`.
class ShortTokenIssuer {
 public:
  ShortTokenIssuer(const std::string& nats_url, std::chrono::seconds lifetime)
      : lifetime_(lifetime) {
    bus_ = *bus::NatsBus::Connect(TestBusOptions({nats_url}, "csi-test-issuer"));
    subs_.push_back(*bus_->Serve(bus::subjects::kTokenIssue, bus::queues::kToken,
                                 [this](const bus::Request& r) -> bus::Reply {
                                   auto req = bus::ParseBody<v1::IssueRequest>(r);
                                   if (!req.ok()) return bus::Reply::Error(req.status());
                                   std::lock_guard lock(mu_);
                                   return bus::ProtoReply(IssueLocked(*req));
                                 }));
    subs_.push_back(*bus_->Serve(bus::subjects::kTokenIssueBatch, bus::queues::kToken,
                                 [this](const bus::Request& r) -> bus::Reply {
                                   auto req = bus::ParseBody<v1::IssueBatchRequest>(r);
                                   if (!req.ok()) return bus::Reply::Error(req.status());
                                   std::lock_guard lock(mu_);
                                   batch_sizes_.push_back(req->requests_size());
                                   v1::IssueBatchResponse resp;
                                   for (const auto& entry : req->requests()) {
                                     *resp.add_results()->mutable_token() = IssueLocked(entry);
                                   }
                                   return bus::ProtoReply(resp);
                                 }));
  }
  // The number of entries of each issue_batch request, in order.
  std::vector<int> batch_sizes() {
    std::lock_guard lock(mu_);
    return batch_sizes_;
  }
  int issued() {
    std::lock_guard lock(mu_);
    return issued_;
  }
  bool IsIssued(const std::string& token) {
    std::lock_guard lock(mu_);
    return issued_tokens_.count(token) > 0;
  }
  // The pod_proof of every issue request, in order.
  std::vector<std::string> proofs() {
    std::lock_guard lock(mu_);
    return proofs_;
  }

 private:
  std::chrono::seconds lifetime_;
  std::mutex mu_;
  int issued_ = 0;
  std::set<std::string> issued_tokens_;
  std::vector<std::string> proofs_;
  std::vector<int> batch_sizes_;
  std::unique_ptr<bus::NatsBus> bus_;
  std::vector<bus::SubscriptionPtr> subs_;

  v1::IssueResponse IssueLocked(const v1::IssueRequest& req) {
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    v1::IssueResponse resp;
    // Distinct lengths, so a torn read could never pass for a valid token.
    const int n = ++issued_;
    proofs_.push_back(req.pod_proof());
    resp.set_token("short-" + std::to_string(n) + "-" + std::string(100 + 37 * n, 'x'));
    issued_tokens_.insert(resp.token());
    resp.set_issued_at_unix(now);
    resp.set_expiration_unix(now + lifetime_.count());
    return resp;
  }
};

class CsiIntegrationTest : public ::testing::Test {
 protected:
  void StartStack(StackOptions options = {}) {
    auto stack = Stack::Start(options);
    ASSERT_TRUE(stack.ok()) << stack.status();
    stack_ = *std::move(stack);
    client_ = std::make_unique<CsiClient>(stack_->csi_socket());
    ASSERT_TRUE(Eventually([&] { return fs::exists(stack_->csi_socket()); }, 10s));
  }
  std::string Target(const std::string& name) {
    const std::string dir = stack_->target_root() + "/pods/" + name;
    fs::create_directories(dir);  // the kubelet makes the parent; the plugin the target itself
    return dir + "/mount";
  }

  // A failed test may leave mounts behind; take them off before the stack's directory goes.
  void TearDown() override {
    if (!stack_) return;
    const std::string root = stack_->target_root() + "/";
    std::vector<std::string> leftovers;
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string a, b, c, r, mp;
      f >> a >> b >> c >> r >> mp;
      if (mp.compare(0, root.size(), root) == 0) leftovers.push_back(mp);
    }
    for (auto it = leftovers.rbegin(); it != leftovers.rend(); ++it)
      ::umount2(it->c_str(), MNT_DETACH);
  }

  std::unique_ptr<Stack> stack_;
  std::unique_ptr<CsiClient> client_;
};

// Tests Identity over the socket: the plugin name, capabilities, a ready Probe, socket mode 0660.
TEST_F(CsiIntegrationTest, IdentityAndProbe) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  ::csi::v1::GetPluginInfoResponse info;
  ASSERT_TRUE(client_->identity->GetPluginInfo(CsiClient::Ctx().get(), {}, &info).ok());
  EXPECT_EQ(info.name(), "csi.wisp.dev");
  ::csi::v1::GetPluginCapabilitiesResponse caps;
  ASSERT_TRUE(client_->identity->GetPluginCapabilities(CsiClient::Ctx().get(), {}, &caps).ok());
  EXPECT_EQ(caps.capabilities_size(), 2);
  EXPECT_TRUE(Eventually(
      [&] {
        ::csi::v1::ProbeResponse probe;
        return client_->identity->Probe(CsiClient::Ctx().get(), {}, &probe).ok() &&
               probe.ready().value();
      },
      15s));
  struct stat st;
  ASSERT_EQ(::stat(stack_->csi_socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  ::csi::v1::NodeGetInfoResponse node;
  ASSERT_TRUE(client_->node->NodeGetInfo(CsiClient::Ctx().get(), {}, &node).ok());
  EXPECT_EQ(node.node_id(), "node-a");
  EXPECT_EQ(node.accessible_topology().segments().at("topology.wisp.dev/node"), "node-a");
}

// Tests that Probe turns ready on a stack with per-service NATS users (scripts/nats-auth), as
// scripts/local-up and the Helm chart run it: the gateway user may ping wisp-token and
// wisp-populator. (It could not: every Probe said not ready, which the CSI livenessprobe sidecar
// answers by restarting the plugin; csi-sanity only checks that Probe answers, and found it so.)
TEST_F(CsiIntegrationTest, ProbeIsReadyWithPerServiceNatsUsers) {
  ASSERT_NO_FATAL_FAILURE(StartStack({.auth = true}));
  EXPECT_TRUE(Eventually(
      [&] {
        ::csi::v1::ProbeResponse probe;
        return client_->identity->Probe(CsiClient::Ctx().get(), {}, &probe).ok() &&
               probe.ready().value();
      },
      15s))
      << stack_->process("wisp-gateway").Log();
  EXPECT_THAT(stack_->process("wisp-gateway").Log(), ::testing::Not(HasSubstr("Not Permitted")));
}

// Tests scenario 4 with the real wisp-token: a tmpfs with a JWT written atomically, then removed.
TEST_F(CsiIntegrationTest, TokenVolumeWithWispToken) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  const std::string target = Target("vault");
  grpc::Status st = client_->Publish(TokenVolumeRequest("csi-vault", target, "vault", "900"));
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(IsTmpfs(target));
  const std::string token = TokenIn(target);
  EXPECT_EQ(std::count(token.begin(), token.end(), '.'), 2) << "a JWT";
  EXPECT_EQ(fs::read_symlink(target + "/token").string(), "..data/token");
  EXPECT_THAT(fs::read_symlink(target + "/..data").string(), ::testing::StartsWith("..20"));
  // Republish (requiresRepublish) changes nothing.
  ASSERT_TRUE(client_->Publish(TokenVolumeRequest("csi-vault", target, "vault", "900")).ok());
  EXPECT_EQ(TokenIn(target), token);
  // The token is never logged.
  EXPECT_THAT(stack_->process("wisp-gateway").Log(), ::testing::Not(HasSubstr(token)));

  ASSERT_TRUE(client_->Unpublish("csi-vault", target).ok());
  EXPECT_FALSE(IsMountPoint(target));
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(client_->Unpublish("csi-vault", target).ok());  // idempotent
}

// Tests issue 25 items 1-2 end to end on real parts: `wispctl admit --bus` runs an IRSA-style
// ServiceAccount and pod (integration/admission/manifests/irsa-pod.yaml) through wisp-policy,
// and the aws preset's csi.wisp.dev volume, as the pod carries it, is published through the real
// CSI socket: the token wisp-token signed for sts.amazonaws.com lands at IRSA's file name, owned
// by the pod's non-root user with 0600, readable by that user and by no other (no fsGroup).
TEST_F(CsiIntegrationTest, AwsPresetTokenReadableByTheNonRootContainer) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  std::string cmd = BinaryPath("wispctl") + " admit --bus -f " + SourceDir() +
                    "/integration/admission/manifests/irsa-pod.yaml";
  for (const auto& a : stack_->WispctlArgs()) cmd += " '" + a + "'";
  const std::string out_file = stack_->dir() + "/admitted.yaml";
  CommandResult admitted = RunCommand(cmd + " > " + out_file + " 2>&1");
  ASSERT_EQ(admitted.exit_code, 0) << ReadFileOrEmpty(out_file);
  CommandResult json = RunCommand(
      "/usr/bin/python3 -c 'import json,sys,yaml; "
      "print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d]))' < " +
      out_file);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  nlohmann::json pod;
  for (const auto& doc : nlohmann::json::parse(json.output)) {
    if (doc.value("kind", "") == "Pod") pod = doc;
  }
  ASSERT_TRUE(pod.is_object()) << ReadFileOrEmpty(out_file);
  nlohmann::json attrs;
  for (const auto& v : pod["spec"]["volumes"]) {
    if (v["name"] == "aws-iam-token") attrs = v["csi"]["volumeAttributes"];
  }
  ASSERT_TRUE(attrs.is_object()) << pod.dump(2);
  EXPECT_EQ(attrs["fileOwner"], "1000");
  const auto& app = pod["spec"]["containers"][0];
  EXPECT_EQ(app["volumeMounts"][0]["mountPath"],
            "/var/run/secrets/eks.amazonaws.com/serviceaccount");

  // What the kubelet sends for that volume of that pod: its attributes plus the pod's facts.
  const std::string target = Target("s3-lister");
  ::csi::v1::NodePublishVolumeRequest req =
      TokenVolumeRequest("csi-aws", target, "unused", "600", "uid-s3-lister");
  auto& c = *req.mutable_volume_context();
  c.erase("audience");
  c.erase("expirationSeconds");
  c.erase("path");
  c["csi.storage.k8s.io/pod.namespace"] = "apps";
  c["csi.storage.k8s.io/pod.name"] = "s3-lister";
  c["csi.storage.k8s.io/serviceAccount.name"] = "s3-reader";
  for (const auto& [k, v] : attrs.items()) c[k] = v.get<std::string>();
  grpc::Status st = client_->Publish(req);
  ASSERT_TRUE(st.ok()) << st.error_message();

  struct stat info {};
  ASSERT_EQ(::stat((target + "/token").c_str(), &info), 0);
  EXPECT_EQ(info.st_uid, 1000u);
  EXPECT_EQ(info.st_gid, 1000u);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  const std::string token = TokenIn(target);
  ASSERT_EQ(std::count(token.begin(), token.end(), '.'), 2) << "a JWT";
  // Its claims: the audience the preset asked for, the pod's ServiceAccount as subject.
  CommandResult claims = RunCommand(
      "/usr/bin/python3 -c 'import base64,json,sys; p=sys.stdin.read().split(\".\")[1]; "
      "print(base64.urlsafe_b64decode(p+\"=\"*(-len(p)%4)).decode())' < " +
      target + "/token");
  ASSERT_EQ(claims.exit_code, 0) << claims.output;
  const auto payload = nlohmann::json::parse(claims.output);
  EXPECT_EQ(payload["aud"], nlohmann::json::array({"sts.amazonaws.com"})) << claims.output;
  EXPECT_EQ(payload["sub"], "system:serviceaccount:apps:s3-reader");

  // In the container the volume is mounted at its own path; here the test's directories above
  // the target must let uid 1000 through to reach it.
  for (fs::path p = fs::path(target).parent_path(); p.string().size() >= stack_->dir().size();
       p = p.parent_path()) {
    fs::permissions(p, fs::perms::others_exec | fs::perms::group_exec, fs::perm_options::add);
  }
  CommandResult as_user =
      RunCommand("setpriv --reuid=1000 --regid=1000 --clear-groups cat " + target + "/token 2>&1");
  EXPECT_EQ(as_user.exit_code, 0) << as_user.output;
  EXPECT_EQ(as_user.output, token);
  CommandResult other =
      RunCommand("setpriv --reuid=2000 --regid=2000 --clear-groups cat " + target + "/token 2>&1");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_THAT(other.output, HasSubstr("Permission denied"));
  EXPECT_THAT(stack_->process("wisp-gateway").Log(), ::testing::Not(HasSubstr(token)));
  ASSERT_TRUE(client_->Unpublish("csi-aws", target).ok());
}

// Tests kubelet-token mode: the kubelet's token is written, and a republish with a fresh one
// replaces it atomically without a new mount.
TEST_F(CsiIntegrationTest, KubeletTokenModeWithRepublish) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  const std::string target = Target("kubelet");
  auto req = TokenVolumeRequest("csi-kubelet", target, "sts.amazonaws.com", "3600");
  auto& c = *req.mutable_volume_context();
  c["tokenSource"] = "kubelet";
  c["csi.storage.k8s.io/serviceAccount.tokens"] =
      R"({"sts.amazonaws.com":{"token":"kubelet-token-1","expirationTimestamp":"2030-01-01T00:10:00Z"}})";
  ASSERT_TRUE(client_->Publish(req).ok());
  EXPECT_EQ(TokenIn(target), "kubelet-token-1");
  const std::string first_dir = fs::read_symlink(target + "/..data").string();
  c["csi.storage.k8s.io/serviceAccount.tokens"] =
      R"({"sts.amazonaws.com":{"token":"kubelet-token-2","expirationTimestamp":"2030-01-01T00:20:00Z"}})";
  ASSERT_TRUE(client_->Publish(req).ok());
  EXPECT_EQ(TokenIn(target), "kubelet-token-2");
  EXPECT_NE(fs::read_symlink(target + "/..data").string(), first_dir);
  EXPECT_THAT(stack_->process("wisp-gateway").Log(), ::testing::Not(HasSubstr("kubelet-token-")));
  // A missing audience is refused naming the field.
  c["audience"] = "vault";
  grpc::Status st = client_->Publish(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("could not find token for \"vault\""));
  ASSERT_TRUE(client_->Unpublish("csi-kubelet", target).ok());
}

// Tests rotation: a short-lived token is replaced before it expires, and a reader looping over
// the file meanwhile only ever sees complete tokens.
TEST_F(CsiIntegrationTest, RotatesShortLivedTokenAtomically) {
  ASSERT_NO_FATAL_FAILURE(StartStack({.token = false}));
  ShortTokenIssuer issuer(stack_->nats().url(), 6s);
  const std::string target = Target("rotate");
  ASSERT_TRUE(client_->Publish(TokenVolumeRequest("csi-rot", target, "vault", "600")).ok());
  const std::string first = TokenIn(target);
  ASSERT_TRUE(issuer.IsIssued(first));

  std::atomic<bool> stop{false};
  std::atomic<int> reads{0}, bad{0};
  std::thread reader([&] {
    while (!stop) {
      auto got = fsutil::ReadFile(target + "/token");
      if (!got.ok()) continue;
      ++reads;
      if (!issuer.IsIssued(*got)) ++bad;
    }
  });
  // 80% of 6 s (minus at most 0.3 s of jitter): two rotations within ~12 s.
  const bool rotated = Eventually([&] { return issuer.issued() >= 3; }, 20s);
  stop = true;
  reader.join();
  ASSERT_TRUE(rotated) << stack_->process("wisp-gateway").Log();
  EXPECT_EQ(bad.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_GT(reads.load(), 100);
  EXPECT_NE(TokenIn(target), first);
  ASSERT_TRUE(client_->Unpublish("csi-rot", target).ok());
  const int after = issuer.issued();
  std::this_thread::sleep_for(6s);
  EXPECT_EQ(issuer.issued(), after) << "rotation stops after unpublish";
}

// Tests that a gateway killed mid-rotation is restarted and carries on rotating from KV.
TEST_F(CsiIntegrationTest, GatewayRestartKeepsRotating) {
  ASSERT_NO_FATAL_FAILURE(StartStack({.token = false}));
  ShortTokenIssuer issuer(stack_->nats().url(), 8s);
  const std::string target = Target("restart");
  grpc::Status published =
      client_->Publish(TokenVolumeRequest("csi-restart", target, "vault", "600"));
  ASSERT_TRUE(published.ok()) << published.error_code() << " " << published.error_message() << "\n"
                              << stack_->process("wisp-gateway").Log();
  const std::string first = TokenIn(target);
  stack_->Kill("wisp-gateway");
  ASSERT_TRUE(IsTmpfs(target)) << "the pod's tmpfs outlives the gateway";
  EXPECT_EQ(TokenIn(target), first);
  ASSERT_TRUE(stack_->StartService("wisp-gateway").ok());
  ASSERT_TRUE(stack_->WaitReady("wisp-gateway").ok());
  ASSERT_TRUE(Eventually([&] { return TokenIn(target) != first; }, 15s))
      << stack_->process("wisp-gateway").Log();
  EXPECT_TRUE(issuer.IsIssued(TokenIn(target)));
  EXPECT_THAT(stack_->process("wisp-gateway").Log(), HasSubstr("recovered 1 token volume"));
  ASSERT_TRUE(client_->Unpublish("csi-restart", target).ok());
  EXPECT_FALSE(fs::exists(target));
}

// Tests that volumes whose rotation fell due while the gateway was down are rotated together
// after its restart, in one wisp.v1.token.issue_batch request rather than one request each.
TEST_F(CsiIntegrationTest, RestartRotatesOverdueVolumesInOneBatch) {
  ASSERT_NO_FATAL_FAILURE(StartStack({.token = false}));
  ShortTokenIssuer issuer(stack_->nats().url(), 6s);
  std::vector<std::string> targets, first;
  for (int i = 0; i < 3; ++i) {
    targets.push_back(Target("overdue-" + std::to_string(i)));
    ASSERT_TRUE(client_
                    ->Publish(TokenVolumeRequest("csi-overdue-" + std::to_string(i), targets.back(),
                                                 "vault", "600"))
                    .ok());
    first.push_back(TokenIn(targets.back() + "/token"));
  }
  stack_->Kill("wisp-gateway");
  std::this_thread::sleep_for(6s);  // past 80% of every token's 6 s
  ASSERT_TRUE(stack_->StartService("wisp-gateway").ok());
  ASSERT_TRUE(stack_->WaitReady("wisp-gateway").ok());
  ASSERT_TRUE(Eventually(
      [&] {
        for (size_t i = 0; i < targets.size(); ++i) {
          if (TokenIn(targets[i]) == first[i]) return false;
        }
        return true;
      },
      15s))
      << stack_->process("wisp-gateway").Log();
  const auto batches = issuer.batch_sizes();
  ASSERT_FALSE(batches.empty()) << stack_->process("wisp-gateway").Log();
  EXPECT_EQ(batches.front(), 3);
  for (const auto& t : targets) EXPECT_TRUE(issuer.IsIssued(TokenIn(t)));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client_->Unpublish("csi-overdue-" + std::to_string(i), targets[i]).ok());
  }
}

// Tests G3's gateway side: the kubelet's token for audience "wisp" goes with every issue of the
// pod's token as its proof, on publish and on each rotation, and a republish's fresh token
// replaces it for the next rotations.
TEST_F(CsiIntegrationTest, ForwardsThePodProofOnPublishAndRotation) {
  ASSERT_NO_FATAL_FAILURE(StartStack({.token = false}));
  ShortTokenIssuer issuer(stack_->nats().url(), 4s);
  const std::string target = Target("proof");
  auto req = TokenVolumeRequest("csi-proof", target, "vault", "600");
  auto& c = *req.mutable_volume_context();
  c["csi.storage.k8s.io/serviceAccount.tokens"] =
      R"({"wisp":{"token":"kubelet-proof-1","expirationTimestamp":"2030-01-01T00:10:00Z"}})";
  ASSERT_TRUE(client_->Publish(req).ok());
  ASSERT_TRUE(Eventually([&] { return issuer.issued() >= 2; }, 15s))
      << stack_->process("wisp-gateway").Log();
  c["csi.storage.k8s.io/serviceAccount.tokens"] =
      R"({"wisp":{"token":"kubelet-proof-2","expirationTimestamp":"2030-01-01T00:20:00Z"}})";
  ASSERT_TRUE(client_->Publish(req).ok());  // republish
  const int republished_at = issuer.issued();
  ASSERT_TRUE(Eventually([&] { return issuer.issued() >= republished_at + 1; }, 15s));
  const auto proofs = issuer.proofs();
  EXPECT_EQ(proofs[0], "kubelet-proof-1") << "publish";
  EXPECT_EQ(proofs[1], "kubelet-proof-1") << "first rotation";
  EXPECT_EQ(proofs.back(), "kubelet-proof-2") << "rotation after the republish";
  EXPECT_THAT(stack_->process("wisp-gateway").Log(), ::testing::Not(HasSubstr("kubelet-proof-")));
  ASSERT_TRUE(client_->Unpublish("csi-proof", target).ok());
}

// Tests G3 end to end with the real wisp-token requiring pod proofs from a test kube-apiserver
// (its key and JWKS made, its tokens signed, by PyJWT): a publish whose kubelet token is bound to
// the pod gets that pod's token; a proof for another pod, or none, is refused naming the field.
// The gateway runs as the chart's node DaemonSet does: role node, as node-a's own NATS user.
TEST_F(CsiIntegrationTest, TokenIssueRequiresTheKubeletsProofOfThePod) {
  TempDir dir("wisp-g3");
  const std::string script = SourceDir() + "/integration/token/kube_apiserver.py";
  auto keygen = RunCommand("/usr/bin/python3 " + script + " keygen " + dir.path());
  ASSERT_EQ(keygen.exit_code, 0) << keygen.output;
  const std::string apiserver = "https://kube-apiserver.test";
  const std::string policy = dir.path() + "/token-policy.yaml";
  std::ofstream(policy) << "defaultAudiences: [wisp]\n"
                           "namespaces: {\"*\": {audiences: [wisp, vault]}}\n"
                           "trustedIssuers:\n"
                           "  - {issuer: \""
                        << apiserver << "\", jwksFile: \"" << dir.path()
                        << "/apiserver-jwks.json\", audiences: [wisp-sts]}\n"
                           "issue:\n"
                           "  requirePodProof: true\n"
                           "  podProofAudience: wisp\n"
                           "  podProofIssuers: [\""
                        << apiserver << "\"]\n";
  ASSERT_NO_FATAL_FAILURE(StartStack({.auth = true,
                                      .gateway_node_user = true,
                                      .csi_role = "node",
                                      .extra_args = {{"wisp-token", {"--policy-file", policy}}}}));
  const auto sign = [&](const std::string& pod, const std::string& uid) {
    auto r = RunCommand("/usr/bin/python3 " + script + " sign " + dir.path() + " " + apiserver +
                        " wisp team default " + pod + " " + uid + " node-a");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    while (!r.output.empty() && r.output.back() == '\n') r.output.pop_back();
    return r.output;
  };
  const auto with_proof = [&](::csi::v1::NodePublishVolumeRequest req, const std::string& proof) {
    if (!proof.empty()) {
      (*req.mutable_volume_context())["csi.storage.k8s.io/serviceAccount.tokens"] =
          R"({"wisp":{"token":")" + proof + R"(","expirationTimestamp":"2030-01-01T00:00:00Z"}})";
    }
    return req;
  };

  // The pod's own proof (app-0, uid-1 on node-a): its token is issued and written.
  const std::string own = sign("app-0", "uid-1");
  const std::string target = Target("proven");
  grpc::Status st =
      client_->Publish(with_proof(TokenVolumeRequest("csi-proven", target, "vault", "900"), own));
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << stack_->process("wisp-token").Log();
  const std::string token = TokenIn(target);
  EXPECT_EQ(std::count(token.begin(), token.end(), '.'), 2) << "a JWT";

  // A proof the node holds for another pod (app-1) does not get app-0's token.
  const std::string other = sign("app-1", "uid-2");
  const std::string refused_target = Target("other-pod");
  st = client_->Publish(
      with_proof(TokenVolumeRequest("csi-other", refused_target, "vault", "900"), other));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_THAT(st.error_message(),
              HasSubstr("kubernetes.io.pod.name \"app-1\" does not match subject.pod_name"));
  EXPECT_FALSE(IsMountPoint(refused_target)) << "nothing is mounted for a refused publish";
  // Same pod name, another incarnation (uid): refused too.
  st = client_->Publish(
      with_proof(TokenVolumeRequest("csi-other", refused_target, "vault", "900", "uid-9"), own));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("kubernetes.io.pod.uid"));
  // No proof at all.
  st = client_->Publish(TokenVolumeRequest("csi-other", refused_target, "vault", "900"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("pod_proof: required"));

  // Neither side logs the proof or the token.
  for (const char* service : {"wisp-gateway", "wisp-token"}) {
    EXPECT_THAT(stack_->process(service).Log(), ::testing::Not(HasSubstr(own))) << service;
    EXPECT_THAT(stack_->process(service).Log(), ::testing::Not(HasSubstr(token))) << service;
  }
  ASSERT_TRUE(client_->Unpublish("csi-proven", target).ok());
}

// Tests the persistent path: CreateVolume through wisp-populator (idempotent by name), a
// read-only bind mount of the volume directory, stats, unpublish and DeleteVolume.
TEST_F(CsiIntegrationTest, PersistentVolumeLifecycle) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  ::csi::v1::CreateVolumeRequest create;
  create.set_name("pvc-disk");
  create.mutable_capacity_range()->set_required_bytes(64 << 20);
  *create.add_volume_capabilities() = MountCapability();
  (*create.mutable_accessibility_requirements()
        ->add_preferred()
        ->mutable_segments())["topology.wisp.dev/node"] = "node-a";
  ::csi::v1::CreateVolumeResponse created;
  grpc::Status st = client_->controller->CreateVolume(CsiClient::Ctx(60s).get(), create, &created);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const std::string id = created.volume().volume_id();
  EXPECT_EQ(created.volume().capacity_bytes(), 64 << 20);
  ::csi::v1::CreateVolumeResponse again;
  ASSERT_TRUE(client_->controller->CreateVolume(CsiClient::Ctx(60s).get(), create, &again).ok());
  EXPECT_EQ(again.volume().volume_id(), id);
  create.mutable_capacity_range()->set_required_bytes(128 << 20);
  st = client_->controller->CreateVolume(CsiClient::Ctx(60s).get(), create, &again);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS);

  const std::string target = Target("disk");
  ::csi::v1::NodePublishVolumeRequest pub;
  pub.set_volume_id(id);
  pub.set_target_path(target);
  *pub.mutable_volume_capability() = MountCapability();
  *pub.mutable_volume_context() = created.volume().volume_context();
  pub.set_readonly(true);
  st = client_->Publish(pub);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_TRUE(client_->Publish(pub).ok());  // idempotent
  EXPECT_TRUE(IsMountPoint(target));
  struct statvfs vfs;
  ASSERT_EQ(::statvfs(target.c_str(), &vfs), 0);
  EXPECT_TRUE(vfs.f_flag & ST_RDONLY);
  EXPECT_TRUE(fs::exists(target + "/disk.img"));
  EXPECT_EQ(fs::file_size(target + "/disk.img"), uint64_t{64} << 20);

  ::csi::v1::NodeGetVolumeStatsRequest stats_req;
  stats_req.set_volume_id(id);
  stats_req.set_volume_path(target);
  ::csi::v1::NodeGetVolumeStatsResponse stats;
  ASSERT_TRUE(client_->node->NodeGetVolumeStats(CsiClient::Ctx().get(), stats_req, &stats).ok());
  EXPECT_EQ(stats.usage_size(), 2);

  ASSERT_TRUE(client_->Unpublish(id, target).ok());
  EXPECT_FALSE(IsMountPoint(target));
  EXPECT_FALSE(fs::exists(target));
  ::csi::v1::DeleteVolumeRequest del;
  del.set_volume_id(id);
  ::csi::v1::DeleteVolumeResponse deleted;
  ASSERT_TRUE(client_->controller->DeleteVolume(CsiClient::Ctx().get(), del, &deleted).ok());
  ASSERT_TRUE(client_->controller->DeleteVolume(CsiClient::Ctx().get(), del, &deleted).ok());
}

// Tests CDI's http source fields through the real parts, short of the apiserver (the e2e suite
// has it): a cdi.kubevirt.io VolumeImportSource with certConfigMap and extraHeaders, and a PVC
// naming it, recorded by the real wisp-policy (as the gateway's watch sends them); an HTTPS
// server with its own CA that answers 403 without the header. Through the real gateway's CSI
// socket (no apiserver to read the ConfigMap from) CreateVolume fails naming the ConfigMap, never
// importing without its CA; with the bundle in the create request, as the gateway sends it once it
// read the ConfigMap, the real wisp-populator imports the bytes, sending the header. A source
// without certConfigMap fails naming the TLS cause. secretRef is refused by wisp-policy.
TEST_F(CsiIntegrationTest, HttpSourceTrustsItsCertConfigMapAndSendsItsHeaders) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  const std::string images = stack_->dir() + "/images";
  fs::create_directories(images);
  ASSERT_EQ(RunCommand("cd " + images +
                       " && head -c 3145728 /dev/urandom > disk.raw && truncate -s 8M disk.raw")
                .exit_code,
            0);
  auto tls = populator::testing::MakeSelfSignedCert(images);
  ASSERT_TRUE(tls.ok()) << tls.status();
  const std::string ca = ReadFileOrEmpty(tls->cert_pem_path);
  populator::testing::TestHttpServer mirror(*tls);
  populator::testing::ServeOptions tenant;
  tenant.required_headers = {{"X-Mirror-Tenant", "vms"}};
  mirror.Serve("/disk.raw", images + "/disk.raw", tenant);
  ASSERT_TRUE(mirror.Start().ok());

  auto commit = [&](const Json& object) {
    const std::string file = stack_->dir() + "/commit-in.json";
    std::ofstream(file) << object.dump();
    std::string cmd = BinaryPath("wispctl") + " admit --bus -f " + file;
    for (const auto& a : stack_->WispctlArgs()) cmd += " '" + a + "'";
    return RunCommand(cmd + " 2>&1");
  };
  auto source = [&](const std::string& name, const Json& http) {
    return Json{{"apiVersion", "cdi.kubevirt.io/v1beta1"},
                {"kind", "VolumeImportSource"},
                {"metadata", {{"name", name}, {"namespace", "vms"}, {"uid", name + "-uid"}}},
                {"spec", {{"source", {{"http", http}}}, {"contentType", "kubevirt"}}}};
  };
  auto claim = [&](const std::string& name, const std::string& vis) {
    return Json{
        {"apiVersion", "v1"},
        {"kind", "PersistentVolumeClaim"},
        {"metadata", {{"name", name}, {"namespace", "vms"}, {"uid", name + "-uid"}}},
        {"spec",
         {{"accessModes", {"ReadWriteOnce"}},
          {"resources", {{"requests", {{"storage", "8Mi"}}}}},
          {"dataSourceRef",
           {{"apiGroup", "cdi.kubevirt.io"}, {"kind", "VolumeImportSource"}, {"name", vis}}}}}};
  };
  const Json http = {{"url", mirror.Url("/disk.raw")},
                     {"certConfigMap", "mirror-ca"},
                     {"extraHeaders", {"X-Mirror-Tenant: vms"}}};
  for (const Json& object : {source("mirror", http), claim("disk", "mirror"),
                             source("untrusted", {{"url", mirror.Url("/disk.raw")},
                                                  {"extraHeaders", {"X-Mirror-Tenant: vms"}}}),
                             claim("untrusted-disk", "untrusted")}) {
    CommandResult r = commit(object);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_NE(r.output.find("recordWrites: 1"), std::string::npos) << r.output;
  }
  Json with_secret = http;
  with_secret["secretRef"] = "mirror-auth";
  CommandResult refused = commit(source("with-secret", with_secret));
  // wispctl's YAML escapes the quotes around the value.
  EXPECT_NE(refused.output.find("refused: \"spec.source.http.secretRef: Unsupported value: "),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("wisp-populator does not fetch with credentials from Secrets"),
            std::string::npos)
      << refused.output;

  // The real gateway, without an apiserver to read ConfigMap vms/mirror-ca from.
  ::csi::v1::CreateVolumeRequest create;
  create.set_name("pvc-mirror");
  create.mutable_capacity_range()->set_required_bytes(8 << 20);
  *create.add_volume_capabilities() = MountCapability();
  (*create.mutable_parameters())["csi.storage.k8s.io/pvc/name"] = "disk";
  (*create.mutable_parameters())["csi.storage.k8s.io/pvc/namespace"] = "vms";
  ::csi::v1::CreateVolumeResponse created;
  grpc::Status st = client_->controller->CreateVolume(CsiClient::Ctx(30s).get(), create, &created);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(),
              HasSubstr("spec.source.http.certConfigMap: the CA bundle of ConfigMap "
                        "vms/mirror-ca did not come with the create request"));
  EXPECT_EQ(mirror.requests(), 0);

  // What the gateway sends once it has read the ConfigMap (cluster/source_ca.hpp).
  auto bus = bus::NatsBus::Connect(TestBusOptions({stack_->nats().url()}, "csi-test-ca"));
  ASSERT_TRUE(bus.ok()) << bus.status();
  auto create_on_bus = [&](const std::string& name, const std::string& pvc, bool with_ca) {
    v1::CreateVolumeRequest req;
    req.mutable_spec()->set_name(name);
    req.mutable_spec()->set_capacity_bytes(8 << 20);
    req.mutable_spec()->set_pvc_namespace("vms");
    req.mutable_spec()->set_pvc_name(pvc);
    if (with_ca) {
      req.mutable_spec()->mutable_source_ca()->set_config_map("mirror-ca");
      req.mutable_spec()->mutable_source_ca()->set_ca_pem(ca);
    }
    return bus::Call<v1::CreateVolumeResponse>(**bus, bus::subjects::kVolumeCreate, req, 10s);
  };
  auto wait_done = [&](const std::string& id) {
    v1::VolumeStatus last;
    Eventually(
        [&] {
          v1::GetVolumeRequest get;
          get.set_volume_id(id);
          auto got = bus::Call<v1::GetVolumeResponse>(**bus, bus::subjects::kVolumeGet, get, 5s);
          if (got.ok()) last = got->volume();
          return last.phase() == v1::SUCCEEDED || last.phase() == v1::FAILED;
        },
        60s);
    return last;
  };
  auto trusted = create_on_bus("pvc-mirror", "disk", true);
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  v1::VolumeStatus done = wait_done(trusted->volume().volume_id());
  ASSERT_EQ(done.phase(), v1::SUCCEEDED) << done.message();
  EXPECT_EQ(done.spec().source().http().headers().at("X-Mirror-Tenant"), "<redacted>");
  const std::string disk = ReadFileOrEmpty(done.path() + "/disk.img");
  const std::string image = ReadFileOrEmpty(images + "/disk.raw");
  EXPECT_EQ(disk.size(), image.size());
  EXPECT_TRUE(disk == image);

  auto untrusted = create_on_bus("pvc-untrusted", "untrusted-disk", false);
  ASSERT_TRUE(untrusted.ok()) << untrusted.status();
  v1::VolumeStatus failed = wait_done(untrusted->volume().volume_id());
  EXPECT_EQ(failed.phase(), v1::FAILED);
  EXPECT_THAT(failed.message(), HasSubstr("certificate verify failed"));
}

// Tests a persistent volume across a gateway restart: the new process finds the bind mount the old
// one made (NodeGetVolumeStats answered NOT_FOUND after a restart), accepts the same publish and
// refuses the other access mode; and a mount point holding something else is never taken for a
// volume (a restarted gateway used to adopt any mount at the target).
TEST_F(CsiIntegrationTest, PersistentVolumeSurvivesGatewayRestart) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  ::csi::v1::CreateVolumeRequest create;
  create.set_name("pvc-restart");
  create.mutable_capacity_range()->set_required_bytes(16 << 20);
  *create.add_volume_capabilities() = MountCapability();
  ::csi::v1::CreateVolumeResponse created;
  grpc::Status st = client_->controller->CreateVolume(CsiClient::Ctx(60s).get(), create, &created);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const std::string id = created.volume().volume_id();
  const std::string target = Target("restart-disk");
  ::csi::v1::NodePublishVolumeRequest pub;
  pub.set_volume_id(id);
  pub.set_target_path(target);
  *pub.mutable_volume_capability() = MountCapability();
  ASSERT_TRUE(client_->Publish(pub).ok());
  // Something else mounted at another target.
  const std::string foreign = Target("foreign");
  fs::create_directories(foreign);
  ASSERT_EQ(::mount("tmpfs", foreign.c_str(), "tmpfs", 0, "size=1m"), 0) << std::strerror(errno);

  stack_->Kill("wisp-gateway");
  ASSERT_TRUE(stack_->StartService("wisp-gateway").ok());
  ASSERT_TRUE(stack_->WaitReady("wisp-gateway").ok());
  client_ = std::make_unique<CsiClient>(stack_->csi_socket());

  ::csi::v1::NodeGetVolumeStatsRequest stats_req;
  stats_req.set_volume_id(id);
  stats_req.set_volume_path(target);
  ::csi::v1::NodeGetVolumeStatsResponse stats;
  st = client_->node->NodeGetVolumeStats(CsiClient::Ctx().get(), stats_req, &stats);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(stats.usage_size(), 2);
  stats_req.set_volume_path(foreign);
  st = client_->node->NodeGetVolumeStats(CsiClient::Ctx().get(), stats_req, &stats);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();

  pub.set_readonly(true);
  st = client_->Publish(pub);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS) << st.error_message();
  pub.set_readonly(false);
  st = client_->Publish(pub);
  EXPECT_TRUE(st.ok()) << st.error_message();
  pub.set_target_path(foreign);
  st = client_->Publish(pub);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS) << st.error_message();
  EXPECT_TRUE(IsTmpfs(foreign)) << "the foreign mount is left alone";
  ::umount2(foreign.c_str(), MNT_DETACH);

  ASSERT_TRUE(client_->Unpublish(id, target).ok());
  EXPECT_FALSE(fs::exists(target));
  ::csi::v1::DeleteVolumeRequest del;
  del.set_volume_id(id);
  ::csi::v1::DeleteVolumeResponse deleted;
  EXPECT_TRUE(client_->controller->DeleteVolume(CsiClient::Ctx().get(), del, &deleted).ok());
}

// Tests a block volume (volumeMode: Block), with real loop devices and mounts: CreateVolume with a
// block capability, NodePublishVolume places a block device at the target whose bytes are the
// volume's disk.img (what is written through the device lands in the file), a restarted gateway
// adopts the publication (no second loop device), and unpublish unmounts, detaches the loop device
// and removes the target file.
TEST_F(CsiIntegrationTest, BlockVolumeThroughALoopDevice) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  ::csi::v1::VolumeCapability block;
  block.mutable_block();
  block.mutable_access_mode()->set_mode(
      ::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  ::csi::v1::CreateVolumeRequest create;
  create.set_name("pvc-block");
  create.mutable_capacity_range()->set_required_bytes(16 << 20);
  *create.add_volume_capabilities() = block;
  ::csi::v1::CreateVolumeResponse created;
  grpc::Status st = client_->controller->CreateVolume(CsiClient::Ctx(60s).get(), create, &created);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const std::string id = created.volume().volume_id();
  const std::string image = stack_->volume_root() + "/" + id + "/disk.img";
  ASSERT_TRUE(fs::exists(image));

  const std::string target = Target("block-disk");
  ::csi::v1::NodePublishVolumeRequest pub;
  pub.set_volume_id(id);
  pub.set_target_path(target);
  *pub.mutable_volume_capability() = block;
  st = client_->Publish(pub);
  ASSERT_TRUE(st.ok()) << st.error_message();
  struct stat sb;
  ASSERT_EQ(::stat(target.c_str(), &sb), 0);
  ASSERT_TRUE(S_ISBLK(sb.st_mode)) << "no block device at the target";
  const std::string device = "/dev/loop" + std::to_string(minor(sb.st_rdev));
  const std::string loop_dir = "/sys/block/loop" + std::to_string(minor(sb.st_rdev)) + "/loop";
  EXPECT_EQ(ReadFileOrEmpty(loop_dir + "/backing_file"), image + "\n");
  // Written through the device, found in disk.img.
  const std::string pattern(4096, 'w');
  {
    const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::pwrite(fd, pattern.data(), pattern.size(), 1 << 20), 4096);
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  {
    std::ifstream in(image, std::ios::binary);
    in.seekg(1 << 20);
    std::string got(4096, '\0');
    in.read(got.data(), got.size());
    EXPECT_EQ(got, pattern);
  }

  stack_->Kill("wisp-gateway");
  ASSERT_TRUE(stack_->StartService("wisp-gateway").ok());
  ASSERT_TRUE(stack_->WaitReady("wisp-gateway").ok());
  client_ = std::make_unique<CsiClient>(stack_->csi_socket());
  st = client_->Publish(pub);
  ASSERT_TRUE(st.ok()) << "a restarted gateway did not adopt its block publication: "
                       << st.error_message();
  ASSERT_EQ(::stat(target.c_str(), &sb), 0);
  EXPECT_EQ("/dev/loop" + std::to_string(minor(sb.st_rdev)), device) << "a second loop device";

  ASSERT_TRUE(client_->Unpublish(id, target).ok());
  EXPECT_FALSE(fs::exists(target));
  EXPECT_FALSE(fs::exists(loop_dir + "/backing_file")) << device << " still attached";
  ::csi::v1::DeleteVolumeRequest del;
  del.set_volume_id(id);
  ::csi::v1::DeleteVolumeResponse deleted;
  EXPECT_TRUE(client_->controller->DeleteVolume(CsiClient::Ctx().get(), del, &deleted).ok());
}

// Tests that bad requests over the socket get InvalidArgument naming the field.
TEST_F(CsiIntegrationTest, RefusesBadRequestsOverTheSocket) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  struct Case {
    std::string name;
    ::csi::v1::NodePublishVolumeRequest req;
    std::string message;
  };
  std::vector<Case> cases;
  auto base = TokenVolumeRequest("csi-bad", Target("bad"), "vault", "900");
  cases.push_back({"target outside root", base, "is not under an allowed root"});
  cases.back().req.set_target_path("/etc/wisp-bad");
  cases.push_back({"dotdot", base, "must not contain '..'"});
  cases.back().req.set_target_path(stack_->target_root() + "/../../etc");
  cases.push_back({"short lifetime", base, "may not specify a duration less than 10 minutes"});
  (*cases.back().req.mutable_volume_context())["expirationSeconds"] = "300";
  cases.push_back({"path escape", base, "volume_context[path]"});
  (*cases.back().req.mutable_volume_context())["path"] = "../../etc/passwd";
  cases.push_back({"no capability", base, "volume_capability is required"});
  cases.back().req.clear_volume_capability();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    grpc::Status st = client_->Publish(c.req);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr(c.message));
  }
  EXPECT_FALSE(fs::exists(stack_->target_root() + "/pods/bad/mount"));
  EXPECT_FALSE(fs::exists("/etc/wisp-bad"));
}

// Tests, over the socket, the contract the official csi-sanity suite checks (docs/operations.md,
// "CSI conformance"), so a regression shows here without the Go tool: required fields, the
// 128-character name, idempotent CreateVolume and ALREADY_EXISTS for another capacity, ListVolumes
// paging and ABORTED for a token it did not issue, NOT_FOUND for unknown volumes, OK for deleting
// one, and NodeUnpublishVolume removing the target it made.
TEST_F(CsiIntegrationTest, MeetsTheCsiSanityContract) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  auto& controller = *client_->controller;
  auto& node = *client_->node;
  using grpc::StatusCode;

  // CreateVolume: name, then capabilities, are required.
  ::csi::v1::CreateVolumeRequest create;
  ::csi::v1::CreateVolumeResponse created;
  grpc::Status st = controller.CreateVolume(CsiClient::Ctx().get(), create, &created);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("name"));
  create.set_name("sanity-no-caps");
  st = controller.CreateVolume(CsiClient::Ctx().get(), create, &created);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("volume_capabilities"));

  // The longest name CSI allows, no topology (the default node), created twice: one volume.
  const int64_t size = int64_t{1} << 30;
  create.set_name("sanity-maxlen-" + std::string(128 - 14, 'n'));
  ASSERT_EQ(create.name().size(), 128u);
  *create.add_volume_capabilities() = MountCapability();
  create.mutable_capacity_range()->set_required_bytes(size);
  create.mutable_capacity_range()->set_limit_bytes(size);
  st = controller.CreateVolume(CsiClient::Ctx(60s).get(), create, &created);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const std::string id = created.volume().volume_id();
  EXPECT_GE(created.volume().capacity_bytes(), size);
  ::csi::v1::CreateVolumeResponse again;
  ASSERT_TRUE(controller.CreateVolume(CsiClient::Ctx(60s).get(), create, &again).ok());
  EXPECT_EQ(again.volume().volume_id(), id);
  create.mutable_capacity_range()->set_required_bytes(2 * size);
  create.mutable_capacity_range()->set_limit_bytes(2 * size);
  st = controller.CreateVolume(CsiClient::Ctx(60s).get(), create, &again);
  EXPECT_EQ(st.error_code(), StatusCode::ALREADY_EXISTS) << st.error_message();
  // A second volume, without a capacity range (the default capacity).
  ::csi::v1::CreateVolumeRequest other;
  other.set_name("sanity");
  *other.add_volume_capabilities() = MountCapability();
  ::csi::v1::CreateVolumeResponse other_created;
  ASSERT_TRUE(controller.CreateVolume(CsiClient::Ctx(60s).get(), other, &other_created).ok());
  EXPECT_GT(other_created.volume().capacity_bytes(), 0);

  // ListVolumes: a page at a time visits every volume once; a foreign token is ABORTED.
  std::vector<std::string> listed;
  ::csi::v1::ListVolumesRequest list;
  list.set_max_entries(1);
  for (int page = 0; page < 10; ++page) {
    ::csi::v1::ListVolumesResponse resp;
    st = controller.ListVolumes(CsiClient::Ctx().get(), list, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_LE(resp.entries_size(), 1);
    for (const auto& e : resp.entries()) listed.push_back(e.volume().volume_id());
    if (resp.next_token().empty()) break;
    list.set_starting_token(resp.next_token());
  }
  EXPECT_THAT(listed, ::testing::UnorderedElementsAre(id, other_created.volume().volume_id()));
  list.set_starting_token("invalid-token");
  ::csi::v1::ListVolumesResponse listed_bad;
  st = controller.ListVolumes(CsiClient::Ctx().get(), list, &listed_bad);
  EXPECT_EQ(st.error_code(), StatusCode::ABORTED) << st.error_message();
  list.set_starting_token("");
  list.set_max_entries(-1);
  st = controller.ListVolumes(CsiClient::Ctx().get(), list, &listed_bad);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("max_entries"));

  // ValidateVolumeCapabilities: confirmed for our volume, NOT_FOUND for another, fields required.
  ::csi::v1::ValidateVolumeCapabilitiesRequest validate;
  ::csi::v1::ValidateVolumeCapabilitiesResponse validated;
  validate.set_volume_id(id);
  st = controller.ValidateVolumeCapabilities(CsiClient::Ctx().get(), validate, &validated);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("volume_capabilities"));
  *validate.add_volume_capabilities() = MountCapability();
  st = controller.ValidateVolumeCapabilities(CsiClient::Ctx().get(), validate, &validated);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(validated.has_confirmed());
  validate.set_volume_id("fake-vol-id-0123456789");
  st = controller.ValidateVolumeCapabilities(CsiClient::Ctx().get(), validate, &validated);
  EXPECT_EQ(st.error_code(), StatusCode::NOT_FOUND) << st.error_message();

  // GetCapacity with nothing set answers (the default node's free space).
  ::csi::v1::GetCapacityResponse capacity;
  st = controller.GetCapacity(CsiClient::Ctx().get(), {}, &capacity);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_GT(capacity.available_capacity(), 0);

  // Publish, then stats: NOT_FOUND for an unknown volume and for ours at a path it is not at.
  const std::string target = Target("sanity");
  ::csi::v1::NodePublishVolumeRequest pub;
  pub.set_volume_id(id);
  pub.set_target_path(target);
  *pub.mutable_volume_capability() = MountCapability();
  *pub.mutable_volume_context() = created.volume().volume_context();
  for (int i = 0; i < 3; ++i) {
    st = client_->Publish(pub);
    ASSERT_TRUE(st.ok()) << "publish " << i << ": " << st.error_message();
  }
  ::csi::v1::NodeGetVolumeStatsRequest stats_req;
  ::csi::v1::NodeGetVolumeStatsResponse stats;
  stats_req.set_volume_id("fake-vol-id-0123456789");
  stats_req.set_volume_path("some/path");
  st = node.NodeGetVolumeStats(CsiClient::Ctx().get(), stats_req, &stats);
  EXPECT_EQ(st.error_code(), StatusCode::NOT_FOUND) << st.error_message();
  stats_req.set_volume_id(id);
  st = node.NodeGetVolumeStats(CsiClient::Ctx().get(), stats_req, &stats);
  EXPECT_EQ(st.error_code(), StatusCode::NOT_FOUND) << st.error_message();
  stats_req.set_volume_path(target);
  st = node.NodeGetVolumeStats(CsiClient::Ctx().get(), stats_req, &stats);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(stats.usage_size(), 2);

  // NodeUnpublishVolume: fields required; it removes the target it created, and again is OK.
  ::csi::v1::NodeUnpublishVolumeRequest unpub;
  ::csi::v1::NodeUnpublishVolumeResponse unpublished;
  st = node.NodeUnpublishVolume(CsiClient::Ctx().get(), unpub, &unpublished);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  unpub.set_volume_id(id);
  st = node.NodeUnpublishVolume(CsiClient::Ctx().get(), unpub, &unpublished);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("target_path"));
  ASSERT_TRUE(client_->Unpublish(id, target).ok());
  EXPECT_FALSE(IsMountPoint(target));
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(fs::exists(fs::path(target).parent_path())) << "the CO's directory stays";
  EXPECT_TRUE(client_->Unpublish(id, target).ok());

  // DeleteVolume: id required; deleting ours and an unknown one both answer OK.
  ::csi::v1::DeleteVolumeRequest del;
  ::csi::v1::DeleteVolumeResponse deleted;
  st = controller.DeleteVolume(CsiClient::Ctx().get(), del, &deleted);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  for (const std::string& v :
       {id, other_created.volume().volume_id(), std::string("fake-vol-id")}) {
    del.set_volume_id(v);
    st = controller.DeleteVolume(CsiClient::Ctx().get(), del, &deleted);
    EXPECT_TRUE(st.ok()) << v << ": " << st.error_message();
  }
  ::csi::v1::ListVolumesResponse after;
  ASSERT_TRUE(controller.ListVolumes(CsiClient::Ctx().get(), {}, &after).ok());
  EXPECT_EQ(after.entries_size(), 0);
}

}  // namespace
}  // namespace wisp::integration
