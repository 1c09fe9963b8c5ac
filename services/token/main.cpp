// wisp-token: parses settings, loads the policy and KEK, runs TokenService until SIGTERM.
#include <atomic>

#include "key_manager.hpp"
#include "policy_store.hpp"
#include "token_service.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/runtime/runtime.hpp"

int main(int argc, char** argv) {
  using namespace wisp;
  token::BlockReloadSignal();  // before any thread: SIGHUP reloads the policy, never terminates
  runtime::CommonSettings common{.metrics_address = "0.0.0.0:9092"};
  std::string kek_file, algorithm = "RS256", issuer_url = "https://localhost:8443", jwks_uri,
                        policy_file;
  std::chrono::milliseconds rotation = std::chrono::hours(24), leeway = std::chrono::seconds(60);
  config::Flags flags("wisp-token",
                      "token issuance: signing keys, JWKS, bound tokens, STS exchange");
  runtime::AddCommonFlags(flags, common);
  flags.String("key-encryption-key-file", &kek_file,
               "File holding the 32-byte key-encryption key (raw, hex or base64) that seals the "
               "signing keys in the wisp_keys bucket. Required.");
  flags.Enum("algorithm", &algorithm, {"RS256", "ES256"}, "Default signing algorithm.");
  flags.Duration(
      "key-rotation-period", &rotation, "How often a new signing key is made.", [](auto d) {
        return d >= std::chrono::seconds(10) ? absl::OkStatus()
                                             : absl::InvalidArgumentError("must be at least 10s");
      });
  flags.String("issuer-url", &issuer_url, "The iss of every token; discovery is served under it.");
  flags.String("jwks-uri", &jwks_uri,
               "jwks_uri in discovery (default <issuer-url>/openid/v1/jwks).");
  flags.String("policy-file", &policy_file,
               "YAML token policy (audiences, lifetimes, exchange, trusted issuers, pod proofs on "
               "issue). Re-read on "
               "SIGHUP and when the file changes; a file that does not load keeps the policy in "
               "force. Without it any namespace may request any audience and no exchange is "
               "allowed.");
  flags.Duration("review-leeway", &leeway,
                 "Clock skew allowed when checking exp and nbf (reviews, exchanges, pod proofs).");
  flags.ParseOrExit(argc, argv);
  if (kek_file.empty()) {
    return runtime::Fail("wisp-token",
                         absl::InvalidArgumentError("key-encryption-key-file: required"));
  }
  auto kek = jwt::Kek::FromFile(kek_file);
  if (!kek.ok())
    return runtime::Fail("wisp-token", absl::InvalidArgumentError(kek.status().message()));
  if (!policy_file.empty()) {
    // A bad file fails before anything starts; the remote JWKS are fetched once metrics exist.
    if (auto p = token::Policy::FromFile(policy_file); !p.ok())
      return runtime::Fail("wisp-token", p.status());
  }
  const jwt::Algorithm alg = *jwt::ParseAlgorithm(algorithm);

  auto process = runtime::Process::Start("wisp-token", common);
  if (!process.ok()) return runtime::Fail("wisp-token", process.status());
  std::atomic<bool> serving{false};  // ready only once keys are loaded and endpoints serve
  (*process)->endpoint().AddReadinessCheck("token", [&serving] {
    return serving ? absl::OkStatus() : absl::UnavailableError("signing keys not loaded yet");
  });
  auto kv = (*process)->OpenBucket({.name = std::string(bus::buckets::kKeys), .history = 5});
  if (!kv.ok()) return runtime::Fail("wisp-token", kv.status());
  token::TokenMetrics metrics((*process)->registry());
  Clock& clock = SystemClock::Instance();
  absl::StatusOr<token::Policy> policy = token::Policy::Default();
  if (!policy_file.empty()) policy = token::LoadPolicyFile(policy_file, nullptr, clock, &metrics);
  if (!policy.ok()) return runtime::Fail("wisp-token", policy.status());
  token::PolicyStore policy_store(*policy);
  token::KeyManager keys(
      **kv, *kek, clock,
      {.rotation_period = std::chrono::duration_cast<std::chrono::seconds>(rotation),
       .longest_token = std::chrono::seconds(policy->LongestTokenSeconds()),
       .default_algorithm = alg},
      &metrics);
  // A reloaded policy that allows longer tokens keeps keys retired from then on published longer.
  policy_store.OnReplace([&keys](const token::Policy& p) {
    keys.ExtendLongestToken(std::chrono::seconds(p.LongestTokenSeconds()));
  });
  // Declared after the key manager, so it stops (destructor) before the callback's target goes.
  // SIGHUP reaches main's WaitForSignal (runtime blocks it in every thread), which hands it to the
  // watcher: a second thread waiting for it too would take some signals and leave others.
  token::PolicyWatcher watcher(policy_store, {.path = policy_file, .handle_sighup = false}, clock,
                               metrics);
  if (!policy_file.empty()) watcher.Start();
  if (auto st = keys.Start(); !st.ok()) return runtime::Fail("wisp-token", st);
  token::Issuer issuer(keys, policy_store, clock, metrics,
                       {.issuer = issuer_url,
                        .default_algorithm = alg,
                        .leeway = std::chrono::duration_cast<std::chrono::seconds>(leeway)});
  token::Reviewer reviewer(
      keys, clock, metrics,
      {.issuer = issuer_url, .leeway = std::chrono::duration_cast<std::chrono::seconds>(leeway)});
  token::Exchanger exchanger(reviewer, issuer, policy_store, clock, metrics);
  auto micro =
      (*process)->RegisterService("signing keys, JWKS, bound tokens, STS exchange, review");
  if (!micro.ok()) return runtime::Fail("wisp-token", micro.status());
  token::TokenService service(**micro, (*process)->bus(), keys, issuer, reviewer, exchanger,
                              {.issuer = issuer_url,
                               .jwks_uri = jwks_uri,
                               .tick_interval = std::min<std::chrono::milliseconds>(
                                   std::chrono::seconds(10), rotation / 4)});
  if (auto st = service.Start(); !st.ok()) return runtime::Fail("wisp-token", st);
  serving = true;
  (*process)->WaitForSignal([&] {
    if (!policy_file.empty()) (void)watcher.Reload("SIGHUP");
  });
  service.Stop();
  watcher.Stop();
  return (*process)->Shutdown();
}
