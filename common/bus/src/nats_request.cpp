// NatsBus's requests: Request, RequestAsync (the pending-call table behind one wildcard reply
// inbox per connection) and RequestMany.
#include <charconv>
#include <random>
#include <thread>

#include "nats_internal.hpp"

namespace wisp::bus {
namespace internal {
namespace {

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

}  // namespace

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

Headers RequestHeaders(const Headers& headers, std::chrono::milliseconds timeout) {
  Headers h = headers;
  h[std::string(kHeaderTimeoutMs)] = std::to_string(Ms(timeout));
  if (h.find(kHeaderRequestId) == h.end()) {
    const std::string& current = log::CurrentRequestId();
    h[std::string(kHeaderRequestId)] = current.empty() ? RandomId() : current;
  }
  return h;
}

std::optional<uint64_t> ReplyId(natsMsg* msg) {
  const std::string_view subject = natsMsg_GetSubject(msg);
  const std::string_view token = subject.substr(subject.rfind('.') + 1);
  uint64_t id = 0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), id);
  if (ec != std::errc() || end != token.data() + token.size()) return std::nullopt;
  return id;
}

absl::StatusOr<Message> ReplyOutcome(natsMsg* msg, const std::string& subject) {
  if (natsMsg_IsNoResponders(msg)) {
    return NoRespondersError("request on " + subject + ": " +
                             natsStatus_GetText(NATS_NO_RESPONDERS));
  }
  Message out = ToMessage(msg);
  WISP_RETURN_IF_ERROR(StatusFromHeaders(out.headers));
  return out;
}

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

}  // namespace internal

using namespace internal;

void NatsBus::Impl::StartAsync() {
  async = std::make_shared<AsyncCore>();
  async->nc = nc;
  async->retirer = retirer;
  async->metrics = metrics.get();
  async->inbox_prefix = options.inbox_prefix;
}

void NatsBus::Impl::CloseAsync() {
  if (async) async->Close();
}

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

}  // namespace wisp::bus
