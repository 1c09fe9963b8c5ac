// The only file in wisp that includes nats.h (see nats_bus.hpp for the contract).
#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/loop_requester.hpp"

#include <nats/nats.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <future>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "bus_metrics.hpp"
#include "wisp/log/log.hpp"

// nats.c's per-connection message filter (src/conn.h in nats.c): exported by libnats (every
// release since 2.x) but not declared in nats.h. common/bus/CMakeLists.txt refuses a libnats
// without it. See LoopConn::Filter.
extern "C" {
typedef void (*natsMsgFilter)(natsConnection* nc, natsMsg** msg, void* closure);
void natsConn_setFilterWithClosure(natsConnection* nc, natsMsgFilter f, void* closure);
}

namespace wisp::bus {
namespace {

using Clock = std::chrono::steady_clock;

struct MsgDeleter {
  void operator()(natsMsg* m) const { natsMsg_Destroy(m); }
};
using MsgPtr = std::unique_ptr<natsMsg, MsgDeleter>;

int64_t Ms(std::chrono::milliseconds d) { return std::max<int64_t>(d.count(), 0); }
int64_t Ns(std::chrono::nanoseconds d) { return d.count(); }

std::shared_ptr<spdlog::logger> Logger() {
  static auto logger = log::Get("bus");
  return logger;
}

// nats.c's status plus its thread-local error text, as an absl::Status.
absl::Status FromNats(natsStatus s, std::string_view what) {
  if (s == NATS_OK) return absl::OkStatus();
  std::string text = std::string(what) + ": " + natsStatus_GetText(s);
  natsStatus last = NATS_OK;
  const char* detail = nats_GetLastError(&last);
  if (detail != nullptr && *detail != '\0' && std::string_view(detail) != natsStatus_GetText(s)) {
    text += " (" + std::string(detail) + ")";
  }
  switch (s) {
    case NATS_TIMEOUT:
      return absl::DeadlineExceededError(text);
    case NATS_NO_RESPONDERS:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NO_SERVER:
    case NATS_NOT_YET_CONNECTED:
    case NATS_STALE_CONNECTION:
    case NATS_IO_ERROR:
    case NATS_DRAINING:
    case NATS_CONNECTION_AUTH_FAILED:
      return absl::UnavailableError(text);
    case NATS_NOT_FOUND:
      return absl::NotFoundError(text);
    case NATS_INVALID_ARG:
    case NATS_INVALID_SUBJECT:
    case NATS_INVALID_QUEUE_NAME:
      return absl::InvalidArgumentError(text);
    case NATS_MAX_PAYLOAD:
      return absl::ResourceExhaustedError(text);
    case NATS_NOT_PERMITTED:
      return absl::PermissionDeniedError(text);
    default:
      return absl::InternalError(text);
  }
}

// JetStream API errors carry a jsErrCode; map the ones callers act on.
absl::Status FromJs(natsStatus s, jsErrCode jerr, std::string_view what) {
  if (s == NATS_OK) return absl::OkStatus();
  absl::Status base = FromNats(s, what);
  std::string text(base.message());
  if (jerr != 0) text += " [jetstream error " + std::to_string(static_cast<int>(jerr)) + "]";
  switch (jerr) {
    case JSStreamNotFoundErr:
    case JSConsumerNotFoundErr:
    case JSNoMessageFoundErr:
      return absl::NotFoundError(text);
    case JSStreamWrongLastSequenceErr:
      return absl::AbortedError(text);
    case JSStreamNameExistErr:
    case JSConsumerNameExistErr:
      return absl::AlreadyExistsError(text);
    case JSStreamSubjectOverlapErr:
      return absl::InvalidArgumentError(text);
    case JSNotEnabledErr:
      return absl::UnavailableError(text);
    default:
      break;
  }
  if (s == NATS_NO_RESPONDERS) {
    return absl::UnavailableError(text + " (no JetStream stream or server answered)");
  }
  return absl::Status(base.code(), text);
}

bool LastErrorContains(std::string_view needle) {
  natsStatus last = NATS_OK;
  const char* detail = nats_GetLastError(&last);
  return detail != nullptr && std::string_view(detail).find(needle) != std::string_view::npos;
}

Message ToMessage(natsMsg* m) {
  Message out;
  out.subject = natsMsg_GetSubject(m);
  if (const char* r = natsMsg_GetReply(m); r != nullptr) out.reply = r;
  if (const char* d = natsMsg_GetData(m); d != nullptr)
    out.data.assign(d, natsMsg_GetDataLength(m));
  const char** keys = nullptr;
  int count = 0;
  if (natsMsgHeader_Keys(m, &keys, &count) == NATS_OK) {
    for (int i = 0; i < count; ++i) {
      const char* value = nullptr;
      if (natsMsgHeader_Get(m, keys[i], &value) == NATS_OK && value != nullptr) {
        out.headers[keys[i]] = value;
      }
    }
    free(static_cast<void*>(keys));
  }
  return out;
}

absl::StatusOr<MsgPtr> BuildMsg(std::string_view subject, const char* reply, std::string_view data,
                                const Headers& headers) {
  natsMsg* raw = nullptr;
  const std::string subj(subject);
  natsStatus s =
      natsMsg_Create(&raw, subj.c_str(), reply, data.data(), static_cast<int>(data.size()));
  if (s != NATS_OK) return FromNats(s, "creating message on " + subj);
  MsgPtr msg(raw);
  for (const auto& [k, v] : headers) {
    s = natsMsgHeader_Set(msg.get(), k.c_str(), v.c_str());
    if (s != NATS_OK) return FromNats(s, "setting header " + k);
  }
  return msg;
}

std::string RandomId() {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(16, '0');
  uint64_t v = rng();
  for (char& c : id) {
    c = kHex[v & 0xf];
    v >>= 4;
  }
  return id;
}

// ---- Subscriptions ----

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
  void Retire(natsSubscription* sub) {
    if (sub == nullptr) return;
    natsSubscription_Unsubscribe(sub);
    // Only what was unsubscribed before the PING went out is known to be past the reader when
    // its PONG comes back, so the flush covers the batch taken now, not what is parked meanwhile.
    std::vector<natsSubscription*> batch;
    {
      std::lock_guard lock(mu_);
      if (!reader_stopped_) {
        parked_.push_back(sub);
        batch.swap(parked_);
      }
    }
    if (batch.empty()) {
      natsSubscription_Destroy(sub);
      return;
    }
    // Not connected (a reconnect may take long): park at once rather than wait out the flush,
    // so closing subscriptions during an outage (shutdown) does not stall.
    if (natsConnection_Status(nc_) != NATS_CONN_STATUS_CONNECTED ||
        natsConnection_FlushTimeout(nc_, kFlushMs) != NATS_OK) {
      std::lock_guard lock(mu_);
      if (!reader_stopped_) {
        parked_.insert(parked_.end(), batch.begin(), batch.end());
        return;
      }
    }
    for (natsSubscription* x : batch) natsSubscription_Destroy(x);
  }

  // After natsConnection_Close (which joins the reader): frees what waits, and from now on
  // Retire frees at once.
  void ReaderStopped() {
    std::vector<natsSubscription*> free;
    {
      std::lock_guard lock(mu_);
      reader_stopped_ = true;
      free.swap(parked_);
    }
    for (natsSubscription* x : free) natsSubscription_Destroy(x);
  }

 private:
  static constexpr int64_t kFlushMs = 2000;
  natsConnection* nc_;
  std::mutex mu_;
  bool reader_stopped_ = false;
  std::vector<natsSubscription*> parked_;
};

// Subscribe (plain messages): nats.c's async delivery thread runs the handler. The state is shared
// between the Subscription handle and nats.c's callbacks, which hold their own reference until the
// subscription's completion callback, so it outlives every callback.
struct MsgCore {
  natsSubscription* sub = nullptr;
  std::shared_ptr<SubscriptionRetirer> retirer;
  std::string subject;
  MessageHandler handler;
  std::atomic<bool> finished{false};
  std::mutex mu;
  std::condition_variable cv;
  bool complete = false;

  bool WaitComplete(Clock::time_point deadline) {
    std::unique_lock lock(mu);
    return cv.wait_until(lock, deadline, [&] { return complete; });
  }
};

void OnSubMsg(natsConnection*, natsSubscription*, natsMsg* raw, void* closure) {
  MsgPtr msg(raw);
  auto* core = static_cast<std::shared_ptr<MsgCore>*>(closure)->get();
  Message in = ToMessage(msg.get());
  msg.reset();
  core->handler(in);
}

void OnSubComplete(void* closure) {
  auto* holder = static_cast<std::shared_ptr<MsgCore>*>(closure);
  {
    std::lock_guard lock((*holder)->mu);
    (*holder)->complete = true;
  }
  (*holder)->cv.notify_all();
  delete holder;
}

class NatsMessageSubscription final : public Subscription {
 public:
  explicit NatsMessageSubscription(std::shared_ptr<MsgCore> core) : core_(std::move(core)) {}
  ~NatsMessageSubscription() override { Close(); }

  absl::Status Drain() override {
    if (core_->finished) return absl::OkStatus();
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    if (natsSubscription_Drain(core_->sub) == NATS_OK) {
      natsSubscription_WaitForDrainCompletion(core_->sub, 30000);
    }
    const bool done = core_->WaitComplete(deadline);
    Close();
    return done ? absl::OkStatus()
                : absl::DeadlineExceededError("drain of " + core_->subject + " timed out");
  }

 private:
  void Close() {
    if (core_->finished.exchange(true)) return;
    natsSubscription_Unsubscribe(core_->sub);  // fails harmlessly when already drained/closed
    // Wait for nats.c to stop calling us; a closed connection completes subscriptions too.
    core_->WaitComplete(Clock::now() + std::chrono::seconds(10));
    core_->retirer->Retire(core_->sub);
    core_->sub = nullptr;
  }

  std::shared_ptr<MsgCore> core_;
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

size_t PayloadBytes(natsMsg* msg) {
  return static_cast<size_t>(std::max(natsMsg_GetDataLength(msg), 0));
}

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
    bytes_ += PayloadBytes(msg.get());
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

// For serving threads: one batch per thread, released by the thread itself.
class SpentMsgs {
 public:
  static void Add(MsgPtr msg) {
    if (Get().Add(std::move(msg))) Release();
  }
  static bool Empty() { return Get().empty(); }
  static void Release() { Get().Destroy(); }

 private:
  static SpentBatch& Get() {
    thread_local SpentBatch batch;
    return batch;
  }
};

// SpentMsgs for threads that have no quiet moment of their own to release in: RequestAsync's
// callers (an HTTP server's threads) and its reply delivery thread. One batch for all of them,
// destroyed outside the lock once due, so a quiet client keeps at most kSpentBytes plus one
// message until its next request.
class SharedSpentMsgs {
 public:
  void Add(MsgPtr msg) {
    {
      std::lock_guard lock(mu_);
      if (!batch_.Add(std::move(msg))) return;
    }
    Release();
  }

  void Release() {
    std::unique_lock lock(mu_);
    SpentBatch due(std::move(batch_));
    lock.unlock();
  }  // `due` is destroyed here, outside the lock

 private:
  std::mutex mu_;
  SpentBatch batch_;
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Publishes `reply` to the request `in` (served on `subject`) over `nc`.
void SendReply(natsConnection* nc, const std::string& subject, const Message& in,
               const Reply& reply) {
  if (in.reply.empty()) return;  // a publish to a service subject: nobody waits
  natsStatus s = NATS_OK;
  if (reply.headers.empty()) {  // most replies: no natsMsg to build (one copy fewer)
    s = natsConnection_Publish(nc, in.reply.c_str(), reply.data.data(),
                               static_cast<int>(reply.data.size()));
  } else {
    auto out = BuildMsg(in.reply, nullptr, reply.data, reply.headers);
    if (!out.ok()) return;
    s = natsConnection_PublishMsg(nc, out->get());
  }
  if (s != NATS_OK) {
    SPDLOG_LOGGER_WARN(Logger(), "reply on {} not sent: {}", subject, natsStatus_GetText(s));
  }
}

// Wakes a spare serving thread when a handler has run inline for longer than kInlineGraceNs (see
// ServeCore). Ticks every kTickMs while requests flow; sleeps after a second without any.
class Ticker {
 public:
  static constexpr int64_t kTickMs = 5;
  static constexpr int64_t kInlineGraceNs = 5'000'000;
  static constexpr int64_t kIdleNs = 1'000'000'000;

  explicit Ticker(std::function<void(int64_t)> tick) : tick_(std::move(tick)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Ticker() { Stop(); }

  void Stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // Called when a handler starts inline; cheap unless the ticker was asleep.
  void Activity() {
    last_activity_ns_.store(NowNs());
    if (asleep_.load()) {
      std::lock_guard lock(mu_);
      cv_.notify_one();
    }
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      if (NowNs() - last_activity_ns_.load() > kIdleNs) {
        asleep_.store(true);
        cv_.wait(lock, [&] { return stop_ || NowNs() - last_activity_ns_.load() <= kIdleNs; });
        asleep_.store(false);
        continue;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(kTickMs));
      if (stop_) break;
      lock.unlock();
      tick_(NowNs());
      lock.lock();
    }
  }

  std::function<void(int64_t)> tick_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<int64_t> last_activity_ns_{0};
  std::atomic<bool> asleep_{false};
  std::thread thread_;
};

// Serve (requests): a synchronous nats.c subscription shared by `max_running + 1` threads in a
// leader/follower scheme. One thread at a time waits in NextMsg (the listener) and stamps each
// arrival with the time it left nats.c. If a handler slot is free and nothing is queued, the
// listener runs the handler itself, so a request costs no thread hop beyond raw nats.c. When it
// took a burst (nats.c held more than one) and serve_threads > 1, it first wakes a spare thread,
// which takes the rest of the burst and listens, so requests run in parallel. A lone request wakes
// nobody; should its handler run longer than 5 ms, the ticker wakes a spare thread to take over
// listening and stamping. When every slot is busy the listener queues the
// stamped message; a request whose deadline passes in that queue is answered DeadlineExceeded
// without calling the handler. (A request that arrived in the first ~5-10 ms of a long inline
// handler is stamped when the spare thread takes it, so its wait is undercounted by at most that
// much: never a false expiry.)
struct ServeCore {
  natsConnection* nc = nullptr;
  natsSubscription* sub = nullptr;
  std::shared_ptr<SubscriptionRetirer> retirer;
  std::string subject;
  RequestHandler handler;
  int max_running = 1;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<MsgPtr, Clock::time_point>> queue;
  int running = 0;
  bool listening = false;
  int idle = 0;           // threads waiting on cv
  bool stopping = false;  // Close(): finish the running handlers, drop the rest
  bool sub_done = false;  // NextMsg reported the subscription gone (drained or closed)
  std::atomic<bool> finished{false};
  std::vector<std::thread> threads;
  std::shared_ptr<Ticker> ticker;
  std::atomic<int64_t> inline_since_ns{0};  // a handler runs inline with nobody listening

  // From the ticker: hands the listener role to a spare thread once an inline handler runs long.
  void Nudge(int64_t now_ns) {
    const int64_t since = inline_since_ns.load();
    if (since == 0 || now_ns - since < Ticker::kInlineGraceNs) return;
    std::lock_guard lock(mu);
    inline_since_ns.store(0);
    if (!listening) EnsureSpareLocked();
  }

  // Gets a thread to take the listener role: wakes an idle one, or starts one (threads are
  // started on demand, up to max_running + 1, so a quiet subscription holds a single thread).
  void EnsureSpareLocked() {
    if (stopping) return;
    if (idle > 0) {
      cv.notify_one();
    } else if (static_cast<int>(threads.size()) < max_running + 1) {
      threads.emplace_back([this] { Loop(); });
    }
  }

  void Handle(MsgPtr msg, Clock::time_point arrived) {
    Message in = ToMessage(msg.get());
    SpentMsgs::Add(std::move(msg));
    log::ScopedRequestId rid(in.Header(kHeaderRequestId));
    SendReply(nc, subject, in, ServeRequest(handler, in, arrived));
  }

  // Runs one message with `lock` released; counts it as running. Nobody is woken afterwards: this
  // thread goes on to the queue or the listener role itself.
  void RunLocked(std::unique_lock<std::mutex>& lock, MsgPtr msg, Clock::time_point arrived) {
    ++running;
    lock.unlock();
    Handle(std::move(msg), arrived);
    lock.lock();
    --running;
  }

  // After NextMsg returned one message: takes what else nats.c already holds (up to kMaxBatch),
  // without blocking, so a burst costs one listener wake-up rather than one per request. They all
  // left nats.c now and are stamped with the same arrival time.
  static constexpr int kMaxBatch = 64;
  void TakePending(std::vector<MsgPtr>& out) {
    int pending = 0;
    int bytes = 0;
    if (natsSubscription_GetPending(sub, &pending, &bytes) != NATS_OK) return;
    for (int i = 0; i < std::min(pending, kMaxBatch); ++i) {
      natsMsg* raw = nullptr;
      if (natsSubscription_NextMsg(&raw, sub, 0) != NATS_OK) break;
      out.emplace_back(raw);
    }
  }

  void Loop() {
    std::vector<MsgPtr> more;
    std::unique_lock lock(mu);
    while (true) {
      if (stopping) return;
      if (!queue.empty() && running < max_running) {
        auto [msg, arrived] = std::move(queue.front());
        queue.pop_front();
        // Keep one thread listening, and let a free slot take the next queued request.
        if (!listening || (!queue.empty() && running + 1 < max_running)) EnsureSpareLocked();
        RunLocked(lock, std::move(msg), arrived);
        continue;
      }
      if (sub_done && queue.empty()) return;
      if (!listening && !sub_done) {
        listening = true;
        lock.unlock();
        natsMsg* raw = nullptr;
        const natsStatus s = natsSubscription_NextMsg(&raw, sub, 500);
        const auto arrived = Clock::now();
        MsgPtr msg(raw);
        more.clear();
        if (s == NATS_OK) TakePending(more);
        if (s == NATS_TIMEOUT) SpentMsgs::Release();  // quiet for a while
        lock.lock();
        listening = false;
        if (s == NATS_TIMEOUT) continue;
        if (s == NATS_SLOW_CONSUMER) {
          SPDLOG_LOGGER_WARN(Logger(), "requests on {} dropped: too many pending", subject);
          continue;
        }
        if (s != NATS_OK) {  // unsubscribed, drained or connection closed
          sub_done = true;
          cv.notify_all();
          continue;
        }
        if (stopping) return;
        const bool run_here = running < max_running && queue.empty();
        if (!run_here) queue.emplace_back(std::move(msg), arrived);
        for (auto& m : more) queue.emplace_back(std::move(m), arrived);
        if (run_here) {
          // Serve it on this thread. When the burst brought more (queued above) and there are
          // free slots, a spare thread takes them, so requests run in parallel. A lone request
          // wakes nobody: waking a spare listener for each one cost wisp-policy about a futex call
          // and a context switch per request at the admission benchmark's peak, and its gain, a
          // listener for requests that arrive during a handler of tens of microseconds, is
          // small. Should this handler take long, the ticker brings a spare listener in.
          if (!more.empty() && running + 1 < max_running) {
            EnsureSpareLocked();
            RunLocked(lock, std::move(msg), arrived);
          } else {
            inline_since_ns.store(NowNs());
            if (ticker) ticker->Activity();
            RunLocked(lock, std::move(msg), arrived);
            inline_since_ns.store(0);
          }
        } else if (running < max_running) {
          EnsureSpareLocked();  // a free slot and nobody to use it
        }
        continue;
      }
      ++idle;
      if (SpentMsgs::Empty()) {
        cv.wait(lock);
      } else if (cv.wait_for(lock, kSpentLinger) == std::cv_status::timeout) {
        --idle;
        lock.unlock();
        SpentMsgs::Release();  // quiet for a while
        lock.lock();
        continue;
      }
      --idle;
    }
  }

  void Start() {
    std::lock_guard lock(mu);
    threads.emplace_back([this] { Loop(); });
  }

  // Stops delivery: the server drops interest and, after the flush, everything it sent before
  // is in nats.c's queue or ours.
  void StartDrain() {
    if (finished) return;
    if (natsSubscription_Drain(sub) != NATS_OK) natsSubscription_Unsubscribe(sub);
  }

  // After StartDrain + a connection flush: waits until every delivered request was served. The
  // state must hold twice in a row, so a message the listener just took from nats.c (in its hand,
  // not yet queued or running) is not missed.
  bool WaitDrained(Clock::time_point deadline) {
    int quiet = 0;
    while (true) {
      int pending = 0;
      int bytes = 0;
      if (finished || natsSubscription_GetPending(sub, &pending, &bytes) != NATS_OK) pending = 0;
      bool idle;
      {
        std::lock_guard lock(mu);
        idle = (sub_done || pending == 0) && queue.empty() && running == 0;
      }
      quiet = idle ? quiet + 1 : 0;
      if (quiet >= 2) return true;
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  void Close() {
    if (finished.exchange(true)) return;
    {
      std::lock_guard lock(mu);
      stopping = true;
      queue.clear();
    }
    natsSubscription_Unsubscribe(sub);  // wakes the listener; fails harmlessly when drained
    cv.notify_all();
    // No thread is started once `stopping` is set, so the vector no longer changes.
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
    threads.clear();
    retirer->Retire(sub);
    sub = nullptr;
  }
};

class NatsServeSubscription final : public Subscription {
 public:
  explicit NatsServeSubscription(std::shared_ptr<ServeCore> core) : core_(std::move(core)) {}
  ~NatsServeSubscription() override { core_->Close(); }

  absl::Status Drain() override {
    if (core_->finished) return absl::OkStatus();
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    core_->StartDrain();
    natsConnection_FlushTimeout(core_->nc, 5000);
    const bool done = core_->WaitDrained(deadline);
    core_->Close();
    return done ? absl::OkStatus()
                : absl::DeadlineExceededError("drain of " + core_->subject + " timed out");
  }

 private:
  std::shared_ptr<ServeCore> core_;
};

// A fresh reply inbox under `prefix` (nats.c's "_INBOX" when empty). nats.c's public
// natsInbox_Create ignores the connection's custom prefix: keep its unique token and put the
// prefix in front.
absl::StatusOr<std::string> NewInbox(const std::string& prefix) {
  natsInbox* raw = nullptr;
  natsStatus s = natsInbox_Create(&raw);
  if (s != NATS_OK) return FromNats(s, "creating inbox");
  std::string inbox(raw);
  natsInbox_Destroy(raw);
  if (!prefix.empty()) {
    const size_t dot = inbox.rfind('.');
    inbox = prefix + inbox.substr(dot == std::string::npos ? 0 : dot);
  }
  return inbox;
}

// Reconnect backoff: `wait` doubling per attempt up to `wait_max`, plus up to a fifth of jitter.
int64_t ReconnectDelayMs(int attempts, int64_t wait, int64_t wait_max) {
  int64_t delay = wait;
  for (int i = 1; i < attempts && delay < wait_max; ++i) delay *= 2;
  delay = std::min(delay, wait_max);
  thread_local std::mt19937 rng(std::random_device{}());
  const int64_t jitter = delay / 5;
  if (jitter > 0) delay += std::uniform_int_distribution<int64_t>(0, jitter)(rng);
  return delay;
}

// ---- Asynchronous requests ----

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
std::optional<uint64_t> ReplyId(natsMsg* msg) {
  const std::string_view subject = natsMsg_GetSubject(msg);
  const std::string_view token = subject.substr(subject.rfind('.') + 1);
  uint64_t id = 0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), id);
  if (ec != std::errc() || end != token.data() + token.size()) return std::nullopt;
  return id;
}

// What a call's caller gets for its reply: Unavailable for "no responders", the error its micro
// headers carry, or the reply.
absl::StatusOr<Message> ReplyOutcome(natsMsg* msg, const std::string& subject) {
  if (natsMsg_IsNoResponders(msg)) {
    return absl::UnavailableError("request on " + subject + ": " +
                                  natsStatus_GetText(NATS_NO_RESPONDERS));
  }
  Message out = ToMessage(msg);
  WISP_RETURN_IF_ERROR(StatusFromHeaders(out.headers));
  return out;
}

// Records the call in the client metrics (when there are any) and runs its callback.
void FinishCall(BusClientMetrics* metrics, PendingCall& call, absl::StatusOr<Message> result) {
  if (metrics != nullptr) {
    metrics->Record(call.subject, result.status().code(),
                    std::chrono::duration<double>(Clock::now() - call.start).count());
  }
  call.done(std::move(result));
}

// RequestAsync: one wildcard reply subscription per connection (<inbox>.*, made on first use) whose
// nats.c delivery thread completes each pending request by the last token of its reply subject,
// and one timer thread that completes overdue requests with DeadlineExceeded. Like MsgCore, the
// state outlives nats.c's callbacks through a holder that the completion callback frees.
struct AsyncCore : std::enable_shared_from_this<AsyncCore> {
  natsConnection* nc = nullptr;
  std::shared_ptr<SubscriptionRetirer> retirer;
  BusClientMetrics* metrics = nullptr;  // may be null
  std::string inbox_prefix;             // NatsBusOptions::inbox_prefix

  std::mutex mu;
  std::condition_variable cv;  // the timer's: an earlier deadline, stopping, completion
  natsSubscription* sub = nullptr;
  std::string inbox;  // reply subjects are inbox + "." + id
  bool started = false;
  bool stopping = false;
  bool complete = false;  // nats.c made its last callback
  uint64_t next_id = 0;
  PendingCalls pending;
  std::thread timer;
  SharedSpentMsgs spent;  // requests sent and replies taken

  void Finish(PendingCall& p, absl::StatusOr<Message> result) {
    FinishCall(metrics, p, std::move(result));
  }

  std::optional<PendingCall> Take(uint64_t id) {
    std::lock_guard lock(mu);
    return pending.Take(id);
  }

  static void OnReply(natsConnection*, natsSubscription*, natsMsg* raw, void* closure) {
    MsgPtr msg(raw);
    auto* core = static_cast<std::shared_ptr<AsyncCore>*>(closure)->get();
    const auto id = ReplyId(raw);
    if (!id) return;
    auto p = core->Take(*id);
    if (!p) return;  // answered after its timeout
    absl::StatusOr<Message> outcome = ReplyOutcome(raw, p->subject);
    core->spent.Add(std::move(msg));
    core->Finish(*p, std::move(outcome));
  }

  static void OnComplete(void* closure) {
    auto* holder = static_cast<std::shared_ptr<AsyncCore>*>(closure);
    {
      std::lock_guard lock((*holder)->mu);
      (*holder)->complete = true;
    }
    (*holder)->cv.notify_all();
    delete holder;
  }

  void TimerLoop() {
    std::unique_lock lock(mu);
    while (!stopping) {
      const auto first = pending.Earliest();
      if (first == Clock::time_point::max()) {
        cv.wait(lock);
        continue;
      }
      if (Clock::now() < first) {
        cv.wait_until(lock, first);
        continue;
      }
      std::vector<PendingCall> expired = pending.TakeExpired(Clock::now());
      lock.unlock();
      for (auto& p : expired) {
        absl::Status st = absl::DeadlineExceededError("request on " + p.subject + ": " +
                                                      natsStatus_GetText(NATS_TIMEOUT));
        Finish(p, std::move(st));
      }
      lock.lock();
    }
  }

  // With `mu` held: subscribes to the reply inbox and starts the timer, once.
  absl::Status StartLocked() {
    if (stopping) return absl::UnavailableError("bus connection closed");
    if (started) return absl::OkStatus();
    WISP_ASSIGN_OR_RETURN(inbox, NewInbox(inbox_prefix));
    auto* holder = new std::shared_ptr<AsyncCore>(shared_from_this());
    const std::string wildcard = inbox + ".*";
    natsStatus s = natsConnection_Subscribe(&sub, nc, wildcard.c_str(), OnReply, holder);
    if (s == NATS_OK) s = natsSubscription_SetOnCompleteCB(sub, OnComplete, holder);
    if (s != NATS_OK) {
      absl::Status st = FromNats(s, "subscribing to " + wildcard);
      if (sub != nullptr) {
        retirer->Retire(sub);
        sub = nullptr;
      } else {
        delete holder;
      }
      return st;
    }
    natsSubscription_SetPendingLimits(sub, 65536, 256 * 1024 * 1024);
    timer = std::thread([this] { TimerLoop(); });
    started = true;
    return absl::OkStatus();
  }

  void Send(std::string_view subject, std::string_view data, std::chrono::milliseconds timeout,
            Headers headers, Requester::ReplyCallback done) {
    const auto start = Clock::now();
    PendingCall p{std::move(done), std::string(subject), start, start + timeout};
    std::unique_lock lock(mu);
    if (absl::Status st = StartLocked(); !st.ok()) {
      lock.unlock();
      Finish(p,
             absl::UnavailableError("request on " + p.subject + ": " + std::string(st.message())));
      return;
    }
    const uint64_t id = ++next_id;
    const bool earliest = p.deadline < pending.Earliest();
    pending.Add(id, std::move(p));
    if (earliest) cv.notify_all();
    lock.unlock();
    const std::string reply = inbox + "." + std::to_string(id);
    auto msg = BuildMsg(subject, reply.c_str(), data, headers);
    absl::Status st = msg.status();
    if (st.ok()) {
      st =
          FromNats(natsConnection_PublishMsg(nc, msg->get()), "request on " + std::string(subject));
      spent.Add(*std::move(msg));
    }
    if (!st.ok()) {
      if (auto taken = Take(id)) Finish(*taken, std::move(st));
    }
  }

  // Stops the timer and the reply subscription; requests still pending fail with Unavailable.
  void Close() {
    std::vector<PendingCall> rest;
    {
      std::lock_guard lock(mu);
      if (stopping) return;
      stopping = true;
      rest = pending.TakeAll();
    }
    cv.notify_all();
    if (timer.joinable()) timer.join();
    if (sub != nullptr) {
      natsSubscription_Unsubscribe(sub);  // fails harmlessly when the connection is closed
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::seconds(10), [&] { return complete; });
      lock.unlock();
      retirer->Retire(sub);
      sub = nullptr;
    }
    for (auto& p : rest) {
      absl::Status st =
          absl::UnavailableError("request on " + p.subject + ": bus connection closed");
      Finish(p, std::move(st));
    }
    spent.Release();
  }
};

}  // namespace

// ---- The connection ----

namespace {
struct LoopServeCore;  // ServeOnLoops (below, with the event-loop connections)
}  // namespace

struct NatsBus::Impl {
  NatsBusOptions options;
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  std::unique_ptr<BusClientMetrics> metrics;
  std::unique_ptr<JetStream> jetstream;

  std::mutex mu;
  std::condition_variable cv;
  bool closed = false;
  std::atomic<bool> closing{false};  // we are closing on purpose: a disconnect is expected
  std::vector<std::weak_ptr<ServeCore>> serves;           // for Drain() and the ticker
  std::vector<std::weak_ptr<LoopServeCore>> loop_serves;  // for Drain()
  std::shared_ptr<Ticker> ticker;
  std::shared_ptr<AsyncCore> async;              // RequestAsync
  std::shared_ptr<SubscriptionRetirer> retirer;  // set once connected

  void Tick(int64_t now_ns) {
    std::vector<std::shared_ptr<ServeCore>> cores;
    {
      std::lock_guard lock(mu);
      for (auto& w : serves) {
        if (auto c = w.lock()) cores.push_back(std::move(c));
      }
    }
    for (auto& c : cores) c->Nudge(now_ns);
  }

  // nats.c callback closure; lives until the closed callback (the last one nats.c makes).
  struct Callbacks {
    Impl* impl;
  };
  Callbacks* callbacks = nullptr;

  ~Impl() {
    if (ticker) ticker->Stop();  // it visits `serves`; serving cores may outlive us
    if (async) async->Close();   // fails what is pending before the metrics go
    if (js != nullptr) jsCtx_Destroy(js);
    if (nc != nullptr) {
      closing = true;
      natsConnection_Close(nc);
      if (retirer) retirer->ReaderStopped();  // Close joined nats.c's reader
      std::unique_lock lock(mu);
      const bool done = cv.wait_for(lock, std::chrono::seconds(5), [&] { return closed; });
      lock.unlock();
      natsConnection_Destroy(nc);
      if (done) delete callbacks;  // else leak it: nats.c might still call back
    } else {
      delete callbacks;
    }
  }

  absl::Status CheckConnected(std::string_view subject) const {
    switch (natsConnection_Status(nc)) {
      case NATS_CONN_STATUS_CONNECTED:
        return absl::OkStatus();
      case NATS_CONN_STATUS_CLOSED:
        return absl::UnavailableError("request on " + std::string(subject) +
                                      ": bus connection closed");
      case NATS_CONN_STATUS_DRAINING_SUBS:
      case NATS_CONN_STATUS_DRAINING_PUBS:
        return absl::UnavailableError("request on " + std::string(subject) + ": bus draining");
      default:
        return absl::UnavailableError("request on " + std::string(subject) +
                                      ": not connected to NATS (reconnecting)");
    }
  }

  void SetConnected(bool up) {
    if (metrics) metrics->connected.Set(up ? 1 : 0);
  }

  static void OnDisconnected(natsConnection*, void* c) {
    auto* impl = static_cast<Callbacks*>(c)->impl;
    impl->SetConnected(false);
    if (!impl->closing) SPDLOG_LOGGER_WARN(Logger(), "disconnected from NATS; reconnecting");
  }
  static void OnReconnected(natsConnection* nc, void* c) {
    auto* impl = static_cast<Callbacks*>(c)->impl;
    impl->SetConnected(true);
    if (impl->metrics) impl->metrics->reconnects.Increment();
    char url[256] = {0};
    natsConnection_GetConnectedUrl(nc, url, sizeof(url));
    SPDLOG_LOGGER_INFO(Logger(), "reconnected to NATS at {}", url);
  }
  static void OnConnected(natsConnection* nc, void* c) {
    auto* impl = static_cast<Callbacks*>(c)->impl;
    impl->SetConnected(true);
    char url[256] = {0};
    natsConnection_GetConnectedUrl(nc, url, sizeof(url));
    SPDLOG_LOGGER_INFO(Logger(), "connected to NATS at {}", url);
  }
  static void OnClosed(natsConnection*, void* c) {
    auto* impl = static_cast<Callbacks*>(c)->impl;
    impl->SetConnected(false);
    // Notify under the lock: the destructor, woken by this, must not free the condition variable
    // while notify_all is still running.
    std::lock_guard lock(impl->mu);
    impl->closed = true;
    impl->cv.notify_all();
  }
  static void OnError(natsConnection*, natsSubscription* sub, natsStatus err, void*) {
    if (err == NATS_SLOW_CONSUMER && sub != nullptr) {
      SPDLOG_LOGGER_WARN(Logger(), "slow consumer on {}: messages dropped",
                         natsSubscription_GetSubject(sub));
    } else {
      SPDLOG_LOGGER_WARN(Logger(), "NATS async error: {}", natsStatus_GetText(err));
    }
  }
  static int64_t ReconnectDelay(natsConnection*, int attempts, void* c) {
    const auto& o = static_cast<Callbacks*>(c)->impl->options;
    return ReconnectDelayMs(attempts, Ms(o.reconnect_wait), Ms(o.reconnect_wait_max));
  }

  absl::StatusOr<SubscriptionPtr> Serve(std::string_view subject, std::string_view queue,
                                        RequestHandler handler) {
    if (subject.empty()) return absl::InvalidArgumentError("serve: empty subject");
    auto core = std::make_shared<ServeCore>();
    core->nc = nc;
    core->retirer = retirer;
    core->subject = std::string(subject);
    core->handler = std::move(handler);
    core->max_running = options.serve_threads;
    {
      std::lock_guard lock(mu);
      if (!ticker) ticker = std::make_shared<Ticker>([this](int64_t now) { Tick(now); });
      core->ticker = ticker;
    }
    const std::string q(queue);
    natsStatus s = q.empty() ? natsConnection_SubscribeSync(&core->sub, nc, core->subject.c_str())
                             : natsConnection_QueueSubscribeSync(&core->sub, nc,
                                                                 core->subject.c_str(), q.c_str());
    if (s != NATS_OK) return FromNats(s, "subscribing to " + core->subject);
    // Let a burst queue in nats.c rather than being dropped as a slow consumer.
    natsSubscription_SetPendingLimits(core->sub, 65536, 256 * 1024 * 1024);
    core->Start();
    {
      std::lock_guard lock(mu);
      serves.erase(std::remove_if(serves.begin(), serves.end(),
                                  [](const std::weak_ptr<ServeCore>& w) { return w.expired(); }),
                   serves.end());
      serves.push_back(core);
    }
    return SubscriptionPtr(std::make_unique<NatsServeSubscription>(std::move(core)));
  }

  absl::StatusOr<SubscriptionPtr> Subscribe(std::string_view subject, std::string_view queue,
                                            MessageHandler handler) {
    if (subject.empty()) return absl::InvalidArgumentError("subscribe: empty subject");
    auto core = std::make_shared<MsgCore>();
    core->retirer = retirer;
    core->subject = std::string(subject);
    core->handler = std::move(handler);
    auto* holder = new std::shared_ptr<MsgCore>(core);
    natsSubscription* sub = nullptr;
    const std::string q(queue);
    natsStatus s = q.empty()
                       ? natsConnection_Subscribe(&sub, nc, core->subject.c_str(), OnSubMsg, holder)
                       : natsConnection_QueueSubscribe(&sub, nc, core->subject.c_str(), q.c_str(),
                                                       OnSubMsg, holder);
    if (s == NATS_OK) s = natsSubscription_SetOnCompleteCB(sub, OnSubComplete, holder);
    if (s != NATS_OK) {
      absl::Status st = FromNats(s, "subscribing to " + core->subject);
      if (sub != nullptr) {
        retirer->Retire(sub);
      } else {
        delete holder;
      }
      return st;
    }
    natsSubscription_SetPendingLimits(sub, 65536, 256 * 1024 * 1024);
    core->sub = sub;
    return SubscriptionPtr(std::make_unique<NatsMessageSubscription>(std::move(core)));
  }
};

namespace {

// ---- JetStream ----

class NatsJsMessage final : public JsMessage {
 public:
  NatsJsMessage(MsgPtr msg, jsCtx* js) : raw_(std::move(msg)), js_(js) {
    msg_ = ToMessage(raw_.get());
    jsMsgMetaData* meta = nullptr;
    if (natsMsg_GetMetaData(&meta, raw_.get()) == NATS_OK && meta != nullptr) {
      seq_ = meta->Sequence.Stream;
      deliveries_ = meta->NumDelivered;
      jsMsgMetaData_Destroy(meta);
    }
  }
  const Message& msg() const override { return msg_; }
  uint64_t stream_sequence() const override { return seq_; }
  uint64_t delivery_count() const override { return deliveries_; }

  absl::Status Ack() override {
    jsErrCode jerr = static_cast<jsErrCode>(0);
    return FromJs(natsMsg_AckSync(raw_.get(), nullptr, &jerr), jerr, "ack of " + msg_.subject);
  }
  absl::Status Nak(std::chrono::milliseconds delay) override {
    natsStatus s = delay.count() > 0 ? natsMsg_NakWithDelay(raw_.get(), Ms(delay), nullptr)
                                     : natsMsg_Nak(raw_.get(), nullptr);
    return FromNats(s, "nak of " + msg_.subject);
  }
  absl::Status InProgress() override {
    return FromNats(natsMsg_InProgress(raw_.get(), nullptr), "in-progress of " + msg_.subject);
  }
  absl::Status Term() override {
    return FromNats(natsMsg_Term(raw_.get(), nullptr), "term of " + msg_.subject);
  }

 private:
  MsgPtr raw_;
  [[maybe_unused]] jsCtx* js_;
  Message msg_;
  uint64_t seq_ = 0;
  uint64_t deliveries_ = 0;
};

class NatsPullConsumer final : public PullConsumer {
 public:
  NatsPullConsumer(natsSubscription* sub, jsCtx* js, std::shared_ptr<SubscriptionRetirer> retirer,
                   std::string name)
      : sub_(sub), js_(js), retirer_(std::move(retirer)), name_(std::move(name)) {}
  ~NatsPullConsumer() override {
    // Keep the durable consumer on the server: Destroy without Unsubscribe would leave the
    // subscription registered; Unsubscribe on a bound durable does not delete the consumer.
    retirer_->Retire(sub_);
  }

  absl::StatusOr<std::vector<JsMessagePtr>> Fetch(int batch,
                                                  std::chrono::milliseconds timeout) override {
    if (batch <= 0) return absl::InvalidArgumentError("Fetch: batch must be positive");
    natsMsgList list{nullptr, 0};
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s =
        natsSubscription_Fetch(&list, sub_, batch, std::max<int64_t>(Ms(timeout), 1), &jerr);
    std::vector<JsMessagePtr> out;
    for (int i = 0; i < list.Count; ++i) {
      if (list.Msgs[i] == nullptr) continue;
      out.push_back(std::make_unique<NatsJsMessage>(MsgPtr(list.Msgs[i]), js_));
      list.Msgs[i] = nullptr;
    }
    natsMsgList_Destroy(&list);
    if (s == NATS_TIMEOUT || (s == NATS_OK)) return out;
    if (!out.empty()) return out;
    return FromJs(s, jerr, "fetch from " + name_);
  }

 private:
  natsSubscription* sub_;
  jsCtx* js_;
  std::shared_ptr<SubscriptionRetirer> retirer_;
  std::string name_;
};

class NatsJetStream final : public JetStream {
 public:
  explicit NatsJetStream(NatsBus::Impl* impl) : impl_(impl) {}

  absl::Status EnsureStream(const StreamConfig& config) override {
    if (config.name.empty()) return absl::InvalidArgumentError("stream name is empty");
    if (config.subjects.empty()) {
      return absl::InvalidArgumentError("stream " + config.name + ": subjects is empty");
    }
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    std::vector<const char*> subjects;
    for (const auto& s : config.subjects) subjects.push_back(s.c_str());
    sc.Name = config.name.c_str();
    sc.Subjects = subjects.data();
    sc.SubjectsLen = static_cast<int>(subjects.size());
    sc.Retention = config.work_queue ? js_WorkQueuePolicy : js_LimitsPolicy;
    sc.Storage = js_FileStorage;
    sc.Replicas = config.replicas;
    sc.MaxAge = Ns(config.max_age);
    if (config.max_msg_size > 0) sc.MaxMsgSize = static_cast<int32_t>(config.max_msg_size);
    sc.Duplicates = Ns(config.duplicate_window);
    jsStreamInfo* si = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_AddStream(&si, impl_->js, &sc, nullptr, &jerr);
    if (s != NATS_OK && jerr == JSStreamNameExistErr) {
      jerr = static_cast<jsErrCode>(0);
      s = js_UpdateStream(&si, impl_->js, &sc, nullptr, &jerr);
    }
    if (si != nullptr) jsStreamInfo_Destroy(si);
    return FromJs(s, jerr, "ensuring stream " + config.name);
  }

  absl::StatusOr<uint64_t> Publish(std::string_view subject, std::string_view data,
                                   const Headers& headers, std::string_view msg_id) override {
    WISP_ASSIGN_OR_RETURN(MsgPtr msg, BuildMsg(subject, nullptr, data, headers));
    jsPubOptions po;
    jsPubOptions_Init(&po);
    const std::string id(msg_id);
    if (!id.empty()) po.MsgId = id.c_str();
    po.MaxWait = Ms(impl_->options.jetstream_timeout);
    jsPubAck* pa = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_PublishMsg(&pa, impl_->js, msg.get(), &po, &jerr);
    if (s != NATS_OK) {
      if (pa != nullptr) jsPubAck_Destroy(pa);
      return FromJs(s, jerr, "JetStream publish on " + std::string(subject));
    }
    const uint64_t seq = pa->Sequence;
    jsPubAck_Destroy(pa);
    return seq;
  }

  absl::StatusOr<PullConsumerPtr> PullSubscribe(std::string_view stream,
                                                const ConsumerConfig& config) override {
    if (config.durable.empty()) return absl::InvalidArgumentError("consumer durable name is empty");
    const std::string stream_name(stream);
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = config.durable.c_str();
    cc.AckPolicy = js_AckExplicit;
    cc.DeliverPolicy = js_DeliverAll;
    cc.AckWait = Ns(config.ack_wait);
    cc.MaxDeliver = config.max_deliver;
    cc.MaxAckPending = config.max_ack_pending;
    if (!config.filter_subject.empty()) cc.FilterSubject = config.filter_subject.c_str();
    jsConsumerInfo* ci = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    // Create it, or bring an existing durable to this configuration.
    natsStatus s =
        js_GetConsumerInfo(&ci, impl_->js, stream_name.c_str(), cc.Durable, nullptr, &jerr);
    if (ci != nullptr) jsConsumerInfo_Destroy(ci), ci = nullptr;
    if (s == NATS_NOT_FOUND || jerr == JSConsumerNotFoundErr) {
      jerr = static_cast<jsErrCode>(0);
      s = js_AddConsumer(&ci, impl_->js, stream_name.c_str(), &cc, nullptr, &jerr);
    } else if (s == NATS_OK) {
      s = js_UpdateConsumer(&ci, impl_->js, stream_name.c_str(), &cc, nullptr, &jerr);
    }
    if (ci != nullptr) jsConsumerInfo_Destroy(ci);
    WISP_RETURN_IF_ERROR(
        FromJs(s, jerr, "ensuring consumer " + config.durable + " on stream " + stream_name));

    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = stream_name.c_str();
    so.Consumer = config.durable.c_str();
    so.ManualAck = true;
    natsSubscription* sub = nullptr;
    jerr = static_cast<jsErrCode>(0);
    const char* subject = config.filter_subject.empty() ? nullptr : config.filter_subject.c_str();
    s = js_PullSubscribe(&sub, impl_->js, subject, config.durable.c_str(), nullptr, &so, &jerr);
    WISP_RETURN_IF_ERROR(FromJs(s, jerr, "binding consumer " + config.durable));
    return PullConsumerPtr(std::make_unique<NatsPullConsumer>(sub, impl_->js, impl_->retirer,
                                                              stream_name + "/" + config.durable));
  }

 private:
  NatsBus::Impl* impl_;
};

// ---- Key-value ----

struct KvEntryDeleter {
  void operator()(kvEntry* e) const { kvEntry_Destroy(e); }
};
using KvEntryPtr = std::unique_ptr<kvEntry, KvEntryDeleter>;

class NatsKvWatch final : public KvWatch {
 public:
  NatsKvWatch(kvWatcher* w, KvWatchHandler handler) : w_(w), handler_(std::move(handler)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~NatsKvWatch() override {
    stop_ = true;
    kvWatcher_Stop(w_);
    thread_.join();
    kvWatcher_Destroy(w_);
  }

 private:
  void Loop() {
    bool initial = true;
    while (!stop_) {
      kvEntry* raw = nullptr;
      natsStatus s = kvWatcher_Next(&raw, w_, 500);
      if (s == NATS_TIMEOUT) continue;
      if (s != NATS_OK) {
        if (stop_) return;
        // Stopped underneath us or the connection closed: nothing more will come.
        if (s == NATS_ILLEGAL_STATE || s == NATS_CONNECTION_CLOSED ||
            s == NATS_INVALID_SUBSCRIPTION) {
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      KvEntryPtr e(raw);
      if (!e) {
        initial = false;
        handler_(KvEntry{});
        continue;
      }
      const kvOperation op = kvEntry_Operation(e.get());
      const bool deleted = op == kvOp_Delete || op == kvOp_Purge;
      if (initial && deleted) continue;  // initial values are the live entries only
      KvEntry entry;
      entry.key = kvEntry_Key(e.get());
      if (!deleted && kvEntry_Value(e.get()) != nullptr) {
        entry.value.assign(static_cast<const char*>(kvEntry_Value(e.get())),
                           kvEntry_ValueLen(e.get()));
      }
      entry.revision = kvEntry_Revision(e.get());
      entry.deleted = deleted;
      handler_(entry);
    }
  }

  kvWatcher* w_;
  KvWatchHandler handler_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class NatsKeyValue final : public KeyValue {
 public:
  NatsKeyValue(kvStore* kv, std::string bucket) : kv_(kv), bucket_(std::move(bucket)) {}
  ~NatsKeyValue() override { kvStore_Destroy(kv_); }

  const std::string& bucket() const override { return bucket_; }

  absl::StatusOr<KvEntry> Get(std::string_view key) override {
    const std::string k(key);
    kvEntry* raw = nullptr;
    natsStatus s = kvStore_Get(&raw, kv_, k.c_str());
    if (s == NATS_NOT_FOUND)
      return absl::NotFoundError("key " + k + " not found in bucket " + bucket_);
    WISP_RETURN_IF_ERROR(Err(s, "get", k));
    KvEntryPtr e(raw);
    KvEntry out;
    out.key = k;
    if (kvEntry_Value(e.get()) != nullptr) {
      out.value.assign(static_cast<const char*>(kvEntry_Value(e.get())), kvEntry_ValueLen(e.get()));
    }
    out.revision = kvEntry_Revision(e.get());
    return out;
  }

  absl::StatusOr<uint64_t> Put(std::string_view key, std::string_view value) override {
    const std::string k(key);
    uint64_t rev = 0;
    WISP_RETURN_IF_ERROR(Err(
        kvStore_Put(&rev, kv_, k.c_str(), value.data(), static_cast<int>(value.size())), "put", k));
    return rev;
  }

  absl::StatusOr<uint64_t> Create(std::string_view key, std::string_view value) override {
    const std::string k(key);
    uint64_t rev = 0;
    natsStatus s =
        kvStore_Create(&rev, kv_, k.c_str(), value.data(), static_cast<int>(value.size()));
    if (s != NATS_OK && LastErrorContains("wrong last sequence")) {
      return absl::AlreadyExistsError("key " + k + " exists in bucket " + bucket_);
    }
    WISP_RETURN_IF_ERROR(Err(s, "create", k));
    return rev;
  }

  absl::StatusOr<uint64_t> Update(std::string_view key, std::string_view value,
                                  uint64_t revision) override {
    const std::string k(key);
    uint64_t rev = 0;
    natsStatus s = kvStore_Update(&rev, kv_, k.c_str(), value.data(),
                                  static_cast<int>(value.size()), revision);
    if (s != NATS_OK && LastErrorContains("wrong last sequence")) {
      return absl::AbortedError("key " + k + " in bucket " + bucket_ +
                                " is no longer at revision " + std::to_string(revision));
    }
    WISP_RETURN_IF_ERROR(Err(s, "update", k));
    return rev;
  }

  absl::Status Delete(std::string_view key) override {
    const std::string k(key);
    return Err(kvStore_Delete(kv_, k.c_str()), "delete", k);
  }

  absl::Status PurgeDeletes(std::chrono::milliseconds older_than) override {
    if (older_than.count() < 0) {
      return absl::InvalidArgumentError("kv purge-deletes " + bucket_ + ": negative age");
    }
    kvPurgeOptions o;
    kvPurgeOptions_Init(&o);
    // nats.c reads 0 as its own default (30 minutes) and a negative age as "every marker".
    o.DeleteMarkersOlderThan =
        older_than.count() == 0
            ? -1
            : std::chrono::duration_cast<std::chrono::nanoseconds>(older_than).count();
    o.Timeout = 60'000;  // gathering the markers; on timeout the ones found are still purged
    return Err(kvStore_PurgeDeletes(kv_, &o), "purge-deletes", "");
  }

  absl::StatusOr<std::vector<std::string>> Keys() override {
    kvKeysList list{nullptr, 0};
    natsStatus s = kvStore_Keys(&list, kv_, nullptr);
    std::vector<std::string> keys;
    if (s == NATS_NOT_FOUND) return keys;  // nats.c reports an empty bucket as "not found"
    WISP_RETURN_IF_ERROR(Err(s, "keys", ""));
    for (int i = 0; i < list.Count; ++i) keys.emplace_back(list.Keys[i]);
    kvKeysList_Destroy(&list);
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  absl::StatusOr<KvWatchPtr> Watch(std::string_view pattern, KvWatchHandler handler) override {
    const std::string p(pattern);
    kvWatcher* w = nullptr;
    WISP_RETURN_IF_ERROR(Err(kvStore_Watch(&w, kv_, p.c_str(), nullptr), "watch", p));
    return KvWatchPtr(std::make_unique<NatsKvWatch>(w, std::move(handler)));
  }

 private:
  absl::Status Err(natsStatus s, std::string_view op, std::string_view key) {
    if (s == NATS_OK) return absl::OkStatus();
    return FromNats(s, "kv " + std::string(op) + " " + bucket_ + "/" + std::string(key));
  }

  kvStore* kv_;
  std::string bucket_;
};

absl::Status ValidateOptions(const NatsBusOptions& o) {
  if (o.servers.empty())
    return absl::InvalidArgumentError("nats servers: at least one URL required");
  for (const auto& s : o.servers) {
    if (s.empty()) return absl::InvalidArgumentError("nats servers: empty URL");
  }
  const int auth =
      (!o.user.empty() ? 1 : 0) + (!o.creds_file.empty() ? 1 : 0) + (!o.token.empty() ? 1 : 0);
  if (auth > 1) {
    return absl::InvalidArgumentError(
        "nats auth: set only one of user/password, creds file, token");
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("nats tls: tls_cert_file and tls_key_file go together");
  }
  if (o.serve_threads < 1) return absl::InvalidArgumentError("nats serve_threads must be >= 1");
  if (!o.inbox_prefix.empty()) {
    // A literal subject: dot-separated non-empty tokens of printable characters, no wildcards.
    const std::string_view p = o.inbox_prefix;
    bool ok = p.front() != '.' && p.back() != '.' && p.find("..") == std::string_view::npos;
    for (char c : p) ok &= c > ' ' && c < 0x7f && c != '*' && c != '>';
    if (!ok) {
      return absl::InvalidArgumentError("nats inbox_prefix: \"" + o.inbox_prefix +
                                        "\" is not a literal subject (tokens separated by '.', no "
                                        "spaces, no '*' or '>')");
    }
  }
  return absl::OkStatus();
}

// The options NatsBus::Connect and LoopRequester::Connect share: servers, name, authentication,
// TLS and the inbox prefix. InvalidArgument naming the option nats.c refused.
absl::Status SetServerOptions(natsOptions* o, const NatsBusOptions& options) {
  std::vector<const char*> urls;
  for (const auto& u : options.servers) urls.push_back(u.c_str());
  auto check = [](natsStatus st, std::string_view field) -> absl::Status {
    if (st == NATS_OK) return absl::OkStatus();
    return absl::InvalidArgumentError("nats " + std::string(field) + ": " + natsStatus_GetText(st));
  };
  WISP_RETURN_IF_ERROR(
      check(natsOptions_SetServers(o, urls.data(), static_cast<int>(urls.size())), "servers"));
  if (!options.name.empty())
    WISP_RETURN_IF_ERROR(check(natsOptions_SetName(o, options.name.c_str()), "name"));
  if (!options.user.empty()) {
    WISP_RETURN_IF_ERROR(
        check(natsOptions_SetUserInfo(o, options.user.c_str(), options.password.c_str()), "user"));
  }
  if (!options.token.empty())
    WISP_RETURN_IF_ERROR(check(natsOptions_SetToken(o, options.token.c_str()), "token"));
  if (!options.creds_file.empty()) {
    WISP_RETURN_IF_ERROR(
        check(natsOptions_SetUserCredentialsFromFiles(o, options.creds_file.c_str(), nullptr),
              "creds file " + options.creds_file));
  }
  if (!options.tls_ca_file.empty()) {
    WISP_RETURN_IF_ERROR(check(natsOptions_SetSecure(o, true), "tls"));
    WISP_RETURN_IF_ERROR(
        check(natsOptions_LoadCATrustedCertificates(o, options.tls_ca_file.c_str()),
              "tls_ca_file " + options.tls_ca_file));
  }
  if (!options.tls_cert_file.empty()) {
    WISP_RETURN_IF_ERROR(check(natsOptions_SetSecure(o, true), "tls"));
    WISP_RETURN_IF_ERROR(check(natsOptions_LoadCertificatesChain(o, options.tls_cert_file.c_str(),
                                                                 options.tls_key_file.c_str()),
                               "tls_cert_file/tls_key_file"));
  }
  if (!options.inbox_prefix.empty()) {
    WISP_RETURN_IF_ERROR(
        check(natsOptions_SetCustomInboxPrefix(o, options.inbox_prefix.c_str()), "inbox_prefix"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NatsBus>> NatsBus::Connect(const NatsBusOptions& options) {
  WISP_RETURN_IF_ERROR(ValidateOptions(options));
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  if (options.registry != nullptr) {
    impl->metrics = std::make_unique<BusClientMetrics>(*options.registry);
    impl->metrics->connected.Set(0);
  }
  impl->callbacks = new Impl::Callbacks{impl.get()};
  void* cb = impl->callbacks;

  natsOptions* o = nullptr;
  natsStatus s = natsOptions_Create(&o);
  if (s != NATS_OK) return FromNats(s, "nats options");
  std::unique_ptr<natsOptions, void (*)(natsOptions*)> guard(o, natsOptions_Destroy);
  WISP_RETURN_IF_ERROR(SetServerOptions(o, options));
  natsOptions_SetTimeout(o, Ms(options.connect_timeout));
  natsOptions_SetAllowReconnect(o, true);
  natsOptions_SetMaxReconnect(o, -1);  // forever
  natsOptions_SetCustomReconnectDelay(o, Impl::ReconnectDelay, cb);
  natsOptions_SetPingInterval(o, std::max<int64_t>(Ms(options.ping_interval), 100));
  natsOptions_SetMaxPingsOut(o, 2);
  natsOptions_SetSendAsap(o, true);
  natsOptions_SetFailRequestsOnDisconnect(o, true);
  natsOptions_SetDisconnectedCB(o, Impl::OnDisconnected, cb);
  natsOptions_SetReconnectedCB(o, Impl::OnReconnected, cb);
  natsOptions_SetClosedCB(o, Impl::OnClosed, cb);
  natsOptions_SetErrorHandler(o, Impl::OnError, cb);
  if (options.retry_on_failed_connect) {
    natsOptions_SetRetryOnFailedConnect(o, true, Impl::OnConnected, cb);
  }

  s = natsConnection_Connect(&impl->nc, o);
  if (s == NATS_NOT_YET_CONNECTED && options.retry_on_failed_connect) {
    SPDLOG_LOGGER_WARN(Logger(), "NATS not reachable yet; retrying in the background");
  } else if (s != NATS_OK) {
    absl::Status st = FromNats(s, "connecting to NATS");
    impl->nc = nullptr;  // nothing to close; callbacks never registered with a live connection
    return absl::UnavailableError(std::string(st.message()));
  } else {
    impl->SetConnected(true);
  }
  impl->retirer = std::make_shared<SubscriptionRetirer>(impl->nc);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = Ms(options.jetstream_timeout);
  s = natsConnection_JetStream(&impl->js, impl->nc, &jo);
  if (s != NATS_OK) return FromNats(s, "JetStream context");
  impl->jetstream = std::make_unique<NatsJetStream>(impl.get());
  impl->async = std::make_shared<AsyncCore>();
  impl->async->nc = impl->nc;
  impl->async->retirer = impl->retirer;
  impl->async->metrics = impl->metrics.get();
  impl->async->inbox_prefix = options.inbox_prefix;
  return std::unique_ptr<NatsBus>(new NatsBus(std::move(impl)));
}

NatsBus::NatsBus(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
NatsBus::~NatsBus() = default;

absl::Status NatsBus::Publish(std::string_view subject, std::string_view data,
                              const Headers& headers) {
  const std::string subj(subject);
  if (headers.empty()) {
    return FromNats(
        natsConnection_Publish(impl_->nc, subj.c_str(), data.data(), static_cast<int>(data.size())),
        "publish on " + subj);
  }
  WISP_ASSIGN_OR_RETURN(MsgPtr msg, BuildMsg(subject, nullptr, data, headers));
  return FromNats(natsConnection_PublishMsg(impl_->nc, msg.get()), "publish on " + subj);
}

namespace {
Headers RequestHeaders(const Headers& headers, std::chrono::milliseconds timeout) {
  Headers h = headers;
  h[std::string(kHeaderTimeoutMs)] = std::to_string(Ms(timeout));
  if (h.find(kHeaderRequestId) == h.end()) {
    const std::string& current = log::CurrentRequestId();
    h[std::string(kHeaderRequestId)] = current.empty() ? RandomId() : current;
  }
  return h;
}
}  // namespace

absl::StatusOr<Message> NatsBus::Request(std::string_view subject, std::string_view data,
                                         std::chrono::milliseconds timeout,
                                         const Headers& headers) {
  const auto start = Clock::now();
  auto result = [&]() -> absl::StatusOr<Message> {
    if (timeout.count() <= 0) {
      return absl::DeadlineExceededError("request on " + std::string(subject) + ": no time left");
    }
    // nats.c would buffer a request made while reconnecting and time it out; fail fast instead.
    WISP_RETURN_IF_ERROR(impl_->CheckConnected(subject));
    WISP_ASSIGN_OR_RETURN(MsgPtr msg,
                          BuildMsg(subject, nullptr, data, RequestHeaders(headers, timeout)));
    natsMsg* raw = nullptr;
    natsStatus s = natsConnection_RequestMsg(&raw, impl_->nc, msg.get(), Ms(timeout));
    MsgPtr reply(raw);
    if (s != NATS_OK) return FromNats(s, "request on " + std::string(subject));
    Message out = ToMessage(reply.get());
    WISP_RETURN_IF_ERROR(StatusFromHeaders(out.headers));
    return out;
  }();
  if (impl_->metrics) {
    impl_->metrics->Record(subject, result.status().code(),
                           std::chrono::duration<double>(Clock::now() - start).count());
  }
  return result;
}

void NatsBus::RequestAsync(std::string_view subject, std::string_view data,
                           std::chrono::milliseconds timeout, const Headers& headers,
                           ReplyCallback done) {
  absl::Status st;
  if (timeout.count() <= 0) {
    st = absl::DeadlineExceededError("request on " + std::string(subject) + ": no time left");
  } else {
    st = impl_->CheckConnected(subject);
  }
  if (!st.ok()) {
    if (impl_->metrics) impl_->metrics->Record(subject, st.code(), 0);
    done(std::move(st));
    return;
  }
  impl_->async->Send(subject, data, timeout, RequestHeaders(headers, timeout), std::move(done));
}

absl::StatusOr<std::vector<Message>> NatsBus::RequestMany(std::string_view subject,
                                                          std::string_view data,
                                                          std::chrono::milliseconds timeout,
                                                          int max_replies, const Headers& headers) {
  const auto deadline = Clock::now() + timeout;
  WISP_RETURN_IF_ERROR(impl_->CheckConnected(subject));
  WISP_ASSIGN_OR_RETURN(const std::string inbox, NewInbox(impl_->options.inbox_prefix));
  natsSubscription* sub = nullptr;
  natsStatus s = natsConnection_SubscribeSync(&sub, impl_->nc, inbox.c_str());
  if (s != NATS_OK) return FromNats(s, "subscribing to reply inbox");
  auto retire = [retirer = impl_->retirer.get()](natsSubscription* x) { retirer->Retire(x); };
  auto sub_guard = std::unique_ptr<natsSubscription, decltype(retire)>(sub, retire);
  WISP_ASSIGN_OR_RETURN(MsgPtr msg,
                        BuildMsg(subject, inbox.c_str(), data, RequestHeaders(headers, timeout)));
  s = natsConnection_PublishMsg(impl_->nc, msg.get());
  if (s != NATS_OK) return FromNats(s, "request on " + std::string(subject));
  std::vector<Message> out;
  while (max_replies <= 0 || static_cast<int>(out.size()) < max_replies) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    natsMsg* raw = nullptr;
    s = natsSubscription_NextMsg(&raw, sub, left.count());
    MsgPtr reply(raw);
    if (s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS) break;
    if (s != NATS_OK) return FromNats(s, "collecting replies on " + std::string(subject));
    if (natsMsg_IsNoResponders(reply.get())) break;
    out.push_back(ToMessage(reply.get()));
  }
  return out;
}

absl::StatusOr<SubscriptionPtr> NatsBus::Serve(std::string_view subject,
                                               std::string_view queue_group,
                                               RequestHandler handler) {
  if (!handler) return absl::InvalidArgumentError("Serve: empty handler");
  return impl_->Serve(subject, queue_group, std::move(handler));
}

absl::StatusOr<SubscriptionPtr> NatsBus::Subscribe(std::string_view subject,
                                                   std::string_view queue_group,
                                                   MessageHandler handler) {
  if (!handler) return absl::InvalidArgumentError("Subscribe: empty handler");
  return impl_->Subscribe(subject, queue_group, std::move(handler));
}

JetStream& NatsBus::Js() { return *impl_->jetstream; }

absl::StatusOr<KeyValuePtr> NatsBus::OpenBucket(const BucketConfig& config) {
  if (config.name.empty()) return absl::InvalidArgumentError("bucket name is empty");
  kvStore* kv = nullptr;
  natsStatus s = js_KeyValue(&kv, impl_->js, config.name.c_str());
  if (s == NATS_NOT_FOUND) {
    kvConfig kc;
    kvConfig_Init(&kc);
    kc.Bucket = config.name.c_str();
    kc.History = static_cast<uint8_t>(std::clamp(config.history, 1, 64));
    kc.TTL = Ns(config.ttl);
    kc.Replicas = config.replicas;
    if (config.max_value_size > 0) kc.MaxValueSize = static_cast<int32_t>(config.max_value_size);
    kc.StorageType = js_FileStorage;
    s = js_CreateKeyValue(&kv, impl_->js, &kc);
    if (s != NATS_OK) {
      // Another instance may have created it at the same moment.
      if (js_KeyValue(&kv, impl_->js, config.name.c_str()) == NATS_OK) s = NATS_OK;
    }
  }
  if (s != NATS_OK) return FromNats(s, "opening bucket " + config.name);
  return KeyValuePtr(std::make_unique<NatsKeyValue>(kv, config.name));
}

ConnectionState NatsBus::State() const {
  switch (natsConnection_Status(impl_->nc)) {
    case NATS_CONN_STATUS_CONNECTED:
    case NATS_CONN_STATUS_DRAINING_SUBS:
    case NATS_CONN_STATUS_DRAINING_PUBS:
      return ConnectionState::kConnected;
    case NATS_CONN_STATUS_CLOSED:
      return ConnectionState::kClosed;
    default:
      return ConnectionState::kReconnecting;
  }
}

std::string NatsBus::ConnectedUrl() const {
  char url[256] = {0};
  if (natsConnection_GetConnectedUrl(impl_->nc, url, sizeof(url)) != NATS_OK) return "";
  return url;
}

// ---- LoopRequester ----

namespace {

namespace asio = boost::asio;

// One NATS connection in nats.c's event-loop mode, on one asio io_context. nats.c calls the
// Ev* callbacks from any thread (the loop's, a publisher's, its reconnect and timer threads),
// sometimes with the connection's lock held; they only record the change on the loop thread
// (at once when called there, else posted), so nothing here ever calls back into nats.c from
// inside nats.c. Everything below "loop thread only" is touched on the loop thread alone.
struct LoopConn : std::enable_shared_from_this<LoopConn> {
  // nats.c's socket as asio watches it: a dup, so asio registers and closes a descriptor number
  // of its own, never one nats.c may close and reuse for the next connection's socket.
  struct Watch {
    Watch(asio::io_context& ioc, int fd) : sd(ioc, fd) {}
    asio::posix::stream_descriptor sd;
    bool read_armed = false;
    bool write_armed = false;
  };

  // What nats.c's callback thread touches (disconnected, reconnected, connected, closed). nats.c
  // may run those after Close() has returned and the LoopConn is gone, so they get a Link of their
  // own, held by the callbacks' closure until the closed callback, the last one, frees it.
  struct Link {
    std::string name;        // the connection's name, for logs
    std::string while_down;  // what happens to its traffic while it is down, for the log
    int64_t reconnect_wait_ms = 100;
    int64_t reconnect_wait_max_ms = 5000;
    std::atomic<bool> connected{false};
    std::atomic<bool> closing{false};
  };
  using LinkHolder = std::shared_ptr<Link>;  // the closure nats.c's callbacks get (heap, owned)

  LoopConn(const void* owner, asio::io_context& ioc)
      : owner(owner), ioc(ioc), link(std::make_shared<Link>()), timer(ioc) {}

  const void* const owner;
  asio::io_context& ioc;
  natsConnection* nc = nullptr;
  natsSubscription* sub = nullptr;  // its one: the reply inbox, or the served subject
  // Serving (ServeOnLoops): every message is a request on `serve_subject` for `serve` (set before
  // connecting, then read-only). Unset: every message is a reply to a request of this connection.
  const RequestHandler* serve = nullptr;
  std::string serve_subject;
  std::string inbox;
  const std::shared_ptr<Link> link;
  BusClientMetrics* metrics = nullptr;  // may be null
  std::atomic<bool> registered{false};  // its loop has run (and routes its thread's requests)

  // Loop thread only.
  std::shared_ptr<Watch> watch;
  bool want_read = false;
  bool want_write = false;
  bool closed = false;
  uint64_t next_id = 0;
  PendingCalls pending;
  asio::steady_timer timer;
  Clock::time_point timer_at = Clock::time_point::max();
  SpentBatch spent;  // nats.c frees each message through its GC thread: hand them over in batches

  void Spend(MsgPtr msg) {
    if (spent.Add(std::move(msg))) spent.Destroy();
  }

  bool OnLoop() const { return ioc.get_executor().running_in_this_thread(); }

  template <typename Fn>
  void Run(Fn fn) {
    if (OnLoop()) {
      fn();
    } else {
      asio::post(ioc, [self = shared_from_this(), fn = std::move(fn)] { fn(); });
    }
  }

  static natsStatus EvAttach(void** user, void* loop, natsConnection*, natsSock fd) {
    auto* c = static_cast<LoopConn*>(loop);
    *user = c;
    const int d = ::dup(fd);
    if (d < 0) return NATS_SYS_ERROR;
    c->Run([c, d] { c->Attach(d); });
    return NATS_OK;
  }
  // nats.c asks to start or stop reading (want_read) or writing (want_write).
  static natsStatus Want(void* user, bool LoopConn::*flag, bool add) {
    auto* c = static_cast<LoopConn*>(user);
    c->Run([c, flag, add] {
      c->*flag = add;
      c->Arm();
    });
    return NATS_OK;
  }
  static natsStatus EvRead(void* user, bool add) { return Want(user, &LoopConn::want_read, add); }
  static natsStatus EvWrite(void* user, bool add) { return Want(user, &LoopConn::want_write, add); }
  static natsStatus EvDetach(void* user) {
    auto* c = static_cast<LoopConn*>(user);
    c->Run([c] { c->Unwatch(); });
    return NATS_OK;
  }
  // nats.c's threads. While a requesting connection is down its thread's requests go to the
  // fallback; while a serving one is down, its queue group's other members get the requests.
  static void OnDisconnected(natsConnection*, void* closure) {
    Link& c = **static_cast<LinkHolder*>(closure);
    if (c.connected.exchange(false) && !c.closing) {
      SPDLOG_LOGGER_WARN(Logger(), "{}: disconnected from NATS; {} until it reconnects", c.name,
                         c.while_down);
    }
  }
  static void OnConnected(natsConnection*, void* closure) {
    Link& c = **static_cast<LinkHolder*>(closure);
    if (!c.connected.exchange(true)) SPDLOG_LOGGER_INFO(Logger(), "{}: connected", c.name);
  }
  static void OnClosed(natsConnection*, void* closure) { delete static_cast<LinkHolder*>(closure); }
  static int64_t ReconnectDelay(natsConnection*, int attempts, void* closure) {
    const Link* c = static_cast<LinkHolder*>(closure)->get();
    return ReconnectDelayMs(attempts, c->reconnect_wait_ms, c->reconnect_wait_max_ms);
  }

  void Unwatch() {
    if (!watch) return;
    boost::system::error_code ec;
    watch->sd.close(ec);  // its pending waits complete with operation_aborted
    watch.reset();
  }

  void Attach(int fd) {
    Unwatch();
    if (closed) {
      ::close(fd);
      return;
    }
    watch = std::make_shared<Watch>(ioc, fd);
    want_read = true;  // as nats.c's own adapters: reading starts on attach
    Arm();
  }

  void Arm() {
    if (!watch) return;
    ArmWait(&LoopConn::want_read, &Watch::read_armed, asio::posix::stream_descriptor::wait_read,
            natsConnection_ProcessReadEvent);
    ArmWait(&LoopConn::want_write, &Watch::write_armed, asio::posix::stream_descriptor::wait_write,
            natsConnection_ProcessWriteEvent);
  }

  // While nats.c wants it (`want`), waits once for the socket to be ready that way, then lets
  // nats.c read or write (`process`) and waits again.
  void ArmWait(bool LoopConn::*want, bool Watch::*armed,
               asio::posix::stream_descriptor::wait_type type, void (*process)(natsConnection*)) {
    auto w = watch;
    if (!(this->*want) || (*w).*armed) return;
    (*w).*armed = true;
    w->sd.async_wait(type, [self = shared_from_this(), w, want, armed,
                            process](const boost::system::error_code& ec) {
      (*w).*armed = false;
      if (ec || self->watch != w) return;
      if ((*self).*want) process(self->nc);
      self->Arm();
    });
  }

  // Every message this connection receives (replies to its requests, or, serving, requests on its
  // one subject), inside natsConnection_ProcessReadEvent on the loop thread, before any
  // subscription queues it: taken here, so no delivery thread is involved. Not a synchronous
  // subscription's NextMsg: that swallows a "no responders" status without saying whose request
  // it was.
  static void Filter(natsConnection*, natsMsg** raw, void* closure) {
    auto* c = static_cast<LoopConn*>(closure);
    MsgPtr msg(*raw);
    *raw = nullptr;
    if (c->OnLoop()) {
      c->OnMessage(std::move(msg), Clock::now());
    } else {  // not expected: nats.c reads only in ProcessReadEvent once attached
      asio::post(c->ioc, [self = c->shared_from_this(), m = msg.release(), at = Clock::now()] {
        self->OnMessage(MsgPtr(m), at);
      });
    }
  }

  void OnMessage(MsgPtr msg, Clock::time_point arrived) {
    if (serve != nullptr) {
      OnRequest(std::move(msg), arrived);
    } else {
      OnReply(std::move(msg));
    }
  }

  // A request, served here and now: its reply joins the others of this read in nats.c's buffer,
  // and the loop writes them at once when the read is done.
  void OnRequest(MsgPtr msg, Clock::time_point arrived) {
    if (closed) return;
    Message in = ToMessage(msg.get());
    Spend(std::move(msg));
    log::ScopedRequestId rid(in.Header(kHeaderRequestId));
    SendReply(nc, serve_subject, in, ServeRequest(*serve, in, arrived));
  }

  void OnReply(MsgPtr msg) {
    const auto id = ReplyId(msg.get());
    if (!id) return;
    auto p = pending.Take(*id);
    if (!p) return;  // answered after its timeout
    absl::StatusOr<Message> outcome = ReplyOutcome(msg.get(), p->subject);
    Spend(std::move(msg));
    FinishCall(metrics, *p, std::move(outcome));
  }

  void ArmTimer() {
    const auto first = pending.Earliest();
    if (first >= timer_at) return;  // nothing waits, or the timer is already set as early
    timer_at = first;
    timer.expires_at(first);
    timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec) return;  // re-armed earlier, or closed
      self->timer_at = Clock::time_point::max();
      for (auto& p : self->pending.TakeExpired(Clock::now())) {
        FinishCall(self->metrics, p,
                   absl::DeadlineExceededError("request on " + p.subject + ": " +
                                               natsStatus_GetText(NATS_TIMEOUT)));
      }
      self->ArmTimer();
    });
  }

  // Loop thread. False when this connection cannot take the request (down or closed): the
  // caller sends it another way.
  bool Send(std::string_view subject, std::string_view data, std::chrono::milliseconds timeout,
            const Headers& headers, Requester::ReplyCallback& done) {
    if (closed || !link->connected) return false;
    const auto start = Clock::now();
    const uint64_t id = ++next_id;
    const std::string reply = inbox + "." + std::to_string(id);
    auto msg = BuildMsg(subject, reply.c_str(), data, RequestHeaders(headers, timeout));
    PendingCall p{std::move(done), std::string(subject), start, start + timeout};
    absl::Status st = msg.status();
    if (st.ok()) {
      st =
          FromNats(natsConnection_PublishMsg(nc, msg->get()), "request on " + std::string(subject));
      Spend(*std::move(msg));
    }
    if (!st.ok()) {
      FinishCall(metrics, p, std::move(st));
      return true;
    }
    pending.Add(id, std::move(p));
    ArmTimer();
    return true;
  }

  // Opens the connection in event-loop mode on `ioc` (named `name`) and sets the filter. With
  // retry_on_failed_connect, a server that is not up yet is not an error: nats.c keeps trying.
  absl::Status Connect(const NatsBusOptions& options, std::string name) {
    link->name = std::move(name);
    link->while_down = serve != nullptr ? "its queue group's other members get its requests"
                                        : "its requests use the shared connection";
    link->reconnect_wait_ms = std::max<int64_t>(Ms(options.reconnect_wait), 1);
    link->reconnect_wait_max_ms = std::max(link->reconnect_wait_ms, Ms(options.reconnect_wait_max));
    natsOptions* o = nullptr;
    natsStatus s = natsOptions_Create(&o);
    if (s != NATS_OK) return FromNats(s, "nats options");
    std::unique_ptr<natsOptions, void (*)(natsOptions*)> guard(o, natsOptions_Destroy);
    WISP_RETURN_IF_ERROR(SetServerOptions(o, options));
    natsOptions_SetName(o, link->name.c_str());
    natsOptions_SetTimeout(o, Ms(options.connect_timeout));
    natsOptions_SetAllowReconnect(o, true);
    natsOptions_SetMaxReconnect(o, -1);  // forever
    // Freed by OnClosed, or below when no connection is made (then nats.c calls nothing).
    auto* holder = new LinkHolder(link);
    natsOptions_SetCustomReconnectDelay(o, ReconnectDelay, holder);
    natsOptions_SetPingInterval(o, std::max<int64_t>(Ms(options.ping_interval), 100));
    natsOptions_SetMaxPingsOut(o, 2);
    // In event-loop mode SendAsap asks the loop for one write per pass rather than waking a
    // flusher thread that waits a millisecond.
    natsOptions_SetSendAsap(o, true);
    natsOptions_SetDisconnectedCB(o, OnDisconnected, holder);
    natsOptions_SetReconnectedCB(o, OnConnected, holder);
    natsOptions_SetClosedCB(o, OnClosed, holder);
    if (options.retry_on_failed_connect) {
      natsOptions_SetRetryOnFailedConnect(o, true, OnConnected, holder);
    }
    natsOptions_SetEventLoop(o, this, EvAttach, EvRead, EvWrite, EvDetach);
    s = natsConnection_Connect(&nc, o);
    if (s == NATS_OK) {
      link->connected = true;
    } else if (s != NATS_NOT_YET_CONNECTED || !options.retry_on_failed_connect) {
      absl::Status st = FromNats(s, "connecting to NATS");
      nc = nullptr;
      delete holder;
      return absl::UnavailableError(std::string(st.message()));
    }
    natsConn_setFilterWithClosure(nc, &LoopConn::Filter, this);
    return absl::OkStatus();
  }

  // Any thread: closes the NATS connection; its event-loop callbacks only post to the loop.
  void CloseNats() {
    link->closing = true;
    natsConnection_Close(nc);
  }

  // After Shutdown, with its loop no longer running: frees the subscription and the connection.
  void Release() {
    if (sub != nullptr) natsSubscription_Destroy(sub);
    sub = nullptr;
    natsConnection_Destroy(nc);
    nc = nullptr;
  }

  // Loop thread: fails what is pending and stops watching.
  void Shutdown() {
    closed = true;
    std::vector<PendingCall> rest = pending.TakeAll();
    timer.cancel();
    Unwatch();
    spent.Destroy();
    for (auto& p : rest) {
      FinishCall(metrics, p,
                 absl::UnavailableError("request on " + p.subject + ": bus connection closed"));
    }
  }
};

// The loop connections of the thread running (there is one per LoopRequester and io_context).
thread_local std::vector<LoopConn*> t_loop_conns;

}  // namespace

struct LoopRequester::Impl {
  Requester& fallback;
  std::vector<std::shared_ptr<LoopConn>> conns;
  std::unique_ptr<BusClientMetrics> metrics;
  bool closed = false;

  LoopConn* Current() const {
    for (LoopConn* c : t_loop_conns) {
      if (c->owner == this) return c;
    }
    return nullptr;
  }
};

absl::StatusOr<std::unique_ptr<LoopRequester>> LoopRequester::Connect(
    const NatsBusOptions& options, const std::vector<asio::io_context*>& loops,
    Requester& fallback) {
  WISP_RETURN_IF_ERROR(ValidateOptions(options));
  if (loops.empty()) return absl::InvalidArgumentError("bus loop: no event loops");
  auto impl = std::make_unique<Impl>(Impl{fallback, {}, nullptr});
  if (options.registry != nullptr) {
    impl->metrics = std::make_unique<BusClientMetrics>(*options.registry);
  }
  std::unique_ptr<LoopRequester> out(new LoopRequester(std::move(impl)));
  Impl& in = *out->impl_;
  for (size_t i = 0; i < loops.size(); ++i) {
    auto conn = std::make_shared<LoopConn>(&in, *loops[i]);
    conn->metrics = in.metrics.get();
    WISP_RETURN_IF_ERROR(
        conn->Connect(options, (options.name.empty() ? std::string("wisp") : options.name) +
                                   "-loop-" + std::to_string(i)));
    in.conns.push_back(conn);  // from here Close() closes it
    WISP_ASSIGN_OR_RETURN(conn->inbox, NewInbox(options.inbox_prefix));
    const std::string wildcard = conn->inbox + ".*";
    natsStatus s = natsConnection_SubscribeSync(&conn->sub, conn->nc, wildcard.c_str());
    if (s != NATS_OK) return FromNats(s, "subscribing to " + wildcard);
    natsSubscription_SetPendingLimits(conn->sub, 65536, 256 * 1024 * 1024);
    asio::post(*loops[i], [conn] {
      t_loop_conns.push_back(conn.get());
      conn->registered = true;
    });
  }
  return out;
}

LoopRequester::LoopRequester(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LoopRequester::~LoopRequester() { Close(); }

absl::StatusOr<Message> LoopRequester::Request(std::string_view subject, std::string_view data,
                                               std::chrono::milliseconds timeout,
                                               const Headers& headers) {
  return impl_->fallback.Request(subject, data, timeout, headers);
}

void LoopRequester::RequestAsync(std::string_view subject, std::string_view data,
                                 std::chrono::milliseconds timeout, const Headers& headers,
                                 ReplyCallback done) {
  if (LoopConn* c = impl_->Current(); c != nullptr && timeout.count() > 0) {
    if (c->Send(subject, data, timeout, headers, done)) return;
  }
  impl_->fallback.RequestAsync(subject, data, timeout, headers, std::move(done));
}

void LoopRequester::Close() {
  if (impl_->closed) return;
  impl_->closed = true;
  for (auto& c : impl_->conns) c->CloseNats();
  // A loop that never ran (its server failed to start) gets a second to start before its
  // connection is shut down from here.
  const auto give_up = Clock::now() + std::chrono::seconds(1);
  for (auto& c : impl_->conns) {
    // On the loop thread while it runs; here when it has stopped for good (no thread runs it,
    // so nothing else touches the connection's loop state).
    if (c->ioc.stopped()) {
      c->Shutdown();
      continue;
    }
    auto done = std::make_shared<std::promise<void>>();
    auto fut = done->get_future();
    asio::post(c->ioc, [c, done] {
      std::erase(t_loop_conns, c.get());
      c->Shutdown();
      done->set_value();
    });
    while (fut.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
      if (c->ioc.stopped() || (!c->registered && Clock::now() > give_up)) {
        SPDLOG_LOGGER_WARN(Logger(), "{}: its event loop is not running; closing from here",
                           c->link->name);
        c->Shutdown();
        break;
      }
    }
  }
  for (auto& c : impl_->conns) c->Release();
}

// ---- ServeOnLoops ----

namespace {

// One subject served over event-loop connections (LoopConn with `serve` set), each on an
// io_context and a thread of its own, all in the subject's queue group.
struct LoopServeCore {
  struct Loop {
    std::unique_ptr<asio::io_context> ioc;
    std::shared_ptr<LoopConn> conn;
    std::thread thread;
  };
  std::string subject;
  RequestHandler handler;
  std::vector<Loop> loops;
  std::atomic<bool> finished{false};

  // Unsubscribes in drain mode: the server stops sending, and what it sent before is read and
  // served by the loops (the filter takes each request as it is parsed, so nothing waits in
  // nats.c's queue and the drain completes once the server has confirmed the unsubscribe).
  void StartDrain() {
    if (finished) return;
    for (auto& l : loops) {
      if (l.conn->sub != nullptr && natsSubscription_Drain(l.conn->sub) != NATS_OK) {
        natsSubscription_Unsubscribe(l.conn->sub);
      }
    }
  }

  // After StartDrain: waits until each connection's drain completed and its last replies left.
  bool WaitDrained(Clock::time_point deadline) {
    bool drained = true;
    for (auto& l : loops) {
      natsSubscription* sub = l.conn->sub;
      if (sub == nullptr) continue;
      auto left = [&] {
        return std::max<int64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count(),
            1);
      };
      if (natsSubscription_WaitForDrainCompletion(sub, left()) != NATS_OK ||
          natsSubscription_DrainCompletionStatus(sub) != NATS_OK) {
        drained = false;
      }
      // The ping goes out after the replies in the connection's buffer, so its answer says they
      // were written.
      if (natsConnection_FlushTimeout(l.conn->nc, left()) != NATS_OK) drained = false;
    }
    return drained;
  }

  // Closes the connections and stops the loops, once their handlers have returned.
  void Close() {
    if (finished.exchange(true)) return;
    for (auto& l : loops) l.conn->CloseNats();
    for (auto& l : loops) {
      if (l.thread.joinable()) {
        asio::post(*l.ioc, [c = l.conn, ioc = l.ioc.get()] {
          c->Shutdown();
          ioc->stop();
        });
        l.thread.join();
      } else {
        l.conn->Shutdown();
      }
    }
    for (auto& l : loops) {
      // What is still queued (callbacks nats.c posted while closing, the cancelled waits) runs
      // now and sees the connection shut down, so no handler holds it when the loop goes.
      l.ioc->restart();
      l.ioc->poll();
      l.conn->Release();
    }
  }
};

class NatsLoopServeSubscription final : public Subscription {
 public:
  explicit NatsLoopServeSubscription(std::shared_ptr<LoopServeCore> core)
      : core_(std::move(core)) {}
  ~NatsLoopServeSubscription() override { core_->Close(); }

  absl::Status Drain() override {
    if (core_->finished) return absl::OkStatus();
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    core_->StartDrain();
    const bool done = core_->WaitDrained(deadline);
    core_->Close();
    return done ? absl::OkStatus()
                : absl::DeadlineExceededError("drain of " + core_->subject + " timed out");
  }

 private:
  std::shared_ptr<LoopServeCore> core_;
};

}  // namespace

absl::StatusOr<SubscriptionPtr> NatsBus::ServeOnLoops(std::string_view subject,
                                                      std::string_view queue_group,
                                                      RequestHandler handler, int connections) {
  if (connections <= 0) return Serve(subject, queue_group, std::move(handler));
  if (subject.empty()) return absl::InvalidArgumentError("serve: empty subject");
  auto core = std::make_shared<LoopServeCore>();
  core->subject = std::string(subject);
  core->handler = std::move(handler);
  // From here the subscription owns the core: an error below closes what was opened.
  SubscriptionPtr out = std::make_unique<NatsLoopServeSubscription>(core);
  const NatsBusOptions& options = impl_->options;
  const std::string queue(queue_group);
  for (int i = 0; i < connections; ++i) {
    LoopServeCore::Loop& l = core->loops.emplace_back();
    l.ioc = std::make_unique<asio::io_context>(1);
    l.conn = std::make_shared<LoopConn>(core.get(), *l.ioc);
    l.conn->serve = &core->handler;
    l.conn->serve_subject = core->subject;
    absl::Status st =
        l.conn->Connect(options, (options.name.empty() ? std::string("wisp") : options.name) +
                                     "-serve-" + core->subject + "-" + std::to_string(i));
    if (!st.ok()) {
      core->loops.pop_back();
      return st;
    }
    natsSubscription** sub = &l.conn->sub;
    natsStatus s = queue.empty()
                       ? natsConnection_SubscribeSync(sub, l.conn->nc, core->subject.c_str())
                       : natsConnection_QueueSubscribeSync(sub, l.conn->nc, core->subject.c_str(),
                                                           queue.c_str());
    if (s != NATS_OK) return FromNats(s, "subscribing to " + core->subject);
    l.thread = std::thread([ioc = l.ioc.get()] {
      auto work = asio::make_work_guard(*ioc);  // run until Close stops it
      ioc->run();
    });
  }
  {
    std::lock_guard lock(impl_->mu);
    std::erase_if(impl_->loop_serves,
                  [](const std::weak_ptr<LoopServeCore>& w) { return w.expired(); });
    impl_->loop_serves.push_back(core);
  }
  return out;
}

absl::Status NatsBus::Drain(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<std::shared_ptr<ServeCore>> serves;
  std::vector<std::shared_ptr<LoopServeCore>> loop_serves;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& w : impl_->serves) {
      if (auto c = w.lock()) serves.push_back(std::move(c));
    }
    for (auto& w : impl_->loop_serves) {
      if (auto c = w.lock()) loop_serves.push_back(std::move(c));
    }
  }
  // First stop taking requests and let the delivered ones finish while replies can still go out.
  for (auto& core : serves) core->StartDrain();
  for (auto& core : loop_serves) core->StartDrain();
  if (!serves.empty()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    natsConnection_FlushTimeout(impl_->nc, std::max<int64_t>(left.count(), 1));
  }
  bool idle = true;
  for (auto& core : serves) {
    if (!core->finished) idle = core->WaitDrained(deadline) && idle;
  }
  // Their handlers may use this connection (KV, requests): they finish before it drains.
  for (auto& core : loop_serves) {
    if (!core->finished) idle = core->WaitDrained(deadline) && idle;
    core->Close();
  }
  impl_->closing = true;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  natsStatus s = natsConnection_DrainTimeout(impl_->nc, std::max<int64_t>(left.count(), 1));
  if (s != NATS_OK && s != NATS_CONNECTION_CLOSED) natsConnection_Close(impl_->nc);
  std::unique_lock lock(impl_->mu);
  const bool closed = impl_->cv.wait_until(lock, deadline + std::chrono::milliseconds(500),
                                           [&] { return impl_->closed; });
  lock.unlock();
  if (!closed) natsConnection_Close(impl_->nc);
  impl_->async->Close();  // nothing more can answer
  if (!idle || !closed) return absl::DeadlineExceededError("bus drain did not finish in time");
  return absl::OkStatus();
}

}  // namespace wisp::bus
