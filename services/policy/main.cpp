// wisp-policy: loads the rules file, serves wisp.v1.policy.{mutate,validate} until SIGTERM;
// SIGHUP (and, with --policy-reload-interval, a change of the file) reloads the rules file.
#include "policy/src/policy_service.hpp"
#include "policy/src/reload.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/runtime/runtime.hpp"

int main(int argc, char** argv) {
  using namespace wisp;
  runtime::CommonSettings common{.metrics_address = "0.0.0.0:9091"};
  std::string policy_file;
  std::chrono::milliseconds reload_interval{0};
  config::Flags flags("wisp-policy", "injection and validation rules for admission");
  runtime::AddCommonFlags(flags, common);
  flags.String("policy-file", &policy_file,
               "YAML rules file (rules on/off, audiences per namespace, maximum token lifetime, "
               "sidecar image and resources, native-sidecar mode). Empty: built-in defaults. "
               "SIGHUP reloads it; a file that does not load is refused and the old rules stay.");
  flags.Duration("policy-reload-interval", &reload_interval,
                 "Also reload the policy file when its contents change, checked this often "
                 "(e.g. 10s for a mounted ConfigMap). 0: only on SIGHUP.");
  int64_t serve_loops = 1;
  flags.Int("serve-loops", &serve_loops,
            "Serve the mutate and validate endpoints each on this many NATS connections of their "
            "own, each read, evaluated and answered by one thread: no thread hop per review, and "
            "the answers to one read leave in one write. A review that waits on the bus (a KV "
            "record) holds up the reviews behind it on its connection. Each is a NATS connection "
            "of its own (count them in connection limits). 0: serve them on the shared "
            "connection with --serve-threads threads.",
            [](int64_t n) {
              return n >= 0 && n <= 64 ? absl::OkStatus()
                                       : absl::InvalidArgumentError("must be between 0 and 64");
            });
  flags.ParseOrExit(argc, argv);
  auto policy =
      policy_file.empty() ? policy::ParsePolicyYaml("") : policy::LoadPolicyFile(policy_file);
  if (!policy.ok()) {
    return runtime::Fail(
        "wisp-policy",
        absl::InvalidArgumentError("policy-file: " + std::string(policy.status().message())));
  }

  auto process = runtime::Process::Start("wisp-policy", common);
  if (!process.ok()) return runtime::Fail("wisp-policy", process.status());
  auto pods = (*process)->OpenBucket({.name = std::string(bus::buckets::kPods)});
  if (!pods.ok()) return runtime::Fail("wisp-policy", pods.status());
  auto sources = (*process)->OpenBucket({.name = std::string(bus::buckets::kSources)});
  if (!sources.ok()) return runtime::Fail("wisp-policy", sources.status());
  policy::PolicyMetrics metrics((*process)->registry());
  policy::PolicyService service(**pods, **sources, *policy, SystemClock::Instance(), metrics);
  auto micro = (*process)->RegisterService("injection and validation rules for admission");
  if (!micro.ok()) return runtime::Fail("wisp-policy", micro.status());
  if (auto st = service.AddEndpoints(**micro, static_cast<int>(serve_loops)); !st.ok()) {
    return runtime::Fail("wisp-policy", st);
  }
  policy::ReloadMetrics reload_metrics((*process)->registry());
  std::optional<policy::PolicyReloader> reloader;
  if (!policy_file.empty()) {
    reloader.emplace(
        policy_file, [&service](policy::Policy p) { service.SetPolicy(std::move(p)); },
        reload_metrics);
    reloader->Watch(reload_interval);
  }
  (*process)->WaitForSignal([&reloader] {
    if (reloader) (void)reloader->Reload("sighup");
  });
  return (*process)->Shutdown();
}
