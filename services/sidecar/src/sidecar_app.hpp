#pragma once
// wisp-sidecar's wiring, out of main.cpp: its settings and flags, and SidecarApp, which serves the
// pod's access token on the unix socket (and /metrics when asked) until Stop().
//
// Contract:
//   - AddSidecarFlags() declares every flag; StsOptionsFrom() is what HttpStsClient::Create needs:
//     the STS audience and scope are --sts-audience / --sts-scope when set, else --audience /
//     --scope (so a sidecar whose --audience wisp-policy set to the projected token's audience can
//     still ask an STS for another, as gcs-fuse asks Google's for the workload identity provider).
//   - SidecarApp::Start() takes the STS client (an interface: unit tests pass a fake), starts the
//     metrics endpoint when metrics_address is set (/readyz: "socket not listening yet" until the
//     socket serves) and the token-url server, which answers every method on every path.
//   - From its start the app keeps a token warm: a refresher thread exchanges at once, again at
//     each token's refresh point (TokenServer: 70-80% of its lifetime with the default
//     --refresh-jitter-percent 10), after a failure when TokenServer's backoff ends (1 s, 2 s ...
//     30 s, spread, never before the STS's Retry-After), and after each success publishes the
//     expiry in the ready file
//     (ReadyFile; the token itself is never written). `wisp-sidecar --probe` checks that file:
//     the startupProbe and readinessProbe wisp-policy injects, so the pod is not Ready (and, for a
//     native sidecar, its app containers do not start) before the sidecar holds a token.
//   - Stop() stops the refresher, clears the ready file, stops the socket server, then the
//     metrics endpoint.
//
// Example (wisp-sidecar's main.cpp):
//   sidecar::SidecarSettings settings;
//   sidecar::AddSidecarFlags(flags, settings);
//   flags.ParseOrExit(argc, argv);
//   auto sts = sidecar::HttpStsClient::Create(sidecar::StsOptionsFrom(settings));
//   auto app = sidecar::SidecarApp::Start(settings, *std::move(sts));
//   ... wait for SIGTERM ... (*app)->Stop();
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ready_file.hpp"
#include "sidecar_metrics.hpp"
#include "sts_client.hpp"
#include "token_file.hpp"
#include "token_server.hpp"
#include "wisp/config/flags.hpp"
#include "wisp/http/server.hpp"
#include "wisp/metrics/metrics.hpp"

namespace wisp::sidecar {

struct SidecarSettings {
  std::string socket = "/run/wisp/token.sock";
  std::string token_file = "/var/run/secrets/wisp/token";
  std::string sts_url;
  std::string ca_file;
  std::string ca_pem;        // the bundle's text instead of ca_file (public, not a secret)
  std::string audience;      // the STS audience unless sts_audience is set
  std::string scope;         // the STS scope unless sts_scope is set
  std::string sts_audience;  // the STS's, when it is not the projected token's (GKE shape)
  std::string sts_scope;
  std::string metrics_address;
  std::string log_level = "info";
  std::string log_format = "text";
  std::string ready_file;               // "" = "ready" beside the socket
  bool probe = false;                   // check the ready file and exit (the pod's probes)
  int64_t refresh_jitter_percent = 10;  // TokenServer's RefreshOptions
  bool single_flight = true;            // false: bench/token's baseline only
};

// The ready file the settings name (`ready` in the socket's directory unless --ready-file).
std::string ReadyFilePath(const SidecarSettings& settings);
// `wisp-sidecar --probe`: 0 when the ready file names an unexpired token, else 1; one line on
// stdout saying which (never the token).
int Probe(const SidecarSettings& settings);

void AddSidecarFlags(config::Flags& flags, SidecarSettings& settings);
StsOptions StsOptionsFrom(const SidecarSettings& settings);
// log::Init with the settings' level and format.
absl::Status InitLogging(const SidecarSettings& settings);

class SidecarApp {
 public:
  static absl::StatusOr<std::unique_ptr<SidecarApp>> Start(const SidecarSettings& settings,
                                                           std::unique_ptr<StsClient> sts);
  ~SidecarApp();
  void Stop();

 private:
  SidecarApp() = default;
  void Refresh();  // the refresher thread
  std::unique_ptr<StsClient> sts_;
  std::unique_ptr<SidecarMetrics> counters_;
  std::unique_ptr<metrics::Endpoint> endpoint_;
  std::shared_ptr<std::atomic<bool>> serving_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<TokenFile> file_;
  std::unique_ptr<TokenServer> tokens_;
  std::unique_ptr<http::Server> server_;
  std::unique_ptr<ReadyFile> ready_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread refresher_;
};

}  // namespace wisp::sidecar
