#include "sidecar_app.hpp"

#include <iostream>

#include "wisp/log/log.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::sidecar {

void AddSidecarFlags(config::Flags& flags, SidecarSettings& s) {
  flags.Description(
      "Answers every HTTP request on the socket with {\"access_token\", "
      "\"token_type\", \"expiry\"}: the projected token exchanged at wisp's STS, "
      "cached until a random point between 70% and 80% of its lifetime (see "
      "--refresh-jitter-percent). Concurrent requests share one exchange; failed exchanges back "
      "off (1 s doubling to 30 s, spread, never before the STS's Retry-After) while a "
      "still-valid token keeps being served; a new token from kubelet in --token-file ends the "
      "wait, unless the STS said Retry-After.");
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
  flags.String("audience", &s.audience,
               "The audience to ask the STS for, unless --sts-audience is set. wisp-policy "
               "passes the token volume's audience here: the projected token's own.");
  flags.String("scope", &s.scope,
               "Space-separated scopes to ask the STS for, unless --sts-scope is set.");
  flags.String(
      "sts-audience", &s.sts_audience,
      "The audience to ask the STS for when it is not the projected token's (overrides "
      "--audience). The GKE shape, as gcs-fuse asks Google's STS: the projected token's audience "
      "is <project>.svc.id.goog and the STS audience the workload identity provider, "
      "//iam.googleapis.com/projects/<number>/locations/global/workloadIdentityPools/<pool>/"
      "providers/<provider>.");
  flags.String("sts-scope", &s.sts_scope,
               "Space-separated scopes to ask the STS for (overrides --scope), e.g. "
               "https://www.googleapis.com/auth/cloud-platform.");
  flags.String("metrics-address", &s.metrics_address,
               "host:port for /metrics, /healthz and /readyz (e.g. 0.0.0.0:9095); empty = none.");
  flags.String("ready-file", &s.ready_file,
               "Where the expiry of the token held is published for the probes (never the token "
               "itself); empty = `ready` in the socket's directory.");
  flags.Bool("probe", &s.probe,
             "Check the ready file and exit: 0 while it names an unexpired token, else 1 (the "
             "startupProbe and readinessProbe of the injected container).");
  flags.Int("refresh-jitter-percent", &s.refresh_jitter_percent,
            "Refresh the access token at a random point between (80 - N)% and 80% of its "
            "lifetime, and spread each retry delay over the upper half of its backoff, so "
            "sidecars started together do not come back to the STS together. 0 = at exactly 80% "
            "and fixed delays (bench/token's baseline).",
            config::Flags::Between(0, 50));
  flags.Bool("single-flight", &s.single_flight,
             "Concurrent requests that find no fresh token wait for one exchange. "
             "--no-single-flight (each such request exchanges on its own) exists for "
             "bench/token's baseline only.");
  flags.String("log-level", &s.log_level, "trace|debug|info|warn|error.");
  flags.String("log-format", &s.log_format, "text|json.");
}

StsOptions StsOptionsFrom(const SidecarSettings& s) {
  return {.url = s.sts_url,
          .ca_file = s.ca_file,
          .ca_pem = s.ca_pem,
          .audience = s.sts_audience.empty() ? s.audience : s.sts_audience,
          .scope = s.sts_scope.empty() ? s.scope : s.sts_scope};
}

std::string ReadyFilePath(const SidecarSettings& s) {
  if (!s.ready_file.empty()) return s.ready_file;
  const size_t slash = s.socket.rfind('/');
  return slash == std::string::npos ? "ready" : s.socket.substr(0, slash + 1) + "ready";
}

int Probe(const SidecarSettings& s) {
  const std::string path = ReadyFilePath(s);
  absl::Status st = CheckReady(path, std::chrono::system_clock::now());
  std::cout << "wisp-sidecar: " << (st.ok() ? "ready: holds a token" : std::string(st.message()))
            << "\n";
  return st.ok() ? 0 : 1;
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
  app->tokens_ = std::make_unique<TokenServer>(
      *app->file_, *app->sts_, SystemClock::Instance(),
      RefreshOptions{.refresh_jitter_percent = s.refresh_jitter_percent,
                     .single_flight = s.single_flight,
                     .metrics = app->counters_.get()});
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
  app->ready_ = std::make_unique<ReadyFile>(ReadyFilePath(s));
  app->ready_->Clear();  // a previous run's file says nothing about this one
  app->refresher_ = std::thread([raw = app.get()] { raw->Refresh(); });
  return app;
}

void SidecarApp::Refresh() {
  auto logger = log::Get("sidecar");
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    absl::StatusOr<CachedToken> token = tokens_->Get(TokenServer::Caller::kWarm);
    if (token.ok()) {
      if (absl::Status st = ready_->Publish(token->expiry); !st.ok()) {
        SPDLOG_LOGGER_WARN(logger, "{}", std::string(st.message()));
      }
    }
    // TokenServer decides when: the token's refresh point, or the end of its backoff (it logged
    // the failure). At least 100 ms apart, so a clock step cannot make this spin.
    const auto wait = std::max<std::chrono::milliseconds>(
        std::chrono::duration_cast<std::chrono::milliseconds>(tokens_->NextAttempt() -
                                                              std::chrono::system_clock::now()),
        std::chrono::milliseconds(100));
    lock.lock();
    cv_.wait_for(lock, wait, [this] { return stopping_; });
  }
}

SidecarApp::~SidecarApp() { Stop(); }

void SidecarApp::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (refresher_.joinable()) refresher_.join();
  if (ready_) ready_->Clear();
  if (server_) server_->Stop();
  if (endpoint_) endpoint_->Stop();
}

}  // namespace wisp::sidecar
