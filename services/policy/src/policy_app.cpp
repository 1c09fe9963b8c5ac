#include "wisp/policy/policy_app.hpp"

#include "wisp/bus/subjects.hpp"

namespace wisp::policy {

void AddPolicyFlags(config::Flags& flags, PolicySettings& s) {
  flags.String("policy-file", &s.policy_file,
               "YAML rules file (rules on/off, audiences per namespace, maximum token lifetime, "
               "sidecar image and resources, native-sidecar mode). Empty: built-in defaults. "
               "SIGHUP reloads it; a file that does not load is refused and the old rules stay.");
  flags.Duration("policy-reload-interval", &s.reload_interval,
                 "Also reload the policy file when its contents change, checked this often "
                 "(e.g. 10s for a mounted ConfigMap). 0: only on SIGHUP.");
  flags.Int("serve-loops", &s.serve_loops,
            "Serve the mutate and validate endpoints each on this many NATS connections of their "
            "own, each read, evaluated and answered by one thread: no thread hop per review, and "
            "the answers to one read leave in one write. A review that waits on the bus (a KV "
            "record) holds up the reviews behind it on its connection. Each is a NATS connection "
            "of its own (count them in connection limits). 0: serve them on the shared "
            "connection with --serve-threads threads.",
            config::Flags::Between(0, 64));
}

absl::StatusOr<Policy> LoadPolicySettings(const PolicySettings& s) {
  auto policy = s.policy_file.empty() ? ParsePolicyYaml("") : LoadPolicyFile(s.policy_file);
  if (!policy.ok()) {
    return absl::InvalidArgumentError("policy-file: " + std::string(policy.status().message()));
  }
  return policy;
}

absl::StatusOr<std::unique_ptr<PolicyApp>> PolicyApp::Start(const PolicySettings& s, Policy policy,
                                                            runtime::Process& process) {
  std::unique_ptr<PolicyApp> app(new PolicyApp());
  WISP_ASSIGN_OR_RETURN(app->sources_,
                        process.OpenBucket({.name = std::string(bus::buckets::kSources)}));
  app->metrics_ = std::make_unique<PolicyMetrics>(process.registry());
  app->service_ = std::make_unique<PolicyService>(*app->sources_, std::move(policy),
                                                  SystemClock::Instance(), *app->metrics_);
  WISP_ASSIGN_OR_RETURN(bus::Service * micro,
                        process.RegisterService("injection and validation rules for admission"));
  WISP_RETURN_IF_ERROR(app->service_->AddEndpoints(*micro, static_cast<int>(s.serve_loops)));
  app->reload_metrics_ = std::make_unique<ReloadMetrics>(process.registry());
  if (!s.policy_file.empty()) {
    app->reloader_.emplace(
        s.policy_file,
        [service = app->service_.get()](Policy p) { service->SetPolicy(std::move(p)); },
        *app->reload_metrics_);
    app->reloader_->Watch(s.reload_interval);
  }
  return app;
}

void PolicyApp::Reload() {
  if (reloader_) (void)reloader_->Reload("sighup");
}

}  // namespace wisp::policy
