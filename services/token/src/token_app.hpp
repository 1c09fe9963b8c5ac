#pragma once
// wisp-token's wiring, out of main.cpp: its settings and flags, the checks that run before
// anything starts, and TokenApp, which builds the key manager, policy store and watcher, issuer,
// reviewer, exchanger and TokenService on a started runtime::Process and serves until Stop().
//
// Contract:
//   - AddTokenFlags() declares wisp-token's own flags (runtime::AddCommonFlags the shared ones).
//   - CheckTokenSettings() runs before the process starts: a missing or unreadable
//     key-encryption-key-file, a key-publish-ahead not below key-rotation-period, or a policy file
//     that does not load is an InvalidArgument naming the setting (main exits 2), as before any
//     connection is made.
//   - TokenApp::Start() opens wisp_keys (waiting for the bus as runtime does), loads the keys and
//     serves; /readyz reports "signing keys not loaded yet" until then. Reload() re-reads the
//     policy file (SIGHUP); Stop() stops the rotation loop, the policy watcher and the watch on
//     the key set (before the bus drains, so that drain takes no 5 s JetStream timeout).
//
// Example (wisp-token's main.cpp):
//   token::TokenSettings settings;
//   token::AddTokenFlags(flags, settings);
//   flags.ParseOrExit(argc, argv);
//   auto kek = token::CheckTokenSettings(settings);   // before Process::Start
//   auto app = token::TokenApp::Start(settings, *kek, **process);
//   (*process)->WaitForSignal([&] { (*app)->Reload(); });
//   (*app)->Stop();
#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "exchanger.hpp"
#include "issuer.hpp"
#include "key_manager.hpp"
#include "lifetime_jitter.hpp"
#include "metrics.hpp"
#include "policy_store.hpp"
#include "reviewer.hpp"
#include "token_service.hpp"
#include "wisp/config/flags.hpp"
#include "wisp/jwt/seal.hpp"
#include "wisp/runtime/runtime.hpp"

namespace wisp::token {

struct TokenSettings {
  std::string kek_file;
  std::string algorithm = "RS256";
  std::string issuer_url = "https://localhost:8443";
  std::string jwks_uri;
  std::string policy_file;
  std::chrono::milliseconds rotation = std::chrono::hours(24);
  std::chrono::milliseconds publish_ahead{0};  // 0 = rotation / 2
  std::chrono::milliseconds leeway = std::chrono::seconds(60);
  int64_t lifetime_jitter_percent = kDefaultLifetimeJitterPercent;
};

void AddTokenFlags(config::Flags& flags, TokenSettings& settings);

// The key-encryption key, once the settings are known to be usable (see the contract).
absl::StatusOr<jwt::Kek> CheckTokenSettings(const TokenSettings& settings);

class TokenApp {
 public:
  static absl::StatusOr<std::unique_ptr<TokenApp>> Start(const TokenSettings& settings,
                                                         const jwt::Kek& kek,
                                                         runtime::Process& process);
  ~TokenApp();

  // Re-reads the policy file (nothing without one); a file that does not load keeps the policy.
  void Reload();
  void Stop();

 private:
  TokenApp() = default;
  std::string policy_file_;
  std::shared_ptr<std::atomic<bool>> serving_ = std::make_shared<std::atomic<bool>>(false);
  bus::KeyValuePtr keys_bucket_;
  std::unique_ptr<TokenMetrics> metrics_;
  std::unique_ptr<PolicyStore> policy_store_;
  std::unique_ptr<KeyManager> keys_;
  // After the key manager, so it stops (destructor) before its callback's target goes.
  std::unique_ptr<PolicyWatcher> watcher_;
  std::unique_ptr<Issuer> issuer_;
  std::unique_ptr<Reviewer> reviewer_;
  std::unique_ptr<Exchanger> exchanger_;
  std::unique_ptr<TokenService> service_;
};

}  // namespace wisp::token
