#pragma once
// MakeTestPki: certificates for tests of TLS clients and servers, made with the openssl CLI in a
// directory of the test's (P-256 keys, valid one day).
//
// Contract: writes into `dir` (created if needed)
//   ca.pem, ca-key.pem        a test CA ("test-ca")
//   other.pem, other-key.pem  a second CA that signed nothing the server shows ("other-ca")
//   srv.pem, srv-key.pem      a server certificate for DNS name localhost, signed by ca.pem
//   cli.pem, cli-key.pem      a client certificate ("client"), signed by ca.pem
//   str.pem, str-key.pem      a client certificate ("stranger"), signed by other.pem
// and returns false when openssl failed. TlsServerOptions(dir) serves HTTPS with srv.pem on
// 127.0.0.1, a free port, one thread (change what a test needs).
//
// Example:
//   ASSERT_TRUE(http::testing::MakeTestPki(dir));
//   auto server = http::Server::Create(http::testing::TlsServerOptions(dir));
//   auto client = http::NewClient({.tls = {.ca_file = dir + "/ca.pem"}});
#include <cstdlib>
#include <filesystem>
#include <string>

#include "wisp/http/server.hpp"

namespace wisp::http::testing {

inline ServerOptions TlsServerOptions(const std::string& dir) {
  return {.address = "127.0.0.1",
          .cert_file = dir + "/srv.pem",
          .key_file = dir + "/srv-key.pem",
          .threads = 1};
}

inline bool MakeTestPki(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return false;
  const std::string req = "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes ";
  const std::string sign = "openssl x509 -req -CAcreateserial -days 1 ";
  const std::string cmd =
      "cd '" + dir + "' && " + req +
      "-x509 -days 1 -subj /CN=test-ca -keyout ca-key.pem -out ca.pem 2>/dev/null && " + req +
      "-x509 -days 1 -subj /CN=other-ca -keyout other-key.pem -out other.pem 2>/dev/null && " +
      req + "-subj /CN=localhost -keyout srv-key.pem -out srv.csr 2>/dev/null && " +
      "printf 'subjectAltName=DNS:localhost\\n' > srv.ext && " + sign +
      "-in srv.csr -CA ca.pem -CAkey ca-key.pem -extfile srv.ext -out srv.pem 2>/dev/null && " +
      req + "-subj /CN=client -keyout cli-key.pem -out cli.csr 2>/dev/null && " + sign +
      "-in cli.csr -CA ca.pem -CAkey ca-key.pem -out cli.pem 2>/dev/null && " + req +
      "-subj /CN=stranger -keyout str-key.pem -out str.csr 2>/dev/null && " + sign +
      "-in str.csr -CA other.pem -CAkey other-key.pem -out str.pem 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace wisp::http::testing
