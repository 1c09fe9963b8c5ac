// The event-loop part of the bus, in its own target wisp::bus_asio (the only part that needs
// Boost): NATS connections in nats.c's event-loop mode on asio io_contexts. LoopRequester
// (loop_requester.hpp) runs them on the caller's loops; NatsBus::ServeOnLoops runs them on loops
// of its own, installed into NatsBus when a program links wisp::bus_asio (see the end).
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <future>
#include <thread>

#include "nats_internal.hpp"
#include "wisp/bus/loop_requester.hpp"

// nats.c's per-connection message filter (src/conn.h in nats.c) and its message free
// (src/msg.h: the headers, then the message's one allocation; what natsMsg_Destroy does after
// handing the message to nats.c's garbage-collector thread): exported by libnats (every release
// since 2.x) but not declared in nats.h. common/bus/CMakeLists.txt refuses a libnats without
// them. See LoopConn::Filter and LoopConn::Spend.
extern "C" {
typedef void (*natsMsgFilter)(natsConnection* nc, natsMsg** msg, void* closure);
void natsConn_setFilterWithClosure(natsConnection* nc, natsMsgFilter f, void* closure);
void natsMsg_free(void* object);
}

namespace wisp::bus {

using namespace internal;

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

  // Frees a message this loop is done with, here and now. Every message a loop connection
  // handles is its alone: a request it built and published (nats.c copied the bytes into its
  // write buffer), or one its filter took before any subscription saw it. natsMsg_Destroy would
  // hand it to nats.c's garbage-collector thread instead, which frees it on that thread: in
  // batches of 512 (SpentBatch, so that thread is not woken per message) the loop kept up to
  // 4 MiB of spent messages and allocated each new one from memory the allocator had to fetch,
  // often fresh pages (0.7 page faults per admission in the gateway, 0.4 in wisp-policy at
  // 100 reviews/s); freed here, the next message reuses the same warm memory and no other
  // thread is involved (bench/admission/README.md, ninth round).
  static void Spend(MsgPtr msg) { natsMsg_free(msg.release()); }

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
struct LoopServeCore final : DrainableServe {
  struct Loop {
    std::unique_ptr<asio::io_context> ioc;
    std::shared_ptr<LoopConn> conn;
    std::thread thread;
  };
  std::string subject;
  RequestHandler handler;
  std::vector<Loop> loops;
  std::atomic<bool> finished{false};

  bool Finished() const override { return finished; }

  // Unsubscribes in drain mode: the server stops sending, and what it sent before is read and
  // served by the loops (the filter takes each request as it is parsed, so nothing waits in
  // nats.c's queue and the drain completes once the server has confirmed the unsubscribe).
  void StartDrain() override {
    if (finished) return;
    for (auto& l : loops) {
      if (l.conn->sub != nullptr && natsSubscription_Drain(l.conn->sub) != NATS_OK) {
        natsSubscription_Unsubscribe(l.conn->sub);
      }
    }
  }

  // After StartDrain: waits until each connection's drain completed and its last replies left.
  bool WaitDrained(Clock::time_point deadline) override {
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
  void Close() override {
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

// ServeOnLoops with connections > 0 (NatsBus::ServeOnLoops calls it through
// internal::InstallServeOnLoops).
absl::StatusOr<SubscriptionPtr> ServeOnLoopsWithAsio(NatsBus::Impl& impl, std::string_view subject,
                                                     std::string_view queue_group,
                                                     RequestHandler handler, int connections) {
  if (subject.empty()) return absl::InvalidArgumentError("serve: empty subject");
  auto core = std::make_shared<LoopServeCore>();
  core->subject = std::string(subject);
  core->handler = std::move(handler);
  // From here the subscription owns the core: an error below closes what was opened.
  SubscriptionPtr out = std::make_unique<NatsLoopServeSubscription>(core);
  const NatsBusOptions& options = impl.options;
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
    std::lock_guard lock(impl.mu);
    std::erase_if(impl.loop_serves,
                  [](const std::weak_ptr<DrainableServe>& w) { return w.expired(); });
    impl.loop_serves.push_back(core);
  }
  return out;
}

// Installs ServeOnLoopsWithAsio before main. common/bus/CMakeLists.txt links wisp::bus_asio whole
// (WHOLE_ARCHIVE) so this object is in every program that links it, though nothing names it.
[[maybe_unused]] const bool kServeOnLoopsInstalled =
    (InstallServeOnLoops(&ServeOnLoopsWithAsio), true);

}  // namespace
}  // namespace wisp::bus
