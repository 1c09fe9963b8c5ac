// wisp-token: parses settings, starts the process skeleton and TokenApp, runs until SIGTERM
// (SIGHUP reloads the policy file). The wiring is src/token_app.cpp.
#include "token_app.hpp"

int main(int argc, char** argv) {
  using namespace wisp;
  token::BlockReloadSignal();  // before any thread: SIGHUP reloads the policy, never terminates
  runtime::CommonSettings common{.metrics_address = "0.0.0.0:9092"};
  token::TokenSettings settings;
  config::Flags flags("wisp-token",
                      "token issuance: signing keys, JWKS, bound tokens, STS exchange");
  runtime::AddCommonFlags(flags, common);
  token::AddTokenFlags(flags, settings);
  flags.ParseOrExit(argc, argv);
  auto kek = token::CheckTokenSettings(settings);
  if (!kek.ok()) return runtime::Fail("wisp-token", kek.status());

  auto process = runtime::Process::Start("wisp-token", common);
  if (!process.ok()) return runtime::Fail("wisp-token", process.status());
  auto app = token::TokenApp::Start(settings, *kek, **process);
  if (!app.ok()) return runtime::Fail("wisp-token", app.status());
  (*process)->WaitForSignal([&app] { (*app)->Reload(); });
  (*app)->Stop();
  return (*process)->Shutdown();
}
