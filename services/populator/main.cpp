// wisp-populator: serves wisp.v1.volume.* and runs this node's population jobs until SIGTERM.
// The wiring is src/populator_app.cpp.
#include "populator_app.hpp"

int main(int argc, char** argv) {
  using namespace wisp;
  const char* kName = "wisp-populator";
  runtime::CommonSettings common{.metrics_address = "0.0.0.0:9093"};
  populator::PopulatorSettings settings;
  config::Flags flags(kName, "volume population: durable import jobs, blank volumes, clones");
  runtime::AddCommonFlags(flags, common);
  populator::AddPopulatorFlags(flags, settings);
  flags.ParseOrExit(argc, argv);
  if (auto st = populator::CheckPopulatorSettings(settings); !st.ok()) {
    return runtime::Fail(kName, st);
  }

  auto process = runtime::Process::Start(kName, common);
  if (!process.ok()) return runtime::Fail(kName, process.status());
  auto app = populator::PopulatorApp::Start(settings, **process);
  if (!app.ok()) return runtime::Fail(kName, app.status());
  (*process)->WaitForSignal();
  (*app)->Stop();
  return (*process)->Shutdown();
}
