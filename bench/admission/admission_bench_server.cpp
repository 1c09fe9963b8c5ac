// admission_bench_server: the gateway's admission door alone (HTTPS -> AdmissionHandler -> NATS ->
// wisp-policy), so bench/admission/run.sh measures exactly that path without CSI, OIDC or uploads.
// With --fixed-response it answers POST /mutate with that file at once, on the same HTTPS server:
// run.sh's HTTPS floor (FLOORS=1), the serving cost without the admission work or the bus.
#include <utility>

#include "admission/admission_handler.hpp"
#include "wisp/bus/loop_requester.hpp"
#include "wisp/config/flags.hpp"
#include "wisp/fsutil/read_file.hpp"
#include "wisp/http/server.hpp"
#include "wisp/runtime/runtime.hpp"

int main(int argc, char** argv) {
  using namespace wisp;
  runtime::CommonSettings common{.metrics_address = "127.0.0.1:0"};
  std::string cert, key, failure_mode = "closed", fixed_file;
  int64_t port = 18443, threads = 8;
  config::Flags flags("admission_bench_server",
                      "HTTPS admission webhooks over NATS, for benchmarks");
  runtime::AddCommonFlags(flags, common);
  flags.Int("port", &port, "HTTPS port on 127.0.0.1.");
  flags.Int("http-threads", &threads, "Threads serving HTTPS.");
  flags.String("tls-cert", &cert, "PEM certificate.");
  flags.String("tls-key", &key, "PEM key.");
  flags.Enum("failure-mode", &failure_mode, {"closed", "open"}, "Admission failure mode.");
  flags.String("fixed-response", &fixed_file,
               "Answer POST /mutate with this JSON file at once, without the admission handler.");
  bool bus_loop = true;
  flags.Bool("admission-bus-per-thread", &bus_loop,
             "As wisp-gateway's: the policy calls go over one NATS connection per HTTPS thread, "
             "on that thread (bus::LoopRequester). --no-admission-bus-per-thread: over the shared "
             "connection.");
  flags.ParseOrExit(argc, argv);
  std::string fixed;  // --fixed-response's answer, read before anything starts
  if (!fixed_file.empty()) {
    auto bytes = fsutil::ReadFile(fixed_file);
    if (!bytes.ok()) {
      return runtime::Fail(
          "admission_bench_server",
          absl::NotFoundError("fixed-response: " + std::string(bytes.status().message())));
    }
    fixed = *std::move(bytes);
  }
  auto process = runtime::Process::Start("admission-bench", common);
  if (!process.ok()) return runtime::Fail("admission_bench_server", process.status());
  auto server = http::Server::Create({.address = "127.0.0.1",
                                      .port = static_cast<uint16_t>(port),
                                      .cert_file = cert,
                                      .key_file = key,
                                      .threads = static_cast<int>(threads),
                                      .name = "admission-bench"});
  if (!server.ok()) return runtime::Fail("admission_bench_server", server.status());
  std::unique_ptr<bus::LoopRequester> loop;
  if (bus_loop && fixed_file.empty()) {
    auto l = bus::LoopRequester::Connect((*process)->bus_options(), (*server)->IoContexts(),
                                         (*process)->bus());
    if (!l.ok()) return runtime::Fail("admission_bench_server", l.status());
    loop = *std::move(l);
  }
  bus::Requester& requester = loop ? static_cast<bus::Requester&>(*loop) : (*process)->bus();
  gateway::admission::AdmissionHandler handler(
      requester, (*process)->registry(),
      {.failure_mode = *gateway::admission::ParseFailureMode(failure_mode),
       .kubernetes_version = "1.30"});
  if (fixed_file.empty()) {
    gateway::admission::RegisterAdmissionRoutes(**server, handler);
  } else {
    (*server)->HandleAsync(
        "POST", "/mutate",
        [fixed = std::move(fixed)](const http::Request&, http::Responder respond) {
          respond(http::Response::Json(200, fixed));
        });
  }
  if (auto st = (*server)->Start(); !st.ok()) return runtime::Fail("admission_bench_server", st);
  (*process)->WaitForSignal();
  (*server)->Stop();
  loop.reset();  // before the server's io_contexts go
  return (*process)->Shutdown();
}
