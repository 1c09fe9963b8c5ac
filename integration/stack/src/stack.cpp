#include "wisp/integration/stack.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <utility>

#include "wisp/http/client.hpp"

namespace wisp::integration {
namespace {

const char* const kServices[] = {"wisp-token", "wisp-policy", "wisp-populator", "wisp-gateway"};

// "wisp-token.1" -> {"wisp-token", 1}; "wisp-token" -> {"wisp-token", 0}.
std::pair<std::string, int> SplitReplica(const std::string& instance) {
  const auto dot = instance.rfind('.');
  if (dot == std::string::npos) return {instance, 0};
  return {instance.substr(0, dot), std::stoi(instance.substr(dot + 1))};
}

int ServiceIndex(const std::string& service) {
  for (int i = 0; i < 4; ++i) {
    if (service == kServices[i]) return i;
  }
  return 0;
}

}  // namespace

std::string SourceDir() { return WISP_SOURCE_DIR; }

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

absl::StatusOr<std::unique_ptr<Stack>> Stack::Start(StackOptions options) {
  auto stack = std::unique_ptr<Stack>(new Stack());
  stack->options_ = std::move(options);
  stack->dir_ = std::make_unique<TempDir>("wisp-stack");
  const std::string& d = stack->dir_->path();
  for (const char* sub : {"/pki", "/secrets", "/volumes", "/csi", "/targets"}) {
    RunCommand("mkdir -p " + d + sub);
  }
  // A test CA and the gateway's certificate for localhost / 127.0.0.1, as scripts/local-up makes.
  const std::string pki = d + "/pki";
  // Further names a peer dials the gateway by (the e2e suite's WISP_E2E_WEBHOOK_HOST).
  std::string sans = "DNS:localhost,IP:127.0.0.1";
  for (const std::string& san : stack->options_.gateway_extra_sans) {
    const bool ip = san.find(':') != std::string::npos ||
                    san.find_first_not_of("0123456789.") == std::string::npos;
    sans += (ip ? ",IP:" : ",DNS:") + san;
  }
  auto r = RunCommand(
      "cd " + pki +
      " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
      "-subj '/CN=wisp test CA' -keyout ca-key.pem -out ca.pem"
      " && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=wisp-gateway "
      "-keyout gateway-key.pem -out gateway.csr"
      " && printf 'subjectAltName=" +
      sans +
      "\\nextendedKeyUsage=serverAuth\\n' > ext.cnf"
      " && openssl x509 -req -in gateway.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 "
      "-extfile ext.cnf -out gateway.pem");
  if (r.exit_code != 0) return absl::InternalError("making the test CA: " + r.output);
  stack->ca_file_ = pki + "/ca.pem";
  stack->kek_file_ = d + "/secrets/key-encryption-key";
  RunCommand("head -c 32 /dev/urandom > " + stack->kek_file_ + " && chmod 600 " + stack->kek_file_);

  NatsServer::Options nats_options;
  if (stack->options_.auth) {
    r = RunCommand(SourceDir() + "/scripts/nats-auth " + d + "/secrets node-a > " + d +
                   "/users.conf");
    if (r.exit_code != 0) return absl::InternalError("scripts/nats-auth: " + r.output);
    std::ofstream(d + "/nats.conf") << "include ./users.conf\n";
    nats_options.extra_args = {"-c", d + "/nats.conf"};
  }
  const StackOptions& so = stack->options_;
  if (so.replicas < 1 || so.replicas > 2) return absl::InvalidArgumentError("replicas: 1 or 2");
  if (so.nats_nodes != 1 && so.nats_nodes != 3) {
    return absl::InvalidArgumentError("nats_nodes: 1 or 3");
  }
  if (so.auth && so.nats_nodes > 1) {
    return absl::InvalidArgumentError("auth with a NATS cluster is not supported by Stack");
  }
  std::vector<std::string> tls_args;
  if (so.nats_tls) {
    // One certificate for every node's client port (and, in a cluster, its routes), one client
    // certificate for the services and the test's own clients.
    WISP_ASSIGN_OR_RETURN(TestCa ca, TestCa::Create(pki, "nats-ca"));
    WISP_RETURN_IF_ERROR(ca.Issue("nats-server",
                                  "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                  "extendedKeyUsage=serverAuth,clientAuth\n"));
    WISP_RETURN_IF_ERROR(ca.Issue("nats-client", "extendedKeyUsage=clientAuth\n"));
    stack->nats_ca_file_ = ca.ca_file();
    stack->nats_client_cert_ = ca.cert_file("nats-client");
    stack->nats_client_key_ = ca.key_file("nats-client");
    tls_args = {"--tls",
                "--tlscert",
                ca.cert_file("nats-server"),
                "--tlskey",
                ca.key_file("nats-server"),
                "--tlscacert",
                ca.ca_file(),
                "--tlsverify"};
  }
  if (so.nats_nodes > 1) {
    NatsCluster::Options co{.nodes = so.nats_nodes, .extra_args = tls_args};
    if (so.nats_tls) {
      co.route_tls = RouteTls{.cert_file = pki + "/nats-server.pem",
                              .key_file = pki + "/nats-server-key.pem",
                              .ca_file = stack->nats_ca_file_};
    } else {
      // Routes over mutual TLS all the same (the chart's nats.routeTls).
      WISP_ASSIGN_OR_RETURN(TestCa ca, TestCa::Create(pki, "route-ca"));
      WISP_RETURN_IF_ERROR(ca.Issue("route",
                                    "subjectAltName=IP:127.0.0.1\n"
                                    "extendedKeyUsage=serverAuth,clientAuth\n"));
      co.route_tls = RouteTls{.cert_file = ca.cert_file("route"),
                              .key_file = ca.key_file("route"),
                              .ca_file = ca.ca_file()};
    }
    WISP_ASSIGN_OR_RETURN(stack->cluster_, NatsCluster::Start(co));
  } else {
    nats_options.extra_args.insert(nats_options.extra_args.end(), tls_args.begin(), tls_args.end());
    WISP_ASSIGN_OR_RETURN(stack->nats_, NatsServer::Start(nats_options));
  }

  for (int r = 0; r < so.replicas; ++r) {
    for (const char* name : kServices) stack->metrics_ports_[Replica(name, r)] = FreePort();
    stack->gateway_ports_.push_back(FreePort());
  }
  stack->gateway_port_ = stack->gateway_ports_[0];
  const std::map<std::string, bool> wanted = {{"wisp-token", so.token},
                                              {"wisp-policy", so.policy},
                                              {"wisp-populator", so.populator},
                                              {"wisp-gateway", so.gateway}};
  for (const char* name : kServices) {
    if (!wanted.at(name)) continue;
    for (int r = 0; r < so.replicas; ++r) {
      WISP_RETURN_IF_ERROR(stack->StartService(Replica(name, r)));
    }
  }
  for (const char* name : kServices) {
    if (!wanted.at(name)) continue;
    for (int r = 0; r < so.replicas; ++r) {
      WISP_RETURN_IF_ERROR(stack->WaitReady(Replica(name, r)));
    }
  }
  return stack;
}

Stack::~Stack() {
  // Services first (they drain against a live bus), then NATS.
  for (auto it = procs_.rbegin(); it != procs_.rend(); ++it)
    it->second->Terminate(std::chrono::seconds(5));
  procs_.clear();
  nats_.reset();
  cluster_.reset();
}

std::string Stack::Replica(const std::string& service, int r) {
  return r == 0 ? service : service + "." + std::to_string(r);
}

std::vector<std::string> Stack::nats_urls() const {
  const std::string scheme = options_.nats_tls ? "tls://" : "nats://";
  std::vector<std::string> out;
  if (cluster_) {
    for (int i = 0; i < cluster_->size(); ++i) {
      out.push_back(scheme + "127.0.0.1:" + std::to_string(cluster_->node(i).port()));
    }
  } else {
    out.push_back(scheme + "127.0.0.1:" + std::to_string(nats_->port()));
  }
  return out;
}

std::string Stack::gateway_url() const {
  return "https://127.0.0.1:" + std::to_string(gateway_port_);
}
std::string Stack::csi_socket(int replica) const {
  return dir_->path() + (replica == 0 ? "/csi" : "/csi-" + std::to_string(replica)) + "/csi.sock";
}
std::string Stack::csi_endpoint(int replica) const { return "unix://" + csi_socket(replica); }
std::string Stack::volume_root() const { return dir_->path() + "/volumes"; }
std::string Stack::target_root(int replica) const {
  return dir_->path() + (replica == 0 ? "/targets" : "/targets-" + std::to_string(replica));
}
int Stack::metrics_port(const std::string& service) const { return metrics_ports_.at(service); }

std::string Stack::NatsPassword(const std::string& user) const {
  return NatsAuthPassword(dir_->path() + "/secrets", user);
}

std::string Stack::NatsPasswordFile(const std::string& user) const {
  return dir_->path() + "/secrets/nats-" + user + ".password";
}

std::vector<std::string> Stack::WispctlArgs() const {
  std::string urls;
  for (const auto& u : nats_urls()) urls += (urls.empty() ? "" : ",") + u;
  std::vector<std::string> args = {"--nats-url", urls};
  if (options_.nats_tls) {
    args.insert(args.end(), {"--nats-ca", nats_ca_file_, "--nats-cert", nats_client_cert_,
                             "--nats-key", nats_client_key_});
  }
  if (options_.auth) {
    args.insert(args.end(),
                {"--nats-user", "wispctl", "--nats-password-file", NatsPasswordFile("wispctl")});
  }
  return args;
}

std::vector<std::string> Stack::ArgsFor(const std::string& instance) const {
  const std::string& d = dir_->path();
  const auto [service, replica] = SplitReplica(instance);
  // One node's URL per instance, in turn (service i, replica r -> node (i + r) mod nodes); the
  // client learns the other nodes from the cluster and fails over to them.
  const std::vector<std::string> urls = nats_urls();
  const std::string url = urls[(ServiceIndex(service) + replica) % urls.size()];
  std::vector<std::string> args = {
      "--nats-url",        url,
      "--metrics-address", "127.0.0.1:" + std::to_string(metrics_ports_.at(instance)),
      "--log-level",       "debug"};
  if (options_.nats_tls) {
    args.insert(args.end(), {"--nats-ca", nats_ca_file_, "--nats-cert", nats_client_cert_,
                             "--nats-key", nats_client_key_});
  }
  if (options_.auth) {
    const std::string user = service == "wisp-gateway" && options_.gateway_node_user
                                 ? std::string("wisp-gateway-node-a")
                                 : service;
    // The password by file, as scripts/local-up passes it: never a secret on a command line.
    args.insert(args.end(), {"--nats-user", user, "--nats-password-file", NatsPasswordFile(user)});
    if (user != service) args.insert(args.end(), {"--nats-inbox-prefix", "_INBOX." + user});
  }
  const std::string issuer = "https://localhost:" + std::to_string(gateway_port_);
  if (service == "wisp-token") {
    args.insert(args.end(), {"--key-encryption-key-file", kek_file_, "--issuer-url", issuer});
  } else if (service == "wisp-policy") {
    args.insert(args.end(), {"--policy-file", options_.policy_file.empty()
                                                  ? SourceDir() + "/deploy/local/policy.yaml"
                                                  : options_.policy_file});
  } else if (service == "wisp-populator") {
    args.insert(args.end(), {"--volume-root", d + "/volumes", "--node-name", "node-a"});
  } else if (service == "wisp-gateway") {
    // Replica r is node-<a+r>'s gateway: its own port, CSI socket, volume and target roots.
    const std::string node = std::string("node-") + static_cast<char>('a' + replica);
    const std::string suffix = replica == 0 ? "" : "-" + std::to_string(replica);
    RunCommand("mkdir -p " + d + "/csi" + suffix + " " + d + "/volumes" + suffix + " " +
               target_root(replica));
    args.insert(args.end(),
                {"--listen-address", "127.0.0.1:" + std::to_string(gateway_ports_.at(replica)),
                 "--tls-cert", d + "/pki/gateway.pem", "--tls-key", d + "/pki/gateway-key.pem",
                 "--csi-endpoint", csi_endpoint(replica), "--csi-role", options_.csi_role,
                 "--node-name", node, "--volume-root", d + "/volumes" + suffix, "--target-root",
                 target_root(replica), "--failure-mode", options_.failure_mode});
  }
  if (auto it = options_.extra_args.find(service); it != options_.extra_args.end()) {
    args.insert(args.end(), it->second.begin(), it->second.end());
  }
  return args;
}

absl::Status Stack::StartService(const std::string& instance) {
  const std::string service = SplitReplica(instance).first;
  Process::Options o{.path = BinaryPath(service), .args = ArgsFor(instance)};
  if (auto it = options_.env.find(service); it != options_.env.end()) o.env = it->second;
  // Keep the logs of every run for post-mortem reading next to the harness's run dir.
  o.log_path = RunDir() + "/" + instance + "-" + std::to_string(FreePort()) + ".log";
  WISP_ASSIGN_OR_RETURN(procs_[instance], Process::Start(std::move(o)));
  return absl::OkStatus();
}

Process& Stack::process(const std::string& service) { return *procs_.at(service); }

absl::Status Stack::WaitReady(const std::string& service, std::chrono::milliseconds timeout) {
  auto s = WaitForHttp("127.0.0.1", metrics_ports_.at(service), "/readyz", timeout);
  // A ready answer from a process that is not ours (another test's service on a port both were
  // given) must not pass for this one: ours has to be alive too.
  if (s.ok() && procs_.count(service) && !procs_[service]->Running()) {
    s = absl::UnavailableError("the process exited; another process answered on its metrics port");
  }
  if (!s.ok()) {
    std::string log = procs_.count(service) ? procs_[service]->Log() : "";
    if (log.size() > 3000) log = log.substr(log.size() - 3000);
    return absl::Status(s.code(), service + " not ready: " + std::string(s.message()) + "\n" + log);
  }
  return absl::OkStatus();
}

void Stack::Kill(const std::string& service) {
  if (auto it = procs_.find(service); it != procs_.end()) it->second->Kill();
}

void Stack::SetEnv(const std::string& service, std::map<std::string, std::string> env) {
  options_.env[service] = std::move(env);
}

absl::Status Stack::Restart(const std::string& service) {
  if (auto it = procs_.find(service); it != procs_.end())
    it->second->Terminate(std::chrono::seconds(10));
  WISP_RETURN_IF_ERROR(StartService(service));
  return WaitReady(service);
}

absl::StatusOr<HttpsResponse> Stack::Https(const std::string& method, const std::string& target,
                                           const std::string& body,
                                           const std::map<std::string, std::string>& headers,
                                           std::chrono::milliseconds timeout, int replica) {
  // wisp's own outbound client (common/http), verifying the gateway against the test CA by the
  // name "localhost", as kube-apiserver verifies a webhook's serving certificate.
  WISP_ASSIGN_OR_RETURN(http::ClientPtr client,
                        http::NewClient({.tls = {.ca_file = ca_file_, .server_name = "localhost"},
                                         .connect_timeout = timeout,
                                         .read_timeout = timeout,
                                         .max_idle_per_host = 0}));
  http::ClientRequest req{
      .method = method,
      .url = "https://127.0.0.1:" + std::to_string(gateway_ports_.at(replica)) + target,
      .body = body,
      .total_timeout = timeout,
      .max_response_bytes = 64ull << 20};
  bool has_type = false;
  for (const auto& [k, v] : headers) {
    req.headers.emplace_back(k, v);
    has_type |= (k == "Content-Type" || k == "content-type");
  }
  if (!body.empty() && !has_type) req.headers.emplace_back("Content-Type", "application/json");
  WISP_ASSIGN_OR_RETURN(http::ClientResponse res, client->Send(req));
  HttpsResponse out;
  out.status = res.status;
  out.body = std::move(res.body);
  for (auto& [name, value] : res.headers) out.headers[name] = value;  // names are lower-cased
  return out;
}

}  // namespace wisp::integration
