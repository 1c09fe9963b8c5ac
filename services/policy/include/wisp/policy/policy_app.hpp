#pragma once
// wisp-policy's wiring, out of main.cpp: its settings and flags, loading the rules file before
// anything starts, and PolicyApp, which serves PolicyService on a started runtime::Process and
// reloads the file on SIGHUP (and on change, with --policy-reload-interval).
//
// Contract:
//   - AddPolicyFlags() declares wisp-policy's own flags (runtime::AddCommonFlags the shared ones).
//   - LoadPolicySettings() reads the policy file (built-in defaults without one); a file that does
//     not load is an InvalidArgument naming policy-file (main exits 2) before any connection.
//   - PolicyApp::Start() opens wisp_sources, registers the mutate and validate
//     endpoints (on --serve-loops connections of their own) and starts the file watcher.
//   - Reload() reloads the file (SIGHUP); a file that does not load is refused, the rules stay.
//
// Example (wisp-policy's main.cpp):
//   policy::PolicySettings settings;
//   policy::AddPolicyFlags(flags, settings);
//   flags.ParseOrExit(argc, argv);
//   auto rules = policy::LoadPolicySettings(settings);
//   auto app = policy::PolicyApp::Start(settings, *std::move(rules), **process);
//   (*process)->WaitForSignal([&] { (*app)->Reload(); });
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "wisp/config/flags.hpp"
#include "wisp/policy/policy.hpp"
#include "wisp/policy/policy_service.hpp"
#include "wisp/policy/reload.hpp"
#include "wisp/runtime/runtime.hpp"

namespace wisp::policy {

struct PolicySettings {
  std::string policy_file;
  std::chrono::milliseconds reload_interval{0};
  int64_t serve_loops = 1;
};

void AddPolicyFlags(config::Flags& flags, PolicySettings& settings);

// The rules in force at start (see the contract).
absl::StatusOr<Policy> LoadPolicySettings(const PolicySettings& settings);

class PolicyApp {
 public:
  static absl::StatusOr<std::unique_ptr<PolicyApp>> Start(const PolicySettings& settings,
                                                          Policy policy, runtime::Process& process);
  // Reloads the policy file (nothing without one).
  void Reload();

 private:
  PolicyApp() = default;
  bus::KeyValuePtr sources_;
  std::unique_ptr<PolicyMetrics> metrics_;
  std::unique_ptr<PolicyService> service_;
  std::unique_ptr<ReloadMetrics> reload_metrics_;
  std::optional<PolicyReloader> reloader_;
};

}  // namespace wisp::policy
