// soak_bench: the whole real stack under a steady, paced mix of its four front doors for a bounded
// time (issue 8 item 5), to show that nothing fails and no service keeps growing.
//
// Starts nats-server (JetStream, per-service users from scripts/nats-auth), wisp-token,
// wisp-policy, wisp-populator and wisp-gateway (HTTPS with a test CA, CSI socket in both roles)
// through wisp::integration::Stack, then drives, each at its own constant rate:
//   admission     AdmissionReview of a realistic ~4 KiB pod POSTed over HTTPS to /mutate
//                 (gateway -> NATS -> wisp-policy), must be allowed with a JSON patch;
//   issue         wisp.v1.token.issue over the bus as the wispctl user (-> wisp-token);
//   exchange      RFC 8693 POST /v1/token over HTTPS with a wisp-issued subject token
//                 (gateway -> NATS -> wisp-token), must return an access token;
//   csi           NodePublishVolume of a token volume on the unix socket (gateway issues through
//                 NATS, mounts a real tmpfs, writes the token), the token file is read back, then
//                 NodeUnpublishVolume (p50/p99 reported for publish and unpublish separately).
// HTTPS clients keep connections alive and reconnect every --requests-per-connection requests,
// as kube-apiserver and STS clients do, so connection set-up is part of the mix.
//
// Output: per operation the target and achieved rate, count, errors, p50/p99/max latency (from
// the moment the request was sent); per service VmRSS at start, after warm-up (--warmup, a
// fraction of the run) and at the end, with growth after warm-up, plus CPU seconds used; then one
// verdict line per goal (errors == 0; RSS growth after warm-up < --rss-goal % for each wisp
// service) and a final PASS/FAIL. Exit 0 when every goal is met, 1 when one fails, 2 on bad
// usage, 3 when the stack or the pre-flight checks fail, 130 when interrupted.
//
// Bounded: the load stops by itself after --duration seconds (at most 3600); every request has a
// deadline (HTTPS 10 s, bus 5 s, CSI 30 s). Every tmpfs it caused is unpublished, and any mount
// left under the stack's directory is detached before the stack is torn down, also on Ctrl-C.
// Talks to loopback and the unix socket only; never prints a token.
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include "csi_client.hpp"
#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/fsutil/read_file.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/stack.hpp"
#include "wisp/v1/token.pb.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kExchangeAudience = "storage.wisp.dev";
constexpr const char* kExchangeScope = "https://www.googleapis.com/auth/cloud-platform";
constexpr const char* kSubjectAudience = "wisp-sts";
// The gateway allows 5 exchanges/s per subject (burst 20); the exchange load is spread over a pool
// of service accounts so that each one stays well under it, as many pods would.
constexpr double kExchangesPerSubjectPerSecond = 2.0;

// wisp-token's policy for the run: any namespace may ask for any audience (CSI and issue load),
// and service accounts of namespace "soak" may exchange a wisp-sts token for storage.wisp.dev.
constexpr const char* kTokenPolicy = R"(maxExpirationSeconds: 86400
namespaces:
  "*": {audiences: ["*"]}
exchange:
  accessTokenLifetimeSeconds: 1800
  subjectAudiences: [wisp-sts]
  rules:
    - namespace: soak
      serviceAccounts: ["*"]
      audiences: [storage.wisp.dev]
      scopes: [https://www.googleapis.com/auth/cloud-platform]
)";

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

// ---- options ----

struct Options {
  int duration_s = 180;
  double warmup = 0.2;  // fraction of the run before the "after warm-up" RSS sample
  std::map<std::string, double> rate = {
      {"admission", 10}, {"issue", 10}, {"exchange", 10}, {"csi", 5}};
  int clients = 4;  // worker threads per operation
  int requests_per_connection = 100;
  double rss_goal_percent = 10;
  bool auth = true;
  std::string service_log_level = "info";
  // wisp-gateway's --projection-purge-interval and --projection-purge-age; empty = its defaults
  // (1h, 10m: no purge within a run).
  std::string purge_interval;
  std::string purge_age;
};

void Usage() {
  std::fprintf(stderr,
               "usage: soak_bench [--duration SECONDS (180, 10..3600)] [--rate OPS_PER_S (all)]\n"
               "         [--rate-admission R (10)] [--rate-issue R (10)] [--rate-exchange R (10)]\n"
               "         [--rate-csi R (5, publish+unpublish cycles)] [--clients N (4 per op)]\n"
               "         [--warmup FRACTION (0.2)] [--rss-goal PERCENT (10)]\n"
               "         [--requests-per-connection N (100)] [--service-log-level LEVEL (info)]\n"
               "         [--projection-purge-interval D] [--projection-purge-age D] [--no-auth]\n"
               "A rate of 0 leaves that operation out. Needs root (tmpfs mounts).\n");
}

std::optional<Options> ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-auth") {
      o.auth = false;
      continue;
    }
    if (a == "-h" || a == "--help" || i + 1 >= argc) return std::nullopt;
    const std::string v = argv[++i];
    char* end = nullptr;
    const double num = std::strtod(v.c_str(), &end);
    const bool numeric = end != nullptr && *end == '\0' && !v.empty();
    if (a == "--service-log-level") {
      o.service_log_level = v;
    } else if (a == "--projection-purge-interval") {
      o.purge_interval = v;
    } else if (a == "--projection-purge-age") {
      o.purge_age = v;
    } else if (!numeric) {
      return std::nullopt;
    } else if (a == "--duration") {
      o.duration_s = static_cast<int>(num);
    } else if (a == "--rate") {
      for (auto& [name, r] : o.rate) r = num;
    } else if (a.rfind("--rate-", 0) == 0 && o.rate.count(a.substr(7))) {
      o.rate[a.substr(7)] = num;
    } else if (a == "--clients") {
      o.clients = static_cast<int>(num);
    } else if (a == "--warmup") {
      o.warmup = num;
    } else if (a == "--rss-goal") {
      o.rss_goal_percent = num;
    } else if (a == "--requests-per-connection") {
      o.requests_per_connection = static_cast<int>(num);
    } else {
      return std::nullopt;
    }
  }
  if (o.duration_s < 10 || o.duration_s > 3600 || o.clients < 1 || o.clients > 64 ||
      o.warmup <= 0 || o.warmup >= 1 || o.requests_per_connection < 1 || o.rss_goal_percent <= 0) {
    return std::nullopt;
  }
  for (const auto& [name, r] : o.rate) {
    if (r < 0 || r > 1000) return std::nullopt;
  }
  return o;
}

// ---- per-operation figures ----

class OpStats {
 public:
  explicit OpStats(std::string name) : name_(std::move(name)) {}
  void Ok(double ms) {
    std::lock_guard lock(mu_);
    ms_.push_back(ms);
  }
  void Fail(const std::string& what) {
    std::lock_guard lock(mu_);
    ++errors_;
    if (examples_.size() < 3) examples_.push_back(what);
  }
  void Late() { ++late_; }

  const std::string& name() const { return name_; }
  uint64_t errors() const {
    std::lock_guard lock(mu_);
    return errors_;
  }

  void Print(double target_rate, double seconds) {
    std::lock_guard lock(mu_);
    std::sort(ms_.begin(), ms_.end());
    auto at = [&](double q) {
      return ms_.empty() ? 0.0 : ms_[std::min(ms_.size() - 1, static_cast<size_t>(q * ms_.size()))];
    };
    const uint64_t count = ms_.size() + errors_;
    std::printf("%-15s %9.1f %10.1f %8llu %7llu %9.2f %9.2f %9.2f %6llu\n", name_.c_str(),
                target_rate, seconds > 0 ? static_cast<double>(count) / seconds : 0.0,
                static_cast<unsigned long long>(count), static_cast<unsigned long long>(errors_),
                at(0.50), at(0.99), ms_.empty() ? 0.0 : ms_.back(),
                static_cast<unsigned long long>(late_.load()));
  }
  void PrintErrors() {
    std::lock_guard lock(mu_);
    for (const auto& e : examples_) std::printf("  %s error: %s\n", name_.c_str(), e.c_str());
  }

 private:
  const std::string name_;
  mutable std::mutex mu_;
  std::vector<double> ms_;
  uint64_t errors_ = 0;
  std::vector<std::string> examples_;
  std::atomic<uint64_t> late_{0};
};

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ---- HTTPS with keep-alive ----

struct Reply {
  int status = 0;
  std::string body;
};

// One keep-alive HTTPS connection to the gateway, verified against the test CA with SNI
// "localhost" as kube-apiserver would. Reconnects after `per_connection` requests, when the server
// closes, and once (counted in stale_retries) when a reused connection turns out to be dead.
// Every step is an async operation run to completion on a private io_context, because beast's
// tcp_stream deadlines (10 s here) only apply to async operations: no request can hang the run.
class HttpsClient {
 public:
  HttpsClient(int port, const std::string& ca_file, int per_connection,
              std::atomic<uint64_t>& stale_retries)
      : ctx_(asio::ssl::context::tls_client),
        port_(port),
        per_connection_(per_connection),
        stale_retries_(stale_retries) {
    ctx_.load_verify_file(ca_file);
    ctx_.set_verify_mode(asio::ssl::verify_peer);
  }
  ~HttpsClient() { Close(); }
  HttpsClient(const HttpsClient&) = delete;
  HttpsClient& operator=(const HttpsClient&) = delete;

  absl::StatusOr<Reply> Post(const std::string& target, const std::string& body,
                             const std::string& content_type) {
    bhttp::request<bhttp::string_body> req{bhttp::verb::post, target, 11};
    req.set(bhttp::field::host, "localhost");
    req.set(bhttp::field::content_type, content_type);
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    for (int attempt = 0;; ++attempt) {
      if (stream_ && used_ >= per_connection_) Close();
      const bool reused = stream_ != nullptr;
      if (!stream_) {
        if (auto st = Connect(); !st.ok()) return st;
      }
      beast::get_lowest_layer(*stream_).expires_after(seconds(10));
      beast::error_code ec =
          Run([&](auto handler) { bhttp::async_write(*stream_, req, std::move(handler)); });
      bhttp::response_parser<bhttp::string_body> parser;
      parser.body_limit(4 * 1024 * 1024);
      if (!ec) {
        ec = Run([&](auto handler) {
          bhttp::async_read(*stream_, buffer_, parser, std::move(handler));
        });
      }
      if (!ec) {
        auto res = parser.release();
        Reply reply{static_cast<int>(res.result_int()), std::move(res.body())};
        ++used_;
        if (!res.keep_alive()) Close();
        return reply;
      }
      Close();
      if (!reused || attempt > 0) {
        return absl::UnavailableError("POST " + target + ": " + ec.message());
      }
      ++stale_retries_;
    }
  }

 private:
  // Starts one async operation and runs the io_context until it completed.
  template <typename Start>
  beast::error_code Run(Start start) {
    beast::error_code result = asio::error::would_block;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc_.restart();
    ioc_.run();
    return result;
  }

  absl::Status Connect() {
    stream_ = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc_, ctx_);
    SSL_set_tlsext_host_name(stream_->native_handle(), "localhost");
    SSL_set1_host(stream_->native_handle(), "localhost");
    const asio::ip::tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"),
                                           static_cast<uint16_t>(port_));
    beast::get_lowest_layer(*stream_).expires_after(seconds(10));
    beast::error_code ec = Run([&](auto handler) {
      beast::get_lowest_layer(*stream_).async_connect(endpoint, std::move(handler));
    });
    if (!ec) {
      beast::get_lowest_layer(*stream_).expires_after(seconds(10));
      ec = Run([&](auto handler) {
        stream_->async_handshake(asio::ssl::stream_base::client, std::move(handler));
      });
    }
    if (ec) {
      stream_.reset();
      return absl::UnavailableError("connect/TLS handshake: " + ec.message());
    }
    used_ = 0;
    buffer_.clear();
    return absl::OkStatus();
  }

  void Close() {
    if (!stream_) return;
    // close_notify, at most 2 s; the server may already be gone.
    beast::get_lowest_layer(*stream_).expires_after(seconds(2));
    Run([&](auto handler) { stream_->async_shutdown(std::move(handler)); });
    stream_.reset();
    used_ = 0;
  }

  asio::io_context ioc_;
  asio::ssl::context ctx_;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> stream_;
  beast::flat_buffer buffer_;
  const int port_;
  const int per_connection_;
  int used_ = 0;
  std::atomic<uint64_t>& stale_retries_;
};

// ---- request bodies ----

// The pod of bench/admission/make_body.py: a hostNetwork pod asking for the token sidecar, with a
// csi.wisp.dev volume and three containers (~4 KiB as JSON).
Json RealisticPod() {
  Json containers = Json::array();
  const char* names[] = {"loader", "prefetch", "metrics-agent"};
  for (int i = 0; i < 3; ++i) {
    Json env = Json::array();
    for (int j = 0; j < 8; ++j) {
      char value[64];
      std::snprintf(value, sizeof(value), "s3://training-data/shard-%04d", j);
      env.push_back({{"name", "SHARD_" + std::to_string(j)}, {"value", value}});
    }
    containers.push_back(
        {{"name", names[i]},
         {"image", std::string("registry.example/ml/") + names[i] + ":2.3." + std::to_string(i)},
         {"args", {"--bucket", "training-data", "--threads", "32", "--log-level", "info"}},
         {"env", env},
         {"resources",
          {{"requests", {{"cpu", "2"}, {"memory", "4Gi"}}}, {"limits", {{"memory", "8Gi"}}}}},
         {"volumeMounts",
          {{{"name", "training-data"}, {"mountPath", "/data"}, {"readOnly", true}},
           {{"name", "scratch"}, {"mountPath", "/scratch"}}}},
         {"ports", {{{"containerPort", 9000 + i}, {"name", "p" + std::to_string(i)}}}},
         {"readinessProbe",
          {{"httpGet", {{"path", "/ready"}, {"port", 9000 + i}}}, {"periodSeconds", 10}}}});
  }
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", "data-loader-7d9f8"},
        {"namespace", "ml"},
        {"labels", {{"app", "data-loader"}, {"team", "ml-platform"}, {"tier", "batch"}}},
        {"annotations",
         {{"wisp.dev/token-sidecar", "true"}, {"wisp.dev/sidecar-memory-limit", "1Gi"}}}}},
      {"spec",
       {{"hostNetwork", true},
        {"dnsPolicy", "ClusterFirstWithHostNet"},
        {"serviceAccountName", "data-loader"},
        {"nodeSelector", {{"pool", "gpu"}}},
        {"tolerations",
         {{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}}},
        {"containers", containers},
        {"volumes",
         {{{"name", "training-data"},
           {"csi",
            {{"driver", "csi.wisp.dev"},
             {"readOnly", true},
             {"volumeAttributes",
              {{"bucketName", "training-data"}, {"identityProvider", "ml-pool.svc.id.goog"}}}}}},
          {{"name", "scratch"}, {"emptyDir", {{"sizeLimit", "20Gi"}}}}}}}}};
}

std::string AdmissionReview(const Json& pod, const std::string& uid, const std::string& name) {
  Json p = pod;
  p["metadata"]["name"] = name;
  Json review = {{"apiVersion", "admission.k8s.io/v1"},
                 {"kind", "AdmissionReview"},
                 {"request",
                  {{"uid", uid},
                   {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                   {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
                   {"operation", "CREATE"},
                   {"namespace", "ml"},
                   {"name", name},
                   {"userInfo",
                    {{"username", "system:serviceaccount:kube-system:job-controller"},
                     {"uid", "4b1c"},
                     {"groups", {"system:serviceaccounts", "system:authenticated"}}}},
                   {"object", p},
                   {"dryRun", false}}}};
  return review.dump();
}

// Checks an AdmissionReview answer: 200, same uid, allowed, with a JSON patch (the pod asks for
// the sidecar, so a mutation is expected every time).
absl::Status CheckAdmission(const absl::StatusOr<Reply>& r, const std::string& uid) {
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    return absl::InternalError("HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 200));
  }
  const Json j = Json::parse(r->body, nullptr, false);
  if (!j.is_object() || !j.contains("response"))
    return absl::DataLossError("not an AdmissionReview");
  const Json& resp = j["response"];
  if (resp.value("uid", "") != uid) return absl::DataLossError("answer for another uid");
  if (!resp.value("allowed", false)) {
    return absl::PermissionDeniedError("denied: " + resp.value("status", Json::object()).dump());
  }
  if (resp.value("patch", "").empty()) return absl::DataLossError("allowed without a patch");
  return absl::OkStatus();
}

std::string FormEncode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string ExchangeForm(const std::string& subject_token) {
  return "grant_type=" + FormEncode("urn:ietf:params:oauth:grant-type:token-exchange") +
         "&subject_token=" + FormEncode(subject_token) +
         "&subject_token_type=" + FormEncode("urn:ietf:params:oauth:token-type:jwt") +
         "&audience=" + FormEncode(kExchangeAudience) + "&scope=" + FormEncode(kExchangeScope);
}

absl::Status CheckExchange(const absl::StatusOr<Reply>& r) {
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    // An RFC 6749 error body names the error code and never carries a token.
    return absl::InternalError("HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 200));
  }
  const Json j = Json::parse(r->body, nullptr, false);
  if (!j.is_object() || j.value("access_token", "").empty()) {
    return absl::DataLossError("200 without an access_token");
  }
  return absl::OkStatus();
}

bool LooksLikeJwt(const std::string& t) { return std::count(t.begin(), t.end(), '.') == 2; }

absl::StatusOr<std::string> Issue(wisp::bus::Bus& bus, const std::string& ns, const std::string& sa,
                                  const std::string& audience, int64_t expiration_seconds) {
  wisp::v1::IssueRequest req;
  req.mutable_subject()->set_namespace_(ns);
  req.mutable_subject()->set_service_account(sa);
  req.add_audiences(audience);
  req.set_expiration_seconds(expiration_seconds);
  auto resp = wisp::bus::Call<wisp::v1::IssueResponse>(bus, wisp::bus::subjects::kTokenIssue, req,
                                                       seconds(5));
  if (!resp.ok()) return resp.status();
  if (!LooksLikeJwt(resp->token())) return absl::DataLossError("issue: reply is not a JWT");
  return resp->token();
}

// One publish + read-back + unpublish cycle of an inline token volume, as the kubelet does for a
// new pod. Records publish and unpublish latency separately.
void CsiCycle(wisp::integration::CsiClient& client, const std::string& root, uint64_t seq,
              OpStats& publish, OpStats& unpublish) {
  const std::string dir = root + "/" + std::to_string(seq);
  const std::string target = dir + "/mount";
  const std::string id = "soak-" + std::to_string(seq);
  std::error_code fec;
  fs::create_directories(dir, fec);
  auto req = wisp::integration::TokenVolumeRequest(id, target, "vault", "3600",
                                                   "soak-uid-" + std::to_string(seq));
  const auto t0 = Clock::now();
  grpc::Status st = client.Publish(req);
  const double publish_ms = MsSince(t0);
  if (st.ok()) {
    if (LooksLikeJwt(wisp::fsutil::ReadFile(target + "/token").value_or(""))) {
      publish.Ok(publish_ms);
    } else {
      publish.Fail("published volume has no token file");
    }
  } else {
    publish.Fail(std::to_string(st.error_code()) + " " + st.error_message());
  }
  // Unpublish even after a failed publish: a half-made mount must not outlive the cycle.
  const auto t1 = Clock::now();
  grpc::Status ust = client.Unpublish(id, target);
  const double unpublish_ms = MsSince(t1);
  if (ust.ok()) {
    unpublish.Ok(unpublish_ms);
  } else {
    unpublish.Fail(std::to_string(ust.error_code()) + " " + ust.error_message());
  }
  fs::remove_all(dir, fec);  // only ever an empty mount point after a good unpublish
}

// ---- paced load ----

// Runs `clients` threads that together start one operation every 1/rate seconds (slot i at
// start + i/rate) until `end`, each thread with its own state from make_worker(). A slot started
// more than a second after its time is counted as late (the client or the machine fell behind).
class PacedLoad {
 public:
  using Worker = std::function<void(uint64_t seq)>;
  PacedLoad(double rate, int clients, Clock::time_point start, Clock::time_point end,
            std::function<Worker()> make_worker, OpStats& lateness)
      : period_(
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / rate))),
        start_(start),
        end_(end) {
    for (int i = 0; i < clients; ++i) {
      threads_.emplace_back([this, make_worker, &lateness] {
        Worker work = make_worker();
        while (!g_stop) {
          const uint64_t slot = next_++;
          const auto when = start_ + period_ * static_cast<int64_t>(slot);
          if (when >= end_) break;
          while (!g_stop && Clock::now() < when) {
            std::this_thread::sleep_until(std::min(when, Clock::now() + milliseconds(100)));
          }
          if (g_stop) break;
          if (Clock::now() - when > seconds(1)) lateness.Late();
          work(slot);
        }
      });
    }
  }
  void Join() {
    for (auto& t : threads_) t.join();
  }

 private:
  const Clock::duration period_;
  const Clock::time_point start_, end_;
  std::atomic<uint64_t> next_{0};
  std::vector<std::thread> threads_;
};

// ---- process figures ----

long RssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

double CpuSeconds(pid_t pid) {
  const std::string stat =
      wisp::fsutil::ReadFile("/proc/" + std::to_string(pid) + "/stat").value_or("");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream rest(stat.substr(paren + 2));
  std::vector<std::string> f;
  for (std::string w; rest >> w;) f.push_back(w);
  if (f.size() < 13) return 0;
  return (std::stod(f[11]) + std::stod(f[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct ServiceFigures {
  std::string name;
  pid_t pid = -1;
  bool gated = true;  // nats-server is reported, not held to wisp's goal
  long start = -1, warm = -1, end = -1, peak = -1;
  double cpu_start = 0, cpu_end = 0;
};

// ---- mounts ----

std::string Unescape(const std::string& s) {  // mountinfo escapes space, tab, newline, backslash
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8)));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::vector<std::string> MountsUnder(const std::string& root) {
  std::vector<std::string> found;
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string id, parent, devno, fsroot, mount_point;
    ls >> id >> parent >> devno >> fsroot >> mount_point;
    mount_point = Unescape(mount_point);
    if (mount_point.rfind(root + "/", 0) == 0) found.push_back(mount_point);
  }
  // Deepest first, so stacked and nested mounts come off in order.
  std::sort(found.begin(), found.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return found;
}

// Detaches every mount under `root` when it goes out of scope (normal end, early return, Ctrl-C):
// the stack's temp dir is removed after it, and rm -r must never walk into a live tmpfs.
class MountSweeper {
 public:
  explicit MountSweeper(std::string root) : root_(std::move(root)) {}
  ~MountSweeper() { Sweep(); }
  int Sweep() {
    int n = 0;
    for (int round = 0; round < 8; ++round) {
      const auto mounts = MountsUnder(root_);
      if (mounts.empty()) break;
      for (const auto& m : mounts) n += ::umount2(m.c_str(), MNT_DETACH) == 0 ? 1 : 0;
    }
    return n;
  }

 private:
  std::string root_;
};

}  // namespace

int main(int argc, char** argv) {
  const auto options = ParseOptions(argc, argv);
  if (!options) {
    Usage();
    return 2;
  }
  const Options& o = *options;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines show up through a pipe or tee
  if (::geteuid() != 0) {
    std::fprintf(stderr, "soak_bench needs root: CSI publishes mount tmpfs\n");
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  std::printf(
      "soak_bench: %d s, warm-up %.0f%%, %d clients per operation, %u cores, "
      "load average %s\n",
      o.duration_s, o.warmup * 100, o.clients, std::thread::hardware_concurrency(),
      LoadAverage().c_str());

  wisp::integration::TempDir config_dir("wisp-soak");
  const std::string policy_file = config_dir.path() + "/token-policy.yaml";
  std::ofstream(policy_file) << kTokenPolicy;
  wisp::integration::StackOptions stack_options{.auth = o.auth};
  for (const char* s : {"wisp-token", "wisp-policy", "wisp-populator", "wisp-gateway"}) {
    // Later flags win: the stack's default --log-level debug would measure spdlog, not wisp.
    stack_options.extra_args[s] = {"--log-level", o.service_log_level};
  }
  auto& gateway_args = stack_options.extra_args["wisp-gateway"];
  if (!o.purge_interval.empty()) {
    gateway_args.insert(gateway_args.end(), {"--projection-purge-interval", o.purge_interval});
  }
  if (!o.purge_age.empty()) {
    gateway_args.insert(gateway_args.end(), {"--projection-purge-age", o.purge_age});
  }
  stack_options.extra_args["wisp-token"].insert(stack_options.extra_args["wisp-token"].end(),
                                                {"--policy-file", policy_file});
  auto started = wisp::integration::Stack::Start(stack_options);
  if (!started.ok()) {
    std::fprintf(stderr, "starting the stack: %s\n",
                 std::string(started.status().message()).c_str());
    return 3;
  }
  std::unique_ptr<wisp::integration::Stack> stack = std::move(*started);
  // Declared after the stack, so destroyed (and the mounts detached) before it.
  MountSweeper sweeper(stack->dir());
  std::printf("stack up in %s (service logs in %s), auth %s\n", stack->dir().c_str(),
              wisp::integration::RunDir().c_str(), o.auth ? "on" : "off");

  wisp::bus::NatsBusOptions bo;
  bo.servers = {stack->nats().url()};
  bo.name = "soak-bench";
  if (o.auth) {
    bo.user = "wispctl";
    bo.password = stack->NatsPassword("wispctl");
    bo.inbox_prefix = "_INBOX.wispctl";
  }
  auto bus = wisp::bus::NatsBus::Connect(bo);
  if (!bus.ok()) {
    std::fprintf(stderr, "bus: %s\n", std::string(bus.status().message()).c_str());
    return 3;
  }

  // Subject tokens for the exchange load, one per service account of the pool, living past the run.
  const int pool = std::max(
      4, static_cast<int>(std::ceil(o.rate.at("exchange") / kExchangesPerSubjectPerSecond)));
  const int64_t subject_lifetime = std::max<int64_t>(600, o.duration_s + 1200);
  std::vector<std::string> subject_forms;
  for (int i = 0; i < pool && o.rate.at("exchange") > 0; ++i) {
    auto t =
        Issue(**bus, "soak", "exchanger-" + std::to_string(i), kSubjectAudience, subject_lifetime);
    if (!t.ok()) {
      std::fprintf(stderr, "pre-flight subject token: %s\n",
                   std::string(t.status().message()).c_str());
      return 3;
    }
    subject_forms.push_back(ExchangeForm(*t));
  }

  const Json pod = RealisticPod();
  const std::string csi_root = stack->target_root() + "/soak";
  std::atomic<uint64_t> stale_retries{0};
  OpStats admission("admission"), issue("issue"), exchange("exchange"), csi_publish("csi publish"),
      csi_unpublish("csi unpublish");

  // Pre-flight: one of each, so a misconfigured stack fails here instead of as a wall of errors.
  {
    HttpsClient https(stack->gateway_port(), stack->ca_file(), 1, stale_retries);
    const std::string uid = "soak-preflight";
    if (auto st =
            CheckAdmission(https.Post("/mutate?timeout=10s", AdmissionReview(pod, uid, "preflight"),
                                      "application/json"),
                           uid);
        !st.ok()) {
      std::fprintf(stderr, "pre-flight admission: %s\n", std::string(st.message()).c_str());
      return 3;
    }
    if (!subject_forms.empty()) {
      if (auto st = CheckExchange(
              https.Post("/v1/token", subject_forms[0], "application/x-www-form-urlencoded"));
          !st.ok()) {
        std::fprintf(stderr, "pre-flight exchange: %s\n", std::string(st.message()).c_str());
        return 3;
      }
    }
    wisp::integration::CsiClient csi(stack->csi_socket());
    OpStats p("pre-flight publish"), u("pre-flight unpublish");
    CsiCycle(csi, csi_root, 0, p, u);
    if (p.errors() + u.errors() > 0) {
      p.PrintErrors();
      u.PrintErrors();
      return 3;
    }
  }

  std::vector<ServiceFigures> services;
  for (const char* s : {"wisp-gateway", "wisp-policy", "wisp-token", "wisp-populator"}) {
    services.push_back({.name = s, .pid = stack->process(s).pid()});
  }
  services.push_back(
      {.name = "nats-server", .pid = stack->nats().process()->pid(), .gated = false});
  for (auto& s : services) {
    s.start = s.peak = RssKib(s.pid);
    s.cpu_start = CpuSeconds(s.pid);
  }

  const auto start = Clock::now() + milliseconds(200);
  const auto end = start + seconds(o.duration_s);
  const auto warm_at = start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(o.warmup * o.duration_s));
  std::vector<std::unique_ptr<PacedLoad>> loads;
  auto add = [&](const std::string& op, std::function<PacedLoad::Worker()> make, OpStats& late) {
    if (o.rate.at(op) > 0) {
      loads.push_back(
          std::make_unique<PacedLoad>(o.rate.at(op), o.clients, start, end, std::move(make), late));
    }
  };
  const int port = stack->gateway_port();
  const std::string ca = stack->ca_file();
  const int per_conn = o.requests_per_connection;
  add(
      "admission",
      [&]() -> PacedLoad::Worker {
        auto https = std::make_shared<HttpsClient>(port, ca, per_conn, stale_retries);
        return [&, https](uint64_t seq) {
          const std::string uid = "soak-" + std::to_string(seq);
          const std::string body = AdmissionReview(pod, uid, "data-loader-" + std::to_string(seq));
          const auto t0 = Clock::now();
          auto r = https->Post("/mutate?timeout=10s", body, "application/json");
          const double ms = MsSince(t0);
          if (auto st = CheckAdmission(r, uid); st.ok()) {
            admission.Ok(ms);
          } else {
            admission.Fail(std::string(st.message()));
          }
        };
      },
      admission);
  add(
      "issue",
      [&]() -> PacedLoad::Worker {
        return [&](uint64_t seq) {
          const auto t0 = Clock::now();
          auto t = Issue(**bus, "soak", "issuer-" + std::to_string(seq % 64), "vault", 3600);
          const double ms = MsSince(t0);
          if (t.ok()) {
            issue.Ok(ms);
          } else {
            issue.Fail(std::string(t.status().message()));
          }
        };
      },
      issue);
  add(
      "exchange",
      [&]() -> PacedLoad::Worker {
        auto https = std::make_shared<HttpsClient>(port, ca, per_conn, stale_retries);
        return [&, https](uint64_t seq) {
          const std::string& form = subject_forms[seq % subject_forms.size()];
          const auto t0 = Clock::now();
          auto r = https->Post("/v1/token", form, "application/x-www-form-urlencoded");
          const double ms = MsSince(t0);
          if (auto st = CheckExchange(r); st.ok()) {
            exchange.Ok(ms);
          } else {
            exchange.Fail(std::string(st.message()));
          }
        };
      },
      exchange);
  add(
      "csi",
      [&]() -> PacedLoad::Worker {
        auto csi = std::make_shared<wisp::integration::CsiClient>(stack->csi_socket());
        return [&, csi](uint64_t seq) {
          CsiCycle(*csi, csi_root, seq + 1, csi_publish, csi_unpublish);
        };
      },
      csi_publish);
  std::printf(
      "load: admission %.1f/s, issue %.1f/s, exchange %.1f/s (%d subjects), "
      "csi %.1f cycles/s, for %d s\n",
      o.rate.at("admission"), o.rate.at("issue"), o.rate.at("exchange"), pool, o.rate.at("csi"),
      o.duration_s);
  std::fflush(stdout);

  // RSS every second (peak), the warm-up sample once, and a progress line every 10% of the run.
  bool warm_taken = false;
  int next_progress = 1;
  while (!g_stop && Clock::now() < end) {
    std::this_thread::sleep_for(milliseconds(std::min<int64_t>(
        1000, std::chrono::duration_cast<milliseconds>(end - Clock::now()).count() + 1)));
    for (auto& s : services) s.peak = std::max(s.peak, RssKib(s.pid));
    if (!warm_taken && Clock::now() >= warm_at) {
      for (auto& s : services) s.warm = RssKib(s.pid);
      warm_taken = true;
    }
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (elapsed >= next_progress * o.duration_s / 10.0 && next_progress < 10) {
      // Errors so far and each process's RSS now, so a steady climb shows before the end.
      std::printf("  %3.0f s: errors %llu/%llu/%llu/%llu (admission/issue/exchange/csi), RSS KiB",
                  elapsed, static_cast<unsigned long long>(admission.errors()),
                  static_cast<unsigned long long>(issue.errors()),
                  static_cast<unsigned long long>(exchange.errors()),
                  static_cast<unsigned long long>(csi_publish.errors() + csi_unpublish.errors()));
      for (const auto& s : services) std::printf(" %s %ld", s.name.c_str(), RssKib(s.pid));
      std::printf("\n");
      ++next_progress;
    }
  }
  for (auto& l : loads) l->Join();
  const bool interrupted = g_stop != 0;
  const double seconds_run =
      std::chrono::duration<double>(std::min(Clock::now(), end) - start).count();
  for (auto& s : services) {
    s.end = RssKib(s.pid);
    s.peak = std::max(s.peak, s.end);
    s.cpu_end = CpuSeconds(s.pid);
  }
  // Every cycle unpublished: nothing may still be mounted under the bench's targets.
  const auto leftover = MountsUnder(csi_root);
  for (const auto& m : leftover) csi_unpublish.Fail("still mounted after the run: " + m);
  sweeper.Sweep();

  std::printf("\nresults over %.1f s%s (load average now %s)\n", seconds_run,
              interrupted ? " (INTERRUPTED)" : "", LoadAverage().c_str());
  std::printf("%-15s %9s %10s %8s %7s %9s %9s %9s %6s\n", "operation", "target/s", "achieved/s",
              "count", "errors", "p50 ms", "p99 ms", "max ms", "late");
  admission.Print(o.rate.at("admission"), seconds_run);
  issue.Print(o.rate.at("issue"), seconds_run);
  exchange.Print(o.rate.at("exchange"), seconds_run);
  csi_publish.Print(o.rate.at("csi"), seconds_run);
  csi_unpublish.Print(o.rate.at("csi"), seconds_run);
  std::printf("HTTPS reconnects after a stale keep-alive connection: %llu\n",
              static_cast<unsigned long long>(stale_retries.load()));
  uint64_t errors = 0;
  for (OpStats* s : {&admission, &issue, &exchange, &csi_publish, &csi_unpublish}) {
    errors += s->errors();
    s->PrintErrors();
  }

  std::printf("\n%-15s %10s %10s %10s %10s %9s %8s\n", "service", "rss start", "after warm",
              "rss end", "rss peak", "growth", "cpu s");
  std::printf("%-15s %10s %10s %10s %10s %9s %8s\n", "", "(KiB)", "(KiB)", "(KiB)", "(KiB)",
              "(warm->end)", "(load)");
  bool rss_ok = warm_taken;
  std::vector<std::string> rss_lines;
  for (const auto& s : services) {
    const double growth =
        s.warm > 0 ? 100.0 * static_cast<double>(s.end - s.warm) / static_cast<double>(s.warm) : 0;
    std::printf("%-15s %10ld %10ld %10ld %10ld %+8.1f%% %8.1f%s\n", s.name.c_str(), s.start, s.warm,
                s.end, s.peak, growth, s.cpu_end - s.cpu_start, s.gated ? "" : "  (not gated)");
    if (!s.gated) continue;
    const bool ok = warm_taken && s.end > 0 && growth < o.rss_goal_percent;
    rss_ok = rss_ok && ok;
    char line[160];
    std::snprintf(line, sizeof(line), "  %-15s %+.1f%% %s", s.name.c_str(), growth,
                  ok ? "PASS" : "FAIL");
    rss_lines.push_back(line);
  }

  std::printf("\ngoal: errors == 0: %llu errors -> %s\n", static_cast<unsigned long long>(errors),
              errors == 0 ? "PASS" : "FAIL");
  std::printf("goal: RSS growth after warm-up < %g%% for each wisp service%s:\n",
              o.rss_goal_percent, warm_taken ? "" : " (no warm-up sample: run too short)");
  for (const auto& l : rss_lines) std::printf("%s\n", l.c_str());
  const bool pass = errors == 0 && rss_ok;
  std::printf("verdict: %s\n", interrupted ? "INTERRUPTED" : pass ? "PASS" : "FAIL");
  if (interrupted) return 130;
  return pass ? 0 : 1;
}
