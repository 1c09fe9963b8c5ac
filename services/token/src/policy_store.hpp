#pragma once
// PolicyStore and PolicyWatcher: the token policy in force, and its hot reload.
//
// Contract:
//   - PolicyStore::Current() is an immutable snapshot; a request uses one snapshot throughout, so a
//     reload never mixes two policies within one issue or exchange. Replace() swaps atomically.
//   - LoadPolicyFile() parses the file and gives each trustedIssuers[] entry with a jwksUrl its
//     RemoteJwks: reused from `previous` when url, CA file and refresh are unchanged (its keys
//     carry over), else made and fetched once now (a failed first fetch is logged; the watcher
//     retries).
//   - PolicyWatcher re-reads the file on SIGHUP and when the file's bytes change (polled every
//     poll_interval; a file that is briefly missing, as in a ConfigMap's symlink swap, is not a
//     change), and refreshes remote JWKS when due. The mechanism is config::FileReloader, shared
//     with wisp-policy's PolicyReloader.
//     A file that does not load keeps the policy in force and logs why (naming the YAML key);
//     wisp_token_policy_reloads_total{outcome="ok"|"error"} counts both, and
//     wisp_token_policy_last_reload_success_timestamp_seconds is the time of the policy in force.
//   - With Options::handle_sighup the watcher's thread waits for SIGHUP itself, which works only
//     if BlockReloadSignal() ran before any thread was started. wisp-token's main instead leaves
//     SIGHUP to runtime::Process::WaitForSignal and calls Reload("SIGHUP") from there (one waiter,
//     so no signal is lost to the other).
//
// Example:
//   BlockReloadSignal();  // first thing in main
//   WISP_ASSIGN_OR_RETURN(Policy p, LoadPolicyFile(path, nullptr, clock, &metrics));
//   PolicyStore store(std::move(p));
//   PolicyWatcher watcher(store, {.path = path}, clock, metrics);
//   watcher.Start();  ... watcher.Stop();
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "metrics.hpp"
#include "policy.hpp"
#include "remote_jwks.hpp"
#include "wisp/config/file_reloader.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::token {

class PolicyStore {
 public:
  explicit PolicyStore(Policy initial);
  std::shared_ptr<const Policy> Current() const;
  void Replace(Policy next);
  // Called after every Replace, with the new policy, on the replacing thread (the key manager
  // learns of longer token lifetimes this way).
  void OnReplace(std::function<void(const Policy&)> callback);

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const Policy> current_;
  std::vector<std::function<void(const Policy&)>> callbacks_;
};

// Makes the fetcher of one trusted issuer's JWKS URL (tests pass fakes).
using JwksFetcherFactory =
    std::function<absl::StatusOr<std::shared_ptr<JwksFetcher>>(const TrustedIssuer&)>;
JwksFetcherFactory HttpsFetcherFactory();

absl::StatusOr<Policy> LoadPolicyFile(const std::string& path, const Policy* previous, Clock& clock,
                                      TokenMetrics* metrics,
                                      const JwksFetcherFactory& factory = HttpsFetcherFactory());
// The same for a policy already parsed (jwksUrl issuers get their RemoteJwks).
absl::Status AttachRemoteJwks(Policy& policy, const Policy* previous, Clock& clock,
                              TokenMetrics* metrics, const JwksFetcherFactory& factory);

// Blocks SIGHUP in the calling thread and the threads it starts later.
void BlockReloadSignal();

class PolicyWatcher {
 public:
  struct Options {
    std::string path;
    std::chrono::milliseconds poll_interval{1000};
    bool handle_sighup = true;
  };
  PolicyWatcher(PolicyStore& store, Options options, Clock& clock, TokenMetrics& metrics,
                JwksFetcherFactory factory = HttpsFetcherFactory());
  ~PolicyWatcher();

  // Re-reads the file now; on error the policy in force stays and the error is returned.
  absl::Status Reload(std::string_view trigger);
  // Refreshes every jwksUrl issuer of the policy in force whose interval has passed.
  void RefreshJwks();
  void Start();
  void Stop();

 private:
  absl::Status Apply();
  void Observe(std::string_view trigger, const absl::Status& result);

  PolicyStore& store_;
  const Options options_;
  Clock& clock_;
  TokenMetrics& metrics_;
  JwksFetcherFactory factory_;
  std::unique_ptr<config::FileReloader> reloader_;
};

}  // namespace wisp::token
