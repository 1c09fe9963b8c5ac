#pragma once
// Private to common/bus: what the parts of NatsBus share. The parts are nats_common.cpp (status
// mapping, messages, subscription lifetime), nats_connection.cpp (options, connect, reconnect,
// close and drain), nats_request.cpp (Request, RequestAsync, RequestMany), nats_serve.cpp (Serve,
// Subscribe, and the door to ServeOnLoops), nats_jetstream.cpp and nats_kv.cpp, all in wisp::bus;
// and, in wisp::bus_asio (the only part that needs Boost), the event-loop connections
// (nats_loop_conn.*, loop_requester.cpp, nats_loop_serve.cpp).
//
// This header includes nats.h; it and common/bus/src are the only place in wisp that does.
#include <nats/nats.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bus_metrics.hpp"
#include "wisp/bus/nats_bus.hpp"
#include "wisp/log/log.hpp"

namespace wisp::bus::internal {

using Clock = std::chrono::steady_clock;

struct MsgDeleter {
  void operator()(natsMsg* m) const { natsMsg_Destroy(m); }
};
using MsgPtr = std::unique_ptr<natsMsg, MsgDeleter>;

inline int64_t Ms(std::chrono::milliseconds d) { return std::max<int64_t>(d.count(), 0); }
inline int64_t Ns(std::chrono::nanoseconds d) { return d.count(); }
inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

std::shared_ptr<spdlog::logger> Logger();

// ---- nats_common.cpp ----

// nats.c's status plus its thread-local error text, as an absl::Status.
absl::Status FromNats(natsStatus s, std::string_view what);
// JetStream API errors carry a jsErrCode; map the ones callers act on.
absl::Status FromJs(natsStatus s, jsErrCode jerr, std::string_view what);
// True when nats.c's thread-local error text contains `needle`.
bool LastErrorContains(std::string_view needle);

Message ToMessage(natsMsg* m);
absl::StatusOr<MsgPtr> BuildMsg(std::string_view subject, const char* reply, std::string_view data,
                                const Headers& headers);
// Publishes `reply` to the request `in` (served on `subject`) over `nc`.
void SendReply(natsConnection* nc, const std::string& subject, const Message& in,
               const Reply& reply);

// Frees subscriptions only once nats.c's reader thread can no longer be holding them.
//
// nats.c 3.4's reader looks a message's subscription up in the connection's table and lets go of
// the table's lock before it locks the subscription, without taking a reference. Unsubscribe +
// Destroy right away frees a subscription the reader may be about to touch: a reply arriving
// just as RequestMany stops listening was enough (a use-after-free seen as a rare crash). After
// the unsubscribe, a flush (PING/PONG) proves the reader has finished every message it read
// before the PONG, and later messages no longer find the subscription. While disconnected, or
// when the flush fails (slow server), the subscription waits here until a later flush on the
// connection succeeds, or until the connection is closed and its reader joined.
class SubscriptionRetirer {
 public:
  explicit SubscriptionRetirer(natsConnection* nc) : nc_(nc) {}

  // Unsubscribes (harmless when already drained or closed) and destroys `sub` now or later.
  void Retire(natsSubscription* sub);
  // After natsConnection_Close (which joins the reader): frees what waits, and from now on
  // Retire frees at once.
  void ReaderStopped();

 private:
  static constexpr int64_t kFlushMs = 2000;
  natsConnection* nc_;
  std::mutex mu_;
  bool reader_stopped_ = false;
  std::vector<natsSubscription*> parked_;
};

// Destroying a natsMsg hands it to nats.c's one garbage-collector thread, which is woken whenever
// it was idle. Destroying a batch does not wake it once: the collector, woken by the first
// message, empties the list while the rest are still being added, goes back to sleep, and is woken
// again. Measured at the admission benchmark's peak with batches of 32, it woke about 18 times per
// batch, about one context switch and two futex calls per request in each process. So spent
// messages are gathered in large batches (kSpentBatch messages or kSpentBytes of payload, or once
// the thread has had nothing to do for kSpentLinger): with 512 the collector woke about 0.15 times
// per request in the gateway and 0.08 in wisp-policy (bench/admission/README.md).
constexpr std::chrono::milliseconds kSpentLinger{500};
constexpr size_t kSpentBatch = 512;
constexpr size_t kSpentBytes = size_t{4} << 20;

// Messages waiting to be destroyed together.
class SpentBatch {
 public:
  SpentBatch() = default;
  SpentBatch(const SpentBatch&) = delete;
  SpentBatch& operator=(const SpentBatch&) = delete;
  SpentBatch& operator=(SpentBatch&&) = delete;
  SpentBatch(SpentBatch&& other) noexcept
      : msgs_(std::exchange(other.msgs_, {})), bytes_(std::exchange(other.bytes_, 0)) {}
  ~SpentBatch() { Destroy(); }

  // True once the batch is due: kSpentBatch messages or kSpentBytes of payload.
  bool Add(MsgPtr msg) {
    bytes_ += static_cast<size_t>(std::max(natsMsg_GetDataLength(msg.get()), 0));
    msgs_.push_back(msg.release());
    return msgs_.size() >= kSpentBatch || bytes_ >= kSpentBytes;
  }
  bool empty() const { return msgs_.empty(); }
  void Destroy() {
    for (natsMsg* m : msgs_) natsMsg_Destroy(m);
    msgs_.clear();
    bytes_ = 0;
  }

 private:
  std::vector<natsMsg*> msgs_;
  size_t bytes_ = 0;
};

// ---- nats_connection.cpp ----

// Reconnect backoff: `wait` doubling per attempt up to `wait_max`, plus up to a fifth of jitter.
int64_t ReconnectDelayMs(int attempts, int64_t wait, int64_t wait_max);
// InvalidArgument naming the option that NatsBus::Connect and LoopRequester::Connect refuse.
absl::Status ValidateOptions(const NatsBusOptions& o);
// The options NatsBus::Connect and LoopRequester::Connect share: servers, name, authentication,
// TLS and the inbox prefix. InvalidArgument naming the option nats.c refused.
absl::Status SetServerOptions(natsOptions* o, const NatsBusOptions& options);

// ---- nats_request.cpp ----

// A fresh reply inbox under `prefix` (nats.c's "_INBOX" when empty).
absl::StatusOr<std::string> NewInbox(const std::string& prefix);
// `headers` plus Wisp-Timeout-Ms (`timeout`) and Wisp-Request-Id (the caller's, else the thread's
// wisp::log request id, else a fresh random id).
Headers RequestHeaders(const Headers& headers, std::chrono::milliseconds timeout);

// A RequestAsync call waiting for its reply.
struct PendingCall {
  Requester::ReplyCallback done;
  std::string subject;
  Clock::time_point start;
  Clock::time_point deadline;
};

// The calls waiting for replies, by id, with their deadlines in order. Not locked: NatsBus's
// AsyncCore holds its mutex around it, a LoopConn uses it on its loop thread only.
class PendingCalls {
 public:
  void Add(uint64_t id, PendingCall call) {
    deadlines_.insert({call.deadline, id});
    calls_.emplace(id, std::move(call));
  }
  std::optional<PendingCall> Take(uint64_t id) {
    auto it = calls_.find(id);
    if (it == calls_.end()) return std::nullopt;
    PendingCall call = std::move(it->second);
    calls_.erase(it);
    deadlines_.erase({call.deadline, id});
    return call;
  }
  // The calls whose deadline is `now` or earlier.
  std::vector<PendingCall> TakeExpired(Clock::time_point now) {
    std::vector<PendingCall> out;
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      auto node = calls_.extract(deadlines_.begin()->second);
      deadlines_.erase(deadlines_.begin());
      if (!node.empty()) out.push_back(std::move(node.mapped()));
    }
    return out;
  }
  std::vector<PendingCall> TakeAll() {
    std::vector<PendingCall> out;
    for (auto& [id, call] : calls_) out.push_back(std::move(call));
    calls_.clear();
    deadlines_.clear();
    return out;
  }
  // The earliest deadline; time_point::max() when nothing waits.
  Clock::time_point Earliest() const {
    return deadlines_.empty() ? Clock::time_point::max() : deadlines_.begin()->first;
  }

 private:
  std::unordered_map<uint64_t, PendingCall> calls_;
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines_;
};

// The id a reply subject ends with (<inbox>.<id>), if it is one.
std::optional<uint64_t> ReplyId(natsMsg* msg);
// What a call's caller gets for its reply: Unavailable for "no responders", the error its micro
// headers carry, or the reply.
absl::StatusOr<Message> ReplyOutcome(natsMsg* msg, const std::string& subject);
// Records the call in the client metrics (when there are any) and runs its callback.
void FinishCall(BusClientMetrics* metrics, PendingCall& call, absl::StatusOr<Message> result);

// RequestAsync's state: one wildcard reply subscription and one timer thread per connection.
struct AsyncCore;

// ---- nats_serve.cpp (Serve) and nats_loop_serve.cpp (ServeOnLoops, wisp::bus_asio) ----

// A serving subscription as NatsBus::Drain sees it: Serve's and ServeOnLoops'.
class DrainableServe {
 public:
  virtual ~DrainableServe() = default;
  virtual bool Finished() const = 0;
  // Stops delivery: the server drops interest; what it sent before is still served.
  virtual void StartDrain() = 0;
  // After StartDrain (and, for Serve, a flush of the connection): waits until every delivered
  // request was answered. False at `deadline`.
  virtual bool WaitDrained(Clock::time_point deadline) = 0;
  // Stops serving once the running handlers have returned.
  virtual void Close() = 0;
};

struct ServeCore;  // Serve's subscription (nats_serve.cpp)
class Ticker;      // wakes Serve's spare threads (nats_serve.cpp)

// ServeOnLoops with connections > 0. wisp::bus_asio installs it when a program links it (see
// common/bus/CMakeLists.txt); without it NatsBus::ServeOnLoops answers FailedPrecondition.
using ServeOnLoopsFn = absl::StatusOr<SubscriptionPtr> (*)(NatsBus::Impl& impl,
                                                           std::string_view subject,
                                                           std::string_view queue_group,
                                                           RequestHandler handler, int connections);
void InstallServeOnLoops(ServeOnLoopsFn fn);

// ---- nats_jetstream.cpp ----

std::unique_ptr<JetStream> NewJetStream(NatsBus::Impl& impl);
// Brings the existing stream `stream` to at least `wanted` replicas (bus::PlanReplicas: raised in
// place with a JetStream stream update, never lowered) and logs a raise. NotFound when the stream
// does not exist; a placement refusal is bus::ReplicaPlacementError.
absl::Status RaiseReplicas(jsCtx* js, const std::string& stream, int wanted);

}  // namespace wisp::bus::internal

namespace wisp::bus {

// One NATS connection and what hangs off it. Its methods live with the part they serve.
struct NatsBus::Impl {
  using Clock = internal::Clock;

  NatsBusOptions options;
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  std::unique_ptr<BusClientMetrics> metrics;
  std::unique_ptr<JetStream> jetstream;

  std::mutex mu;
  std::condition_variable cv;
  bool closed = false;
  std::atomic<bool> closing{false};  // we are closing on purpose: a disconnect is expected
  std::vector<std::weak_ptr<internal::ServeCore>> serves;            // for Drain() and the ticker
  std::vector<std::weak_ptr<internal::DrainableServe>> loop_serves;  // for Drain()
  std::shared_ptr<internal::Ticker> ticker;
  std::shared_ptr<internal::AsyncCore> async;              // RequestAsync
  std::shared_ptr<internal::SubscriptionRetirer> retirer;  // set once connected

  // nats.c callback closure; lives until the closed callback (the last one nats.c makes).
  struct Callbacks {
    Impl* impl;
  };
  Callbacks* callbacks = nullptr;

  ~Impl();

  // ---- nats_connection.cpp ----
  absl::Status CheckConnected(std::string_view subject) const;
  void SetConnected(bool up);
  static void OnDisconnected(natsConnection*, void* c);
  static void OnReconnected(natsConnection* nc, void* c);
  static void OnConnected(natsConnection* nc, void* c);
  static void OnClosed(natsConnection*, void* c);
  static void OnError(natsConnection*, natsSubscription* sub, natsStatus err, void*);
  static int64_t ReconnectDelay(natsConnection*, int attempts, void* c);

  // ---- nats_request.cpp ----
  void StartAsync();  // once connected
  void CloseAsync();  // fails the pending requests with Unavailable

  // ---- nats_serve.cpp ----
  absl::StatusOr<SubscriptionPtr> Serve(std::string_view subject, std::string_view queue,
                                        RequestHandler handler);
  absl::StatusOr<SubscriptionPtr> Subscribe(std::string_view subject, std::string_view queue,
                                            MessageHandler handler);
  void Tick(int64_t now_ns);
  void StopTicker();
  // The Serve and ServeOnLoops subscriptions still alive.
  std::vector<std::shared_ptr<internal::DrainableServe>> LiveServes(
      std::vector<std::shared_ptr<internal::DrainableServe>>* loop_serves);
};

}  // namespace wisp::bus
