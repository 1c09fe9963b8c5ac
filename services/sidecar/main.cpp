// wisp-sidecar: serves the pod's access token on a unix socket (gcsfuse gcs-auth:token-url),
// exchanging the projected service-account token at wisp's STS. Wiring only; see src/.
#include <atomic>
#include <csignal>
#include <iostream>

#include "src/sidecar_metrics.hpp"
#include "src/sts_client.hpp"
#include "src/token_file.hpp"
#include "src/token_server.hpp"
#include "wisp/config/flags.hpp"
#include "wisp/http/server.hpp"
#include "wisp/log/log.hpp"
#include "wisp/metrics/metrics.hpp"

int main(int argc, char** argv) {
  using namespace wisp;
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread exists

  std::string socket = "/run/wisp/token.sock", token_file = "/var/run/secrets/wisp/token";
  std::string sts_url, ca_file, ca_pem, audience, scope, metrics_address, log_level = "info",
                                                                          log_format = "text";
  config::Flags flags("wisp-sidecar", "per-pod token-url server on a unix socket");
  flags.Description(
      "Answers every HTTP request on the socket with {\"access_token\", "
      "\"token_type\", \"expiry\"}: the projected token exchanged at wisp's STS, "
      "cached until 80% of its lifetime.");
  flags.String("socket", &socket,
               "Unix socket to listen on (a stale socket is removed; mode 0666: the app "
               "containers of the pod run as other users, and only they mount its directory).");
  flags.String("token-file", &token_file, "The projected service-account token file.");
  flags.String("sts-url", &sts_url, "wisp's STS endpoint, https://<gateway>/v1/token.");
  flags.String(
      "ca-file", &ca_file,
      "PEM CA bundle that verifies the gateway's certificate; empty = the system trust store.");
  flags.String("ca-pem", &ca_pem,
               "The PEM CA bundle itself (public; wisp-policy passes $(WISP_STS_CA_PEM)), instead "
               "of --ca-file.");
  flags.String("audience", &audience, "The audience to ask the STS for.");
  flags.String("scope", &scope, "Space-separated scopes to ask the STS for.");
  flags.String("metrics-address", &metrics_address,
               "host:port for /metrics, /healthz and /readyz (e.g. 0.0.0.0:9095); empty = none.");
  flags.String("log-level", &log_level, "trace|debug|info|warn|error.");
  flags.String("log-format", &log_format, "text|json.");
  flags.ParseOrExit(argc, argv);
  const auto fail = [](const absl::Status& st) {
    std::cerr << "wisp-sidecar: " << st.message() << "\n";
    return st.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  };
  if (auto st = log::Init({.service = "wisp-sidecar", .level = log_level, .format = log_format});
      !st.ok()) {
    return fail(st);
  }
  auto sts = sidecar::HttpStsClient::Create(
      {.url = sts_url, .ca_file = ca_file, .ca_pem = ca_pem, .audience = audience, .scope = scope});
  if (!sts.ok()) return fail(sts.status());
  sidecar::SidecarMetrics counters(metrics::Registry());
  metrics::Endpoint endpoint(metrics::SharedRegistry(), "wisp-sidecar");
  std::atomic<bool> serving{false};
  endpoint.AddReadinessCheck("token-url", [&serving] {
    return serving ? absl::OkStatus() : absl::UnavailableError("socket not listening yet");
  });
  if (!metrics_address.empty()) {
    if (auto st = endpoint.Start(metrics_address); !st.ok()) return fail(st);
  }
  sidecar::TokenFile file(token_file);
  sidecar::TokenServer tokens(file, **sts, SystemClock::Instance(), 0.8, &counters);
  auto server = http::Server::Create({.unix_socket = socket,
                                      .socket_mode = 0666,
                                      .threads = 4,
                                      .read_timeout = std::chrono::seconds(10),
                                      .name = "token-url"});
  if (!server.ok()) return fail(server.status());
  for (const char* method : {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"}) {
    (*server)->HandlePrefix(method, "/", [&](const http::Request& r) { return tokens.Handle(r); });
  }
  if (auto st = (*server)->Start(); !st.ok()) return fail(st);
  serving = true;
  SPDLOG_LOGGER_INFO(log::Get("sidecar"), "serving tokens on {}", socket);
  int sig = 0;
  sigwait(&signals, &sig);
  (*server)->Stop();
  endpoint.Stop();
  return 0;
}
