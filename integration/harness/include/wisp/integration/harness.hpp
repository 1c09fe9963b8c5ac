#pragma once
// Integration-test harness: a real nats-server (one node or a 3-node cluster) on free ports with a
// temporary store, and the real wisp binaries as child processes, all torn down by destructors
// even when a test fails or throws.
//
// Contract:
//   - Every child runs in its own process group and gets SIGKILL when its owner is destroyed (and,
//     through PR_SET_PDEATHSIG, when the test process dies). stdout+stderr of each child go to a
//     log file (Process::log_path()) that survives the test for post-mortem reading.
//   - NatsServer::Start() returns once the server logs "Server is ready" and accepts TCP; Kill() is
//     SIGKILL; Restart() starts it again on the same port with the same store (JetStream data
//     kept).
//   - BinaryPath("wisp-policy") is the bin dir + name: $WISP_BIN_DIR when set (scripts/sanitize
//     --integration points it at the ASan build), else the build's own bin dir.
//   - Tests read files with fsutil::ReadFile (included here), e.g.
//     fsutil::ReadFile(path).value_or("") where "" makes the check that follows fail.
//
// Example:
//   auto nats = NatsServer::Start().value();
//   auto policy = Process::Start({.path = BinaryPath("wisp-policy"),
//                                 .args = {"--nats-url", nats->url()}}).value();
//   ASSERT_TRUE(policy->WaitForLog("serving", 10s).ok());
//   nats->Kill();
//   ASSERT_TRUE(nats->Restart().ok());
#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "wisp/fsutil/read_file.hpp"
#include "wisp/status/status.hpp"

namespace wisp::integration {

// Polls `pred` every `poll` until it holds or `timeout` passed (integration tests wait on real
// servers); true when it held.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10),
                std::chrono::milliseconds poll = std::chrono::milliseconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(poll);
  }
  return pred();
}

// A TCP port on 127.0.0.1 that was free a moment ago (bind to 0, read, close), never the same one
// twice in this process.
int FreePort();
// Polls until something accepts TCP on host:port, at most `timeout`.
absl::Status WaitForTcp(const std::string& host, int port, std::chrono::milliseconds timeout);
// Plain-HTTP GET (no TLS); returns the status code and body (a chunked body decoded).
struct HttpResponse {
  int status = 0;
  std::string body;
};
absl::StatusOr<HttpResponse> HttpGet(const std::string& host, int port, const std::string& path,
                                     std::chrono::milliseconds timeout);
// Polls GET until it answers `want_status`, at most `timeout`.
absl::Status WaitForHttp(const std::string& host, int port, const std::string& path,
                         std::chrono::milliseconds timeout, int want_status = 200);

// Path of a binary built by this build (bin dir from CMake).
std::string BinaryPath(std::string_view name);

// A directory under $TMPDIR removed (recursively) on destruction.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "wisp-it");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class Process {
 public:
  struct Options {
    std::string path;
    std::vector<std::string> args;
    std::map<std::string, std::string> env;  // added to (overriding) the test's environment
    std::string log_path;                    // "" = a file under the test's temp dir
    std::string working_dir;                 // "" = current
  };
  static absl::StatusOr<std::unique_ptr<Process>> Start(Options options);
  ~Process();  // SIGKILL to the process group, then reap
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return options_.log_path; }
  std::string Log() const;  // what the child wrote so far
  bool Running();
  // Waits for `needle` to appear in the log (from the start), at most `timeout`. Fails early, with
  // the log tail in the message, when the process exits first.
  absl::Status WaitForLog(std::string_view needle, std::chrono::milliseconds timeout);
  // Waits for exit; the exit code (128+signal when killed), or nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL after `grace`; returns the exit code.
  int Terminate(std::chrono::milliseconds grace = std::chrono::seconds(10));
  void Signal(int sig);
  void Kill();  // SIGKILL to the whole group, reaped

 private:
  explicit Process(Options options) : options_(std::move(options)) {}
  Options options_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// A throwaway certificate authority (P-256, made by the openssl command line) whose files live in
// `dir`: <name>.pem and <name>-key.pem; Issue() adds <cert>.pem and <cert>-key.pem signed by it.
//   auto ca = TestCa::Create(dir.path()).value();
//   ASSERT_TRUE(ca.Issue("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
//                   .ok());
class TestCa {
 public:
  static absl::StatusOr<TestCa> Create(std::string dir, std::string name = "ca");
  // `extensions`: openssl x509 extension lines (subjectAltName=..., extendedKeyUsage=...);
  // `subject`: an openssl -subj ("/O=system:masters/CN=admin"), "" = "/CN=<cert>".
  absl::Status Issue(const std::string& cert, const std::string& extensions,
                     const std::string& subject = "") const;
  std::string ca_file() const { return Path(name_ + ".pem"); }
  std::string cert_file(const std::string& cert) const { return Path(cert + ".pem"); }
  std::string key_file(const std::string& cert) const { return Path(cert + "-key.pem"); }

 private:
  TestCa(std::string dir, std::string name) : dir_(std::move(dir)), name_(std::move(name)) {}
  std::string Path(const std::string& file) const { return dir_ + "/" + file; }
  std::string dir_;
  std::string name_;
};

// TLS for the routes of a cluster node (nats-server `cluster { tls { ... verify: true } }`): the
// node presents cert_file when it dials and when it is dialled, and verifies the other side
// against ca_file. The certificate needs IP:127.0.0.1 and both serverAuth and clientAuth.
struct RouteTls {
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
};

class NatsServer {
 public:
  struct Options {
    int port = 0;  // 0 = a free port
    bool jetstream = true;
    std::string store_dir;     // "" = a temp dir owned by the server object
    std::string server_name;   // required for JetStream in a cluster
    std::string cluster_name;  // set with cluster_port/routes to join a cluster
    int cluster_port = 0;
    std::vector<std::string> routes;  // nats://127.0.0.1:<cluster port> of the others
    // Routes over TLS: the cluster block goes into a generated config file (-c), so extra_args
    // must not hold another -c.
    std::optional<RouteTls> route_tls;
    int monitor_port = 0;  // > 0: the HTTP monitoring port (-m: /varz, /routez, /jsz ...)
    std::vector<std::string> extra_args;
  };
  static absl::StatusOr<std::unique_ptr<NatsServer>> Start();
  static absl::StatusOr<std::unique_ptr<NatsServer>> Start(Options options);
  ~NatsServer();

  int port() const { return options_.port; }
  int cluster_port() const { return options_.cluster_port; }
  int monitor_port() const { return options_.monitor_port; }
  std::string url() const;  // nats://127.0.0.1:<port>
  const std::string& store_dir() const { return options_.store_dir; }
  Process* process() { return process_.get(); }

  void Kill();          // SIGKILL
  absl::Status Stop();  // SIGTERM and wait
  // Starts again on the same port and store dir (after Kill or Stop).
  absl::Status Restart(std::chrono::milliseconds timeout = std::chrono::seconds(15));

 private:
  explicit NatsServer(Options options) : options_(std::move(options)) {}
  absl::Status Launch(std::chrono::milliseconds timeout);
  Options options_;
  std::unique_ptr<TempDir> owned_store_;
  std::unique_ptr<Process> process_;
  int starts_ = 0;
};

// Three routed nats-server nodes with JetStream (replicated streams and KV work), each with a
// monitoring port.
class NatsCluster {
 public:
  struct Options {
    int nodes = 3;
    // Every node's routes over TLS with this certificate (one certificate serves every node on
    // loopback).
    std::optional<RouteTls> route_tls;
    // Appended to every node's command line (client TLS: --tls --tlscert ... --tlsverify).
    std::vector<std::string> extra_args;
  };
  static absl::StatusOr<std::unique_ptr<NatsCluster>> Start(int nodes = 3);
  static absl::StatusOr<std::unique_ptr<NatsCluster>> Start(Options options);
  // nats://127.0.0.1:<cluster port> of every node (to route another server to this cluster).
  std::vector<std::string> route_urls() const;
  std::vector<std::string> urls() const;
  NatsServer& node(int i) { return *nodes_[i]; }
  int size() const { return static_cast<int>(nodes_.size()); }

 private:
  std::vector<std::unique_ptr<NatsServer>> nodes_;
};

// The password scripts/nats-auth wrote for `user` in `secrets_dir` (nats-<user>.password), without
// its newline; "" when there is none.
std::string NatsAuthPassword(const std::string& secrets_dir, const std::string& user);

// The directory for this test run's logs and stores ($TMPDIR/wisp-it-<pid>), created on first use.
const std::string& RunDir();

}  // namespace wisp::integration
