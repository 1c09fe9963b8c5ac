#pragma once
// wisp-sidecar's wiring, out of main.cpp: its settings and flags, and SidecarApp, which serves the
// pod's access token on the unix socket (and /metrics when asked) until Stop().
//
// Contract:
//   - AddSidecarFlags() declares every flag; StsOptionsFrom() is what HttpStsClient::Create needs.
//   - SidecarApp::Start() takes the STS client (an interface: unit tests pass a fake), starts the
//     metrics endpoint when metrics_address is set (/readyz: "socket not listening yet" until the
//     socket serves) and the token-url server, which answers every method on every path.
//   - Stop() stops the socket server, then the metrics endpoint.
//
// Example (wisp-sidecar's main.cpp):
//   sidecar::SidecarSettings settings;
//   sidecar::AddSidecarFlags(flags, settings);
//   flags.ParseOrExit(argc, argv);
//   auto sts = sidecar::HttpStsClient::Create(sidecar::StsOptionsFrom(settings));
//   auto app = sidecar::SidecarApp::Start(settings, *std::move(sts));
//   ... wait for SIGTERM ... (*app)->Stop();
#include <atomic>
#include <memory>
#include <string>

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
  std::string ca_pem;  // the bundle's text instead of ca_file (public, not a secret)
  std::string audience;
  std::string scope;
  std::string metrics_address;
  std::string log_level = "info";
  std::string log_format = "text";
};

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
  std::unique_ptr<StsClient> sts_;
  std::unique_ptr<SidecarMetrics> counters_;
  std::unique_ptr<metrics::Endpoint> endpoint_;
  std::shared_ptr<std::atomic<bool>> serving_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<TokenFile> file_;
  std::unique_ptr<TokenServer> tokens_;
  std::unique_ptr<http::Server> server_;
};

}  // namespace wisp::sidecar
