#pragma once
// The whole local stack for integration tests: nats-server (JetStream), wisp-token, wisp-policy,
// wisp-populator and wisp-gateway as real binaries on free ports, a test CA with the gateway's
// serving certificate, and an HTTPS client that verifies against that CA (as kube-apiserver does).
//
// Contract:
//   - Start() returns when every requested service answers /readyz; on failure its message carries
//     the tail of the failing service's log. The destructor kills everything (process groups).
//   - Each service runs as it would under scripts/local-up; with `auth` on, as its own NATS user
//     with the permissions scripts/nats-auth grants.
//   - Restart(name) SIGTERMs and starts one service again with the same arguments.
//
// Example:
//   auto stack = Stack::Start({}).value();
//   auto resp = stack->Https("POST", "/mutate?timeout=5s", review_json);
//   EXPECT_EQ(resp->status, 200);
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "wisp/integration/harness.hpp"

namespace wisp::integration {

struct StackOptions {
  bool token = true;
  bool policy = true;
  bool populator = true;
  bool gateway = true;
  bool auth = false;  // per-service NATS users (scripts/nats-auth)
  // With auth: the gateway connects as node-a's own user, wisp-gateway-node-a (scripts/nats-auth's
  // node users, docs/security.md G3), as the chart's node DaemonSet does; use with csi_role node.
  bool gateway_node_user = false;
  std::string failure_mode = "closed";
  std::string csi_role = "both";
  std::string policy_file;  // "" = deploy/local/policy.yaml
  // Names (DNS or IP) the gateway's certificate carries besides localhost and 127.0.0.1.
  std::vector<std::string> gateway_extra_sans;
  std::map<std::string, std::vector<std::string>> extra_args;  // per service name
  // Per service name: environment added to the test's (LD_PRELOAD of libfaketime, say). Read at
  // every (re)start, so SetEnv before Restart changes it.
  std::map<std::string, std::map<std::string, std::string>> env;
};

struct HttpsResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-cased names
};

class Stack {
 public:
  static absl::StatusOr<std::unique_ptr<Stack>> Start(StackOptions options);
  ~Stack();

  NatsServer& nats() { return *nats_; }
  const std::string& dir() const { return dir_->path(); }
  const std::string& ca_file() const { return ca_file_; }
  std::string gateway_url() const;  // https://127.0.0.1:<port>
  int gateway_port() const { return gateway_port_; }
  std::string csi_endpoint() const;  // unix:///...
  std::string csi_socket() const;    // the path
  std::string volume_root() const;
  std::string target_root() const;
  int metrics_port(const std::string& service) const;
  // NATS user and password file a test client uses (wispctl's, when auth is on).
  std::vector<std::string> WispctlArgs() const;
  // scripts/nats-auth's password of `user`, and the file holding it (what --nats-password-file
  // takes: a password is never passed on a command line).
  std::string NatsPassword(const std::string& user) const;
  std::string NatsPasswordFile(const std::string& user) const;

  Process& process(const std::string& service);
  absl::Status Restart(const std::string& service);
  // Replaces a service's environment for its next start (StackOptions::env).
  void SetEnv(const std::string& service, std::map<std::string, std::string> env);
  absl::Status StartService(const std::string& service);
  void Kill(const std::string& service);
  absl::Status WaitReady(const std::string& service,
                         std::chrono::milliseconds timeout = std::chrono::seconds(20));

  // HTTPS to the gateway, verified against the test CA, with SNI/host "localhost".
  absl::StatusOr<HttpsResponse> Https(const std::string& method, const std::string& target,
                                      const std::string& body = "",
                                      const std::map<std::string, std::string>& headers = {},
                                      std::chrono::milliseconds timeout = std::chrono::seconds(15));

 private:
  Stack() = default;
  std::vector<std::string> ArgsFor(const std::string& service) const;

  StackOptions options_;
  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<NatsServer> nats_;
  std::map<std::string, std::unique_ptr<Process>> procs_;
  std::map<std::string, int> metrics_ports_;
  std::string ca_file_;
  std::string kek_file_;
  int gateway_port_ = 0;
};

// Runs a shell command, returns its exit code and combined output.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult RunCommand(const std::string& command);

// The repository root (for deploy/ and tools/ files), from CMake.
std::string SourceDir();

}  // namespace wisp::integration
