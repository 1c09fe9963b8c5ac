#pragma once
// PolicyReloader: re-reads wisp-policy's rules file while the service runs, on SIGHUP and (when a
// watch interval is set) whenever the file's bytes change, e.g. a ConfigMap update.
//
// Contract:
//   - A file that loads is handed to `apply` (PolicyService::SetPolicy) and logged at info.
//   - A file that does not load (unreadable, bad YAML, an unknown key or a bad value) is refused:
//     the policy in force stays, a warning names the file and the problem ("policy reload
//     refused, keeping the policy in force: /etc/wisp/policy.yaml: rules.tokenSidecar: ..."), and
//     Reload returns the error. A refused file is retried by the watcher only once it changes
//     again.
//   - Every attempt counts in wisp_policy_reloads_total{trigger,result}; the gauge
//     wisp_policy_reload_success is 1 after a successful (or the initial) load, 0 after a refusal.
//   - The mechanism (reading, change detection, the watcher thread, serialization) is
//     config::FileReloader, shared with wisp-token's PolicyWatcher.
//
// Example:
//   policy::ReloadMetrics reload_metrics(registry);
//   policy::PolicyReloader reloader(path, [&](policy::Policy p) { service.SetPolicy(std::move(p));
//   },
//                                   reload_metrics);
//   reloader.Watch(std::chrono::seconds(10));      // optional
//   (*process)->WaitForSignal([&] { (void)reloader.Reload("sighup"); });
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "wisp/policy/policy.hpp"
#include "wisp/config/file_reloader.hpp"

namespace wisp::policy {

struct ReloadMetrics {
  explicit ReloadMetrics(prometheus::Registry& registry);
  prometheus::Family<prometheus::Counter>& reloads;  // wisp_policy_reloads_total{trigger,result}
  prometheus::Gauge& success;                        // wisp_policy_reload_success
};

class PolicyReloader {
 public:
  using Apply = std::function<void(Policy)>;

  // `path` is the file the running policy was loaded from (its bytes are read now, so the watcher
  // does not reload an unchanged file).
  PolicyReloader(std::string path, Apply apply, ReloadMetrics& metrics);
  ~PolicyReloader();
  PolicyReloader(const PolicyReloader&) = delete;
  PolicyReloader& operator=(const PolicyReloader&) = delete;

  // Loads the file and applies it, or refuses it (see the contract). `trigger` labels the metric.
  absl::Status Reload(std::string_view trigger);
  // Reloads only when the file's bytes differ from the last attempt's; OkStatus when unchanged.
  absl::Status ReloadIfChanged(std::string_view trigger);
  // Starts a thread that calls ReloadIfChanged("file-change") every `interval` until destruction.
  void Watch(std::chrono::milliseconds interval);

 private:
  absl::Status Load(const std::string& bytes);
  void Observe(std::string_view trigger, const absl::Status& result);

  const std::string path_;
  Apply apply_;
  ReloadMetrics& metrics_;
  std::unique_ptr<config::FileReloader> reloader_;
};

}  // namespace wisp::policy
