#pragma once
// NatsBus: the production wisp::bus::Bus over NATS (nats.c 3.4.1). This header does not include
// nats.h; common/bus/src is the only code in wisp that does (src/nats_internal.hpp lists NatsBus's
// parts). Target wisp::bus, which needs no Boost. ServeOnLoops with connections > 0 and
// LoopRequester (loop_requester.hpp) need the event-loop part, target wisp::bus_asio: a program
// that does not link it gets FailedPrecondition from ServeOnLoops(..., connections > 0).
//
// Contract:
//   - Connect() returns Unavailable when no server in `servers` answers within connect_timeout
//     (unless retry_on_failed_connect), InvalidArgument naming the option for bad options.
//   - After connecting it reconnects forever with exponential backoff (reconnect_wait doubling up
//     to reconnect_wait_max, with jitter); subscriptions, queue groups and pull consumers are
//     re-established by nats.c, so Serve/Subscribe handlers serve again without any action.
//     While disconnected, Request fails fast with Unavailable; Publish is buffered by nats.c.
//   - SendAsap is always on (without it nats.c holds a small write about 1 ms).
//   - RequestAsync shares one wildcard reply subscription (<inbox>.*, made on first use) and one
//     timer thread per connection; its callback runs on that subscription's delivery thread (or the
//     timer thread on a timeout, or the caller's when the bus is not connected). Drain() and
//     destruction fail the requests still pending with Unavailable.
//   - Request sends Wisp-Timeout-Ms (the timeout) and Wisp-Request-Id (the caller's, else the
//     thread's wisp::log request id, else a fresh random id). Transport errors map NATS_TIMEOUT ->
//     DeadlineExceeded, NATS_NO_RESPONDERS / NATS_CONNECTION_CLOSED -> Unavailable; a reply with
//     micro error headers comes back as that Status.
//
// Threads (which thread runs each handler):
//   - Serve: the subscription's own threads (up to serve_threads + 1, started on demand) run the
//     handler, at most `serve_threads` at once (default 1: handlers of one subscription run one at
//     a time, in arrival order). A thread always waits for the next request and stamps its arrival
//     (within ~10 ms while a handler that took a lone request runs long), so a request whose
//     deadline passes while it waits behind a busy handler is answered DeadlineExceeded without
//     calling the handler. A lone request runs on the thread that received it (no extra thread
//     hop, for latency and CPU); a burst (nats.c holds more than one) also wakes a spare thread so
//     the rest run in parallel. A woken listener takes every request nats.c already holds (up to
//     64, stamped alike), and finished requests are freed in batches, so a burst costs a few
//     context switches rather than about three per request.
//   - ServeOnLoops: `connections` connections named <name>-serve-<subject>-<i>, each in nats.c's
//     event-loop mode on an asio io_context and a thread of its own, in the same queue group. The
//     thread reads the socket, stamps each request's arrival as nats.c parses it, runs the handler
//     there (one request after the other) and writes the replies of one read in one write.
//     Drain() and Subscription::Drain() drain them as Serve's (no request the server sent is
//     dropped). They reconnect as the bus does; requests sent while one is down go to the group's
//     other members.
//   - Subscribe: the handler runs on nats.c's delivery thread of that subscription (in order).
//   - KeyValue::Watch: the handler runs on the watch's own thread.
//   - Handlers of different subscriptions run concurrently. Destroying a Subscription waits for its
//     in-flight handler to return; do not destroy it from inside its own handler.
//   - JsMessage objects must not outlive the NatsBus that fetched them.
//
// Metrics (when `registry` is set): wisp_bus_connected, wisp_bus_reconnects_total,
// wisp_bus_client_requests_total{subject,code}, wisp_bus_client_request_duration_seconds{subject}.
//
// Example:
//   NatsBusOptions opts;
//   opts.servers = {"nats://nats-0:4222", "nats://nats-1:4222"};
//   opts.name = "wisp-token";
//   opts.registry = &metrics::Registry();
//   WISP_ASSIGN_OR_RETURN(auto bus, NatsBus::Connect(opts));
//   auto sub = bus->Serve(subjects::kTokenIssue, queues::kToken, handler);
//   ...
//   bus->Drain(std::chrono::seconds(10));
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "wisp/bus/bus.hpp"

namespace prometheus {
class Registry;
}

namespace wisp::bus {

struct NatsBusOptions {
  // One or more URLs (nats://host:port, tls://host:port); several = the members of a cluster.
  std::vector<std::string> servers = {"nats://127.0.0.1:4222"};
  std::string name;  // connection name shown by the server (use the service name)
  // Authentication: at most one of user/password, creds_file, token.
  std::string user;
  std::string password;
  std::string creds_file;
  std::string token;
  // TLS: a CA file turns on server verification; cert + key is the client certificate.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Subject prefix of every reply inbox this connection creates (requests, RequestMany, JetStream
  // API replies, pull fetches, KV watches). With one prefix per service user ("_INBOX.wisp-token")
  // the server can allow each user to subscribe to its own replies only, so no client can read
  // another's (a token issued to the gateway travels in a reply). Empty: nats.c's "_INBOX".
  std::string inbox_prefix;

  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds reconnect_wait{100};       // first backoff step
  std::chrono::milliseconds reconnect_wait_max{5000};  // backoff cap
  std::chrono::milliseconds ping_interval{10000};      // dead-server detection (2 missed pings)
  // true: Connect() succeeds while no server is reachable and keeps trying in the background.
  bool retry_on_failed_connect = false;
  // Worker threads per Serve subscription (handlers of one subscription run this many at once).
  int serve_threads = 1;
  // JetStream API calls (stream/consumer management, publish acks, KV) wait at most this long.
  std::chrono::milliseconds jetstream_timeout{5000};

  prometheus::Registry* registry = nullptr;  // not owned; nullptr = no metrics
};

class NatsBus final : public Bus {
 public:
  static absl::StatusOr<std::unique_ptr<NatsBus>> Connect(const NatsBusOptions& options);
  ~NatsBus() override;
  NatsBus(const NatsBus&) = delete;
  NatsBus& operator=(const NatsBus&) = delete;

  absl::Status Publish(std::string_view subject, std::string_view data,
                       const Headers& headers = {}) override;
  absl::StatusOr<Message> Request(std::string_view subject, std::string_view data,
                                  std::chrono::milliseconds timeout,
                                  const Headers& headers = {}) override;
  void RequestAsync(std::string_view subject, std::string_view data,
                    std::chrono::milliseconds timeout, const Headers& headers,
                    ReplyCallback done) override;
  absl::StatusOr<std::vector<Message>> RequestMany(std::string_view subject, std::string_view data,
                                                   std::chrono::milliseconds timeout,
                                                   int max_replies = 0,
                                                   const Headers& headers = {}) override;
  absl::StatusOr<SubscriptionPtr> Serve(std::string_view subject, std::string_view queue_group,
                                        RequestHandler handler) override;
  absl::StatusOr<SubscriptionPtr> ServeOnLoops(std::string_view subject,
                                               std::string_view queue_group, RequestHandler handler,
                                               int connections) override;
  absl::StatusOr<SubscriptionPtr> Subscribe(std::string_view subject, std::string_view queue_group,
                                            MessageHandler handler) override;
  JetStream& Js() override;
  absl::StatusOr<KeyValuePtr> OpenBucket(const BucketConfig& config) override;
  ConnectionState State() const override;
  absl::Status Drain(std::chrono::milliseconds timeout) override;

  // The URL of the server currently connected to ("" when none).
  std::string ConnectedUrl() const;

  struct Impl;

 private:
  explicit NatsBus(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace wisp::bus
