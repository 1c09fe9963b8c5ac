#include "wisp/runtime/runtime.hpp"

#include <pthread.h>
#include <signal.h>

#include <iostream>
#include <thread>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/replicas.hpp"
#include "wisp/fsutil/read_file.hpp"
#include "wisp/log/log.hpp"

namespace wisp::runtime {

void AddNatsFlags(config::Flags& flags, CommonSettings& s) {
  flags.String("nats-url", &s.nats_url,
               "NATS server URLs, comma separated (several = the members of a NATS cluster; "
               "tls:// for TLS).");
  flags.String("nats-user", &s.nats_user, "NATS user name (with --nats-password).");
  flags.String("nats-password", &s.nats_password, "NATS password (with --nats-user).");
  flags.Secret(
      "--nats-password-file FILE, the environment variable WISP_NATS_PASSWORD, or the "
      "key nats-password in the --config file");
  flags.String("nats-password-file", &s.nats_password_file,
               "File holding the NATS password (a trailing newline is dropped), read at start-up.");
  flags.String("nats-creds", &s.nats_creds, "NATS credentials file (JWT + nkey seed).");
  flags.String("nats-token", &s.nats_token, "NATS authentication token.");
  flags.Secret(
      "--nats-token-file FILE, the environment variable WISP_NATS_TOKEN, or the key "
      "nats-token in the --config file");
  flags.String("nats-token-file", &s.nats_token_file,
               "File holding the NATS authentication token, read at start-up.");
  flags.String("nats-ca", &s.nats_ca, "CA bundle that verifies the NATS servers' certificates.");
  flags.String("nats-cert", &s.nats_cert, "Client certificate for NATS TLS (with --nats-key).");
  flags.String("nats-key", &s.nats_key, "Client key for NATS TLS.");
  flags.String("nats-inbox-prefix", &s.nats_inbox_prefix,
               "Subject prefix of this process's reply inboxes. Empty means _INBOX.<service> "
               "(for example _INBOX.wisp-token), so NATS can let each service user subscribe to "
               "its own replies and nobody else's.");
}

namespace {

// A secret given as a value (environment or --config file) or by file, never both.
absl::StatusOr<std::string> SecretValue(const std::string& value, const std::string& file,
                                        const std::string& name) {
  if (file.empty()) return value;
  if (!value.empty()) {
    return absl::InvalidArgumentError(name + " and " + name +
                                      "-file are both set; give the secret once");
  }
  auto read = fsutil::ReadTrimmedFile(file);
  if (!read.ok()) {
    return absl::InvalidArgumentError(name + "-file: cannot read " +
                                      std::string(read.status().message()));
  }
  if (read->empty()) return absl::InvalidArgumentError(name + "-file: " + file + " is empty");
  return *std::move(read);
}

}  // namespace

absl::StatusOr<bus::NatsBusOptions> NatsOptions(const CommonSettings& settings,
                                                const std::string& name) {
  if (settings.nats_cert.empty() != settings.nats_key.empty()) {
    return absl::InvalidArgumentError("nats-cert and nats-key go together");
  }
  bus::NatsBusOptions options;
  WISP_ASSIGN_OR_RETURN(options.servers, ParseNatsUrls(settings.nats_url));
  options.name = name;
  options.user = settings.nats_user;
  WISP_ASSIGN_OR_RETURN(
      options.password,
      SecretValue(settings.nats_password, settings.nats_password_file, "nats-password"));
  options.creds_file = settings.nats_creds;
  WISP_ASSIGN_OR_RETURN(options.token,
                        SecretValue(settings.nats_token, settings.nats_token_file, "nats-token"));
  options.tls_ca_file = settings.nats_ca;
  options.tls_cert_file = settings.nats_cert;
  options.tls_key_file = settings.nats_key;
  options.inbox_prefix =
      settings.nats_inbox_prefix.empty() ? "_INBOX." + name : settings.nats_inbox_prefix;
  return options;
}

void AddCommonFlags(config::Flags& flags, CommonSettings& s) {
  AddNatsFlags(flags, s);
  flags.String("metrics-address", &s.metrics_address,
               "host:port serving /metrics, /healthz and /readyz.");
  flags.Enum("log-level", &s.log_level,
             {"trace", "debug", "info", "warn", "error", "critical", "off"},
             "Least severe level logged.");
  flags.Enum("log-format", &s.log_format, {"text", "json"}, "text lines or JSON lines on stderr.");
  flags.Duration("drain-timeout", &s.drain_timeout,
                 "On SIGTERM, how long in-flight requests may take to finish.");
  flags.Duration("bus-wait", &s.bus_wait,
                 "At start-up, how long to keep retrying while NATS or JetStream is not reachable "
                 "before giving up with exit 1.");
  flags.Int("serve-threads", &s.serve_threads, "Handler threads per served subject.",
            config::Flags::Between(1, 256));
  flags.Int(
      "jetstream-replicas", &s.jetstream_replicas,
      "Copies JetStream keeps of every bucket and stream this service creates "
      "(wisp_keys, wisp_volumes, WISP_POPULATE, ...): 1 for a single nats-server, 3 for "
      "a 3-node NATS cluster (one server may then be lost without losing state). An "
      "existing bucket or stream with fewer copies is raised in place at start-up and the "
      "service logs it; one with more is left as it is. More than the cluster can place "
      "fails at start-up.",
      [](int64_t n) {
        return n >= 1 && n <= bus::kMaxReplicas
                   ? absl::OkStatus()
                   : absl::InvalidArgumentError("must be between 1 and 5 (JetStream's limit)");
      });
}

absl::Status ExplainReplicaError(const absl::Status& status, int64_t replicas) {
  // With one copy the setting is not the cause (JetStream says "insufficient resources" for a
  // full store too).
  if (replicas <= 1 || !bus::IsReplicaPlacementError(status)) return status;
  return absl::InvalidArgumentError(
      "jetstream-replicas: NATS cannot keep " + std::to_string(replicas) + " copies (" +
      std::string(status.message()) +
      "); set jetstream-replicas to at most the number of JetStream servers in the cluster "
      "that are up (1 for a single nats-server)");
}

absl::StatusOr<std::vector<std::string>> ParseNatsUrls(std::string_view text) {
  std::vector<std::string> urls;
  size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    std::string url(
        text.substr(start, comma == std::string_view::npos ? text.npos : comma - start));
    while (!url.empty() && url.front() == ' ') url.erase(url.begin());
    while (!url.empty() && url.back() == ' ') url.pop_back();
    if (!url.empty()) {
      if (url.find("://") == std::string::npos) {
        return absl::InvalidArgumentError("nats-url: \"" + url +
                                          "\" has no scheme (nats://host:port or tls://host:port)");
      }
      urls.push_back(url);
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (urls.empty()) return absl::InvalidArgumentError("nats-url: no server URL given");
  return urls;
}

absl::StatusOr<std::unique_ptr<Process>> Process::Start(std::string service,
                                                        const CommonSettings& settings) {
  // Block the shutdown signals before any thread exists so every thread inherits the mask and
  // WaitForSignal() is the only place that sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);  // WaitForSignal() hands it to the service (a reload) or ignores it
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  WISP_RETURN_IF_ERROR(
      log::Init({.service = service, .level = settings.log_level, .format = settings.log_format}));
  auto process = std::unique_ptr<Process>(new Process());
  process->service_ = service;
  process->settings_ = settings;

  WISP_ASSIGN_OR_RETURN(bus::NatsBusOptions options, NatsOptions(settings, service));
  options.retry_on_failed_connect = true;
  options.serve_threads = static_cast<int>(settings.serve_threads);
  options.registry = &metrics::Registry();
  process->bus_options_ = options;
  WISP_ASSIGN_OR_RETURN(process->bus_, bus::NatsBus::Connect(options));

  process->endpoint_ = std::make_unique<metrics::Endpoint>(metrics::SharedRegistry(), service);
  bus::Bus* bus = process->bus_.get();
  process->endpoint_->AddReadinessCheck("bus", [bus] {
    return bus->State() == bus::ConnectionState::kConnected
               ? absl::OkStatus()
               : absl::UnavailableError("not connected to NATS");
  });
  // Ready only between "main has started everything" (WaitForSignal) and the stop signal: the bus
  // alone connects before the service listens (the gateway's HTTPS port came up after /readyz).
  process->endpoint_->AddReadinessCheck("started", [serving = process->serving_] {
    return serving->load() ? absl::OkStatus() : absl::UnavailableError("starting or draining");
  });
  WISP_RETURN_IF_ERROR(process->endpoint_->Start(settings.metrics_address));
  SPDLOG_LOGGER_INFO(log::Get("runtime"), "{} {} started; metrics on port {}", service,
                     WISP_VERSION, process->endpoint_->port());
  return process;
}

Process::~Process() = default;

bus::Bus& Process::bus() { return *bus_; }
const bus::NatsBusOptions& Process::bus_options() const { return bus_options_; }
prometheus::Registry& Process::registry() { return metrics::Registry(); }
std::shared_ptr<prometheus::Registry> Process::shared_registry() {
  return metrics::SharedRegistry();
}
metrics::Endpoint& Process::endpoint() { return *endpoint_; }

absl::Status Process::RetryUntilBus(std::string_view what,
                                    const std::function<absl::Status()>& call) {
  return RetryWhileUnreachable(what, settings_.bus_wait, call);
}

absl::Status RetryWhileUnreachable(std::string_view what, std::chrono::milliseconds wait,
                                   const std::function<absl::Status()>& call) {
  auto logger = log::Get("runtime");
  const auto deadline = std::chrono::steady_clock::now() + wait;
  auto backoff = std::chrono::milliseconds(100);
  while (true) {
    // SIGTERM/SIGINT are blocked for sigwait(); look for one pending so a service still waiting
    // for its bus stops at once instead of after bus-wait.
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGTERM) == 1 || sigismember(&pending, SIGINT) == 1) {
      return absl::CancelledError(std::string(what) +
                                  ": stopped by a signal before start-up finished");
    }
    absl::Status status = call();
    const auto code = status.code();
    // Only transport trouble is worth waiting out; a refused permission or a bad config is final.
    if (status.ok() ||
        (code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kDeadlineExceeded)) {
      return status;
    }
    if (std::chrono::steady_clock::now() + backoff > deadline) {
      return Annotate(status, std::string(what) + " (gave up after bus-wait " +
                                  config::FormatDuration(wait) + ")");
    }
    SPDLOG_LOGGER_WARN(logger, "{}: {}; retrying in {}", what, std::string(status.message()),
                       config::FormatDuration(backoff));
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
}

absl::StatusOr<bus::KeyValuePtr> Process::OpenBucket(bus::BucketConfig config) {
  config.replicas = jetstream_replicas();
  bus::KeyValuePtr kv;
  WISP_RETURN_IF_ERROR(ExplainReplicaError(RetryUntilBus("waiting for JetStream",
                                                         [&]() -> absl::Status {
                                                           auto opened = bus_->OpenBucket(config);
                                                           if (!opened.ok()) return opened.status();
                                                           kv = std::move(*opened);
                                                           return absl::OkStatus();
                                                         }),
                                           config.replicas));
  return kv;
}

absl::Status Process::EnsureStream(bus::StreamConfig config) {
  config.replicas = jetstream_replicas();
  return ExplainReplicaError(
      RetryUntilBus("waiting for JetStream", [&] { return bus_->Js().EnsureStream(config); }),
      config.replicas);
}

absl::StatusOr<bus::Service*> Process::RegisterService(std::string description) {
  WISP_ASSIGN_OR_RETURN(micro_, bus::Service::Start(*bus_, {.name = service_,
                                                            .version = WISP_VERSION,
                                                            .description = std::move(description),
                                                            .registry = &metrics::Registry()}));
  return micro_.get();
}

void Process::WaitForSignal(const std::function<void()>& on_hangup) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  int sig = 0;
  serving_->store(true);
  while (true) {
    sigwait(&set, &sig);
    if (sig != SIGHUP) break;
    if (on_hangup) {
      SPDLOG_LOGGER_INFO(log::Get("runtime"), "{}: received SIGHUP, reloading", service_);
      on_hangup();
    } else {
      SPDLOG_LOGGER_INFO(log::Get("runtime"), "{}: received SIGHUP, nothing to reload", service_);
    }
  }
  serving_->store(false);
  SPDLOG_LOGGER_INFO(log::Get("runtime"), "{}: received {}, draining", service_,
                     sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

int Process::Shutdown() {
  auto logger = log::Get("runtime");
  // One deadline for everything: NatsBus::Drain stops every served subject (the micro endpoints
  // included), lets delivered requests finish and closes, all within drain-timeout, even when NATS
  // is unreachable. Draining each endpoint on its own would wait per subscription.
  if (bus_) {
    if (auto s = bus_->Drain(settings_.drain_timeout); !s.ok()) {
      SPDLOG_LOGGER_WARN(logger, "draining the bus: {}", std::string(s.message()));
    }
  }
  micro_.reset();
  if (endpoint_) endpoint_->Stop();
  SPDLOG_LOGGER_INFO(logger, "{} stopped", service_);
  spdlog::shutdown();
  return 0;
}

int Fail(std::string_view service, const absl::Status& status) {
  std::cerr << service << ": " << status.message() << "\n";
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return 2;  // a bad setting
    case absl::StatusCode::kCancelled:
      return 0;  // asked to stop while starting
    default:
      return 1;
  }
}

}  // namespace wisp::runtime
