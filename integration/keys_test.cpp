// Signing keys through a rotation, end to end (issue 25 item 5): the real wisp-token and
// wisp-gateway behind a real nats-server with per-service users (integration::Stack, auth on),
// `wispctl keys` and `wispctl token issue` as an operator runs them, and two relying parties
// nobody here wrote verifying through discovery and the JWKS over HTTPS: PyJWT's PyJWKClient and
// npm jose's createRemoteJWKSet.
//   - wisp-token runs with --key-rotation-period 1h --key-publish-ahead 3590s, so its next keys
//     are published 10 s after start and the scheduled switch is an hour away: the test drives the
//     switch with `wispctl keys rotate`.
//   - A token signed before rotate still verifies after it; after taint the tainted key's token
//     verifies but no new token carries its kid; after revoke its tokens do not verify.
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "wisp/integration/harness.hpp"
#include "wisp/integration/stack.hpp"

namespace wisp::integration {
namespace {

using std::chrono::seconds;

std::string Sh(const std::string& s) { return "'" + s + "'"; }

class KeysRotationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto stack = Stack::Start(
        {.policy = false,
         .populator = false,
         .auth = true,
         .extra_args = {
             {"wisp-token", {"--key-rotation-period", "1h", "--key-publish-ahead", "3590s"}}}});
    ASSERT_TRUE(stack.ok()) << stack.status();
    stack_ = stack->release();
    issuer_ = "https://localhost:" + std::to_string(stack_->gateway_port());
  }
  static void TearDownTestSuite() { delete stack_; }

  // `wispctl <args>` as wispctl's NATS user.
  static CommandResult Wispctl(const std::string& args) {
    std::string cmd = BinaryPath("wispctl");
    const std::vector<std::string> conn = stack_->WispctlArgs();
    const size_t space = args.find(' ');
    // The connection flags go after the command and verb ("keys list --nats-url ...").
    const size_t verb_end = args.find(' ', space == std::string::npos ? args.size() : space + 1);
    cmd += " " + args.substr(0, verb_end);
    for (const auto& a : conn) cmd += " " + Sh(a);
    if (verb_end != std::string::npos) cmd += args.substr(verb_end);
    return RunCommand(cmd + " 2>&1");
  }

  static nlohmann::json KeysJson() {
    auto r = Wispctl("keys list --json");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output, nullptr, false);
  }

  // kid -> state of every key wispctl lists, for one algorithm.
  static std::map<std::string, std::string> States(const std::string& alg) {
    std::map<std::string, std::string> out;
    auto doc = KeysJson();
    if (!doc.is_object()) return out;
    for (const auto& k : doc["keys"]) {
      if (k["algorithm"] == alg) out[k["kid"].get<std::string>()] = k["state"].get<std::string>();
    }
    return out;
  }

  // A token for ml/loader from `wispctl token issue`: {token, key_id}.
  static std::pair<std::string, std::string> Issue(const std::string& alg) {
    auto r = Wispctl(
        "token issue --namespace ml --service-account loader --audience sts.amazonaws.com "
        "--algorithm " +
        alg + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    if (!j.is_object()) return {};
    return {j["token"].get<std::string>(), j["key_id"].get<std::string>()};
  }

  // The gateway's JWKS over HTTPS: kid -> the key.
  static std::map<std::string, nlohmann::json> Jwks() {
    std::map<std::string, nlohmann::json> out;
    auto r = stack_->Https("GET", "/openid/v1/jwks");
    if (!r.ok() || r->status != 200) return out;
    auto doc = nlohmann::json::parse(r->body, nullptr, false);
    if (!doc.is_object()) return out;
    for (const auto& k : doc["keys"]) out[k.value("kid", "")] = k;
    return out;
  }

  // Waits until the gateway's JWKS (it follows wisp-token's key events) has or lacks `kid`.
  static bool JwksHas(const std::string& kid, bool want) {
    return Eventually([&] { return Jwks().count(kid) == (want ? 1u : 0u); }, seconds(10));
  }

  static CommandResult PyJwt(const std::string& token) {
    return RunCommand("SSL_CERT_FILE=" + stack_->ca_file() + " /usr/bin/python3 " + SourceDir() +
                      "/integration/token/verify_pyjwt.py " + Sh(issuer_) + " sts.amazonaws.com " +
                      Sh(token) + " 2>&1");
  }
  static CommandResult Jose(const std::string& token) {
    return RunCommand("NODE_EXTRA_CA_CERTS=" + stack_->ca_file() + " node " + SourceDir() +
                      "/integration/token/verify_jose.mjs " + Sh(SourceDir() + "/tools") + " " +
                      Sh(issuer_) + " sts.amazonaws.com " + Sh(token) + " 2>&1");
  }
  static void ExpectVerifies(const std::string& token, const std::string& what) {
    SCOPED_TRACE(what);
    auto py = PyJwt(token);
    EXPECT_EQ(py.exit_code, 0) << py.output;
    auto js = Jose(token);
    EXPECT_EQ(js.exit_code, 0) << js.output;
  }

  static inline Stack* stack_ = nullptr;
  static inline std::string issuer_;
};

// Tests the whole life of the keys with the relying parties: the next key is published before it
// signs and every JWKS key says use and alg; a token signed before rotate verifies after it and
// new tokens carry the pre-published kid; after taint the tainted key's token verifies and no new
// token carries its kid; after revoke its token is refused by PyJWT, jose and wisp's review; an
// unknown kid is refused naming it.
TEST_F(KeysRotationTest, RotateTaintRevokeThroughRelyingParties) {
  const auto [t0, a] = Issue("RS256");
  const auto [e0, ea] = Issue("ES256");
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(ea.empty());

  // The next keys appear in the JWKS 10 s after the start, before anything signs with them.
  std::string next;
  ASSERT_TRUE(Eventually(
      [&] {
        for (const auto& [kid, state] : States("RS256")) {
          if (state == "next") next = kid;
        }
        return !next.empty();
      },
      seconds(40)))
      << KeysJson().dump(2);
  ASSERT_TRUE(JwksHas(next, true));
  const auto jwks = Jwks();
  EXPECT_EQ(jwks.size(), 4u);
  for (const auto& [kid, k] : jwks) {
    EXPECT_EQ(k["use"], "sig") << k;
    EXPECT_EQ(k["alg"], k["kty"] == "RSA" ? "RS256" : "ES256") << k;
  }
  EXPECT_EQ(Issue("RS256").second, a);  // published, not signing

  // rotate: the pre-published key signs now; the old one retires and keeps verifying.
  auto rotated = Wispctl("keys rotate");
  ASSERT_EQ(rotated.exit_code, 0) << rotated.output;
  EXPECT_NE(rotated.output.find("RS256: now signing with " + next + " (published "),
            std::string::npos)
      << rotated.output;
  EXPECT_NE(rotated.output.find(a + " stopped signing and stays in the JWKS until"),
            std::string::npos)
      << rotated.output;
  EXPECT_EQ(States("RS256")[a], "retired");
  const auto [t1, b] = Issue("RS256");
  EXPECT_EQ(b, next);
  EXPECT_NE(Issue("ES256").second, ea);
  ASSERT_TRUE(JwksHas(a, true));
  ExpectVerifies(t0, "RS256 token signed before rotate");
  ExpectVerifies(e0, "ES256 token signed before rotate");
  ExpectVerifies(t1, "token signed after rotate");

  // taint: the signing key stops signing now; its token still verifies, no new token carries it.
  auto tainted = Wispctl("keys taint " + b);
  ASSERT_EQ(tainted.exit_code, 0) << tainted.output;
  EXPECT_NE(tainted.output.find("key " + b +
                                " (RS256, active) tainted: no new token carries it; it stays in "
                                "the JWKS until"),
            std::string::npos)
      << tainted.output;
  const auto [t2, c] = Issue("RS256");
  EXPECT_NE(c, b);
  EXPECT_NE(c, a);
  for (int i = 0; i < 3; ++i) EXPECT_NE(Issue("RS256").second, b);
  ASSERT_TRUE(JwksHas(b, true));
  ExpectVerifies(t1, "token of the tainted key");
  ExpectVerifies(t2, "token signed after taint");
  auto doc = KeysJson();
  for (const auto& k : doc["keys"]) {
    if (k["kid"] == b) {
      EXPECT_TRUE(k["tainted"].get<bool>()) << k;
    }
  }

  // revoke: the key leaves the JWKS now, and its token stops verifying everywhere.
  auto revoked = Wispctl("keys revoke " + a);
  ASSERT_EQ(revoked.exit_code, 0) << revoked.output;
  EXPECT_NE(revoked.output.find("revoked: removed from the JWKS now, so the tokens it signed no "
                                "longer verify"),
            std::string::npos)
      << revoked.output;
  ASSERT_TRUE(JwksHas(a, false));
  auto py = PyJwt(t0);
  EXPECT_NE(py.exit_code, 0) << py.output;
  EXPECT_NE(py.output.find("Unable to find a signing key"), std::string::npos) << py.output;
  auto js = Jose(t0);
  EXPECT_NE(js.exit_code, 0) << js.output;
  EXPECT_NE(js.output.find("ERR_JWKS_NO_MATCHING_KEY"), std::string::npos) << js.output;
  const std::string t0_file = stack_->dir() + "/t0.jwt";
  std::ofstream(t0_file) << t0;
  auto review = Wispctl("token verify --audience sts.amazonaws.com --token-file " + t0_file);
  EXPECT_NE(review.exit_code, 0) << review.output;
  EXPECT_NE(review.output.find(a), std::string::npos) << review.output;
  ExpectVerifies(t1, "tainted key's token after another key's revoke");

  auto unknown = Wispctl("keys revoke no-such-kid");
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_NE(unknown.output.find("key \"no-such-kid\" is not in the key set"), std::string::npos)
      << unknown.output;
  auto missing = Wispctl("keys taint");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
}

}  // namespace
}  // namespace wisp::integration
