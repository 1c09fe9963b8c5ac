// Optional TLS to NATS (issue 8, item 1), against a real nats-server that requires TLS and verifies
// client certificates (`tls { verify: true }`) with a CA the test makes, and runs
// scripts/nats-auth's accounts and users (TLS and least privilege together, as the chart runs them
// with nats.tls on):
//   - the real wisp-token binary connects with --nats-url tls://...
//   --nats-ca/--nats-cert/--nats-key,
//     becomes ready, and serves wisp.v1.token.keys to a TLS client (the gateway's user, across the
//     TOKEN/WISP accounts);
//   - a plain-TCP client, a client that does not trust the test CA, a client with no certificate
//     and a client whose certificate another CA signed are all refused at connect, and so is the
//     binary without its client certificate.
#include <gtest/gtest.h>

#include <fstream>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/stack.hpp"
#include "wisp/v1/token.pb.h"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;
using bus::NatsBus;
using bus::NatsBusOptions;

class NatsTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<TempDir>("wisp-tls");
    const std::string& d = dir_->path();
    // The test CA: the server's certificate (127.0.0.1 / localhost) and a client certificate; a
    // second, unrelated CA with its own client certificate.
    auto ca = TestCa::Create(d, "ca");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ASSERT_TRUE(ca->Issue("server",
                          "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                          "extendedKeyUsage=serverAuth\n")
                    .ok());
    ASSERT_TRUE(ca->Issue("client", "extendedKeyUsage=clientAuth\n").ok());
    auto rogue = TestCa::Create(d, "rogue-ca");
    ASSERT_TRUE(rogue.ok()) << rogue.status();
    ASSERT_TRUE(rogue->Issue("rogue", "extendedKeyUsage=clientAuth\n").ok());
    auto r =
        RunCommand(SourceDir() + "/scripts/nats-auth " + d + "/secrets > " + d + "/users.conf");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream(d + "/nats.conf") << "tls {\n  cert_file: \"" << d << "/server.pem\"\n"
                                    << "  key_file: \"" << d << "/server-key.pem\"\n"
                                    << "  ca_file: \"" << d << "/ca.pem\"\n"
                                    << "  verify: true\n  timeout: 2\n}\n"
                                    << "include ./users.conf\n";
    NatsServer::Options o;
    o.extra_args = {"-c", d + "/nats.conf"};
    auto server = NatsServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    nats_ = *std::move(server);
    url_ = "tls://127.0.0.1:" + std::to_string(nats_->port());
  }

  std::string Path(const std::string& file) const { return dir_->path() + "/" + file; }
  std::string Password(const std::string& user) const {
    return NatsAuthPassword(Path("secrets"), user);
  }
  // The gateway's user over TLS with the given trust and client certificate ("" = none).
  NatsBusOptions Client(const std::string& ca, const std::string& cert) const {
    NatsBusOptions o;
    o.servers = {url_};
    o.name = "tls-test";
    o.user = "wisp-gateway";
    o.password = Password("wisp-gateway");
    o.inbox_prefix = "_INBOX.wisp-gateway";
    o.connect_timeout = 2s;
    if (!ca.empty()) o.tls_ca_file = Path(ca);
    if (!cert.empty()) {
      o.tls_cert_file = Path(cert + ".pem");
      o.tls_key_file = Path(cert + "-key.pem");
    }
    return o;
  }
  absl::StatusOr<std::unique_ptr<Process>> StartToken(bool client_cert, int metrics_port) {
    RunCommand("head -c 32 /dev/urandom > " + Path("kek") + " && chmod 600 " + Path("kek"));
    std::vector<std::string> args = {"--nats-url",
                                     url_,
                                     "--nats-ca",
                                     Path("ca.pem"),
                                     "--nats-user",
                                     "wisp-token",
                                     "--nats-password-file",
                                     Path("secrets/nats-wisp-token.password"),
                                     "--key-encryption-key-file",
                                     Path("kek"),
                                     "--issuer-url",
                                     "https://wisp.test",
                                     "--metrics-address",
                                     "127.0.0.1:" + std::to_string(metrics_port)};
    if (client_cert) {
      args.insert(args.end(),
                  {"--nats-cert", Path("client.pem"), "--nats-key", Path("client-key.pem")});
    }
    return Process::Start({.path = BinaryPath("wisp-token"), .args = args});
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<NatsServer> nats_;
  std::string url_;
};

// Tests that wisp-token connects over TLS with a client certificate and serves a TLS client.
TEST_F(NatsTlsTest, ServiceServesOverTls) {
  const int metrics = FreePort();
  auto token = StartToken(/*client_cert=*/true, metrics);
  ASSERT_TRUE(token.ok()) << token.status();
  ASSERT_TRUE(WaitForHttp("127.0.0.1", metrics, "/readyz", 30s).ok()) << (*token)->Log();
  auto client = NatsBus::Connect(Client("ca.pem", "client"));
  ASSERT_TRUE(client.ok()) << client.status();
  auto keys =
      bus::Call<v1::KeysResponse>(**client, bus::subjects::kTokenKeys, v1::KeysRequest(), 5s);
  ASSERT_TRUE(keys.ok()) << keys.status() << "\n" << (*token)->Log();
  EXPECT_NE(keys->jwks_json().find("\"keys\""), std::string::npos);
}

// Tests that clients without the CA, without TLS, without a client certificate, or with a
// certificate from another CA are refused; and the binary without its client certificate too.
TEST_F(NatsTlsTest, RefusesClientsWithoutTrustOrCertificate) {
  struct Case {
    const char* what;
    NatsBusOptions options;
  };
  std::vector<Case> cases = {
      {"no CA (does not trust the server)", Client("", "client")},
      {"another CA's trust", Client("rogue-ca.pem", "client")},
      {"no client certificate", Client("ca.pem", "")},
      {"client certificate of another CA", Client("ca.pem", "rogue")},
  };
  // And plain TCP to the same port (the server requires TLS).
  NatsBusOptions plain = Client("", "");
  plain.servers = {nats_->url()};
  cases.push_back({"plain TCP", plain});
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto bus = NatsBus::Connect(c.options);
    EXPECT_FALSE(bus.ok()) << "connected";
  }
  // The control: the same options with the CA and the client certificate connect.
  auto ok = NatsBus::Connect(Client("ca.pem", "client"));
  EXPECT_TRUE(ok.ok()) << ok.status();

  // wisp-token with the CA but without a client certificate never becomes ready.
  const int metrics = FreePort();
  auto token = StartToken(/*client_cert=*/false, metrics);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_FALSE(WaitForHttp("127.0.0.1", metrics, "/readyz", 3s).ok()) << (*token)->Log();
}

}  // namespace
}  // namespace wisp::integration
