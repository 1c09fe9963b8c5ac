// Token interop end to end: the real wisp-token binary behind a real nats-server, the gateway's
// OIDC/STS routes (wisp::gateway_oidc, as the gateway registers them) on HTTPS with a test CA, and
// verifiers nobody here wrote: PyJWT's PyJWKClient (Debian python3-jwt) and npm jose's
// createRemoteJWKSet, both starting from discovery. Also the wisp-sidecar binary end to end with a
// kubelet-style projected token swapped mid-test.
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <signal.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <prometheus/registry.h>

#include "oidc/oidc_routes.hpp"
#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/http/server.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/nats_test.hpp"
#include "wisp/integration/stack.hpp"
#include "wisp/jwt/base64url.hpp"
#include "wisp/jwt/jws.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::integration {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

constexpr const char* kScope = "https://www.googleapis.com/auth/cloud-platform";

constexpr const char* kPolicy = R"(
maxExpirationSeconds: 7200
namespaces:
  ml: {audiences: [sts.amazonaws.com, vault, wisp-sts]}
exchange:
  accessTokenLifetimeSeconds: 1800
  subjectAudiences: [wisp-sts]
  rules:
    - namespace: ml
      serviceAccounts: [loader]
      audiences: [storage.wisp.dev]
      scopes: [https://www.googleapis.com/auth/cloud-platform]
)";

std::string Sh(const std::string& s) { return "'" + s + "'"; }

// An `alg` token for system:serviceaccount:<ns>:<sa> from wisp-token, over the bus.
v1::IssueResponse IssueToken(bus::NatsBus& bus, const std::string& alg,
                             const std::vector<std::string>& audiences, const std::string& ns,
                             const std::string& sa) {
  v1::IssueRequest req;
  req.mutable_subject()->set_namespace_(ns);
  req.mutable_subject()->set_service_account(sa);
  req.mutable_subject()->set_service_account_uid("uid-" + sa);
  req.mutable_subject()->set_pod_name(sa + "-0");
  req.mutable_subject()->set_pod_uid("uid-" + sa + "-0");
  for (const auto& a : audiences) req.add_audiences(a);
  req.set_algorithm(alg);
  auto resp = bus::Call<v1::IssueResponse>(bus, bus::subjects::kTokenIssue, req, seconds(5));
  EXPECT_TRUE(resp.ok()) << resp.status();
  return resp.ok() ? *resp : v1::IssueResponse();
}

// The relying parties nobody here wrote, verifying `token` (then each of `forged`, which they
// must refuse) for `audience` through `issuer`'s discovery document and JWKS over HTTPS signed by
// the CA in `ca_file`: PyJWT's PyJWKClient, and jose's createRemoteJWKSet.
CommandResult VerifyWithPyJwt(const std::string& ca_file, const std::string& issuer,
                              const std::string& audience, const std::string& token,
                              const std::vector<std::string>& forged = {}) {
  std::string cmd = "SSL_CERT_FILE=" + ca_file + " /usr/bin/python3 " + SourceDir() +
                    "/integration/token/verify_pyjwt.py " + Sh(issuer) + " " + Sh(audience) + " " +
                    Sh(token);
  for (const auto& f : forged) cmd += " " + Sh(f);
  return RunCommand(cmd + " 2>&1");
}

CommandResult VerifyWithJose(const std::string& ca_file, const std::string& issuer,
                             const std::string& audience, const std::string& token,
                             const std::vector<std::string>& forged = {}) {
  std::string cmd = "NODE_EXTRA_CA_CERTS=" + ca_file + " node " + SourceDir() +
                    "/integration/token/verify_jose.mjs " + Sh(SourceDir() + "/tools") + " " +
                    Sh(issuer) + " " + Sh(audience) + " " + Sh(token);
  for (const auto& f : forged) cmd += " " + Sh(f);
  return RunCommand(cmd + " 2>&1");
}

class TokenInteropTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("wisp-token-it");
    const std::string d = dir_->path();
    auto r = RunCommand(
        "cd " + d +
        " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
        "-subj '/CN=wisp token test CA' -keyout ca-key.pem -out ca.pem 2>&1"
        " && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=gw "
        "-keyout gw-key.pem -out gw.csr 2>&1"
        " && printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n'"
        " > ext.cnf && openssl x509 -req -in gw.csr -CA ca.pem -CAkey ca-key.pem "
        "-CAcreateserial -days 2 -extfile ext.cnf -out gw.pem 2>&1"
        " && head -c 32 /dev/urandom > kek && chmod 600 kek");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream(d + "/policy.yaml") << kPolicy;

    auto nats = NatsServer::Start();
    ASSERT_TRUE(nats.ok()) << nats.status();
    nats_ = nats->release();
    https_port_ = FreePort();
    issuer_ = "https://localhost:" + std::to_string(https_port_);
    metrics_port_ = FreePort();
    auto token = Process::Start(
        {.path = BinaryPath("wisp-token"),
         .args = {"--nats-url", nats_->url(), "--metrics-address",
                  "127.0.0.1:" + std::to_string(metrics_port_), "--key-encryption-key-file",
                  d + "/kek", "--issuer-url", issuer_, "--policy-file", d + "/policy.yaml",
                  "--key-rotation-period", "20s", "--log-level", "debug"}});
    ASSERT_TRUE(token.ok()) << token.status();
    token_ = token->release();
    ASSERT_TRUE(WaitForHttp("127.0.0.1", metrics_port_, "/readyz", seconds(20)).ok())
        << token_->Log();

    bus::NatsBusOptions bo = TestBusOptions({nats_->url()}, "token-interop-test");
    bo.serve_threads = 2;
    auto bus = bus::NatsBus::Connect(bo);
    ASSERT_TRUE(bus.ok()) << bus.status();
    bus_ = bus->release();
    registry_ = new prometheus::Registry();
    auto server = http::Server::Create({.address = "127.0.0.1",
                                        .port = static_cast<uint16_t>(https_port_),
                                        .cert_file = d + "/gw.pem",
                                        .key_file = d + "/gw-key.pem",
                                        .name = "test-gateway"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    auto routes = gateway::oidc::RegisterOidcRoutes(*server_, *bus_, *registry_, {});
    ASSERT_TRUE(routes.ok()) << routes.status();
    routes_ = routes->release();
    ASSERT_TRUE(server_->Start().ok());
    for (int i = 0; i < 100 && !routes_->key_cache().Current(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_NE(routes_->key_cache().Current(), nullptr);
  }

  static void TearDownTestSuite() {
    if (server_) server_->Stop();
    delete routes_;
    delete server_;
    delete bus_;
    delete registry_;
    delete token_;
    delete nats_;
    delete dir_;
  }

  static v1::IssueResponse Issue(const std::string& alg, const std::vector<std::string>& auds,
                                 const std::string& sa = "loader") {
    return IssueToken(*bus_, alg, auds, "ml", sa);
  }

  // Forgeries of `token`: tampered payload, alg none, HS256 keyed with the public key (JWK and
  // PEM), and a valid signature by a key outside the JWKS.
  static std::vector<std::string> Forgeries(const std::string& token) {
    std::vector<std::string> out;
    auto d = *jwt::Decode(token);
    nlohmann::json claims = d.claims;
    claims["sub"] = "system:serviceaccount:kube-system:admin";
    const std::string payload = jwt::Base64UrlEncode(claims.dump());
    const std::string header_b64 = token.substr(0, token.find('.'));
    out.push_back(header_b64 + "." + payload + token.substr(token.rfind('.')));
    out.push_back(jwt::Base64UrlEncode(nlohmann::json{{"alg", "none"}, {"typ", "JWT"}}.dump()) +
                  "." + jwt::Base64UrlEncode(d.claims.dump()) + ".");
    auto keys = *jwt::KeySet::FromJwks(routes_->key_cache().Current()->jwks_json());
    const jwt::PublicKey* pub = keys.Find(d.kid);
    for (const std::string& secret : {pub->Jwk().dump(), *pub->ToPem()}) {
      const std::string input =
          jwt::Base64UrlEncode(
              nlohmann::json{{"alg", "HS256"}, {"kid", d.kid}, {"typ", "JWT"}}.dump()) +
          "." + jwt::Base64UrlEncode(d.claims.dump());
      unsigned char mac[EVP_MAX_MD_SIZE];
      unsigned int len = 0;
      HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &len);
      out.push_back(input + "." +
                    jwt::Base64UrlEncode(std::string(reinterpret_cast<char*>(mac), len)));
    }
    auto stranger = *jwt::PrivateKey::Generate(d.alg == "ES256" ? jwt::Algorithm::kES256
                                                                : jwt::Algorithm::kRS256);
    out.push_back(*jwt::Sign(stranger, d.claims.dump()));
    return out;
  }

  static CommandResult PyJwt(const std::string& audience, const std::string& token,
                             const std::vector<std::string>& forged = {}) {
    return VerifyWithPyJwt(dir_->path() + "/ca.pem", issuer_, audience, token, forged);
  }

  static CommandResult Jose(const std::string& audience, const std::string& token,
                            const std::vector<std::string>& forged = {}) {
    return VerifyWithJose(dir_->path() + "/ca.pem", issuer_, audience, token, forged);
  }

  static std::string Curl(const std::string& args) {
    return RunCommand("curl -sS --cacert " + dir_->path() + "/ca.pem " + args + " 2>&1").output;
  }

  static inline TempDir* dir_ = nullptr;
  static inline NatsServer* nats_ = nullptr;
  static inline Process* token_ = nullptr;
  static inline bus::NatsBus* bus_ = nullptr;
  static inline prometheus::Registry* registry_ = nullptr;
  static inline http::Server* server_ = nullptr;
  static inline gateway::oidc::OidcRoutes* routes_ = nullptr;
  static inline int https_port_ = 0;
  static inline int metrics_port_ = 0;
  static inline std::string issuer_;
};

// Tests that PyJWT's PyJWKClient verifies RS256 and ES256 tokens through discovery and JWKS, and
// refuses expired, not-yet-valid, wrong-audience, tampered, alg none, HS256-with-public-key and
// unknown-kid tokens.
TEST_F(TokenInteropTest, PyJwtVerifiesThroughDiscovery) {
  for (const char* alg : {"RS256", "ES256"}) {
    SCOPED_TRACE(alg);
    const auto issued = Issue(alg, {"sts.amazonaws.com"});
    auto r = PyJwt("sts.amazonaws.com", issued.token(), Forgeries(issued.token()));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("ok ") + alg + " system:serviceaccount:ml:loader"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("ACCEPTED"), std::string::npos) << r.output;
  }
}

// Tests that npm jose's createRemoteJWKSet verifies RS256 and ES256 tokens and refuses the
// forgeries, wrong audience and expiry.
TEST_F(TokenInteropTest, JoseVerifiesThroughRemoteJwks) {
  for (const char* alg : {"RS256", "ES256"}) {
    SCOPED_TRACE(alg);
    const auto issued = Issue(alg, {"vault"});
    auto r = Jose("vault", issued.token(), Forgeries(issued.token()));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("ok ") + alg), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("ACCEPTED"), std::string::npos) << r.output;
  }
}

// Tests wisp.v1.token.issue_batch against the real wisp-token: RS256 and ES256 entries for
// different service accounts come back in order, each verified by PyJWT and by jose through
// discovery, and an entry the policy refuses is refused alone, with the message issue gives.
TEST_F(TokenInteropTest, BatchTokensVerifyWithPyJwtAndJose) {
  v1::IssueBatchRequest batch;
  const std::vector<std::pair<std::string, std::string>> entries = {
      {"RS256", "reader"}, {"ES256", "writer"}, {"ES256", "refused"}, {"RS256", "auditor"}};
  for (const auto& [alg, sa] : entries) {
    v1::IssueRequest* req = batch.add_requests();
    req->mutable_subject()->set_namespace_("ml");
    req->mutable_subject()->set_service_account(sa);
    req->add_audiences(sa == "refused" ? "not-allowed-here" : "sts.amazonaws.com");
    if (sa != "refused") req->add_audiences("vault");
    req->set_algorithm(alg);
  }
  auto resp =
      bus::Call<v1::IssueBatchResponse>(*bus_, bus::subjects::kTokenIssueBatch, batch, seconds(10));
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(resp->results_size(), 4);
  auto alone = bus::Call<v1::IssueResponse>(*bus_, bus::subjects::kTokenIssue, batch.requests(2),
                                            seconds(5));
  EXPECT_EQ(resp->results(2).code(), static_cast<int>(alone.status().code()));
  EXPECT_EQ(resp->results(2).message(), alone.status().message());
  EXPECT_EQ(resp->results(2).code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  for (int i : {0, 1, 3}) {
    const auto& [alg, sa] = entries[static_cast<size_t>(i)];
    SCOPED_TRACE(alg + " " + sa);
    ASSERT_EQ(resp->results(i).code(), 0) << resp->results(i).message();
    const std::string& token = resp->results(i).token().token();
    auto py = PyJwt("sts.amazonaws.com", token);
    EXPECT_EQ(py.exit_code, 0) << py.output;
    EXPECT_NE(py.output.find("ok " + alg + " system:serviceaccount:ml:" + sa), std::string::npos)
        << py.output;
    auto jose = Jose("vault", token);
    EXPECT_EQ(jose.exit_code, 0) << jose.output;
    EXPECT_NE(jose.output.find("ok " + alg), std::string::npos) << jose.output;
  }
}

// Tests that discovery and JWKS have Kubernetes' shapes and cache headers over HTTPS.
TEST_F(TokenInteropTest, DiscoveryShapesOverHttps) {
  const std::string url = "https://localhost:" + std::to_string(https_port_);
  auto doc = nlohmann::json::parse(Curl(url + "/.well-known/openid-configuration"), nullptr, false);
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc["issuer"], issuer_);
  EXPECT_EQ(doc["jwks_uri"], issuer_ + "/openid/v1/jwks");
  EXPECT_EQ(doc["response_types_supported"], nlohmann::json::array({"id_token"}));
  const std::string headers = Curl("-D - -o /dev/null " + url + "/openid/v1/jwks");
  EXPECT_NE(headers.find("application/jwk-set+json"), std::string::npos) << headers;
  EXPECT_NE(headers.find("max-age="), std::string::npos) << headers;
}

// Tests the STS over HTTPS: an RFC 8693 form exchange and RFC 6749 errors.
TEST_F(TokenInteropTest, StsExchangesOverHttps) {
  const auto subject = Issue("", {"wisp-sts"});
  const std::string url = "https://localhost:" + std::to_string(https_port_) + "/v1/token";
  const std::string ok =
      Curl("-X POST " + url +
           " --data-urlencode grant_type=urn:ietf:params:oauth:grant-type:token-exchange"
           " --data-urlencode subject_token=" +
           subject.token() +
           " --data-urlencode subject_token_type=urn:ietf:params:oauth:token-type:jwt"
           " --data-urlencode audience=storage.wisp.dev --data-urlencode scope=" +
           kScope);
  auto j = nlohmann::json::parse(ok, nullptr, false);
  ASSERT_TRUE(j.is_object()) << ok;
  EXPECT_EQ(j["token_type"], "Bearer") << ok;
  // The policy's 1800 s, shortened by wisp-token's default --lifetime-jitter-percent 10.
  EXPECT_GE(j["expires_in"].get<int64_t>(), 1620) << ok;
  EXPECT_LE(j["expires_in"].get<int64_t>(), 1800) << ok;
  // The access token verifies for its audience with PyJWT too.
  auto r = PyJwt("storage.wisp.dev", j["access_token"].get<std::string>());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string bad = Curl("-w ' %{http_code}' -X POST " + url + " -d grant_type=password");
  EXPECT_NE(bad.find("unsupported_grant_type"), std::string::npos) << bad;
  EXPECT_NE(bad.find(" 400"), std::string::npos) << bad;
  const std::string target =
      Curl("-w ' %{http_code}' -X POST " + url +
           " --data-urlencode grant_type=urn:ietf:params:oauth:grant-type:token-exchange"
           " --data-urlencode subject_token=" +
           subject.token() +
           " --data-urlencode subject_token_type=urn:ietf:params:oauth:token-type:jwt"
           " --data-urlencode audience=elsewhere");
  EXPECT_NE(target.find("invalid_target"), std::string::npos) << target;
}

// The value of one series ("name{labels}") in a /metrics body; -1 when absent.
double Series(const std::string& body, const std::string& series) {
  const size_t p = body.find("\n" + series + " ");
  if (p == std::string::npos) return -1;
  return std::stod(body.substr(p + series.size() + 2));
}

// Tests policy hot reload and external JWKS by URL through the real binary: a policy that does not
// load (SIGHUP) keeps the one in force; a policy naming an external issuer's jwksUrl (HTTPS,
// verified with the test CA) is taken on SIGHUP and that issuer's tokens are exchanged at the STS;
// a JWKS server with an untrusted certificate and an oversized JWKS are refused, so their tokens
// get 503 temporarily_unavailable, and the fetch outcomes are counted.
TEST_F(TokenInteropTest, PolicyReloadAndJwksByUrl) {
  const std::string d = dir_->path();
  auto idp = *jwt::PrivateKey::Generate(jwt::Algorithm::kES256);
  fs::create_directories(d + "/idp");
  jwt::KeySet set;
  set.Add(idp.public_key());
  std::ofstream(d + "/idp/jwks.json") << set.ToJwks().dump();
  std::ofstream(d + "/idp/big.json")
      << "{\"keys\":[],\"pad\":\"" << std::string(2 << 20, 'x') << "\"}";
  ASSERT_EQ(RunCommand("cd " + d +
                       " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
                       "-days 1 -subj /CN=other-ca -keyout other-key.pem -out other-ca.pem 2>&1")
                .exit_code,
            0);
  const int port = FreePort();
  auto idp_server = Process::Start(
      {.path = "/usr/bin/python3",
       .args = {SourceDir() + "/integration/token/https_server.py", std::to_string(port),
                d + "/idp", d + "/gw.pem", d + "/gw-key.pem"}});
  ASSERT_TRUE(idp_server.ok()) << idp_server.status();
  ASSERT_TRUE(WaitForTcp("127.0.0.1", port, seconds(10)).ok()) << (*idp_server)->Log();
  const std::string jwks_base = "https://localhost:" + std::to_string(port);

  const auto metrics = [&] {
    auto m = HttpGet("127.0.0.1", metrics_port_, "/metrics", seconds(5));
    return m.ok() ? "\n" + m->body : std::string();
  };
  const auto wait_for = [&](const std::string& series) {
    for (int i = 0; i < 100; ++i) {
      if (Series(metrics(), series) >= 1) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  const auto write_policy = [&](const std::string& yaml) {
    std::ofstream(d + "/policy.yaml.tmp") << yaml;
    fs::rename(d + "/policy.yaml.tmp", d + "/policy.yaml");
  };

  // A policy that does not load: the one in force stays (ml may still ask for vault).
  write_policy("namespaces: {ml: {audiences: vault}}\n");
  token_->Signal(SIGHUP);
  ASSERT_TRUE(wait_for("wisp_token_policy_reloads_total{outcome=\"error\"}")) << token_->Log();
  EXPECT_NE(token_->Log().find("namespaces.ml.audiences"), std::string::npos);
  EXPECT_FALSE(Issue("", {"vault"}).token().empty());

  write_policy(std::string(kPolicy) + "trustedIssuers:\n" +
               "  - {issuer: https://idp.test, jwksUrl: " + jwks_base +
               "/jwks.json, jwksCaFile: " + d + "/ca.pem, audiences: [wisp-sts]}\n" +
               "  - {issuer: https://untrusted.test, jwksUrl: " + jwks_base +
               "/jwks.json, jwksCaFile: " + d + "/other-ca.pem, audiences: [wisp-sts]}\n" +
               "  - {issuer: https://big.test, jwksUrl: " + jwks_base +
               "/big.json, jwksCaFile: " + d + "/ca.pem, audiences: [wisp-sts]}\n");
  token_->Signal(SIGHUP);
  ASSERT_TRUE(wait_for("wisp_token_policy_reloads_total{outcome=\"ok\"}")) << token_->Log();
  EXPECT_GE(Series(metrics(),
                   "wisp_token_jwks_fetches_total{issuer=\"https://idp.test\",outcome=\"ok\"}"),
            1);
  EXPECT_GE(Series(metrics(),
                   "wisp_token_jwks_fetches_total{issuer=\"https://untrusted.test\","
                   "outcome=\"error\"}"),
            1);
  EXPECT_NE(token_->Log().find("certificate verify failed"), std::string::npos);
  EXPECT_NE(token_->Log().find("larger than 1048576 bytes"), std::string::npos);

  const std::string url = "https://localhost:" + std::to_string(https_port_) + "/v1/token";
  const auto exchange = [&](const std::string& iss) {
    const int64_t now = std::time(nullptr);
    nlohmann::json c = {{"iss", iss},
                        {"sub", "system:serviceaccount:ml:loader"},
                        {"aud", {"wisp-sts"}},
                        {"iat", now},
                        {"exp", now + 600}};
    return Curl("-w ' %{http_code}' -X POST " + url +
                " --data-urlencode grant_type=urn:ietf:params:oauth:grant-type:token-exchange"
                " --data-urlencode subject_token=" +
                *jwt::Sign(idp, c.dump()) +
                " --data-urlencode subject_token_type=urn:ietf:params:oauth:token-type:jwt"
                " --data-urlencode audience=storage.wisp.dev");
  };
  const std::string ok = exchange("https://idp.test");
  EXPECT_NE(ok.find(" 200"), std::string::npos) << ok << token_->Log();
  auto j = nlohmann::json::parse(ok.substr(0, ok.rfind(' ')), nullptr, false);
  ASSERT_TRUE(j.is_object()) << ok;
  auto r = PyJwt("storage.wisp.dev", j["access_token"].get<std::string>());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* iss : {"https://untrusted.test", "https://big.test"}) {
    SCOPED_TRACE(iss);
    const std::string refused = exchange(iss);
    EXPECT_NE(refused.find("temporarily_unavailable"), std::string::npos) << refused;
    EXPECT_NE(refused.find(" 503"), std::string::npos) << refused;
  }
}

// Tests rotation through the real binary (--key-rotation-period 20s): a token signed before the
// rotation still verifies with PyJWT and jose after it, and new tokens carry the new kid.
TEST_F(TokenInteropTest, TokenSignedBeforeRotationStillVerifies) {
  const auto before = Issue("RS256", {"sts.amazonaws.com"});
  v1::IssueResponse after;
  for (int i = 0; i < 60; ++i) {
    after = Issue("RS256", {"sts.amazonaws.com"});
    if (after.key_id() != before.key_id()) break;
    std::this_thread::sleep_for(seconds(1));
  }
  ASSERT_NE(after.key_id(), before.key_id()) << "no rotation within 60 s";
  auto jwks = nlohmann::json::parse(routes_->key_cache().Current()->jwks_json());
  std::set<std::string> kids;
  for (const auto& k : jwks["keys"]) kids.insert(k["kid"].get<std::string>());
  EXPECT_TRUE(kids.count(before.key_id()) && kids.count(after.key_id()));
  for (const v1::IssueResponse* t : {&before, static_cast<const v1::IssueResponse*>(&after)}) {
    auto py = PyJwt("sts.amazonaws.com", t->token());
    EXPECT_EQ(py.exit_code, 0) << py.output;
    auto js = Jose("sts.amazonaws.com", t->token());
    EXPECT_EQ(js.exit_code, 0) << js.output;
  }
}

// Writes a kubelet AtomicWriter-style projection: a timestamped dir, ..data swapped by rename,
// token -> ..data/token.
void Project(const fs::path& dir, int generation, const std::string& token) {
  const fs::path ts = dir / ("..2026_12_02_00_00_0" + std::to_string(generation) + ".x");
  fs::create_directories(ts);
  std::ofstream(ts / "token") << token;
  fs::remove(dir / "..data_tmp");
  fs::create_symlink(ts.filename(), dir / "..data_tmp");
  fs::rename(dir / "..data_tmp", dir / "..data");
  if (!fs::exists(fs::symlink_status(dir / "token"))) {
    fs::create_symlink("..data/token", dir / "token");
  }
}

// Tests the sidecar end to end: projected token file -> wisp-sidecar -> STS -> wisp-token, with
// the file swapped mid-test as kubelet does, and one STS exchange for many answers (cache).
TEST_F(TokenInteropTest, SidecarEndToEndWithKubeletSwap) {
  const fs::path proj = fs::path(dir_->path()) / "projected";
  fs::create_directories(proj);
  // First projection: a service account the exchange policy does not allow.
  Project(proj, 1, Issue("", {"wisp-sts"}, "intruder").token());
  const std::string socket = dir_->path() + "/token.sock";
  const int sidecar_metrics = FreePort();
  const std::string ca_pem = fsutil::ReadFile(dir_->path() + "/ca.pem").value_or("");
  auto sidecar = Process::Start(
      {.path = BinaryPath("wisp-sidecar"),
       .args = {"--socket", socket, "--token-file", (proj / "token").string(), "--sts-url",
                "https://localhost:" + std::to_string(https_port_) + "/v1/token",
                // The CA as wisp-policy injects it: the PEM text ($(WISP_STS_CA_PEM)).
                "--ca-pem", ca_pem, "--audience", "storage.wisp.dev", "--scope", kScope,
                "--metrics-address", "127.0.0.1:" + std::to_string(sidecar_metrics)}});
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  ASSERT_TRUE((*sidecar)->WaitForLog("serving tokens", seconds(10)).ok()) << (*sidecar)->Log();
  // 0666: app containers run as users other than the sidecar's 65534.
  EXPECT_EQ(fs::status(socket).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::group_write | fs::perms::others_read | fs::perms::others_write);
  const auto get = [&] {
    return RunCommand("curl -sS -w ' %{http_code}' --unix-socket " + socket + " http://x/ 2>&1")
        .output;
  };
  // Not ready (the injected startupProbe's check) while the exchange is refused.
  const std::string ready_file = (fs::path(socket).parent_path() / "ready").string();
  const std::string probe = BinaryPath("wisp-sidecar") + " --probe --ready-file " + ready_file;
  EXPECT_NE(RunCommand(probe).exit_code, 0);
  const std::string refused = get();
  EXPECT_NE(refused.find(" 500"), std::string::npos) << refused;
  EXPECT_NE(refused.find("invalid_target"), std::string::npos) << refused;

  // kubelet rotates the projection to the pod's real service account.
  Project(proj, 2, Issue("", {"wisp-sts"}, "loader").token());
  const std::string first = get();
  ASSERT_NE(first.find(" 200"), std::string::npos) << first << (*sidecar)->Log();
  // Ready once it holds a token: the keep-warm loop publishes the expiry within its backoff.
  EXPECT_TRUE(Eventually([&] { return RunCommand(probe).exit_code == 0; }, seconds(5)))
      << RunCommand(probe).output;
  auto j = nlohmann::json::parse(first.substr(0, first.rfind(' ')), nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["token_type"], "Bearer");
  EXPECT_EQ(j.size(), 3u);
  EXPECT_EQ(j["expiry"].get<std::string>().back(), 'Z');
  v1::ReviewRequest rr;
  rr.set_token(j["access_token"].get<std::string>());
  rr.add_audiences("storage.wisp.dev");
  auto review = bus::Call<v1::ReviewResponse>(*bus_, bus::subjects::kTokenReview, rr, seconds(5));
  ASSERT_TRUE(review.ok());
  EXPECT_TRUE(review->authenticated()) << review->error();
  EXPECT_EQ(review->subject().service_account(), "loader");

  for (int i = 0; i < 20; ++i) EXPECT_EQ(get(), first);
  auto metrics = HttpGet("127.0.0.1", metrics_port_, "/metrics", seconds(5));
  ASSERT_TRUE(metrics.ok());
  // Exactly one successful exchange came from the sidecar (the STS test may add its own).
  const auto count_ok = [](const std::string& body) {
    const std::string needle = "wisp_token_exchanges_total{outcome=\"ok\"} ";
    const size_t p = body.find(needle);
    return p == std::string::npos ? 0 : std::stoi(body.substr(p + needle.size()));
  };
  const int ok_now = count_ok(metrics->body);
  EXPECT_GE(ok_now, 1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(get(), first);
  EXPECT_EQ(count_ok(HttpGet("127.0.0.1", metrics_port_, "/metrics", seconds(5))->body), ok_now);

  // The sidecar's own metrics: refused exchange(s), 1 good exchange, 25 answers from the cache,
  // both projections loaded; health endpoints up, and promtool accepts the exposition.
  for (const char* path : {"/healthz", "/readyz"}) {
    auto h = HttpGet("127.0.0.1", sidecar_metrics, path, seconds(5));
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->status, 200) << path;
  }
  auto sm = HttpGet("127.0.0.1", sidecar_metrics, "/metrics", seconds(5));
  ASSERT_TRUE(sm.ok()) << sm.status();
  const std::string body = "\n" + sm->body;
  // Refused at least once: the app's request, and the keep-warm loop's own tries (1 s, 2 s, ...)
  // while the service account is not allowed, as many as fell before the swap.
  EXPECT_GE(Series(body, "wisp_sidecar_sts_exchanges_total{outcome=\"rejected\"}"), 1) << body;
  EXPECT_EQ(Series(body, "wisp_sidecar_sts_exchanges_total{outcome=\"ok\"}"), 1) << body;
  EXPECT_EQ(Series(body, "wisp_sidecar_cache_total{result=\"hit\"}"), 25) << body;
  EXPECT_EQ(Series(body, "wisp_sidecar_cache_total{result=\"miss\"}"), 2) << body;
  EXPECT_EQ(Series(body, "wisp_sidecar_requests_total{code=\"200\"}"), 26) << body;
  EXPECT_EQ(Series(body, "wisp_sidecar_requests_total{code=\"500\"}"), 1) << body;
  EXPECT_EQ(Series(body, "wisp_sidecar_token_file_reloads_total"), 2) << body;
  EXPECT_EQ(Series(body, "wisp_build_info{service=\"wisp-sidecar\",version=\"" WISP_VERSION "\"}"),
            1)
      << body;
  CommandResult lint = RunCommand(SourceDir() + "/scripts/check-deploy metrics 'http://127.0.0.1:" +
                                  std::to_string(sidecar_metrics) + "/metrics' 2>&1");
  EXPECT_EQ(lint.exit_code, 0) << lint.output;
  (*sidecar)->Terminate();
}

// libfaketime (Debian libfaketime), preloaded into wisp-token to move its clock forward.
constexpr const char* kLibFaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

std::set<std::string> JwksKids(Stack& stack) {
  std::set<std::string> kids;
  auto r = stack.Https("GET", "/openid/v1/jwks");
  if (!r.ok() || r->status != 200) return kids;
  auto doc = nlohmann::json::parse(r->body, nullptr, false);
  if (!doc.is_object() || !doc["keys"].is_array()) return kids;
  for (const auto& k : doc["keys"]) kids.insert(k.value("kid", ""));
  return kids;
}

// Waits until the gateway's JWKS (which follows the wisp_keys bucket) satisfies `want`.
std::set<std::string> WaitForJwks(Stack& stack,
                                  const std::function<bool(const std::set<std::string>&)>& want) {
  std::set<std::string> kids;
  for (int i = 0; i < 100; ++i) {
    kids = JwksKids(stack);
    if (want(kids)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return kids;
}

// Tests that a retired key leaves the JWKS once every token it signed has expired, through the
// real wisp-token and wisp-gateway binaries, checked by PyJWT and jose through discovery. Waiting
// out a token's lifetime (default policy: 24 h, plus 5 min) is not a test, so wisp-token runs
// under libfaketime with its clock moved forward, as it would be had the time passed (defaults:
// each key signs 24 h, the next one published 12 h before it signs):
//   real time     tokens T (RS256 and ES256) signed by keys A;
//   clock +25 h   the switch is due but no next key was published (wisp-token was not running at
//                 +12 h): keys B are published now and A keep signing;
//   clock +38 h   B have been published 12 h: B sign, A are retired and still published, so T
//                 (not expired in real time) still verifies;
//   clock +63 h   past A's drop time (retired + 24 h + 5 min): A are gone from the JWKS and the
//                 relying parties refuse T for want of its key; B still sign, and their next
//                 keys C are published.
TEST(TokenKeyRetentionTest, RetiredKeyLeavesJwksOnceItsTokensHaveExpired) {
  ASSERT_TRUE(fs::exists(kLibFaketime)) << kLibFaketime << " missing: scripts/install-deps";
  auto stack = Stack::Start({.policy = false, .populator = false});
  ASSERT_TRUE(stack.ok()) << stack.status();
  Stack& s = **stack;
  auto bus = bus::NatsBus::Connect(TestBusOptions({s.nats().url()}, "token-retention-test"));
  ASSERT_TRUE(bus.ok()) << bus.status();
  auto issue = [&](const std::string& alg) {
    return IssueToken(**bus, alg, {"sts.amazonaws.com"}, "vms", "vm-reader");
  };
  const std::string issuer = "https://localhost:" + std::to_string(s.gateway_port());
  auto relying_parties = [&](const std::string& token) {
    return std::pair{VerifyWithPyJwt(s.ca_file(), issuer, "sts.amazonaws.com", token),
                     VerifyWithJose(s.ca_file(), issuer, "sts.amazonaws.com", token)};
  };
  // Under scripts/sanitize the binary is ASan-built, and ASan refuses to start unless its runtime
  // comes first in the library list; libfaketime's preload comes before it, harmlessly.
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string asan_options =
      (asan != nullptr && *asan != '\0' ? std::string(asan) + ":" : "") +
      "verify_asan_link_order=0";
  auto faketime = [&](const std::string& offset) {
    s.SetEnv("wisp-token", {{"LD_PRELOAD", kLibFaketime},
                            {"ASAN_OPTIONS", asan_options},
                            {"FAKETIME", offset},
                            {"FAKETIME_DONT_FAKE_MONOTONIC", "1"}});
    return s.Restart("wisp-token");
  };

  // Real time: keys A.
  const v1::IssueResponse rs_a = issue("RS256"), es_a = issue("ES256");
  ASSERT_FALSE(rs_a.key_id().empty());
  ASSERT_FALSE(es_a.key_id().empty());
  EXPECT_EQ(JwksKids(s), (std::set<std::string>{rs_a.key_id(), es_a.key_id()}));

  // +25 h: B published at start, not signing yet.
  ASSERT_TRUE(faketime("+25h").ok());
  EXPECT_EQ(issue("RS256").key_id(), rs_a.key_id());
  EXPECT_EQ(WaitForJwks(s, [](const auto& k) { return k.size() == 4; }).size(), 4u);

  // +38 h: B sign; A retired but published, the tokens they signed still verify.
  ASSERT_TRUE(faketime("+38h").ok());
  const v1::IssueResponse rs_b = issue("RS256"), es_b = issue("ES256");
  ASSERT_NE(rs_b.key_id(), rs_a.key_id());
  ASSERT_NE(es_b.key_id(), es_a.key_id());
  const std::set<std::string> ab{rs_a.key_id(), es_a.key_id(), rs_b.key_id(), es_b.key_id()};
  EXPECT_EQ(WaitForJwks(s, [&](const auto& k) { return k == ab; }), ab);
  for (const auto* t : {&rs_a, &es_a}) {
    auto [py, js] = relying_parties(t->token());
    EXPECT_EQ(py.exit_code, 0) << py.output;
    EXPECT_EQ(js.exit_code, 0) << js.output;
  }

  // +63 h: every token A signed has expired (on wisp-token's clock): A leave the JWKS; B still
  // sign (their switch is due at +62 h, but their next keys C are published only now).
  ASSERT_TRUE(faketime("+63h").ok());
  const v1::IssueResponse rs_c = issue("RS256");
  EXPECT_EQ(rs_c.key_id(), rs_b.key_id());
  const std::set<std::string> kids =
      WaitForJwks(s, [&](const auto& k) { return k.size() == 4 && !k.count(rs_a.key_id()); });
  EXPECT_FALSE(kids.count(rs_a.key_id()) || kids.count(es_a.key_id()));
  EXPECT_TRUE(kids.count(rs_b.key_id()) && kids.count(es_b.key_id()));
  EXPECT_EQ(kids.size(), 4u);
  // T has not expired in real time, so the only reason left to refuse it is its missing key.
  for (const auto* t : {&rs_a, &es_a}) {
    auto [py, js] = relying_parties(t->token());
    EXPECT_NE(py.exit_code, 0) << py.output;
    EXPECT_NE(py.output.find("Unable to find a signing key"), std::string::npos) << py.output;
    EXPECT_NE(js.exit_code, 0) << js.output;
    EXPECT_NE(js.output.find("ERR_JWKS_NO_MATCHING_KEY"), std::string::npos) << js.output;
  }
  // And wisp's own review refuses it by kid.
  v1::ReviewRequest review;
  review.set_token(rs_a.token());
  review.add_audiences("sts.amazonaws.com");
  auto verdict =
      bus::Call<v1::ReviewResponse>(**bus, bus::subjects::kTokenReview, review, seconds(5));
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_FALSE(verdict->authenticated());
  EXPECT_EQ(verdict->error(), "token kid \"" + rs_a.key_id() + "\" is not a known key");
}

}  // namespace
}  // namespace wisp::integration
