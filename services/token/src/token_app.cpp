#include "token_app.hpp"

#include "wisp/bus/subjects.hpp"

namespace wisp::token {

void AddTokenFlags(config::Flags& flags, TokenSettings& s) {
  flags.String("key-encryption-key-file", &s.kek_file,
               "File holding the 32-byte key-encryption key (raw, hex or base64) that seals the "
               "signing keys in the wisp_keys bucket. Required.");
  flags.Enum("algorithm", &s.algorithm, {"RS256", "ES256"}, "Default signing algorithm.");
  flags.Duration(
      "key-rotation-period", &s.rotation,
      "How long each signing key signs. The next key is published in the JWKS "
      "--key-publish-ahead before it takes over; the key it replaces stays in the JWKS until "
      "every token it signed has expired (the policy's longest token lifetime + 5 min).",
      [](auto d) {
        return d >= std::chrono::seconds(10) ? absl::OkStatus()
                                             : absl::InvalidArgumentError("must be at least 10s");
      });
  flags.Duration(
      "key-publish-ahead", &s.publish_ahead,
      "How long the next signing key is in the JWKS before it signs, so relying parties that "
      "cache the JWKS (the gateway serves it with max-age 300 s) know it before they see a token "
      "it signed. 0 = half the rotation period: SPIRE's schedule, the next key published at half "
      "the active key's life. Must be less than --key-rotation-period.",
      [](auto d) {
        return d.count() >= 0 ? absl::OkStatus()
                              : absl::InvalidArgumentError("must not be negative");
      });
  flags.String("issuer-url", &s.issuer_url,
               "The iss of every token; discovery is served under it.");
  flags.String("jwks-uri", &s.jwks_uri,
               "jwks_uri in discovery (default <issuer-url>/openid/v1/jwks).");
  flags.String("policy-file", &s.policy_file,
               "YAML token policy (audiences, lifetimes, exchange, trusted issuers, pod proofs on "
               "issue). Re-read on "
               "SIGHUP and when the file changes; a file that does not load keeps the policy in "
               "force. Without it any namespace may request any audience and no exchange is "
               "allowed.");
  flags.Int(
      "lifetime-jitter-percent", &s.lifetime_jitter_percent,
      "Shortens the lifetime of every issued token and exchanged access token by a random 0 to "
      "this percent of it (never below 600 s; never longer than the policy allows), so tokens "
      "issued together are not all refreshed together. IRSA projects its default 86400 s as "
      "79200-86400 s, a spread of 8.3%. 0 = exact lifetimes.",
      config::Flags::Between(0, kMaxLifetimeJitterPercent));
  flags.Duration("review-leeway", &s.leeway,
                 "Clock skew allowed when checking exp and nbf (reviews, exchanges, pod proofs).");
}

absl::StatusOr<jwt::Kek> CheckTokenSettings(const TokenSettings& s) {
  if (s.kek_file.empty()) return absl::InvalidArgumentError("key-encryption-key-file: required");
  if (s.publish_ahead >= s.rotation) {
    return absl::InvalidArgumentError(
        "key-publish-ahead: " + config::FormatDuration(s.publish_ahead) +
        " must be less than key-rotation-period (" + config::FormatDuration(s.rotation) +
        "): the next key is published while the active one still signs");
  }
  auto kek = jwt::Kek::FromFile(s.kek_file);
  if (!kek.ok()) return absl::InvalidArgumentError(kek.status().message());
  if (!s.policy_file.empty()) {
    // A bad file fails before anything starts; the remote JWKS are fetched once metrics exist.
    if (auto p = Policy::FromFile(s.policy_file); !p.ok()) return p.status();
  }
  return kek;
}

absl::StatusOr<std::unique_ptr<TokenApp>> TokenApp::Start(const TokenSettings& s,
                                                          const jwt::Kek& kek,
                                                          runtime::Process& process) {
  using std::chrono::duration_cast;
  using std::chrono::seconds;
  std::unique_ptr<TokenApp> app(new TokenApp());
  app->policy_file_ = s.policy_file;
  // Ready only once keys are loaded and the endpoints serve.
  process.endpoint().AddReadinessCheck("token", [serving = app->serving_] {
    return *serving ? absl::OkStatus() : absl::UnavailableError("signing keys not loaded yet");
  });
  WISP_ASSIGN_OR_RETURN(
      app->keys_bucket_,
      process.OpenBucket({.name = std::string(bus::buckets::kKeys), .history = 5}));
  app->metrics_ = std::make_unique<TokenMetrics>(process.registry());
  Clock& clock = SystemClock::Instance();
  absl::StatusOr<Policy> policy = Policy::Default();
  if (!s.policy_file.empty()) {
    policy = LoadPolicyFile(s.policy_file, nullptr, clock, app->metrics_.get());
  }
  if (!policy.ok()) return policy.status();
  const jwt::Algorithm alg = *jwt::ParseAlgorithm(s.algorithm);
  app->policy_store_ = std::make_unique<PolicyStore>(*policy);
  app->keys_ = std::make_unique<KeyManager>(
      *app->keys_bucket_, kek, clock,
      KeyManager::Options{.rotation_period = duration_cast<seconds>(s.rotation),
                          .publish_ahead = duration_cast<seconds>(s.publish_ahead),
                          .longest_token = seconds(policy->LongestTokenSeconds()),
                          .default_algorithm = alg},
      app->metrics_.get());
  // A reloaded policy that allows longer tokens keeps keys retired from then on published longer.
  app->policy_store_->OnReplace([keys = app->keys_.get()](const Policy& p) {
    keys->ExtendLongestToken(seconds(p.LongestTokenSeconds()));
  });
  // SIGHUP reaches main's WaitForSignal (runtime blocks it in every thread), which calls Reload():
  // a second thread waiting for it too would take some signals and leave others.
  app->watcher_ = std::make_unique<PolicyWatcher>(
      *app->policy_store_, PolicyWatcher::Options{.path = s.policy_file, .handle_sighup = false},
      clock, *app->metrics_);
  if (!s.policy_file.empty()) app->watcher_->Start();
  // The bucket is open, but on a new cluster its stream may still be electing a leader and the
  // first read of the key set times out: wait for it as for the bucket, at most bus-wait, rather
  // than exit (two replicas started at once on a fresh 3-node cluster did).
  WISP_RETURN_IF_ERROR(
      process.RetryUntilBus("loading the signing keys", [&] { return app->keys_->Start(); }));
  const seconds leeway = duration_cast<seconds>(s.leeway);
  app->issuer_ = std::make_unique<Issuer>(
      *app->keys_, *app->policy_store_, clock, *app->metrics_,
      Issuer::Options{.issuer = s.issuer_url,
                      .default_algorithm = alg,
                      .leeway = leeway,
                      .lifetime_jitter = LifetimeJitter(s.lifetime_jitter_percent)});
  app->reviewer_ =
      std::make_unique<Reviewer>(*app->keys_, clock, *app->metrics_,
                                 Reviewer::Options{.issuer = s.issuer_url, .leeway = leeway});
  app->exchanger_ = std::make_unique<Exchanger>(*app->reviewer_, *app->issuer_, *app->policy_store_,
                                                clock, *app->metrics_);
  WISP_ASSIGN_OR_RETURN(
      bus::Service * micro,
      process.RegisterService("signing keys, JWKS, bound tokens, STS exchange, review"));
  app->service_ = std::make_unique<TokenService>(
      *micro, process.bus(), *app->keys_, *app->issuer_, *app->reviewer_, *app->exchanger_,
      TokenService::Options{
          .issuer = s.issuer_url,
          .jwks_uri = s.jwks_uri,
          .tick_interval = std::min<std::chrono::milliseconds>(seconds(10), s.rotation / 4)});
  WISP_RETURN_IF_ERROR(app->service_->Start());
  *app->serving_ = true;
  return app;
}

TokenApp::~TokenApp() { Stop(); }

void TokenApp::Reload() {
  if (!policy_file_.empty() && watcher_) (void)watcher_->Reload("SIGHUP");
}

void TokenApp::Stop() {
  if (service_) service_->Stop();
  if (watcher_) watcher_->Stop();
  if (keys_) keys_->StopWatching();  // before the bus drains (runtime::Process::Shutdown)
}

}  // namespace wisp::token
