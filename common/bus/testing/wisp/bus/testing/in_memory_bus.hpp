#pragma once
// InMemoryBus: the whole wisp::bus::Bus interface in one process, synchronous and deterministic,
// for unit tests of code that talks to the bus. No NATS, no threads of its own.
//
// Contract:
//   - Publish/Request deliver on the caller's thread before returning: a Request calls the serving
//     handler directly (through the same ServeRequest() path NatsBus uses, so deadline headers,
//     request ids and micro error headers behave the same) and returns its reply.
//   - Queue groups pick members round-robin in subscription order; subscribers without a queue
//     group all receive every message. Subject wildcards '*' and '>' work as in NATS.
//   - Handlers are called with no lock held, so a handler may call the bus again.
//   - JetStream: streams capture every publish (core or Js) on their subjects. Pull consumers keep
//     NATS semantics that a durable job runner depends on: a delivered message is pending until
//     Ack/Term; Nak(delay) makes it available again after `delay`; after ack_wait without an ack it
//     is redelivered (delivery_count grows) until max_deliver; InProgress restarts ack_wait;
//     work-queue streams drop a message once acked or terminated; Nats-Msg-Id de-duplicates within
//     the duplicate window. Time for all of this comes from the injected Clock (use FakeClock and
//     Advance() instead of sleeping). Fetch returns at once when something is deliverable, else
//     waits up to `timeout` of real time for a publish or a FakeClock advance that makes something
//     due (noticed within ~5 ms), so a runner thread blocked in Fetch picks up redeliveries; pass 0
//     in tests that must not block.
//   - KV: revisions are per bucket and grow by one per write; Update is compare-and-set (Aborted on
//     a stale revision); Delete leaves a marker (Get -> NotFound, Watch sees deleted=true); Watch
//     delivers the current live entries, then the end marker (empty key), then every change.
//     PurgeDeletes drops the markers written more than `older_than` ago by the injected Clock
//     (KvStoredCount counts what is left, markers included).
//     Not modelled: history beyond the latest value, TTLs, stream max_age.
//   - Fault injection: FailSubject, DropReplies, ExpireRequests, FailBucket, SetConnected.
//
// Example:
//   wisp::FakeClock clock;
//   wisp::bus::testing::InMemoryBus bus(clock);
//   auto sub = bus.Serve(subjects::kTokenIssue, queues::kToken,
//                        [](const bus::Request& r) { return bus::Reply::Ok("pong"); });
//   auto reply = bus.Request(subjects::kTokenIssue, "ping", 1s);     // reply->data == "pong"
//   bus.FailSubject(subjects::kTokenIssue, absl::UnavailableError("down"));
//   bus.Request(subjects::kTokenIssue, "ping", 1s);                   // -> Unavailable
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wisp/bus/bus.hpp"
#include "wisp/status/clock.hpp"

namespace wisp::bus::testing {

class InMemoryBus final : public Bus {
 public:
  explicit InMemoryBus(Clock& clock = SystemClock::Instance());
  ~InMemoryBus() override;
  InMemoryBus(const InMemoryBus&) = delete;
  InMemoryBus& operator=(const InMemoryBus&) = delete;

  // ---- Bus ----
  absl::Status Publish(std::string_view subject, std::string_view data,
                       const Headers& headers = {}) override;
  absl::StatusOr<Message> Request(std::string_view subject, std::string_view data,
                                  std::chrono::milliseconds timeout,
                                  const Headers& headers = {}) override;
  absl::StatusOr<std::vector<Message>> RequestMany(std::string_view subject, std::string_view data,
                                                   std::chrono::milliseconds timeout,
                                                   int max_replies = 0,
                                                   const Headers& headers = {}) override;
  absl::StatusOr<SubscriptionPtr> Serve(std::string_view subject, std::string_view queue_group,
                                        RequestHandler handler) override;
  absl::StatusOr<SubscriptionPtr> Subscribe(std::string_view subject, std::string_view queue_group,
                                            MessageHandler handler) override;
  JetStream& Js() override;
  absl::StatusOr<KeyValuePtr> OpenBucket(const BucketConfig& config) override;
  ConnectionState State() const override;
  // Marks the bus closed: every later call returns Unavailable and blocked Fetch calls return.
  absl::Status Drain(std::chrono::milliseconds timeout) override;

  // ---- Fault injection (patterns may use NATS wildcards) ----
  // Publish, Request and Js().Publish on matching subjects return `status` without delivering.
  void FailSubject(std::string_view pattern, absl::Status status);
  // Requests on matching subjects reach the handler, but the caller gets DeadlineExceeded.
  void DropReplies(std::string_view pattern);
  // Requests on matching subjects arrive with their deadline already passed: the serving side
  // answers DeadlineExceeded without calling the handler.
  void ExpireRequests(std::string_view pattern);
  // Every call on the bucket's KeyValue handles returns `status`.
  void FailBucket(std::string_view bucket, absl::Status status);
  // false: State() is kReconnecting and every call returns Unavailable; subscriptions stay and
  // serve again after SetConnected(true), as NATS subscriptions survive a reconnect.
  void SetConnected(bool connected);
  void ClearFaults();

  // ---- Observation ----
  // Every message published (core and JetStream) on subjects matching `pattern`, oldest first.
  std::vector<Message> Published(std::string_view pattern = ">") const;
  // How many requests were sent on subjects matching `pattern` (including failed ones).
  int RequestCount(std::string_view pattern = ">") const;
  // Messages currently stored in `stream` (work-queue streams shrink as messages are acked).
  size_t StreamSize(std::string_view stream) const;
  // Entries stored in KV `bucket`, delete markers included (the stream's message count when the
  // bucket keeps one revision per key).
  size_t KvStoredCount(std::string_view bucket) const;
  // Messages of the durable consumer delivered and not yet acked/terminated.
  size_t PendingCount(std::string_view stream, std::string_view durable) const;

  struct Shared;  // shared with subscription and KV handles, which may outlive the bus

 private:
  std::shared_ptr<Shared> state_;
  std::unique_ptr<JetStream> js_;
};

}  // namespace wisp::bus::testing
