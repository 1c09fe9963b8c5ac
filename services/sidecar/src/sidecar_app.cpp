#include "sidecar_app.hpp"

#include "wisp/log/log.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::sidecar {

void AddSidecarFlags(config::Flags& flags, SidecarSettings& s) {
  flags.Description(
      "Answers every HTTP request on the socket with {\"access_token\", "
      "\"token_type\", \"expiry\"}: the projected token exchanged at wisp's STS, "
      "cached until 80% of its lifetime.");
  flags.String("socket", &s.socket,
               "Unix socket to listen on (a stale socket is removed; mode 0666: the app "
               "containers of the pod run as other users, and only they mount its directory).");
  flags.String("token-file", &s.token_file, "The projected service-account token file.");
  flags.String("sts-url", &s.sts_url, "wisp's STS endpoint, https://<gateway>/v1/token.");
  flags.String(
      "ca-file", &s.ca_file,
      "PEM CA bundle that verifies the gateway's certificate; empty = the system trust store.");
  flags.String("ca-pem", &s.ca_pem,
               "The PEM CA bundle itself (public; wisp-policy passes $(WISP_STS_CA_PEM)), instead "
               "of --ca-file.");
  flags.String("audience", &s.audience, "The audience to ask the STS for.");
  flags.String("scope", &s.scope, "Space-separated scopes to ask the STS for.");
  flags.String("metrics-address", &s.metrics_address,
               "host:port for /metrics, /healthz and /readyz (e.g. 0.0.0.0:9095); empty = none.");
  flags.String("log-level", &s.log_level, "trace|debug|info|warn|error.");
  flags.String("log-format", &s.log_format, "text|json.");
}

StsOptions StsOptionsFrom(const SidecarSettings& s) {
  return {.url = s.sts_url,
          .ca_file = s.ca_file,
          .ca_pem = s.ca_pem,
          .audience = s.audience,
          .scope = s.scope};
}

absl::Status InitLogging(const SidecarSettings& s) {
  return log::Init({.service = "wisp-sidecar", .level = s.log_level, .format = s.log_format});
}

absl::StatusOr<std::unique_ptr<SidecarApp>> SidecarApp::Start(const SidecarSettings& s,
                                                              std::unique_ptr<StsClient> sts) {
  std::unique_ptr<SidecarApp> app(new SidecarApp());
  app->sts_ = std::move(sts);
  app->counters_ = std::make_unique<SidecarMetrics>(metrics::Registry());
  app->endpoint_ = std::make_unique<metrics::Endpoint>(metrics::SharedRegistry(), "wisp-sidecar");
  app->endpoint_->AddReadinessCheck("token-url", [serving = app->serving_] {
    return *serving ? absl::OkStatus() : absl::UnavailableError("socket not listening yet");
  });
  if (!s.metrics_address.empty()) WISP_RETURN_IF_ERROR(app->endpoint_->Start(s.metrics_address));
  app->file_ = std::make_unique<TokenFile>(s.token_file);
  app->tokens_ = std::make_unique<TokenServer>(*app->file_, *app->sts_, SystemClock::Instance(),
                                               0.8, app->counters_.get());
  WISP_ASSIGN_OR_RETURN(app->server_,
                        http::Server::Create({.unix_socket = s.socket,
                                              .socket_mode = 0666,
                                              .threads = 4,
                                              .read_timeout = std::chrono::seconds(10),
                                              .name = "token-url"}));
  TokenServer* tokens = app->tokens_.get();
  for (const char* method : {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"}) {
    app->server_->HandlePrefix(method, "/",
                               [tokens](const http::Request& r) { return tokens->Handle(r); });
  }
  WISP_RETURN_IF_ERROR(app->server_->Start());
  *app->serving_ = true;
  SPDLOG_LOGGER_INFO(log::Get("sidecar"), "serving tokens on {}", s.socket);
  return app;
}

SidecarApp::~SidecarApp() { Stop(); }

void SidecarApp::Stop() {
  if (server_) server_->Stop();
  if (endpoint_) endpoint_->Stop();
}

}  // namespace wisp::sidecar
