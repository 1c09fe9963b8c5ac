#pragma once
// The process skeleton every wisp service shares, so each main.cpp only wires its own parts.
//
// Contract:
//   - AddCommonFlags() declares the settings every service has (NATS, metrics, logging, drain,
//     JetStream replicas).
//   - Secrets never come from the command line (`ps` shows it to every user): --nats-password and
//     --nats-token are refused there; they come from their environment variables, the --config
//     file, or --nats-password-file / --nats-token-file, read once by NatsOptions().
//   - Buckets and streams opened through Process (OpenBucket, EnsureStream) get jetstream-replicas
//     copies: created with them, raised in place when an existing one has fewer (the bus logs it),
//     never lowered. More than the NATS cluster can place fails with one InvalidArgument line
//     naming jetstream-replicas (main exits 2).
//   - Process::Start() blocks SIGTERM/SIGINT/SIGHUP in every thread (before any thread exists),
//   installs
//     logging, connects the bus (retrying in the background while NATS is down, so a service can
//     start before its bus), starts /metrics /healthz /readyz with a "bus" readiness check, and
//     returns a Process. A failure is a Status whose message names the setting.
//   - RegisterService() announces the process as a NATS micro service (`$SRV.*`).
//   - WaitForSignal() returns on SIGTERM or SIGINT (SIGHUP runs its callback); Shutdown() drains
//   the micro service and the
//     bus (in-flight requests finish, at most drain-timeout) and stops the metrics endpoint.
//
// Example (a whole main.cpp):
//   runtime::CommonSettings common{.metrics_address = "0.0.0.0:9091"};
//   config::Flags flags("wisp-policy", "injection and validation rules for admission");
//   runtime::AddCommonFlags(flags, common);
//   flags.ParseOrExit(argc, argv);
//   auto process = runtime::Process::Start("wisp-policy", common);
//   if (!process.ok()) return runtime::Fail("wisp-policy", process.status());
//   ... build the service from (*process)->bus(), register endpoints ...
//   (*process)->WaitForSignal();
//   return (*process)->Shutdown();
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "wisp/bus/bus.hpp"
#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/service.hpp"
#include "wisp/config/flags.hpp"
#include "wisp/metrics/metrics.hpp"

namespace wisp::runtime {

struct CommonSettings {
  std::string nats_url = "nats://127.0.0.1:4222";
  std::string nats_user;
  std::string nats_password;
  std::string nats_password_file;
  std::string nats_creds;
  std::string nats_token;
  std::string nats_token_file;
  std::string nats_ca;
  std::string nats_cert;
  std::string nats_key;
  // Empty: "_INBOX.<service>" (the per-user reply prefix scripts/nats-auth and the chart allow).
  std::string nats_inbox_prefix;
  std::string metrics_address = "0.0.0.0:9090";
  std::string log_level = "info";
  std::string log_format = "text";
  std::chrono::milliseconds drain_timeout = std::chrono::seconds(10);
  std::chrono::milliseconds bus_wait = std::chrono::minutes(2);
  int64_t serve_threads = 4;
  // Copies JetStream keeps of each bucket and stream this service creates (1..5).
  int64_t jetstream_replicas = 1;
};

void AddCommonFlags(config::Flags& flags, CommonSettings& settings);
// Only the NATS connection flags (nats-url ... nats-inbox-prefix), for a tool that connects like
// a service but is not one (wispctl). AddCommonFlags declares them too.
void AddNatsFlags(config::Flags& flags, CommonSettings& settings);
// The NATS half of the settings as connection options (servers, name, credentials, TLS, inbox
// prefix "_INBOX.<name>" unless set): the one mapping Process::Start and wispctl both use. Reads
// nats-password-file / nats-token-file (trailing newline dropped). InvalidArgument naming the flag
// for a bad nats-url, nats-cert without nats-key (or back), a secret given both as a value and as
// a file, or a secret file that cannot be read or is empty.
absl::StatusOr<bus::NatsBusOptions> NatsOptions(const CommonSettings& settings,
                                                const std::string& name);

// Splits "nats://a:4222,nats://b:4222" into URLs; InvalidArgument naming nats-url when empty or
// when a URL has no scheme.
absl::StatusOr<std::vector<std::string>> ParseNatsUrls(std::string_view text);

// The start-up error for a bucket or stream JetStream cannot place with `replicas` (> 1) copies
// (bus::IsReplicaPlacementError): one InvalidArgument line naming jetstream-replicas, what was
// asked and what NATS said. Any other status, or any status with one copy, comes back as it is.
absl::Status ExplainReplicaError(const absl::Status& status, int64_t replicas);

// Runs `call` until it succeeds or fails with something other than Unavailable or
// DeadlineExceeded (transport trouble: NATS not reachable yet, a JetStream stream still electing
// its leader), waiting 100 ms doubling up to 5 s between calls and logging each wait, for at most
// `wait`; then the last status, annotated with "<what> (gave up after bus-wait <wait>)". A
// SIGTERM or SIGINT pending (blocked for sigwait) stops it at once with Cancelled.
//   WISP_RETURN_IF_ERROR(RetryWhileUnreachable("loading the signing keys", 2min,
//                                              [&] { return keys.Start(); }));
absl::Status RetryWhileUnreachable(std::string_view what, std::chrono::milliseconds wait,
                                   const std::function<absl::Status()>& call);

class Process {
 public:
  static absl::StatusOr<std::unique_ptr<Process>> Start(std::string service,
                                                        const CommonSettings& settings);
  ~Process();

  bus::Bus& bus();
  // The options bus() connected with (servers, credentials, TLS, inbox prefix, registry), for a
  // part that opens connections of its own (the gateway's bus::LoopRequester).
  const bus::NatsBusOptions& bus_options() const;
  prometheus::Registry& registry();
  std::shared_ptr<prometheus::Registry> shared_registry();
  metrics::Endpoint& endpoint();

  // Opens (creating when missing) a KV bucket, retrying with backoff while NATS or JetStream is not
  // reachable yet, at most bus-wait; so a service started before its bus waits instead of exiting.
  // The bucket's replicas are jetstream-replicas, whatever config.replicas says (see the contract).
  absl::StatusOr<bus::KeyValuePtr> OpenBucket(bus::BucketConfig config);
  // Creates or updates a JetStream stream with the same patience and the same replicas rule.
  absl::Status EnsureStream(bus::StreamConfig config);
  int jetstream_replicas() const { return static_cast<int>(settings_.jetstream_replicas); }
  // The same patience for any start-up call that needs the bus (streams, consumers, a first read
  // of a bucket): RetryWhileUnreachable with bus-wait.
  absl::Status RetryUntilBus(std::string_view what, const std::function<absl::Status()>& call);

  // Announces this process as a NATS micro service; endpoints are added on the returned Service.
  absl::StatusOr<bus::Service*> RegisterService(std::string description);

  // Blocks until SIGTERM or SIGINT. Each SIGHUP meanwhile runs `on_hangup` (a reload) on this
  // thread, or is logged and ignored when there is none. /readyz answers 503 ("started") until
  // this is called, i.e. until main has started the service (the gateway's HTTPS listener, every
  // endpoint), and again once the signal has arrived and the process drains.
  void WaitForSignal(const std::function<void()>& on_hangup = nullptr);
  // Drains and stops; returns the process exit code (0 after a clean drain).
  int Shutdown();

 private:
  Process() = default;
  std::string service_;
  CommonSettings settings_;
  bus::NatsBusOptions bus_options_;
  std::unique_ptr<bus::Bus> bus_;
  std::unique_ptr<metrics::Endpoint> endpoint_;
  std::unique_ptr<bus::Service> micro_;
  std::shared_ptr<std::atomic<bool>> serving_ = std::make_shared<std::atomic<bool>>(false);
};

// Prints "<service>: <status message>" to stderr and returns the exit code for it: 2 for an
// InvalidArgument (a bad setting), 0 for Cancelled (SIGTERM while starting), 1 otherwise.
int Fail(std::string_view service, const absl::Status& status);

}  // namespace wisp::runtime
