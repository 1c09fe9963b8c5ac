#pragma once
// wisp's message bus: request/reply, publish, queue-group subscriptions, JetStream streams with
// pull consumers, and key-value buckets. Services code against these interfaces only; NatsBus
// (nats_bus.hpp) is the production implementation and the only code in wisp that includes nats.h;
// InMemoryBus (testing/in_memory_bus.hpp) is the synchronous fake for unit tests.
//
// Errors: every call returns absl::Status codes. A remote handler's error travels in the NATS
// service ("micro") headers Nats-Service-Error-Code (the gRPC code number) and Nats-Service-Error
// (the message) and comes back from Request() as that same Status. Transport failures map as:
// timeout -> DeadlineExceeded, no responders / connection closed -> Unavailable.
//
// Deadlines: Request(subject, data, timeout) sends the remaining budget in header Wisp-Timeout-Ms.
// The serving side computes its deadline from it; a request whose deadline has passed before its
// handler runs is answered DeadlineExceeded without calling the handler, and a handler should stop
// work once ctx.Expired().
//
// Example (serving):
//   auto sub = bus.Subscribe(subjects::kTokenIssue, queues::kToken,
//       [&](const Request& req) -> Reply { return issuer.Issue(req); });
// Example (calling):
//   WISP_ASSIGN_OR_RETURN(Message reply, bus.Request(subjects::kTokenIssue, body, 2s));
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wisp/status/status.hpp"

namespace wisp::bus {

// Header names wisp puts on the wire (values are plain ASCII).
inline constexpr std::string_view kHeaderErrorCode = "Nats-Service-Error-Code";
inline constexpr std::string_view kHeaderError = "Nats-Service-Error";
inline constexpr std::string_view kHeaderTimeoutMs = "Wisp-Timeout-Ms";
inline constexpr std::string_view kHeaderRequestId = "Wisp-Request-Id";
inline constexpr std::string_view kHeaderMsgId = "Nats-Msg-Id";  // JetStream de-duplication

// One value per header name is all wisp uses.
using Headers = std::map<std::string, std::string, std::less<>>;

struct Message {
  std::string subject;
  std::string reply;  // empty for a publish
  std::string data;
  Headers headers;

  std::string_view Header(std::string_view name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string_view() : std::string_view(it->second);
  }
};

// What a request handler sees.
struct Request {
  Message msg;
  std::chrono::steady_clock::time_point deadline;  // from Wisp-Timeout-Ms, or max() when absent
  std::string request_id;                          // from Wisp-Request-Id (may be empty)

  bool Expired() const { return std::chrono::steady_clock::now() >= deadline; }
  std::chrono::milliseconds Remaining() const;
};

// What a request handler answers: a body, or an error that goes out in the micro headers.
struct Reply {
  absl::Status status = absl::OkStatus();
  std::string data;
  Headers headers;

  static Reply Ok(std::string data) { return Reply{absl::OkStatus(), std::move(data), {}}; }
  static Reply Error(absl::Status status) { return Reply{std::move(status), {}, {}}; }
};

using RequestHandler = std::function<Reply(const Request&)>;
using MessageHandler = std::function<void(const Message&)>;

class Subscription {
 public:
  virtual ~Subscription() = default;
  // Stops delivery after in-flight messages are handled. Destruction also unsubscribes.
  virtual absl::Status Drain() = 0;
};
using SubscriptionPtr = std::unique_ptr<Subscription>;

class Publisher {
 public:
  virtual ~Publisher() = default;
  virtual absl::Status Publish(std::string_view subject, std::string_view data,
                               const Headers& headers = {}) = 0;
};

class Requester {
 public:
  virtual ~Requester() = default;
  // Sends a request and waits for one reply, at most `timeout`. A reply carrying micro error
  // headers comes back as that error Status.
  virtual absl::StatusOr<Message> Request(std::string_view subject, std::string_view data,
                                          std::chrono::milliseconds timeout,
                                          const Headers& headers = {}) = 0;

  // Completion of RequestAsync: the reply, or the error Request() would have returned.
  using ReplyCallback = std::function<void(absl::StatusOr<Message>)>;
  // Request() without holding a thread while the reply travels: sends and returns at once, and
  // `done` runs exactly once, with the reply or the same errors as Request() (DeadlineExceeded
  // once `timeout` has passed). It runs on a bus thread (NatsBus: the reply-delivery thread, or its
  // timer thread on a timeout), or on the calling thread before RequestAsync returns when the
  // request cannot even be sent; so it must be quick and must not block. This default runs
  // Request() and then `done` on the calling thread, which keeps fakes synchronous.
  virtual void RequestAsync(std::string_view subject, std::string_view data,
                            std::chrono::milliseconds timeout, const Headers& headers,
                            ReplyCallback done);
};

class Subscriber {
 public:
  virtual ~Subscriber() = default;
  // Serves requests on `subject`; with a non-empty queue group one member of the group gets each.
  // Handlers run on the bus's delivery threads (NatsBus: one thread per subscription, so a slow
  // handler delays only its own subject); they must be thread-safe against other subscriptions.
  virtual absl::StatusOr<SubscriptionPtr> Serve(std::string_view subject,
                                                std::string_view queue_group,
                                                RequestHandler handler) = 0;
  // Serves `subject` as Serve does, for a hot subject whose handler is short. NatsBus gives it
  // `connections` NATS connections of its own in nats.c's event-loop mode, each on a thread of its
  // own that reads the requests, runs the handler and writes the replies of one read at once (no
  // thread hop per request, one write per read). A handler that blocks holds up the requests behind
  // it on its connection. `connections` <= 0, and buses without event loops (this default), serve
  // with Serve.
  virtual absl::StatusOr<SubscriptionPtr> ServeOnLoops(std::string_view subject,
                                                       std::string_view queue_group,
                                                       RequestHandler handler, int connections) {
    (void)connections;
    return Serve(subject, queue_group, std::move(handler));
  }
  // Receives plain messages (events, notifications).
  virtual absl::StatusOr<SubscriptionPtr> Subscribe(std::string_view subject,
                                                    std::string_view queue_group,
                                                    MessageHandler handler) = 0;
};

// ---- JetStream -------------------------------------------------------------------------------

struct StreamConfig {
  std::string name;
  std::vector<std::string> subjects;
  bool work_queue = false;  // retention: work-queue (each message consumed once) vs limits
  int replicas = 1;
  std::chrono::seconds max_age{0};  // 0 = unlimited
  int64_t max_msg_size = -1;
  std::chrono::seconds duplicate_window{120};
};

struct ConsumerConfig {
  std::string durable;         // durable name: survives restarts, shared by instances
  std::string filter_subject;  // empty = whole stream
  std::chrono::seconds ack_wait{30};
  int max_deliver = -1;  // -1 = unlimited
  int64_t max_ack_pending = 1000;
};

// A message delivered by a pull consumer; exactly one of Ack/Nak/Term ends it.
class JsMessage {
 public:
  virtual ~JsMessage() = default;
  virtual const Message& msg() const = 0;
  virtual uint64_t stream_sequence() const = 0;
  virtual uint64_t delivery_count() const = 0;  // 1 on first delivery
  virtual absl::Status Ack() = 0;
  virtual absl::Status Nak(std::chrono::milliseconds delay = std::chrono::milliseconds(0)) = 0;
  virtual absl::Status InProgress() = 0;  // resets the ack-wait timer (heartbeat)
  virtual absl::Status Term() = 0;        // never redeliver
};
using JsMessagePtr = std::unique_ptr<JsMessage>;

class PullConsumer {
 public:
  virtual ~PullConsumer() = default;
  // Up to `batch` messages; waits at most `timeout`; an empty vector on timeout (not an error).
  virtual absl::StatusOr<std::vector<JsMessagePtr>> Fetch(int batch,
                                                          std::chrono::milliseconds timeout) = 0;
};
using PullConsumerPtr = std::unique_ptr<PullConsumer>;

class JetStream {
 public:
  virtual ~JetStream() = default;
  // Creates the stream, or updates it to `config` when it exists.
  virtual absl::Status EnsureStream(const StreamConfig& config) = 0;
  // Publishes and waits for the stream's ack; returns the stream sequence. A non-empty msg_id is
  // de-duplicated by the server inside the stream's duplicate window.
  virtual absl::StatusOr<uint64_t> Publish(std::string_view subject, std::string_view data,
                                           const Headers& headers = {},
                                           std::string_view msg_id = {}) = 0;
  virtual absl::StatusOr<PullConsumerPtr> PullSubscribe(std::string_view stream,
                                                        const ConsumerConfig& config) = 0;
};

// ---- Key-value buckets -----------------------------------------------------------------------

struct KvEntry {
  std::string key;
  std::string value;
  uint64_t revision = 0;
  bool deleted = false;  // delete/purge marker, seen only through Watch
};

struct BucketConfig {
  std::string name;
  int history = 1;
  std::chrono::seconds ttl{0};  // 0 = keep forever
  int replicas = 1;
  int64_t max_value_size = -1;
};

class KvWatch {
 public:
  virtual ~KvWatch() = default;
};
using KvWatchPtr = std::unique_ptr<KvWatch>;
// Called with every current entry first, then each change; an entry with an empty key marks the end
// of the initial values.
using KvWatchHandler = std::function<void(const KvEntry&)>;

class KeyValue {
 public:
  virtual ~KeyValue() = default;
  virtual const std::string& bucket() const = 0;
  // NotFound when absent or deleted.
  virtual absl::StatusOr<KvEntry> Get(std::string_view key) = 0;
  virtual absl::StatusOr<uint64_t> Put(std::string_view key, std::string_view value) = 0;
  // AlreadyExists when the key holds a value.
  virtual absl::StatusOr<uint64_t> Create(std::string_view key, std::string_view value) = 0;
  // Compare-and-set: Aborted when the key's revision is not `revision` (someone else wrote).
  virtual absl::StatusOr<uint64_t> Update(std::string_view key, std::string_view value,
                                          uint64_t revision) = 0;
  virtual absl::Status Delete(std::string_view key) = 0;
  // Removes, for every key whose latest entry is a delete marker written more than `older_than`
  // ago, that marker and whatever it hides; 0 removes every marker. Live keys and younger markers
  // stay. A delete keeps its marker in the bucket's stream for good (a watcher must see it), so a
  // bucket whose keys are deleted and never reused grows by one marker per key unless this runs
  // from time to time. Idempotent; several processes may run it at once. NatsBus: nats.c
  // kvStore_PurgeDeletes (an ordered consumer over the bucket, then one $JS.API.STREAM.PURGE per
  // marker, by subject). Race: a key written again between the scan and its purge loses that new
  // value, so use it only on buckets whose deleted keys are not written again (wisp_projections:
  // volume ids are unique per pod). InvalidArgument for a negative `older_than`.
  virtual absl::Status PurgeDeletes(std::chrono::milliseconds older_than) = 0;
  virtual absl::StatusOr<std::vector<std::string>> Keys() = 0;
  // Watches keys matching `pattern` (NATS wildcards; ">" for all). Handler runs on a bus thread.
  virtual absl::StatusOr<KvWatchPtr> Watch(std::string_view pattern, KvWatchHandler handler) = 0;
};
using KeyValuePtr = std::unique_ptr<KeyValue>;

// ---- The whole bus ---------------------------------------------------------------------------

enum class ConnectionState { kConnected, kReconnecting, kClosed };

class Bus : public Publisher, public Requester, public Subscriber {
 public:
  virtual JetStream& Js() = 0;
  // Opens the bucket, creating it with `config` when it does not exist.
  virtual absl::StatusOr<KeyValuePtr> OpenBucket(const BucketConfig& config) = 0;
  virtual ConnectionState State() const = 0;
  // Flushes and waits (at most `timeout`) for every subscription's in-flight handlers, then closes.
  virtual absl::Status Drain(std::chrono::milliseconds timeout) = 0;
  // Sends one request and collects every reply that arrives within `timeout`, stopping early after
  // `max_replies` (0 = no limit). Used for discovery ($SRV.PING: every instance answers). Replies
  // are returned as they came, error headers included (read them with StatusFromHeaders). No reply
  // at all is an empty vector, not an error. The default sends one Request() and returns its reply.
  virtual absl::StatusOr<std::vector<Message>> RequestMany(std::string_view subject,
                                                           std::string_view data,
                                                           std::chrono::milliseconds timeout,
                                                           int max_replies = 0,
                                                           const Headers& headers = {});
};
using BusPtr = std::unique_ptr<Bus>;

// Maps a reply's micro error headers to a Status (OK when there are none).
absl::Status StatusFromHeaders(const Headers& headers);

// The Unavailable a request gets when it reached the bus and nobody serves its subject (NATS "no
// responders"), marked so that IsNoResponders() tells it from a bus that is down, a timeout, or a
// handler that answered Unavailable itself. NatsBus and InMemoryBus return it; the populator takes
// it as "no populator on that node" (services/populator/src/lost_nodes.hpp).
absl::Status NoRespondersError(std::string message);
bool IsNoResponders(const absl::Status& status);

// Sets the micro error headers for a non-OK status.
void SetErrorHeaders(const absl::Status& status, Headers& headers);

// ---- For Bus implementations (NatsBus, InMemoryBus); services do not need these -------------

// Serves one incoming request the way every wisp bus does: reads Wisp-Timeout-Ms and
// Wisp-Request-Id, answers DeadlineExceeded without calling `handler` when the deadline (counted
// from `received`) has already passed, answers InvalidArgument for a malformed Wisp-Timeout-Ms,
// otherwise calls `handler`. The returned reply has the micro error headers set when not OK.
Reply ServeRequest(const RequestHandler& handler, Message msg,
                   std::chrono::steady_clock::time_point received);

// True when `subject` matches the NATS subscription pattern `pattern` ('*' one token, '>' the
// rest).
bool SubjectMatches(std::string_view pattern, std::string_view subject);

}  // namespace wisp::bus
