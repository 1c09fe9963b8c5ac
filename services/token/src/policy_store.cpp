#include "policy_store.hpp"

#include <signal.h>

#include "wisp/log/log.hpp"

namespace wisp::token {
namespace {

std::shared_ptr<spdlog::logger> Logger() {
  static auto logger = log::Get("policy");
  return logger;
}

bool SameRemote(const TrustedIssuer& a, const TrustedIssuer& b) {
  return a.issuer == b.issuer && a.jwks_url == b.jwks_url && a.jwks_ca_file == b.jwks_ca_file &&
         a.jwks_bearer_token_file == b.jwks_bearer_token_file &&
         a.jwks_refresh_seconds == b.jwks_refresh_seconds && b.remote != nullptr;
}

}  // namespace

PolicyStore::PolicyStore(Policy initial)
    : current_(std::make_shared<const Policy>(std::move(initial))) {}

std::shared_ptr<const Policy> PolicyStore::Current() const {
  std::lock_guard lock(mu_);
  return current_;
}

void PolicyStore::Replace(Policy next) {
  auto p = std::make_shared<const Policy>(std::move(next));
  std::vector<std::function<void(const Policy&)>> callbacks;
  {
    std::lock_guard lock(mu_);
    current_ = p;
    callbacks = callbacks_;
  }
  for (const auto& cb : callbacks) cb(*p);
}

void PolicyStore::OnReplace(std::function<void(const Policy&)> callback) {
  std::lock_guard lock(mu_);
  callbacks_.push_back(std::move(callback));
}

JwksFetcherFactory HttpsFetcherFactory() {
  return [](const TrustedIssuer& t) -> absl::StatusOr<std::shared_ptr<JwksFetcher>> {
    auto f = HttpsJwksFetcher::Create(
        {.ca_file = t.jwks_ca_file, .bearer_token_file = t.jwks_bearer_token_file});
    if (!f.ok()) return f.status();
    return std::shared_ptr<JwksFetcher>(std::move(*f));
  };
}

absl::Status AttachRemoteJwks(Policy& policy, const Policy* previous, Clock& clock,
                              TokenMetrics* metrics, const JwksFetcherFactory& factory) {
  for (size_t i = 0; i < policy.trusted_issuers.size(); ++i) {
    TrustedIssuer& t = policy.trusted_issuers[i];
    if (t.jwks_url.empty()) continue;
    if (previous != nullptr) {
      for (const auto& old : previous->trusted_issuers) {
        if (SameRemote(t, old)) t.remote = old.remote;
      }
    }
    if (t.remote) continue;
    auto fetcher = factory(t);
    if (!fetcher.ok()) {
      return absl::InvalidArgumentError("trustedIssuers[" + std::to_string(i) +
                                        "].jwksCaFile: " + std::string(fetcher.status().message()));
    }
    t.remote = std::make_shared<RemoteJwks>(
        *std::move(fetcher),
        RemoteJwks::Options{.url = t.jwks_url,
                            .issuer = t.issuer,
                            .refresh_interval = std::chrono::seconds(t.jwks_refresh_seconds)},
        clock, metrics);
    // Fetched at load; a failure is logged by Refresh and retried by the watcher, so an issuer
    // whose JWKS server is down does not keep wisp-token from starting.
    (void)t.remote->Refresh();
  }
  return absl::OkStatus();
}

absl::StatusOr<Policy> LoadPolicyFile(const std::string& path, const Policy* previous, Clock& clock,
                                      TokenMetrics* metrics, const JwksFetcherFactory& factory) {
  WISP_ASSIGN_OR_RETURN(Policy p, Policy::FromFile(path));
  if (auto st = AttachRemoteJwks(p, previous, clock, metrics, factory); !st.ok()) {
    return Annotate(st, "policy-file " + path);
  }
  return p;
}

void BlockReloadSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

PolicyWatcher::PolicyWatcher(PolicyStore& store, Options options, Clock& clock,
                             TokenMetrics& metrics, JwksFetcherFactory factory)
    : store_(store),
      options_(std::move(options)),
      clock_(clock),
      metrics_(metrics),
      factory_(std::move(factory)) {
  reloader_ = std::make_unique<config::FileReloader>(
      config::FileReloader::Options{.path = options_.path,
                                    .interval = options_.poll_interval,
                                    .change_trigger = "file changed",
                                    .sighup_trigger = "SIGHUP",
                                    .take_sighup = options_.handle_sighup,
                                    .on_tick = [this] { RefreshJwks(); }},
      // The file is loaded by path (LoadPolicyFile); the bytes serve change detection.
      [this](const std::string&) { return Apply(); },
      [this](std::string_view trigger, const absl::Status& st) { Observe(trigger, st); });
  metrics_.policy_last_reload_success_timestamp_seconds.Set(
      static_cast<double>(clock_.NowUnixSeconds()));
}

PolicyWatcher::~PolicyWatcher() { Stop(); }

absl::Status PolicyWatcher::Apply() {
  const auto current = store_.Current();
  auto next = LoadPolicyFile(options_.path, current.get(), clock_, &metrics_, factory_);
  if (!next.ok()) return next.status();
  // A longer lifetime reaches the key manager through PolicyStore::OnReplace (wisp-token's main).
  store_.Replace(*std::move(next));
  return absl::OkStatus();
}

void PolicyWatcher::Observe(std::string_view trigger, const absl::Status& st) {
  if (!st.ok()) {
    metrics_.PolicyReload("error").Increment();
    SPDLOG_LOGGER_ERROR(Logger(), "policy reload ({}) failed, keeping the policy in force: {}",
                        trigger, std::string(st.message()));
    return;
  }
  metrics_.PolicyReload("ok").Increment();
  metrics_.policy_last_reload_success_timestamp_seconds.Set(
      static_cast<double>(clock_.NowUnixSeconds()));
  SPDLOG_LOGGER_INFO(Logger(), "policy reloaded from {} ({})", options_.path, trigger);
}

absl::Status PolicyWatcher::Reload(std::string_view trigger) { return reloader_->Reload(trigger); }

void PolicyWatcher::RefreshJwks() {
  const auto policy = store_.Current();
  for (const auto& t : policy->trusted_issuers) {
    if (t.remote) t.remote->RefreshIfDue();
  }
}

void PolicyWatcher::Start() { reloader_->Start(); }

void PolicyWatcher::Stop() { reloader_->Stop(); }

}  // namespace wisp::token
