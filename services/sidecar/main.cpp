// wisp-sidecar: serves the pod's access token on a unix socket (gcsfuse gcs-auth:token-url),
// exchanging the projected service-account token at wisp's STS. The wiring is
// src/sidecar_app.cpp.
#include <csignal>
#include <iostream>

#include "sidecar_app.hpp"

int main(int argc, char** argv) {
  using namespace wisp;
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread exists

  sidecar::SidecarSettings settings;
  config::Flags flags("wisp-sidecar", "per-pod token-url server on a unix socket");
  sidecar::AddSidecarFlags(flags, settings);
  flags.ParseOrExit(argc, argv);
  if (settings.probe) return sidecar::Probe(settings);
  const auto fail = [](const absl::Status& st) {
    std::cerr << "wisp-sidecar: " << st.message() << "\n";
    return st.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  };
  if (auto st = sidecar::InitLogging(settings); !st.ok()) return fail(st);
  auto sts = sidecar::HttpStsClient::Create(sidecar::StsOptionsFrom(settings));
  if (!sts.ok()) return fail(sts.status());
  auto app = sidecar::SidecarApp::Start(settings, *std::move(sts));
  if (!app.ok()) return fail(app.status());
  int sig = 0;
  sigwait(&signals, &sig);
  (*app)->Stop();
  return 0;
}
