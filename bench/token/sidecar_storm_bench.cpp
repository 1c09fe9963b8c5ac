// sidecar_storm_bench: what wisp-sidecar's refresh-storm protection buys an STS (issue 25 item 4).
//
// Starts the real stack as the integration tests run it (nats-server, wisp-token, wisp-gateway
// with its HTTPS STS; integration::Stack), then, for each arm, N real wisp-sidecar processes at
// once, each with its own service account's projected token, against that one STS. Each sidecar
// has --requests app clients that ask its socket for a token as soon as it exists (an app
// starting beside it) and again every --poll-seconds. The access tokens are short-lived
// (accessTokenLifetimeSeconds --lifetime, 600 s: the policy's minimum), and the run lasts until
// every sidecar has passed the refresh point of its first token, so the window covers the first
// refresh of all of them.
//
// Arms, one after the other in one run, each on a fresh stack:
//   baseline   wisp-token --lifetime-jitter-percent 0; wisp-sidecar --refresh-jitter-percent 0
//              --no-single-flight: exact lifetimes, refresh at exactly 80%, fixed retry delays,
//              every request that finds no fresh token exchanges on its own;
//   protected  the defaults: lifetimes shortened by 0-10%, refresh at 70-80% of the lifetime,
//              single flight, jittered backoff.
//
// Prints per arm: the STS request rate peak (the largest count of POST /v1/token in any 1 s,
// from wisp-gateway's wisp_gateway_sts_requests_total sampled every 100 ms) while the sidecars
// start and over the refresh that follows; the exchanges per sidecar over the window (each
// sidecar's own wisp_sidecar_sts_exchanges_total: mean and max), how many sidecars refreshed;
// p50/p99/max time from spawning a sidecar to its app's first token; and the errors (answers
// other than 200 to the apps, failed exchanges, sidecars that died). Then the ratios
// protected/baseline; the figure is the reduction of the refresh peak.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/stack.hpp"
#include "wisp/v1/token.pb.h"

namespace {

using namespace std::chrono;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using local = asio::local::stream_protocol;
using wisp::integration::BinaryPath;
using wisp::integration::FreePort;
using wisp::integration::Process;
using wisp::integration::Stack;
using wisp::integration::TempDir;

struct Settings {
  int sidecars = 1000;
  int requests = 3;
  int poll_seconds = 10;
  int lifetime = 600;
  int window = 0;  // 0 = until every sidecar passed its first refresh point, plus 20 s
  std::vector<std::string> arms = {"baseline", "protected"};
};

struct Sidecar {
  int index = 0;
  std::string socket;
  int metrics_port = 0;
  std::unique_ptr<Process> process;
  steady_clock::time_point spawned;
  std::atomic<int64_t> first_token_us{-1};  // from spawn to the first 200 on its socket
  std::atomic<bool> connected{false};       // its socket accepted once
};

struct AppStats {
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> answers{0}, errors{0};
  std::mutex mu;
  std::string first_error;
  void Error(const std::string& what) {
    ++errors;
    std::lock_guard lock(mu);
    if (first_error.empty()) first_error = what;
  }
};

// One app container asking one sidecar's socket for its token: as soon as the socket exists, then
// every poll interval; a failure is retried after 200 ms. One connection per request.
class AppClient : public std::enable_shared_from_this<AppClient> {
 public:
  AppClient(asio::io_context& ioc, Sidecar& sidecar, AppStats& stats, seconds poll)
      : ioc_(ioc), sidecar_(sidecar), stats_(stats), poll_(poll), sock_(ioc), timer_(ioc) {}

  void Start() { Connect(); }

 private:
  void After(milliseconds d, void (AppClient::*next)()) {
    if (stats_.stopping) return;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), next](beast::error_code ec) {
      if (!ec) ((*self).*next)();
    });
  }
  void Connect() {
    if (stats_.stopping) return;
    // Until the socket file exists, look every 50 ms (a failed connect costs more).
    if (!sidecar_.connected && ::access(sidecar_.socket.c_str(), F_OK) != 0) {
      return After(milliseconds(50), &AppClient::Connect);
    }
    sock_ = local::socket(ioc_);
    sock_.async_connect(local::endpoint(sidecar_.socket), [self = shared_from_this()](
                                                              beast::error_code ec) {
      if (ec) {
        if (self->sidecar_.connected) self->stats_.Error("connect: " + ec.message());
        return self->After(milliseconds(self->sidecar_.connected ? 200 : 50), &AppClient::Connect);
      }
      self->sidecar_.connected = true;
      self->Send();
    });
  }
  void Send() {
    req_ = {bhttp::verb::get, "/", 11};
    req_.set(bhttp::field::host, "localhost");
    req_.keep_alive(false);
    bhttp::async_write(sock_, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->Failed("write: " + ec.message());
      self->res_ = {};
      self->buf_.clear();
      bhttp::async_read(self->sock_, self->buf_, self->res_,
                        [self](beast::error_code ec, size_t) { self->Answered(ec); });
    });
  }
  void Answered(beast::error_code ec) {
    beast::error_code ignored;
    sock_.close(ignored);
    if (ec) return Failed("read: " + ec.message());
    if (res_.result_int() != 200) {
      return Failed("HTTP " + std::to_string(res_.result_int()) + ": " + res_.body());
    }
    ++stats_.answers;
    const int64_t us = duration_cast<microseconds>(steady_clock::now() - sidecar_.spawned).count();
    int64_t none = -1;
    sidecar_.first_token_us.compare_exchange_strong(none, us);
    if (poll_.count() > 0) After(poll_, &AppClient::Connect);
  }
  void Failed(const std::string& what) {
    if (stats_.stopping) return;
    stats_.Error(what);
    After(milliseconds(200), &AppClient::Connect);
  }

  asio::io_context& ioc_;
  Sidecar& sidecar_;
  AppStats& stats_;
  const seconds poll_;
  local::socket sock_;
  asio::steady_timer timer_;
  bhttp::request<bhttp::empty_body> req_;
  bhttp::response<bhttp::string_body> res_;
  beast::flat_buffer buf_;
};

// The sum of every series of `name` in a Prometheus text exposition (label filter: a substring
// the series' labels must contain, "" = any).
double SumMetric(const std::string& text, const std::string& name, const std::string& label = "") {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    if (!label.empty() && line.find(label) == std::string::npos) continue;
    sum += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return sum;
}

struct Sample {
  double t;  // seconds since the first spawn
  double total;
};

// The largest increase of the sampled counter over any `span` seconds with t in [from, to).
double PeakRate(const std::vector<Sample>& s, double from, double to, double span = 1.0) {
  double peak = 0;
  size_t j = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i].t < from || s[i].t >= to + span) continue;
    while (j < i && s[i].t - s[j].t > span + 1e-9) ++j;
    if (s[j].t < from - 1e-9 && j < i) continue;
    peak = std::max(peak, s[i].total - s[j].total);
  }
  return peak;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[k];
}

struct ArmResult {
  std::string name;
  int sidecars = 0;
  double spawn_seconds = 0, start_phase_end = 0, window = 0;
  double peak_start = 0, peak_refresh = 0, sts_total = 0;
  double exchanges_mean = 0, exchanges_max = 0;
  int refreshed = 0, no_token = 0, died = 0;
  double ttft_p50 = 0, ttft_p99 = 0, ttft_max = 0;
  uint64_t app_answers = 0, app_errors = 0, failed_exchanges = 0;
  std::string first_error;
  std::vector<double> per_10s;  // STS requests in each 10 s of the window
};

std::string Policy(int lifetime) {
  return "namespaces: {bench: {audiences: [wisp-sts]}}\n"
         "exchange:\n"
         "  accessTokenLifetimeSeconds: " +
         std::to_string(lifetime) +
         "\n"
         "  subjectAudiences: [wisp-sts]\n"
         "  rules: [{namespace: bench, serviceAccounts: ['*'], audiences: [storage]}]\n";
}

absl::StatusOr<ArmResult> RunArm(const Settings& s, const std::string& arm) {
  const bool protect = arm == "protected";
  ArmResult r;
  r.name = arm;
  r.sidecars = s.sidecars;
  TempDir dir("wisp-storm");
  const std::string d = dir.path();
  std::ofstream(d + "/policy.yaml") << Policy(s.lifetime);
  auto stack = Stack::Start(
      {.policy = false,
       .populator = false,
       .extra_args = {{"wisp-token",
                       {"--policy-file", d + "/policy.yaml", "--lifetime-jitter-percent",
                        protect ? "10" : "0", "--log-level", "warn"}},
                      {"wisp-gateway", {"--log-level", "warn"}}}});
  if (!stack.ok()) return stack.status();
  wisp::bus::NatsBusOptions bo;
  bo.servers = {(*stack)->nats().url()};
  bo.name = "storm-bench";
  auto bus = wisp::bus::NatsBus::Connect(bo);
  if (!bus.ok()) return bus.status();

  // One service account per sidecar (pods of different workloads: the gateway's per-subject rate
  // limit stays out of the way), each with its projected token, issued in batches.
  std::vector<std::unique_ptr<Sidecar>> sidecars;
  for (int i = 0; i < s.sidecars; i += 250) {
    wisp::v1::IssueBatchRequest batch;
    for (int k = i; k < std::min(s.sidecars, i + 250); ++k) {
      auto* req = batch.add_requests();
      req->mutable_subject()->set_namespace_("bench");
      req->mutable_subject()->set_service_account("sa-" + std::to_string(k));
      req->add_audiences("wisp-sts");
      req->set_expiration_seconds(7200);
    }
    auto resp = wisp::bus::Call<wisp::v1::IssueBatchResponse>(
        **bus, wisp::bus::subjects::kTokenIssueBatch, batch, seconds(30));
    if (!resp.ok()) return resp.status();
    for (int k = 0; k < resp->results_size(); ++k) {
      const auto& res = resp->results(k);
      if (res.code() != 0) return absl::InternalError("issuing a subject token: " + res.message());
      auto sc = std::make_unique<Sidecar>();
      sc->index = i + k;
      const std::string sd = d + "/s" + std::to_string(i + k);
      std::filesystem::create_directories(sd);
      std::ofstream(sd + "/token") << res.token().token();
      sc->socket = sd + "/token.sock";
      sc->metrics_port = FreePort();
      sidecars.push_back(std::move(sc));
    }
  }

  // The STS request counter, every 100 ms, on its own thread.
  const int gw_metrics = (*stack)->metrics_port("wisp-gateway");
  std::vector<Sample> samples;
  std::mutex samples_mu;
  std::atomic<bool> sampling{true};
  const auto t0 = steady_clock::now();
  const auto since = [&] { return duration<double>(steady_clock::now() - t0).count(); };
  std::thread sampler([&] {
    while (sampling) {
      const double t = since();
      auto m = wisp::integration::HttpGet("127.0.0.1", gw_metrics, "/metrics", seconds(2));
      if (m.ok()) {
        std::lock_guard lock(samples_mu);
        samples.push_back({t, SumMetric(m->body, "wisp_gateway_sts_requests_total")});
      }
      std::this_thread::sleep_until(
          t0 + duration_cast<steady_clock::duration>(duration<double>(t + 0.1)));
    }
  });

  asio::io_context ioc;
  auto work = asio::make_work_guard(ioc);
  std::thread app_thread([&] { ioc.run(); });
  AppStats stats;
  // Spawn every sidecar as fast as fork/exec goes: "started at once".
  const auto spawn_start = steady_clock::now();
  for (auto& sc : sidecars) {
    const std::string sd = d + "/s" + std::to_string(sc->index);
    std::vector<std::string> args = {
        "--socket",
        sc->socket,
        "--token-file",
        sd + "/token",
        "--sts-url",
        "https://localhost:" + std::to_string((*stack)->gateway_port()) + "/v1/token",
        "--ca-file",
        (*stack)->ca_file(),
        "--audience",
        "storage",
        "--metrics-address",
        "127.0.0.1:" + std::to_string(sc->metrics_port),
        "--log-level",
        "warn"};
    if (!protect) {
      args.insert(args.end(), {"--refresh-jitter-percent", "0", "--no-single-flight"});
    }
    sc->spawned = steady_clock::now();
    auto p = Process::Start({.path = BinaryPath("wisp-sidecar"),
                             .args = std::move(args),
                             .log_path = sd + "/sidecar.log"});
    if (!p.ok()) return p.status();
    sc->process = *std::move(p);
    Sidecar* raw = sc.get();
    asio::post(ioc, [&, raw] {
      for (int k = 0; k < s.requests; ++k) {
        std::make_shared<AppClient>(ioc, *raw, stats, seconds(s.poll_seconds))->Start();
      }
    });
  }
  r.spawn_seconds = duration<double>(steady_clock::now() - spawn_start).count();

  // The start phase ends when every sidecar's app has a token (at most 120 s after the last
  // spawn); the window when every sidecar passed the refresh point of its first token.
  const auto all_started = [&] {
    return std::all_of(sidecars.begin(), sidecars.end(),
                       [](const auto& sc) { return sc->first_token_us >= 0; });
  };
  const auto start_deadline = steady_clock::now() + seconds(120);
  while (!all_started() && steady_clock::now() < start_deadline) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  r.start_phase_end = since();
  const auto wall_start_end = system_clock::now();
  const double window = s.window > 0 ? s.window : r.start_phase_end + 0.8 * s.lifetime + 20;
  std::printf("  %s: %d sidecars spawned in %.1f s, all with a token after %.1f s; window %.0f s\n",
              arm.c_str(), s.sidecars, r.spawn_seconds, r.start_phase_end, window);
  std::fflush(stdout);
  while (since() < window) std::this_thread::sleep_for(milliseconds(200));
  r.window = window;
  stats.stopping = true;
  sampling = false;
  sampler.join();

  // Each sidecar's own count of exchanges, by outcome.
  std::vector<double> exchanges, ttft;
  for (auto& sc : sidecars) {
    if (!sc->process->Running()) ++r.died;
    auto m = wisp::integration::HttpGet("127.0.0.1", sc->metrics_port, "/metrics", seconds(5));
    if (m.ok()) {
      const double all = SumMetric(m->body, "wisp_sidecar_sts_exchanges_total");
      const double ok = SumMetric(m->body, "wisp_sidecar_sts_exchanges_total", "outcome=\"ok\"");
      exchanges.push_back(all);
      r.failed_exchanges += static_cast<uint64_t>(all - ok);
      (void)ok;
    }
    // Refreshed: the token it holds now (its ready file names the expiry) was obtained after the
    // start phase, whatever it exchanged at start.
    const size_t slash = sc->socket.rfind('/');
    const std::string ready =
        wisp::fsutil::ReadFile(sc->socket.substr(0, slash + 1) + "ready").value_or("");
    const int64_t expiry = ready.empty() ? 0 : std::atoll(ready.c_str());
    if (expiry - s.lifetime > system_clock::to_time_t(wall_start_end)) ++r.refreshed;
    if (sc->first_token_us < 0) {
      ++r.no_token;
    } else {
      ttft.push_back(static_cast<double>(sc->first_token_us) / 1000.0);
    }
  }
  work.reset();
  ioc.stop();
  app_thread.join();
  for (double e : exchanges) r.exchanges_mean += e / static_cast<double>(exchanges.size());
  r.exchanges_max = exchanges.empty() ? 0 : *std::max_element(exchanges.begin(), exchanges.end());
  r.ttft_p50 = Percentile(ttft, 0.50);
  r.ttft_p99 = Percentile(ttft, 0.99);
  r.ttft_max = Percentile(ttft, 1.0);
  r.app_answers = stats.answers;
  r.app_errors = stats.errors;
  r.first_error = stats.first_error;
  r.peak_start = PeakRate(samples, 0, r.start_phase_end);
  r.peak_refresh = PeakRate(samples, r.start_phase_end + 1, window);
  r.sts_total = samples.empty() ? 0 : samples.back().total;
  for (double t = 0; t < window; t += 10) {
    double lo = 0, hi = 0;
    for (const auto& x : samples) {
      if (x.t <= t) lo = x.total;
      if (x.t <= t + 10) hi = x.total;
    }
    r.per_10s.push_back(hi - lo);
  }
  sidecars.clear();  // SIGKILL each, reaped
  return r;
}

// What `uptime` prints: the load the figures were measured under.
std::string Uptime() {
  std::string out;
  if (FILE* p = popen("uptime", "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  return out;
}

constexpr const char* kUsage =
    "usage: sidecar_storm_bench [--sidecars N] [--requests N] [--poll-seconds N] [--lifetime S]\n"
    "                           [--window S] [--arms baseline,protected]\n"
    "  --sidecars N      wisp-sidecar processes started at once (default 1000)\n"
    "  --requests N      app clients per sidecar, asking as soon as its socket exists (default 3)\n"
    "  --poll-seconds N  each app client asks again every N s (default 10; 0 = once)\n"
    "  --lifetime S      the policy's accessTokenLifetimeSeconds (default 600, the minimum)\n"
    "  --window S        seconds from the first spawn to the end of the arm (default: until every\n"
    "                    sidecar passed its first refresh point: start phase + 0.8 * lifetime + "
    "20)\n"
    "  --arms LIST       baseline,protected (default both, in that order)\n"
    "Per arm: a fresh stack (nats-server, wisp-token, wisp-gateway's HTTPS STS), N sidecars with\n"
    "one service account each. baseline: wisp-token --lifetime-jitter-percent 0, wisp-sidecar\n"
    "--refresh-jitter-percent 0 --no-single-flight. protected: the defaults. Prints the STS\n"
    "request peak (most POST /v1/token in 1 s) at start and over the refresh, exchanges per\n"
    "sidecar, time to first token and errors, then protected/baseline ratios.\n";

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--help" || a == "-h") return std::cout << kUsage, 0;
    if (has_value && a == "--sidecars") {
      s.sidecars = std::atoi(argv[++i]);
    } else if (has_value && a == "--requests") {
      s.requests = std::atoi(argv[++i]);
    } else if (has_value && a == "--poll-seconds") {
      s.poll_seconds = std::atoi(argv[++i]);
    } else if (has_value && a == "--lifetime") {
      s.lifetime = std::atoi(argv[++i]);
    } else if (has_value && a == "--window") {
      s.window = std::atoi(argv[++i]);
    } else if (has_value && a == "--arms") {
      s.arms.clear();
      std::stringstream list(argv[++i]);
      for (std::string arm; std::getline(list, arm, ',');) {
        if (arm != "baseline" && arm != "protected") {
          return std::cerr << "sidecar_storm_bench: --arms: baseline or protected, not " << arm
                           << "\n",
                 2;
        }
        s.arms.push_back(arm);
      }
    } else {
      return std::cerr << "sidecar_storm_bench: unknown or incomplete argument " << a << "\n"
                       << kUsage,
             2;
    }
  }
  if (s.sidecars < 1 || s.requests < 0 || s.poll_seconds < 0 || s.lifetime < 600) {
    return std::cerr << "sidecar_storm_bench: --sidecars >= 1, --requests and --poll-seconds >= 0, "
                        "--lifetime >= 600\n",
           2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  std::printf("load before the run:%s", Uptime().c_str());
  std::printf(
      "%d wisp-sidecar processes per arm, %d app clients each (every %d s), access "
      "tokens of %d s, %u cores\n",
      s.sidecars, s.requests, s.poll_seconds, s.lifetime, std::thread::hardware_concurrency());
  std::fflush(stdout);
  std::vector<ArmResult> results;
  for (const auto& arm : s.arms) {
    auto r = RunArm(s, arm);
    if (!r.ok()) return std::cerr << arm << ": " << r.status() << "\n", 1;
    results.push_back(*std::move(r));
  }

  std::printf("\n%-10s %8s %9s %9s %10s %10s %9s %7s %9s %9s %9s %7s %7s %6s\n", "arm", "sidecars",
              "STS peak", "STS peak", "exch/side", "exch/side", "refreshed", "no tok", "ttft p50",
              "ttft p99", "ttft max", "app", "failed", "died");
  std::printf("%-10s %8s %9s %9s %10s %10s %9s %7s %9s %9s %9s %7s %7s %6s\n", "", "", "start/s",
              "refresh/s", "mean", "max", "", "", "ms", "ms", "ms", "errors", "exch", "");
  for (const auto& r : results) {
    std::printf("%-10s %8d %9.0f %9.0f %10.2f %10.0f %9d %7d %9.0f %9.0f %9.0f %7llu %7llu %6d\n",
                r.name.c_str(), r.sidecars, r.peak_start, r.peak_refresh, r.exchanges_mean,
                r.exchanges_max, r.refreshed, r.no_token, r.ttft_p50, r.ttft_p99, r.ttft_max,
                static_cast<unsigned long long>(r.app_errors),
                static_cast<unsigned long long>(r.failed_exchanges), r.died);
  }
  for (const auto& r : results) {
    std::printf("%-10s STS requests per 10 s from the first spawn:", r.name.c_str());
    for (double x : r.per_10s) std::printf(" %.0f", x);
    std::printf("\n%-10s STS requests in all %.0f; spawning took %.1f s; app answers %llu%s%s\n",
                r.name.c_str(), r.sts_total, r.spawn_seconds,
                static_cast<unsigned long long>(r.app_answers),
                r.first_error.empty() ? "" : "; first app error: ", r.first_error.c_str());
  }
  if (results.size() == 2 && results[0].name == "baseline") {
    const ArmResult& b = results[0];
    const ArmResult& p = results[1];
    const auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
    std::printf(
        "\nprotected/baseline: STS peak over the refresh %.2f (%.0f vs %.0f /s), at start %.2f, "
        "exchanges per sidecar %.2f, ttft p99 %.2f\n",
        ratio(p.peak_refresh, b.peak_refresh), p.peak_refresh, b.peak_refresh,
        ratio(p.peak_start, b.peak_start), ratio(p.exchanges_mean, b.exchanges_mean),
        ratio(p.ttft_p99, b.ttft_p99));
  }
  std::printf("load after the run:%s", Uptime().c_str());
  return 0;
}
