// NatsBus's subscriptions that run handlers: Serve (requests, on the subscription's own threads),
// Subscribe (plain messages, on nats.c's delivery thread), and the door to ServeOnLoops, whose
// event-loop connections live in wisp::bus_asio (nats_loop_serve.cpp).
#include <deque>
#include <functional>
#include <thread>

#include "nats_internal.hpp"

namespace wisp::bus {
namespace internal {
namespace {

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

}  // namespace

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
struct ServeCore final : DrainableServe {
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
  bool Finished() const override { return finished; }

  void StartDrain() override {
    if (finished) return;
    if (natsSubscription_Drain(sub) != NATS_OK) natsSubscription_Unsubscribe(sub);
  }

  // After StartDrain + a connection flush: waits until every delivered request was served. The
  // state must hold twice in a row, so a message the listener just took from nats.c (in its hand,
  // not yet queued or running) is not missed.
  bool WaitDrained(Clock::time_point deadline) override {
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

  void Close() override {
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

namespace {

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

// Set once, before main, by wisp::bus_asio's static initializer (when the program links it).
std::atomic<ServeOnLoopsFn> g_serve_on_loops{nullptr};

}  // namespace

void InstallServeOnLoops(ServeOnLoopsFn fn) { g_serve_on_loops.store(fn); }

}  // namespace internal

using namespace internal;

// ---- NatsBus::Impl ----

void NatsBus::Impl::Tick(int64_t now_ns) {
  std::vector<std::shared_ptr<ServeCore>> cores;
  {
    std::lock_guard lock(mu);
    for (auto& w : serves) {
      if (auto c = w.lock()) cores.push_back(std::move(c));
    }
  }
  for (auto& c : cores) c->Nudge(now_ns);
}

void NatsBus::Impl::StopTicker() {
  if (ticker) ticker->Stop();
}

std::vector<std::shared_ptr<DrainableServe>> NatsBus::Impl::LiveServes(
    std::vector<std::shared_ptr<DrainableServe>>* loops) {
  std::vector<std::shared_ptr<DrainableServe>> out;
  std::lock_guard lock(mu);
  for (auto& w : serves) {
    if (auto c = w.lock()) out.push_back(std::move(c));
  }
  for (auto& w : loop_serves) {
    if (auto c = w.lock()) loops->push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<SubscriptionPtr> NatsBus::Impl::Serve(std::string_view subject,
                                                     std::string_view queue,
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

absl::StatusOr<SubscriptionPtr> NatsBus::Impl::Subscribe(std::string_view subject,
                                                         std::string_view queue,
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

// ---- NatsBus ----

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

absl::StatusOr<SubscriptionPtr> NatsBus::ServeOnLoops(std::string_view subject,
                                                      std::string_view queue_group,
                                                      RequestHandler handler, int connections) {
  if (connections <= 0) return Serve(subject, queue_group, std::move(handler));
  ServeOnLoopsFn serve_on_loops = g_serve_on_loops.load();
  if (serve_on_loops == nullptr) {
    return absl::FailedPreconditionError(
        "serving " + std::string(subject) + " on " + std::to_string(connections) +
        " event-loop connection(s): this program was built without wisp::bus_asio (link it, or "
        "serve on 0 event-loop connections)");
  }
  return serve_on_loops(*impl_, subject, queue_group, std::move(handler), connections);
}

}  // namespace wisp::bus
