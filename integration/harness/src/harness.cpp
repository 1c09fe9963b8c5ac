#include "wisp/integration/harness.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#ifndef WISP_BIN_DIR
#error "WISP_BIN_DIR must be defined by CMake"
#endif

namespace wisp::integration {
namespace {

namespace fs = std::filesystem;
using Steady = std::chrono::steady_clock;

std::string Tail(const std::string& s, size_t n = 2000) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

int Connect(const std::string& host, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    ::close(fd);
    return -1;
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::atomic<int> g_log_counter{0};

}  // namespace

const std::string& RunDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string d = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/wisp-it-" +
                    std::to_string(::getpid());
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

namespace {
int UnusedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = -1;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}
}  // namespace

int FreePort() {
  // The kernel may hand the same free port to two binds in a row once the first socket is
  // closed; a stack asks for several ports before any service binds them (wisp-token and
  // wisp-gateway once got the same metrics port). Never return a port twice in one process.
  static std::mutex mu;
  static std::set<int> given;
  std::lock_guard lock(mu);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = UnusedPort();
    if (port < 0) return port;
    if (given.insert(port).second) return port;
  }
  return -1;
}

absl::Status WaitForTcp(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const auto deadline = Steady::now() + timeout;
  while (true) {
    int fd = Connect(host, port);
    if (fd >= 0) {
      ::close(fd);
      return absl::OkStatus();
    }
    if (Steady::now() >= deadline) {
      return absl::DeadlineExceededError("nothing accepts TCP on " + host + ":" +
                                         std::to_string(port));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

absl::StatusOr<HttpResponse> HttpGet(const std::string& host, int port, const std::string& path,
                                     std::chrono::milliseconds timeout) {
  int fd = Connect(host, port);
  if (fd < 0) return absl::UnavailableError("connect " + host + ":" + std::to_string(port));
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string req =
      "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return absl::UnavailableError("send to " + host);
  }
  std::string raw;
  char buf[4096];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  HttpResponse resp;
  if (raw.rfind("HTTP/1.", 0) != 0 || raw.size() < 12) {
    return absl::DataLossError("not an HTTP response from " + host + ":" + std::to_string(port));
  }
  resp.status = std::atoi(raw.substr(9, 3).c_str());
  const size_t body = raw.find("\r\n\r\n");
  if (body == std::string::npos) return resp;
  resp.body = raw.substr(body + 4);
  std::string head = raw.substr(0, body);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (head.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
    // A large answer from a Go server (nats-server's /jsz) comes in chunks: <hex size>\r\n...
    std::string joined;
    size_t at = 0;
    while (at < resp.body.size()) {
      const size_t eol = resp.body.find("\r\n", at);
      if (eol == std::string::npos) break;
      const size_t size = std::strtoul(resp.body.substr(at, eol - at).c_str(), nullptr, 16);
      if (size == 0) break;
      joined += resp.body.substr(eol + 2, size);
      at = eol + 2 + size + 2;
    }
    resp.body = std::move(joined);
  }
  return resp;
}

absl::Status WaitForHttp(const std::string& host, int port, const std::string& path,
                         std::chrono::milliseconds timeout, int want_status) {
  const auto deadline = Steady::now() + timeout;
  int last = 0;
  while (Steady::now() < deadline) {
    auto r = HttpGet(host, port, path, std::chrono::milliseconds(1000));
    if (r.ok()) {
      last = r->status;
      if (r->status == want_status) return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError("GET " + path + " on port " + std::to_string(port) +
                                     " did not answer " + std::to_string(want_status) +
                                     " (last: " + std::to_string(last) + ")");
}

std::string BinaryPath(std::string_view name) {
  // WISP_BIN_DIR in the environment wins over the build's own bin dir, so the integration tests of
  // one build can drive the binaries of another (scripts/sanitize --integration: ASan binaries).
  const char* env = std::getenv("WISP_BIN_DIR");
  const std::string dir = env != nullptr && *env != '\0' ? env : WISP_BIN_DIR;
  return dir + "/" + std::string(name);
}

// ---- TempDir ----

TempDir::TempDir(std::string_view prefix) {
  std::string tmpl = RunDir() + "/" + std::string(prefix) + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    path_ = tmpl.substr(0, tmpl.size() - 6) + std::to_string(g_log_counter++);
    fs::create_directories(path_);
  } else {
    path_ = buf.data();
  }
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

// ---- Process ----

absl::StatusOr<std::unique_ptr<Process>> Process::Start(Options options) {
  if (::access(options.path.c_str(), X_OK) != 0) {
    return absl::NotFoundError("not an executable: " + options.path);
  }
  if (options.log_path.empty()) {
    options.log_path = RunDir() + "/" + fs::path(options.path).filename().string() + "-" +
                       std::to_string(g_log_counter++) + ".log";
  }
  // Everything the child needs is prepared before fork (only async-signal-safe calls after it).
  std::vector<std::string> argv_s = {options.path};
  argv_s.insert(argv_s.end(), options.args.begin(), options.args.end());
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : options.env) env[k] = v;
  std::vector<std::string> env_s;
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  const int log_fd =
      ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError("cannot open log " + options.log_path);
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const char* wd = options.working_dir.empty() ? nullptr : options.working_dir.c_str();

  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    if (null_fd >= 0) ::close(null_fd);
    return absl::InternalError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    if (wd != nullptr && ::chdir(wd) != 0) ::_exit(126);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so there is no window before the child runs
  ::close(log_fd);
  if (null_fd >= 0) ::close(null_fd);
  auto p = std::unique_ptr<Process>(new Process(std::move(options)));
  p->pid_ = pid;
  return p;
}

Process::~Process() { Kill(); }

std::string Process::Log() const {
  return fsutil::ReadFile(options_.log_path, size_t{1} << 30).value_or("");
}

std::string NatsAuthPassword(const std::string& secrets_dir, const std::string& user) {
  return fsutil::ReadTrimmedFile(secrets_dir + "/nats-" + user + ".password").value_or("");
}

bool Process::Running() { return !Wait(std::chrono::milliseconds(0)).has_value(); }

std::optional<int> Process::Wait(std::chrono::milliseconds timeout) {
  if (exit_code_) return exit_code_;
  if (pid_ <= 0) return std::nullopt;
  const auto deadline = Steady::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (r < 0 && errno != EINTR) {
      exit_code_ = -1;
      return exit_code_;
    }
    if (Steady::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

absl::Status Process::WaitForLog(std::string_view needle, std::chrono::milliseconds timeout) {
  const auto deadline = Steady::now() + timeout;
  while (true) {
    const std::string log = Log();
    if (log.find(needle) != std::string::npos) return absl::OkStatus();
    if (!Running()) {
      return absl::FailedPreconditionError(
          options_.path + " exited (code " + std::to_string(exit_code_.value_or(-1)) +
          ") before logging \"" + std::string(needle) + "\"; log tail:\n" + Tail(log));
    }
    if (Steady::now() >= deadline) {
      return absl::DeadlineExceededError(options_.path + " did not log \"" + std::string(needle) +
                                         "\"; log tail:\n" + Tail(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Process::Signal(int sig) {
  if (pid_ > 0 && !exit_code_) ::kill(pid_, sig);
}

int Process::Terminate(std::chrono::milliseconds grace) {
  Signal(SIGTERM);
  if (auto code = Wait(grace)) {
    ::kill(-pid_, SIGKILL);  // leftovers of the group, if any
    return *code;
  }
  Kill();
  return exit_code_.value_or(-1);
}

void Process::Kill() {
  if (pid_ <= 0) return;
  if (!exit_code_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  } else {
    ::kill(-pid_, SIGKILL);
  }
}

// ---- NatsServer ----

absl::StatusOr<std::unique_ptr<NatsServer>> NatsServer::Start() { return Start(Options{}); }

absl::StatusOr<std::unique_ptr<NatsServer>> NatsServer::Start(Options options) {
  if (options.port == 0) options.port = FreePort();
  auto server = std::unique_ptr<NatsServer>(new NatsServer(std::move(options)));
  if (server->options_.store_dir.empty()) {
    server->owned_store_ = std::make_unique<TempDir>("nats-store");
    server->options_.store_dir = server->owned_store_->path();
  }
  WISP_RETURN_IF_ERROR(server->Launch(std::chrono::seconds(15)));
  return server;
}

NatsServer::~NatsServer() {
  if (process_) process_->Kill();
  process_.reset();
}

std::string NatsServer::url() const { return "nats://127.0.0.1:" + std::to_string(options_.port); }

absl::Status NatsServer::Launch(std::chrono::milliseconds timeout) {
  const char* env_bin = std::getenv("WISP_NATS_SERVER");
  std::string bin = env_bin != nullptr && *env_bin != '\0' ? env_bin : "";
  if (bin.empty()) {
    for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"}) {
      const std::string candidate = std::string(dir) + "/nats-server";
      if (::access(candidate.c_str(), X_OK) == 0) {
        bin = candidate;
        break;
      }
    }
  }
  if (bin.empty()) return absl::NotFoundError("nats-server not found (set WISP_NATS_SERVER)");
  Process::Options po;
  po.path = bin;
  po.args = {"-a", "127.0.0.1", "-p", std::to_string(options_.port)};
  if (options_.jetstream) {
    po.args.insert(po.args.end(), {"-js", "-sd", options_.store_dir});
  }
  if (!options_.server_name.empty()) po.args.insert(po.args.end(), {"-n", options_.server_name});
  if (options_.monitor_port > 0) {
    po.args.insert(po.args.end(), {"-m", std::to_string(options_.monitor_port)});
  }
  if (!options_.cluster_name.empty() && options_.route_tls) {
    // The command line has no flags for route TLS: the whole cluster block goes into a file.
    for (const auto& a : options_.extra_args) {
      if (a == "-c" || a == "--config") {
        return absl::InvalidArgumentError("NatsServer: route_tls and a -c in extra_args");
      }
    }
    const RouteTls& t = *options_.route_tls;
    const std::string conf = RunDir() + "/nats-" + std::to_string(options_.port) + "-cluster.conf";
    std::ofstream out(conf);
    out << "cluster {\n  name: \"" << options_.cluster_name
        << "\"\n  listen: \"127.0.0.1:" << options_.cluster_port << "\"\n  routes: [\n";
    for (const auto& r : options_.routes) out << "    \"" << r << "\"\n";
    out << "  ]\n  tls {\n    cert_file: \"" << t.cert_file << "\"\n    key_file: \"" << t.key_file
        << "\"\n    ca_file: \"" << t.ca_file << "\"\n    verify: true\n    timeout: 2\n  }\n}\n";
    out.close();
    if (!out) return absl::InternalError("cannot write " + conf);
    po.args.insert(po.args.end(), {"-c", conf});
  } else if (!options_.cluster_name.empty()) {
    po.args.insert(po.args.end(), {"--cluster_name", options_.cluster_name, "--cluster",
                                   "nats://127.0.0.1:" + std::to_string(options_.cluster_port)});
    std::string routes;
    for (const auto& r : options_.routes) routes += (routes.empty() ? "" : ",") + r;
    if (!routes.empty()) po.args.insert(po.args.end(), {"--routes", routes});
  }
  po.args.insert(po.args.end(), options_.extra_args.begin(), options_.extra_args.end());
  po.log_path = RunDir() + "/nats-" + std::to_string(options_.port) + "-" +
                std::to_string(starts_++) + ".log";
  WISP_ASSIGN_OR_RETURN(process_, Process::Start(po));
  WISP_RETURN_IF_ERROR(process_->WaitForLog("Server is ready", timeout));
  return WaitForTcp("127.0.0.1", options_.port, timeout);
}

void NatsServer::Kill() {
  if (process_) process_->Kill();
}

absl::Status NatsServer::Stop() {
  if (!process_) return absl::OkStatus();
  const int code = process_->Terminate(std::chrono::seconds(10));
  if (code != 0 && code != 128 + SIGTERM) {
    return absl::InternalError("nats-server exited with " + std::to_string(code));
  }
  return absl::OkStatus();
}

absl::Status NatsServer::Restart(std::chrono::milliseconds timeout) {
  if (process_ && process_->Running()) process_->Kill();
  process_.reset();
  // The port was just released; a fresh bind can race TIME_WAIT-free reuse, so retry briefly.
  absl::Status st;
  for (int attempt = 0; attempt < 5; ++attempt) {
    st = Launch(timeout);
    if (st.ok()) return st;
    process_.reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return st;
}

// ---- NatsCluster ----

absl::StatusOr<std::unique_ptr<NatsCluster>> NatsCluster::Start(int nodes) {
  return Start(Options{.nodes = nodes});
}

absl::StatusOr<std::unique_ptr<NatsCluster>> NatsCluster::Start(Options options) {
  const int nodes = options.nodes;
  auto cluster = std::make_unique<NatsCluster>();
  std::vector<int> cluster_ports;
  for (int i = 0; i < nodes; ++i) cluster_ports.push_back(FreePort());
  std::vector<NatsServer::Options> opts(nodes);
  for (int i = 0; i < nodes; ++i) {
    opts[i].server_name = "n" + std::to_string(i);
    opts[i].cluster_name = "wisp-it";
    opts[i].cluster_port = cluster_ports[i];
    opts[i].monitor_port = FreePort();
    opts[i].route_tls = options.route_tls;
    opts[i].extra_args = options.extra_args;
    for (int j = 0; j < nodes; ++j) {
      if (j != i) opts[i].routes.push_back("nats://127.0.0.1:" + std::to_string(cluster_ports[j]));
    }
  }
  // Each node logs "Server is ready" on its own; start them all, then wait for routes.
  for (int i = 0; i < nodes; ++i) {
    WISP_ASSIGN_OR_RETURN(auto node, NatsServer::Start(opts[i]));
    cluster->nodes_.push_back(std::move(node));
  }
  for (auto& n : cluster->nodes_) {
    WISP_RETURN_IF_ERROR(n->process()->WaitForLog("JetStream cluster", std::chrono::seconds(20)));
  }
  return cluster;
}

std::vector<std::string> NatsCluster::route_urls() const {
  std::vector<std::string> out;
  for (const auto& n : nodes_) {
    out.push_back("nats://127.0.0.1:" + std::to_string(n->cluster_port()));
  }
  return out;
}

absl::StatusOr<TestCa> TestCa::Create(std::string dir, std::string name) {
  TestCa ca(std::move(dir), std::move(name));
  const std::string cmd = "cd '" + ca.dir_ +
                          "' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
                          "-nodes -days 2 -subj '/CN=" +
                          ca.name_ + "' -keyout '" + ca.name_ + "-key.pem' -out '" + ca.name_ +
                          ".pem' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return absl::InternalError("openssl: cannot make " + ca.name_);
  return ca;
}

absl::Status TestCa::Issue(const std::string& cert, const std::string& extensions,
                           const std::string& subject) const {
  {
    std::ofstream ext(Path(cert + ".ext"));
    ext << extensions;
  }
  const std::string cmd =
      "cd '" + dir_ + "' && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes " +
      "-subj '" + (subject.empty() ? "/CN=" + cert : subject) + "' -keyout '" + cert +
      "-key.pem' -out '" + cert + ".csr' >/dev/null 2>&1 && openssl x509 -req -in '" + cert +
      ".csr' -CA '" + name_ + ".pem' -CAkey '" + name_ +
      "-key.pem' -CAcreateserial -days 2 -extfile '" + cert + ".ext' -out '" + cert +
      ".pem' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    return absl::InternalError("openssl: cannot issue " + cert + " from " + name_);
  }
  return absl::OkStatus();
}

std::vector<std::string> NatsCluster::urls() const {
  std::vector<std::string> out;
  for (const auto& n : nodes_) out.push_back(n->url());
  return out;
}

}  // namespace wisp::integration
