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
//   - With replicas = 2 every service runs twice: the second instance is named "<service>.1"
//     (Replica("wisp-token", 1)) wherever a service name is taken (process, Kill, Restart,
//     metrics_port ...). A second gateway is node-b's (its own HTTPS port, CSI socket and target
//     root: gateway_port(1), csi_socket(1), target_root(1)); both populators serve node-a's
//     volume root, as two instances on one node. extra_args and env of "<service>" apply to every
//     replica.
//   - With nats_nodes = 3 NATS is a 3-node JetStream cluster whose routes are mutual TLS
//     (NatsCluster); each service instance is given one node's URL, in turn, so replicas talk to
//     different nodes and fail over to the others the cluster advertises. With nats_tls clients
//     reach NATS over TLS only (a NATS test CA, client certificates verified): the services get
//     --nats-ca/--nats-cert/--nats-key and tls:// URLs, and tests connect with nats_ca_file(),
//     nats_client_cert() and nats_client_key(). auth is not combined with a cluster.
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
  int replicas = 1;    // instances of each service (1 or 2)
  int nats_nodes = 1;  // 1 = one nats-server, 3 = a cluster (routes over mutual TLS)
  bool nats_tls = false;
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

  // The server (node 0 of a cluster).
  NatsServer& nats() { return cluster_ ? cluster_->node(0) : *nats_; }
  NatsCluster* cluster() { return cluster_.get(); }  // nullptr unless nats_nodes > 1
  // Every node's client URL (tls:// with nats_tls).
  std::vector<std::string> nats_urls() const;
  // With nats_tls: the CA that signed the NATS servers' certificates and a client certificate
  // they accept; "" otherwise.
  const std::string& nats_ca_file() const { return nats_ca_file_; }
  const std::string& nats_client_cert() const { return nats_client_cert_; }
  const std::string& nats_client_key() const { return nats_client_key_; }
  // The name of replica `r` of `service`: the service's own name for 0, "<service>.<r>" after.
  static std::string Replica(const std::string& service, int r);
  const std::string& dir() const { return dir_->path(); }
  const std::string& ca_file() const { return ca_file_; }
  std::string gateway_url() const;  // https://127.0.0.1:<port>
  int gateway_port(int replica = 0) const { return gateway_ports_.at(replica); }
  std::string csi_endpoint(int replica = 0) const;  // unix:///...
  std::string csi_socket(int replica = 0) const;    // the path
  std::string volume_root() const;
  std::string target_root(int replica = 0) const;
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

  // HTTPS to the gateway (replica `replica`), verified against the test CA, with SNI/host
  // "localhost".
  absl::StatusOr<HttpsResponse> Https(const std::string& method, const std::string& target,
                                      const std::string& body = "",
                                      const std::map<std::string, std::string>& headers = {},
                                      std::chrono::milliseconds timeout = std::chrono::seconds(15),
                                      int replica = 0);

 private:
  Stack() = default;
  std::vector<std::string> ArgsFor(const std::string& service) const;

  StackOptions options_;
  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<NatsServer> nats_;
  std::unique_ptr<NatsCluster> cluster_;
  std::map<std::string, std::unique_ptr<Process>> procs_;
  std::map<std::string, int> metrics_ports_;
  std::string ca_file_;
  std::string kek_file_;
  int gateway_port_ = 0;
  std::vector<int> gateway_ports_;
  std::string nats_ca_file_, nats_client_cert_, nats_client_key_;
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
