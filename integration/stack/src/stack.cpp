#include "wisp/integration/stack.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <utility>

#include "wisp/http/client.hpp"

namespace wisp::integration {
namespace {

const char* const kServices[] = {"wisp-token", "wisp-policy", "wisp-populator", "wisp-gateway"};

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
  WISP_ASSIGN_OR_RETURN(stack->nats_, NatsServer::Start(nats_options));

  for (const char* name : kServices) stack->metrics_ports_[name] = FreePort();
  stack->gateway_port_ = FreePort();
  const std::map<std::string, bool> wanted = {{"wisp-token", stack->options_.token},
                                              {"wisp-policy", stack->options_.policy},
                                              {"wisp-populator", stack->options_.populator},
                                              {"wisp-gateway", stack->options_.gateway}};
  for (const char* name : kServices) {
    if (!wanted.at(name)) continue;
    WISP_RETURN_IF_ERROR(stack->StartService(name));
  }
  for (const char* name : kServices) {
    if (!wanted.at(name)) continue;
    WISP_RETURN_IF_ERROR(stack->WaitReady(name));
  }
  return stack;
}

Stack::~Stack() {
  // Services first (they drain against a live bus), then NATS.
  for (auto it = procs_.rbegin(); it != procs_.rend(); ++it)
    it->second->Terminate(std::chrono::seconds(5));
  procs_.clear();
  nats_.reset();
}

std::string Stack::gateway_url() const {
  return "https://127.0.0.1:" + std::to_string(gateway_port_);
}
std::string Stack::csi_socket() const { return dir_->path() + "/csi/csi.sock"; }
std::string Stack::csi_endpoint() const { return "unix://" + csi_socket(); }
std::string Stack::volume_root() const { return dir_->path() + "/volumes"; }
std::string Stack::target_root() const { return dir_->path() + "/targets"; }
int Stack::metrics_port(const std::string& service) const { return metrics_ports_.at(service); }

std::string Stack::NatsPassword(const std::string& user) const {
  return NatsAuthPassword(dir_->path() + "/secrets", user);
}

std::string Stack::NatsPasswordFile(const std::string& user) const {
  return dir_->path() + "/secrets/nats-" + user + ".password";
}

std::vector<std::string> Stack::WispctlArgs() const {
  std::vector<std::string> args = {"--nats-url", nats_->url()};
  if (options_.auth) {
    args.insert(args.end(),
                {"--nats-user", "wispctl", "--nats-password-file", NatsPasswordFile("wispctl")});
  }
  return args;
}

std::vector<std::string> Stack::ArgsFor(const std::string& service) const {
  const std::string& d = dir_->path();
  std::vector<std::string> args = {
      "--nats-url",        nats_->url(),
      "--metrics-address", "127.0.0.1:" + std::to_string(metrics_ports_.at(service)),
      "--log-level",       "debug"};
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
    args.insert(
        args.end(),
        {"--listen-address", "127.0.0.1:" + std::to_string(gateway_port_), "--tls-cert",
         d + "/pki/gateway.pem", "--tls-key", d + "/pki/gateway-key.pem", "--csi-endpoint",
         csi_endpoint(), "--csi-role", options_.csi_role, "--node-name", "node-a", "--volume-root",
         d + "/volumes", "--target-root", d + "/targets", "--failure-mode", options_.failure_mode});
  }
  if (auto it = options_.extra_args.find(service); it != options_.extra_args.end()) {
    args.insert(args.end(), it->second.begin(), it->second.end());
  }
  return args;
}

absl::Status Stack::StartService(const std::string& service) {
  Process::Options o{.path = BinaryPath(service), .args = ArgsFor(service)};
  if (auto it = options_.env.find(service); it != options_.env.end()) o.env = it->second;
  // Keep the logs of every run for post-mortem reading next to the harness's run dir.
  o.log_path = RunDir() + "/" + service + "-" + std::to_string(FreePort()) + ".log";
  WISP_ASSIGN_OR_RETURN(procs_[service], Process::Start(std::move(o)));
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
                                           std::chrono::milliseconds timeout) {
  // wisp's own outbound client (common/http), verifying the gateway against the test CA by the
  // name "localhost", as kube-apiserver verifies a webhook's serving certificate.
  WISP_ASSIGN_OR_RETURN(http::ClientPtr client,
                        http::NewClient({.tls = {.ca_file = ca_file_, .server_name = "localhost"},
                                         .connect_timeout = timeout,
                                         .read_timeout = timeout,
                                         .max_idle_per_host = 0}));
  http::ClientRequest req{.method = method,
                          .url = "https://127.0.0.1:" + std::to_string(gateway_port_) + target,
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
