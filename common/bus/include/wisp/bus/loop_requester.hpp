#pragma once
// LoopRequester: RequestAsync over NATS connections that run on the caller's own event loop.
// Defined in target wisp::bus_asio (link it; wisp::bus alone has no Boost).
//
// NatsBus reads each connection on nats.c's reader thread and hands replies to a delivery
// thread, which hands them on to whoever waits (an HTTP I/O thread): two thread wake-ups per
// reply. A LoopRequester opens one more NATS connection per asio io_context it is given (one per
// HTTP I/O thread) in nats.c's event-loop mode. On that io_context's thread it writes the
// requests, reads the socket, matches replies and runs each callback, so an admission request
// and its answer never leave the I/O thread that read it, and the requests one pass of the loop
// publishes leave in one write.
//
// Contract:
//   - RequestAsync from a thread running one of the io_contexts goes over that thread's
//     connection, and `done` runs on that thread: later, from the loop, or before RequestAsync
//     returns when the request cannot even be sent. From any other thread, and while that
//     thread's connection is down (nats.c reconnects it in the background with NatsBus's backoff),
//     the request goes to `fallback`. Request (synchronous) always goes to `fallback`: a loop
//     thread must never wait for a reply that only it can read.
//   - `done` runs exactly once: the reply (micro error headers as that Status), Unavailable for no
//     responders, DeadlineExceeded after `timeout`, Unavailable when closed meanwhile. It must be
//     quick and must not block: it runs on the loop.
//   - Requests carry Wisp-Timeout-Ms and Wisp-Request-Id as NatsBus's do, and count in the same
//     client metrics (wisp_bus_client_requests_total, ..._duration_seconds) when
//     options.registry is set.
//   - Close() (and the destructor) fails what is still pending with Unavailable and closes the
//     connections. Call it while the io_contexts run, or after they have stopped for good (their
//     threads joined), and destroy the LoopRequester before the io_contexts.
//   - With options.retry_on_failed_connect, Connect succeeds while NATS is unreachable and each
//     connection keeps trying in the background (its thread uses `fallback` meanwhile).
//
// Example (the gateway):
//   auto server = http::Server::Create(...);
//   WISP_ASSIGN_OR_RETURN(auto loop, bus::LoopRequester::Connect(process.bus_options(),
//                                                               server->IoContexts(), bus));
//   AdmissionHandler admission(*loop, ...);          // its RequestAsync runs on the I/O threads
//   ... server->Stop(); loop->Close(); loop.reset(); server.reset();
#include <chrono>
#include <memory>
#include <vector>

#include "wisp/bus/bus.hpp"
#include "wisp/bus/nats_bus.hpp"

namespace boost::asio {
class io_context;
}

namespace wisp::bus {

class LoopRequester final : public Requester {
 public:
  // Connects one NATS connection per io_context (options as NatsBus::Connect; name gets
  // "-loop-<i>"). Unavailable when a connection fails.
  static absl::StatusOr<std::unique_ptr<LoopRequester>> Connect(
      const NatsBusOptions& options, const std::vector<boost::asio::io_context*>& loops,
      Requester& fallback);
  ~LoopRequester() override;
  LoopRequester(const LoopRequester&) = delete;
  LoopRequester& operator=(const LoopRequester&) = delete;

  absl::StatusOr<Message> Request(std::string_view subject, std::string_view data,
                                  std::chrono::milliseconds timeout,
                                  const Headers& headers = {}) override;
  void RequestAsync(std::string_view subject, std::string_view data,
                    std::chrono::milliseconds timeout, const Headers& headers,
                    ReplyCallback done) override;
  void Close();

  struct Impl;

 private:
  explicit LoopRequester(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace wisp::bus
