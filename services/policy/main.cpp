// wisp-policy: loads the rules file, serves wisp.v1.policy.{mutate,validate} until SIGTERM;
// SIGHUP (and, with --policy-reload-interval, a change of the file) reloads the rules file.
// The wiring is src/policy_app.cpp.
#include "wisp/policy/policy_app.hpp"

int main(int argc, char** argv) {
  using namespace wisp;
  runtime::CommonSettings common{.metrics_address = "0.0.0.0:9091"};
  policy::PolicySettings settings;
  config::Flags flags("wisp-policy", "injection and validation rules for admission");
  runtime::AddCommonFlags(flags, common);
  policy::AddPolicyFlags(flags, settings);
  flags.ParseOrExit(argc, argv);
  auto rules = policy::LoadPolicySettings(settings);
  if (!rules.ok()) return runtime::Fail("wisp-policy", rules.status());

  auto process = runtime::Process::Start("wisp-policy", common);
  if (!process.ok()) return runtime::Fail("wisp-policy", process.status());
  auto app = policy::PolicyApp::Start(settings, *std::move(rules), **process);
  if (!app.ok()) return runtime::Fail("wisp-policy", app.status());
  (*process)->WaitForSignal([&app] { (*app)->Reload(); });
  return (*process)->Shutdown();
}
