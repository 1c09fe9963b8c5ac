// Real clients of wisp's STS (issue 25 item 6), against the real wisp-token and wisp-gateway
// binaries over HTTPS behind a real nats-server (integration::Stack), with a token policy that
// demands the GKE shape: the projected token's audience <project>.svc.id.goog, the STS audience
// the workload identity provider, and scope cloud-platform.
//   - Google's own google-auth-library (npm, tools/), ExternalAccountClient with a file credential
//     source (a token file written as `echo` writes it: a trailing newline) and token_url = wisp's
//     STS, obtains an access token from wisp.
//   - wisp-sidecar, whose --audience is the projected token's (as wisp-policy injects it), asks
//     the STS for the provider audience and the scope through --sts-audience and --sts-scope.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/fsutil/read_file.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/nats_test.hpp"
#include "wisp/integration/stack.hpp"
#include "wisp/jwt/jws.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::integration {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

constexpr const char* kProjectAudience = "wisp-project.svc.id.goog";
constexpr const char* kProvider =
    "//iam.googleapis.com/projects/123456/locations/global/workloadIdentityPools/wisp-pool/"
    "providers/wisp";
constexpr const char* kScope = "https://www.googleapis.com/auth/cloud-platform";

std::string Policy() {
  return std::string(R"(
namespaces:
  ml: {audiences: [)") +
         kProjectAudience + R"(]}
exchange:
  accessTokenLifetimeSeconds: 1800
  subjectAudiences: [)" +
         kProjectAudience + R"(]
  rules:
    - namespace: ml
      serviceAccounts: [loader]
      audiences: [")" +
         kProvider + R"("]
      scopes: [)" +
         kScope + R"(]
)";
}

std::string Sh(const std::string& s) { return "'" + s + "'"; }

class StsClientsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("wisp-sts-clients");
    std::ofstream(dir_->path() + "/policy.yaml") << Policy();
    auto stack = Stack::Start(
        {.policy = false,
         .populator = false,
         .extra_args = {{"wisp-token", {"--policy-file", dir_->path() + "/policy.yaml"}}}});
    ASSERT_TRUE(stack.ok()) << stack.status();
    stack_ = stack->release();
    auto bus = bus::NatsBus::Connect(TestBusOptions({stack_->nats().url()}, "sts-clients-test"));
    ASSERT_TRUE(bus.ok()) << bus.status();
    bus_ = bus->release();
  }
  static void TearDownTestSuite() {
    delete bus_;
    delete stack_;
    delete dir_;
  }

  // A projected token of ml/<sa> for the project audience, from wisp-token over the bus.
  static std::string Projected(const std::string& sa = "loader") {
    v1::IssueRequest req;
    req.mutable_subject()->set_namespace_("ml");
    req.mutable_subject()->set_service_account(sa);
    req.mutable_subject()->set_service_account_uid("uid-" + sa);
    req.add_audiences(kProjectAudience);
    auto resp = bus::Call<v1::IssueResponse>(*bus_, bus::subjects::kTokenIssue, req, seconds(5));
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->token() : "";
  }

  // wisp's review of an access token for `audience`.
  static v1::ReviewResponse Review(const std::string& token, const std::string& audience) {
    v1::ReviewRequest rr;
    rr.set_token(token);
    rr.add_audiences(audience);
    auto r = bus::Call<v1::ReviewResponse>(*bus_, bus::subjects::kTokenReview, rr, seconds(5));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::ReviewResponse();
  }

  static std::string StsUrl() {
    return "https://localhost:" + std::to_string(stack_->gateway_port()) + "/v1/token";
  }

  // google-auth-library's ExternalAccountClient with a credential file naming `token_file` and
  // wisp's STS, asking for `scopes` (none: the library's default, cloud-platform).
  static CommandResult GoogleAuth(const std::string& token_file,
                                  const std::vector<std::string>& scopes = {}) {
    const nlohmann::json credentials = {
        {"type", "external_account"},
        {"audience", kProvider},
        {"subject_token_type", "urn:ietf:params:oauth:token-type:jwt"},
        {"token_url", StsUrl()},
        {"credential_source", {{"file", token_file}}}};
    const std::string file = dir_->path() + "/credentials.json";
    std::ofstream(file) << credentials.dump(2);
    std::string cmd = "NODE_EXTRA_CA_CERTS=" + stack_->ca_file() + " node " + SourceDir() +
                      "/integration/token/google_auth.mjs " + Sh(SourceDir() + "/tools") + " " +
                      Sh(file);
    for (const auto& s : scopes) cmd += " " + Sh(s);
    return RunCommand(cmd + " 2>&1");
  }

  static inline TempDir* dir_ = nullptr;
  static inline Stack* stack_ = nullptr;
  static inline bus::NatsBus* bus_ = nullptr;
};

// Tests that google-auth-library's ExternalAccountClient, reading a token file written as `echo`
// writes it (trailing newline), gets an access token from wisp's STS for the provider audience
// and its default scope, valid for the policy's lifetime; and that a scope the policy does not
// allow comes back to it as wisp's invalid_scope.
TEST_F(StsClientsTest, GoogleAuthLibraryGetsAnAccessToken) {
  const std::string token_file = dir_->path() + "/token";
  std::ofstream(token_file) << Projected() << "\n";
  const auto before = std::chrono::system_clock::now();
  auto r = GoogleAuth(token_file);
  ASSERT_EQ(r.exit_code, 0) << r.output << stack_->process("wisp-token").Log();
  auto out = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_TRUE(out.is_object()) << r.output;
  const std::string access = out["access_token"].get<std::string>();
  auto review = Review(access, kProvider);
  EXPECT_TRUE(review.authenticated()) << review.error();
  EXPECT_EQ(review.subject().service_account(), "loader");
  auto claims = jwt::Decode(access);
  ASSERT_TRUE(claims.ok()) << claims.status();
  EXPECT_EQ(claims->claims["scope"], kScope);
  EXPECT_EQ(claims->claims["aud"], nlohmann::json::array({kProvider}));
  // expires_in reached the library: its expiry is the policy's 1800 s from now, shortened by up to
  // 10% (wisp-token's default --lifetime-jitter-percent).
  const int64_t expiry_ms = out["expiry_date"].get<int64_t>();
  const int64_t before_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(before.time_since_epoch()).count();
  EXPECT_GE(expiry_ms, before_ms + 1610 * 1000);
  EXPECT_LE(expiry_ms, before_ms + 1830 * 1000);

  auto refused = GoogleAuth(token_file, {"https://www.googleapis.com/auth/devstorage.read_only"});
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("invalid_scope"), std::string::npos) << refused.output;
}

// Writes a kubelet-style projected token file (a trailing newline, as `echo` writes it).
void WriteToken(const fs::path& file, const std::string& token) {
  std::ofstream(file.string() + ".tmp") << token << "\n";
  fs::rename(file.string() + ".tmp", file);
}

// Tests the gcs-fuse shape through wisp-sidecar: its --audience is the projected token's (as
// wisp-policy injects it), and --sts-audience / --sts-scope ask the STS for the provider and
// cloud-platform, which the policy demands; without them the STS refuses the project audience.
TEST_F(StsClientsTest, SidecarAsksForStsAudienceAndScope) {
  const fs::path token_file = fs::path(dir_->path()) / "sidecar-token";
  WriteToken(token_file, Projected());
  const std::string ca_pem = fsutil::ReadFile(stack_->ca_file()).value_or("");
  const auto start = [&](const std::string& name, std::vector<std::string> extra) {
    const std::string socket = dir_->path() + "/" + name + "/token.sock";
    fs::create_directories(fs::path(socket).parent_path());
    std::vector<std::string> args = {
        "--socket", socket,     "--token-file", token_file.string(), "--sts-url",
        StsUrl(),   "--ca-pem", ca_pem,         "--audience",        kProjectAudience};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = Process::Start({.path = BinaryPath("wisp-sidecar"), .args = args});
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) {
      EXPECT_TRUE((*p)->WaitForLog("serving tokens", seconds(10)).ok()) << (*p)->Log();
    }
    return std::pair{p.ok() ? *std::move(p) : nullptr, socket};
  };
  const auto get = [](const std::string& socket) {
    return RunCommand("curl -sS -w ' %{http_code}' --unix-socket " + socket + " http://x/ 2>&1")
        .output;
  };

  auto [shaped, shaped_socket] =
      start("shaped", {"--sts-audience", kProvider, "--sts-scope", kScope});
  ASSERT_NE(shaped, nullptr);
  const std::string ok = get(shaped_socket);
  ASSERT_NE(ok.find(" 200"), std::string::npos) << ok << shaped->Log();
  auto j = nlohmann::json::parse(ok.substr(0, ok.rfind(' ')), nullptr, false);
  ASSERT_TRUE(j.is_object()) << ok;
  const std::string access = j["access_token"].get<std::string>();
  auto review = Review(access, kProvider);
  EXPECT_TRUE(review.authenticated()) << review.error();
  auto claims = jwt::Decode(access);
  ASSERT_TRUE(claims.ok());
  EXPECT_EQ(claims->claims["aud"], nlohmann::json::array({kProvider}));
  EXPECT_EQ(claims->claims["scope"], kScope);

  // The same sidecar asking the STS for the projected token's own audience: refused by the policy.
  auto [plain, plain_socket] = start("plain", {"--scope", kScope});
  ASSERT_NE(plain, nullptr);
  const std::string refused = get(plain_socket);
  EXPECT_NE(refused.find(" 500"), std::string::npos) << refused;
  EXPECT_NE(refused.find("invalid_target"), std::string::npos) << refused;
  // And with the provider but a scope the policy does not grant.
  auto [scoped, scoped_socket] =
      start("scoped", {"--sts-audience", kProvider, "--sts-scope", "https://example.test/admin"});
  ASSERT_NE(scoped, nullptr);
  const std::string no_scope = get(scoped_socket);
  EXPECT_NE(no_scope.find("invalid_scope"), std::string::npos) << no_scope;
}

}  // namespace
}  // namespace wisp::integration
