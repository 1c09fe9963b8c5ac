#include "wisp/bus/testing/in_memory_bus.hpp"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace wisp::bus::testing {
namespace {

using SysTime = std::chrono::system_clock::time_point;

struct SubEntry {
  uint64_t id = 0;
  std::string pattern;
  std::string queue;
  RequestHandler request_handler;  // set for Serve
  MessageHandler message_handler;  // set for Subscribe
};

struct StoredMsg {
  uint64_t seq = 0;
  Message msg;
  SysTime stored;
};

struct PendingMsg {
  uint64_t deliveries = 0;
  SysTime redeliver_at;
};

struct ConsumerState {
  ConsumerConfig config;
  uint64_t next_seq = 1;
  std::map<uint64_t, PendingMsg> pending;
};

struct StreamState {
  StreamConfig config;
  uint64_t last_seq = 0;
  std::map<uint64_t, StoredMsg> msgs;
  std::map<std::string, std::pair<uint64_t, SysTime>, std::less<>> dedupe;
  std::map<std::string, std::shared_ptr<ConsumerState>, std::less<>> consumers;
};

struct KvValue {
  std::string value;
  uint64_t revision = 0;
  bool deleted = false;
  SysTime written;  // by the injected Clock, for PurgeDeletes
};

struct KvWatcher {
  std::string pattern;
  std::shared_ptr<KvWatchHandler> handler;
};

struct BucketState {
  BucketConfig config;
  uint64_t seq = 0;
  std::map<std::string, KvValue, std::less<>> entries;
  std::map<uint64_t, KvWatcher> watchers;
};

struct Fault {
  std::string pattern;
  absl::Status status;
};

bool ValidKvKey(std::string_view key) {
  if (key.empty() || key.front() == '.' || key.back() == '.') return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '/' || c == '_' || c == '=' || c == '.';
  });
}

bool ValidName(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  });
}

}  // namespace

struct InMemoryBus::Shared {
  explicit Shared(Clock& c) : clock(c) {}

  Clock& clock;
  mutable std::mutex mu;
  std::condition_variable cv;  // a publish / nak / close happened (wakes Fetch)
  ConnectionState conn = ConnectionState::kConnected;
  uint64_t next_id = 1;
  uint64_t next_request = 1;
  std::map<uint64_t, SubEntry> subs;
  std::map<std::string, uint64_t, std::less<>> rr;  // queue group -> round-robin counter
  std::vector<Message> published;
  std::vector<std::string> requested;
  std::vector<Fault> fail_subjects;
  std::vector<std::string> drop_replies;
  std::vector<std::string> expire_requests;
  std::map<std::string, absl::Status, std::less<>> fail_buckets;
  std::map<std::string, StreamState, std::less<>> streams;
  std::map<std::string, BucketState, std::less<>> buckets;

  absl::Status CheckConnectedLocked() const {
    switch (conn) {
      case ConnectionState::kConnected:
        return absl::OkStatus();
      case ConnectionState::kReconnecting:
        return absl::UnavailableError("bus disconnected (in-memory fault)");
      case ConnectionState::kClosed:
        break;
    }
    return absl::UnavailableError("bus connection closed");
  }

  absl::Status SubjectFaultLocked(std::string_view subject) const {
    for (const auto& f : fail_subjects) {
      if (SubjectMatches(f.pattern, subject)) return f.status;
    }
    return absl::OkStatus();
  }

  static bool AnyMatch(const std::vector<std::string>& patterns, std::string_view subject) {
    return std::any_of(patterns.begin(), patterns.end(),
                       [&](const std::string& p) { return SubjectMatches(p, subject); });
  }

  // The subscriptions that receive one message on `subject`: all without a queue group, and one
  // member (round-robin) of each queue group.
  std::vector<SubEntry> RouteLocked(std::string_view subject) {
    std::vector<SubEntry> out;
    std::map<std::string, std::vector<const SubEntry*>> groups;
    for (const auto& [id, sub] : subs) {
      if (!SubjectMatches(sub.pattern, subject)) continue;
      if (sub.queue.empty()) {
        out.push_back(sub);
      } else {
        groups[sub.queue].push_back(&sub);
      }
    }
    for (auto& [queue, members] : groups) {
      uint64_t& counter = rr[queue];
      out.push_back(*members[counter % members.size()]);
      ++counter;
    }
    std::sort(out.begin(), out.end(),
              [](const SubEntry& a, const SubEntry& b) { return a.id < b.id; });
    return out;
  }

  // Stores a publish in the stream whose subjects match, if any. Returns the stream sequence, 0
  // when no stream captures the subject, or an error.
  absl::StatusOr<uint64_t> StoreLocked(const Message& msg, std::string_view msg_id) {
    for (auto& [name, stream] : streams) {
      const bool match =
          std::any_of(stream.config.subjects.begin(), stream.config.subjects.end(),
                      [&](const std::string& p) { return SubjectMatches(p, msg.subject); });
      if (!match) continue;
      const SysTime now = clock.Now();
      if (stream.config.max_msg_size >= 0 &&
          static_cast<int64_t>(msg.data.size()) > stream.config.max_msg_size) {
        return absl::InvalidArgumentError("message on " + msg.subject +
                                          " exceeds max_msg_size of stream " + name);
      }
      if (!msg_id.empty()) {
        auto it = stream.dedupe.find(msg_id);
        if (it != stream.dedupe.end() && now - it->second.second < stream.config.duplicate_window) {
          return it->second.first;
        }
      }
      const uint64_t seq = ++stream.last_seq;
      stream.msgs[seq] = StoredMsg{seq, msg, now};
      if (!msg_id.empty()) stream.dedupe[std::string(msg_id)] = {seq, now};
      cv.notify_all();
      return seq;
    }
    return uint64_t{0};
  }

  // Delivers a plain message to its subscribers (called with no lock held).
  static void Deliver(const std::vector<SubEntry>& targets, const Message& msg) {
    for (const auto& sub : targets) {
      if (sub.message_handler) {
        sub.message_handler(msg);
      } else if (sub.request_handler) {
        // A publish to a service subject: served, the reply goes nowhere (as in NATS).
        ServeRequest(sub.request_handler, msg, std::chrono::steady_clock::now());
      }
    }
  }
};

namespace {

using Shared = InMemoryBus::Shared;

class InMemorySubscription final : public Subscription {
 public:
  InMemorySubscription(std::weak_ptr<Shared> state, uint64_t id)
      : state_(std::move(state)), id_(id) {}
  ~InMemorySubscription() override { Remove(); }
  absl::Status Drain() override {
    Remove();
    return absl::OkStatus();
  }

 private:
  void Remove() {
    if (auto s = state_.lock()) {
      std::lock_guard lock(s->mu);
      s->subs.erase(id_);
    }
  }
  std::weak_ptr<Shared> state_;
  uint64_t id_;
};

// ---- JetStream ----

class InMemoryJsMessage final : public JsMessage {
 public:
  InMemoryJsMessage(std::shared_ptr<Shared> state, std::string stream,
                    std::shared_ptr<ConsumerState> consumer, uint64_t seq, uint64_t deliveries,
                    Message msg)
      : state_(std::move(state)),
        stream_(std::move(stream)),
        consumer_(std::move(consumer)),
        seq_(seq),
        deliveries_(deliveries),
        msg_(std::move(msg)) {}

  const Message& msg() const override { return msg_; }
  uint64_t stream_sequence() const override { return seq_; }
  uint64_t delivery_count() const override { return deliveries_; }

  absl::Status Ack() override { return Finish(); }
  absl::Status Term() override { return Finish(); }

  absl::Status Nak(std::chrono::milliseconds delay) override {
    std::lock_guard lock(state_->mu);
    WISP_RETURN_IF_ERROR(state_->CheckConnectedLocked());
    auto it = consumer_->pending.find(seq_);
    if (it != consumer_->pending.end()) {
      it->second.redeliver_at = state_->clock.Now() + delay;
      state_->cv.notify_all();
    }
    return absl::OkStatus();
  }

  absl::Status InProgress() override {
    std::lock_guard lock(state_->mu);
    WISP_RETURN_IF_ERROR(state_->CheckConnectedLocked());
    auto it = consumer_->pending.find(seq_);
    if (it != consumer_->pending.end()) {
      it->second.redeliver_at = state_->clock.Now() + consumer_->config.ack_wait;
    }
    return absl::OkStatus();
  }

 private:
  // Ack and Term both end the message: no redelivery; a work-queue stream drops it.
  absl::Status Finish() {
    std::lock_guard lock(state_->mu);
    WISP_RETURN_IF_ERROR(state_->CheckConnectedLocked());
    if (consumer_->pending.erase(seq_) == 0) return absl::OkStatus();  // already ended: no-op
    auto sit = state_->streams.find(stream_);
    if (sit != state_->streams.end() && sit->second.config.work_queue) sit->second.msgs.erase(seq_);
    return absl::OkStatus();
  }

  std::shared_ptr<Shared> state_;
  std::string stream_;
  std::shared_ptr<ConsumerState> consumer_;
  uint64_t seq_;
  uint64_t deliveries_;
  Message msg_;
};

class InMemoryPullConsumer final : public PullConsumer {
 public:
  InMemoryPullConsumer(std::shared_ptr<Shared> state, std::string stream,
                       std::shared_ptr<ConsumerState> consumer)
      : state_(std::move(state)), stream_(std::move(stream)), consumer_(std::move(consumer)) {}

  absl::StatusOr<std::vector<JsMessagePtr>> Fetch(int batch,
                                                  std::chrono::milliseconds timeout) override {
    if (batch <= 0) return absl::InvalidArgumentError("Fetch: batch must be positive");
    const auto real_deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock lock(state_->mu);
    while (true) {
      WISP_RETURN_IF_ERROR(state_->CheckConnectedLocked());
      auto sit = state_->streams.find(stream_);
      if (sit == state_->streams.end())
        return absl::NotFoundError("stream " + stream_ + " deleted");
      std::vector<JsMessagePtr> out = CollectLocked(sit->second, batch);
      if (!out.empty()) return out;
      const auto now = std::chrono::steady_clock::now();
      if (now >= real_deadline) return out;
      // Re-check every few ms as well: a FakeClock advanced by the test (a nak delay or ack wait
      // running out) makes messages deliverable without any notification.
      state_->cv.wait_until(lock, std::min(real_deadline, now + std::chrono::milliseconds(5)));
    }
  }

 private:
  std::vector<JsMessagePtr> CollectLocked(StreamState& stream, int batch) {
    std::vector<JsMessagePtr> out;
    const SysTime now = state_->clock.Now();
    ConsumerState& c = *consumer_;
    // Redeliveries first (nak'd or ack_wait expired), oldest sequence first.
    for (auto it = c.pending.begin();
         it != c.pending.end() && static_cast<int>(out.size()) < batch;) {
      auto& [seq, p] = *it;
      auto msg_it = stream.msgs.find(seq);
      if (msg_it == stream.msgs.end()) {
        it = c.pending.erase(it);
        continue;
      }
      if (p.redeliver_at > now) {
        ++it;
        continue;
      }
      if (c.config.max_deliver >= 0 &&
          p.deliveries >= static_cast<uint64_t>(c.config.max_deliver)) {
        it = c.pending.erase(it);  // exhausted: NATS stops delivering it (it stays in the stream)
        continue;
      }
      ++p.deliveries;
      p.redeliver_at = now + c.config.ack_wait;
      out.push_back(Make(seq, p.deliveries, msg_it->second.msg));
      ++it;
    }
    // Then new messages.
    while (static_cast<int>(out.size()) < batch &&
           (c.config.max_ack_pending <= 0 ||
            static_cast<int64_t>(c.pending.size()) < c.config.max_ack_pending)) {
      auto msg_it = stream.msgs.lower_bound(c.next_seq);
      while (msg_it != stream.msgs.end() && !c.config.filter_subject.empty() &&
             !SubjectMatches(c.config.filter_subject, msg_it->second.msg.subject)) {
        ++msg_it;
      }
      if (msg_it == stream.msgs.end()) {
        c.next_seq = stream.last_seq + 1;
        break;
      }
      const uint64_t seq = msg_it->first;
      c.next_seq = seq + 1;
      c.pending[seq] = PendingMsg{1, now + c.config.ack_wait};
      out.push_back(Make(seq, 1, msg_it->second.msg));
    }
    return out;
  }

  JsMessagePtr Make(uint64_t seq, uint64_t deliveries, const Message& msg) {
    return std::make_unique<InMemoryJsMessage>(state_, stream_, consumer_, seq, deliveries, msg);
  }

  std::shared_ptr<Shared> state_;
  std::string stream_;
  std::shared_ptr<ConsumerState> consumer_;
};

class InMemoryJetStream final : public JetStream {
 public:
  explicit InMemoryJetStream(std::shared_ptr<Shared> state) : state_(std::move(state)) {}

  absl::Status EnsureStream(const StreamConfig& config) override {
    if (!ValidName(config.name)) {
      return absl::InvalidArgumentError("stream name \"" + config.name +
                                        "\" must be non-empty letters, digits, '-' or '_'");
    }
    if (config.subjects.empty()) {
      return absl::InvalidArgumentError("stream " + config.name + ": subjects must not be empty");
    }
    std::lock_guard lock(state_->mu);
    WISP_RETURN_IF_ERROR(state_->CheckConnectedLocked());
    for (const auto& [name, other] : state_->streams) {
      if (name == config.name) continue;
      for (const auto& a : config.subjects) {
        for (const auto& b : other.config.subjects) {
          if (SubjectMatches(a, b) || SubjectMatches(b, a)) {
            return absl::InvalidArgumentError("stream " + config.name + ": subject " + a +
                                              " overlaps stream " + name);
          }
        }
      }
    }
    state_->streams[config.name].config = config;
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Publish(std::string_view subject, std::string_view data,
                                   const Headers& headers, std::string_view msg_id) override {
    Message msg{std::string(subject), "", std::string(data), headers};
    if (!msg_id.empty()) msg.headers[std::string(kHeaderMsgId)] = std::string(msg_id);
    std::vector<SubEntry> targets;
    uint64_t seq = 0;
    {
      std::lock_guard lock(state_->mu);
      WISP_RETURN_IF_ERROR(state_->CheckConnectedLocked());
      WISP_RETURN_IF_ERROR(state_->SubjectFaultLocked(subject));
      WISP_ASSIGN_OR_RETURN(seq, state_->StoreLocked(msg, msg_id));
      if (seq == 0) {
        return absl::UnavailableError("no JetStream stream accepts subject " +
                                      std::string(subject));
      }
      state_->published.push_back(msg);
      targets = state_->RouteLocked(subject);
    }
    Shared::Deliver(targets, msg);
    return seq;
  }

  absl::StatusOr<PullConsumerPtr> PullSubscribe(std::string_view stream,
                                                const ConsumerConfig& config) override {
    // As NatsBus: every consumer is durable.
    if (config.durable.empty()) return absl::InvalidArgumentError("consumer durable name is empty");
    std::lock_guard lock(state_->mu);
    WISP_RETURN_IF_ERROR(state_->CheckConnectedLocked());
    auto sit = state_->streams.find(stream);
    if (sit == state_->streams.end()) {
      return absl::NotFoundError("stream " + std::string(stream) + " not found");
    }
    const std::string& durable = config.durable;
    auto& consumer = sit->second.consumers[durable];
    if (!consumer) consumer = std::make_shared<ConsumerState>();
    consumer->config = config;
    consumer->config.durable = durable;
    return PullConsumerPtr(
        std::make_unique<InMemoryPullConsumer>(state_, std::string(stream), consumer));
  }

 private:
  std::shared_ptr<Shared> state_;
};

// ---- Key-value ----

class InMemoryKvWatch final : public KvWatch {
 public:
  InMemoryKvWatch(std::weak_ptr<Shared> state, std::string bucket, uint64_t id)
      : state_(std::move(state)), bucket_(std::move(bucket)), id_(id) {}
  ~InMemoryKvWatch() override {
    if (auto s = state_.lock()) {
      std::lock_guard lock(s->mu);
      auto it = s->buckets.find(bucket_);
      if (it != s->buckets.end()) it->second.watchers.erase(id_);
    }
  }

 private:
  std::weak_ptr<Shared> state_;
  std::string bucket_;
  uint64_t id_;
};

class InMemoryKeyValue final : public KeyValue {
 public:
  InMemoryKeyValue(std::shared_ptr<Shared> state, std::string bucket)
      : state_(std::move(state)), bucket_(std::move(bucket)) {}

  const std::string& bucket() const override { return bucket_; }

  absl::StatusOr<KvEntry> Get(std::string_view key) override {
    std::lock_guard lock(state_->mu);
    WISP_ASSIGN_OR_RETURN(BucketState * b, BucketLocked(key));
    auto it = b->entries.find(key);
    if (it == b->entries.end() || it->second.deleted) {
      return absl::NotFoundError("key " + std::string(key) + " not found in bucket " + bucket_);
    }
    return KvEntry{std::string(key), it->second.value, it->second.revision, false};
  }

  absl::StatusOr<uint64_t> Put(std::string_view key, std::string_view value) override {
    return Write(key, value, /*deleted=*/false, [](const KvValue*) { return absl::OkStatus(); });
  }

  absl::StatusOr<uint64_t> Create(std::string_view key, std::string_view value) override {
    return Write(key, value, false, [&](const KvValue* cur) {
      if (cur != nullptr && !cur->deleted) {
        return absl::AlreadyExistsError("key " + std::string(key) + " exists in bucket " + bucket_);
      }
      return absl::OkStatus();
    });
  }

  absl::StatusOr<uint64_t> Update(std::string_view key, std::string_view value,
                                  uint64_t revision) override {
    return Write(key, value, false, [&](const KvValue* cur) {
      const uint64_t have = cur == nullptr ? 0 : cur->revision;
      if (have != revision) {
        return absl::AbortedError("key " + std::string(key) + " in bucket " + bucket_ +
                                  " is at revision " + std::to_string(have) + ", not " +
                                  std::to_string(revision));
      }
      return absl::OkStatus();
    });
  }

  absl::Status Delete(std::string_view key) override {
    return Write(key, "", true, [](const KvValue*) { return absl::OkStatus(); }).status();
  }

  absl::Status PurgeDeletes(std::chrono::milliseconds older_than) override {
    if (older_than.count() < 0) {
      return absl::InvalidArgumentError("kv purge-deletes " + bucket_ + ": negative age");
    }
    std::lock_guard lock(state_->mu);
    WISP_ASSIGN_OR_RETURN(BucketState * b, BucketLocked({}));
    // As nats.c: a marker goes when written before now - older_than (every marker for 0).
    const SysTime cutoff = state_->clock.Now() - older_than;
    std::erase_if(b->entries, [&](const auto& kv) {
      return kv.second.deleted && (older_than.count() == 0 || kv.second.written < cutoff);
    });
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> Keys() override {
    std::lock_guard lock(state_->mu);
    WISP_ASSIGN_OR_RETURN(BucketState * b, BucketLocked({}));
    std::vector<std::string> keys;
    for (const auto& [k, v] : b->entries) {
      if (!v.deleted) keys.push_back(k);
    }
    return keys;
  }

  absl::StatusOr<KvWatchPtr> Watch(std::string_view pattern, KvWatchHandler handler) override {
    auto shared = std::make_shared<KvWatchHandler>(std::move(handler));
    std::vector<KvEntry> initial;
    uint64_t id = 0;
    {
      std::lock_guard lock(state_->mu);
      WISP_ASSIGN_OR_RETURN(BucketState * b, BucketLocked({}));
      id = state_->next_id++;
      b->watchers[id] = KvWatcher{std::string(pattern), shared};
      for (const auto& [k, v] : b->entries) {
        if (!v.deleted && SubjectMatches(pattern, k))
          initial.push_back({k, v.value, v.revision, false});
      }
    }
    for (const auto& e : initial) (*shared)(e);
    (*shared)(KvEntry{});
    return KvWatchPtr(std::make_unique<InMemoryKvWatch>(state_, bucket_, id));
  }

 private:
  absl::StatusOr<BucketState*> BucketLocked(std::string_view key) {
    WISP_RETURN_IF_ERROR(state_->CheckConnectedLocked());
    if (auto f = state_->fail_buckets.find(bucket_); f != state_->fail_buckets.end()) {
      return f->second;
    }
    if (!key.empty() && !ValidKvKey(key)) {
      return absl::InvalidArgumentError("invalid key \"" + std::string(key) + "\" for bucket " +
                                        bucket_);
    }
    auto it = state_->buckets.find(bucket_);
    if (it == state_->buckets.end()) return absl::NotFoundError("bucket " + bucket_ + " deleted");
    return &it->second;
  }

  template <typename Check>
  absl::StatusOr<uint64_t> Write(std::string_view key, std::string_view value, bool deleted,
                                 Check check) {
    if (key.empty()) return absl::InvalidArgumentError("empty key for bucket " + bucket_);
    std::vector<std::shared_ptr<KvWatchHandler>> watchers;
    KvEntry entry;
    {
      std::lock_guard lock(state_->mu);
      WISP_ASSIGN_OR_RETURN(BucketState * b, BucketLocked(key));
      if (b->config.max_value_size >= 0 &&
          static_cast<int64_t>(value.size()) > b->config.max_value_size) {
        return absl::InvalidArgumentError("value for key " + std::string(key) +
                                          " exceeds max_value_size of bucket " + bucket_);
      }
      auto it = b->entries.find(key);
      WISP_RETURN_IF_ERROR(check(it == b->entries.end() ? nullptr : &it->second));
      const uint64_t rev = ++b->seq;
      b->entries[std::string(key)] =
          KvValue{deleted ? std::string() : std::string(value), rev, deleted, state_->clock.Now()};
      entry = KvEntry{std::string(key), deleted ? std::string() : std::string(value), rev, deleted};
      for (const auto& [id, w] : b->watchers) {
        if (SubjectMatches(w.pattern, key)) watchers.push_back(w.handler);
      }
    }
    for (const auto& w : watchers) (*w)(entry);
    return entry.revision;
  }

  std::shared_ptr<Shared> state_;
  std::string bucket_;
};

}  // namespace

InMemoryBus::InMemoryBus(Clock& clock)
    : state_(std::make_shared<Shared>(clock)), js_(std::make_unique<InMemoryJetStream>(state_)) {}

InMemoryBus::~InMemoryBus() {
  std::lock_guard lock(state_->mu);
  state_->conn = ConnectionState::kClosed;
  state_->cv.notify_all();
}

absl::Status InMemoryBus::Publish(std::string_view subject, std::string_view data,
                                  const Headers& headers) {
  Message msg{std::string(subject), "", std::string(data), headers};
  std::vector<SubEntry> targets;
  {
    std::lock_guard lock(state_->mu);
    WISP_RETURN_IF_ERROR(state_->CheckConnectedLocked());
    WISP_RETURN_IF_ERROR(state_->SubjectFaultLocked(subject));
    state_->published.push_back(msg);
    // Core publishes on a stream's subjects are stored too, as NATS does.
    WISP_RETURN_IF_ERROR(state_->StoreLocked(msg, {}).status());
    targets = state_->RouteLocked(subject);
  }
  Shared::Deliver(targets, msg);
  return absl::OkStatus();
}

absl::StatusOr<Message> InMemoryBus::Request(std::string_view subject, std::string_view data,
                                             std::chrono::milliseconds timeout,
                                             const Headers& headers) {
  if (timeout.count() <= 0) {
    return absl::DeadlineExceededError("request on " + std::string(subject) + ": no time left");
  }
  Message msg{std::string(subject), "", std::string(data), headers};
  msg.headers[std::string(kHeaderTimeoutMs)] = std::to_string(timeout.count());
  std::vector<SubEntry> targets;
  bool drop = false;
  bool expire = false;
  {
    std::lock_guard lock(state_->mu);
    state_->requested.emplace_back(subject);
    WISP_RETURN_IF_ERROR(state_->CheckConnectedLocked());
    WISP_RETURN_IF_ERROR(state_->SubjectFaultLocked(subject));
    const uint64_t n = state_->next_request++;
    msg.reply = "_INBOX.inmemory." + std::to_string(n);
    if (msg.headers.find(kHeaderRequestId) == msg.headers.end()) {
      msg.headers[std::string(kHeaderRequestId)] = "inmemory-" + std::to_string(n);
    }
    drop = Shared::AnyMatch(state_->drop_replies, subject);
    expire = Shared::AnyMatch(state_->expire_requests, subject);
    targets = state_->RouteLocked(subject);
  }
  if (targets.empty()) {
    return NoRespondersError("no responders on " + std::string(subject));
  }
  const auto received =
      expire ? std::chrono::steady_clock::now() - timeout - std::chrono::milliseconds(1)
             : std::chrono::steady_clock::now();
  // A handler that takes longer than `timeout` (by the injected Clock) is answered too late, as
  // NatsBus's caller would have given up: DeadlineExceeded.
  const auto started = state_->clock.Steady();
  std::optional<Reply> first;
  for (const auto& sub : targets) {
    if (sub.message_handler) {
      sub.message_handler(msg);
    } else if (sub.request_handler) {
      Reply r = ServeRequest(sub.request_handler, msg, received);
      if (!first) first = std::move(r);
    }
  }
  if (!first || drop || state_->clock.Steady() - started > timeout) {
    return absl::DeadlineExceededError("request on " + std::string(subject) + " timed out after " +
                                       std::to_string(timeout.count()) + "ms");
  }
  WISP_RETURN_IF_ERROR(StatusFromHeaders(first->headers));
  return Message{msg.reply, "", std::move(first->data), std::move(first->headers)};
}

absl::StatusOr<std::vector<Message>> InMemoryBus::RequestMany(std::string_view subject,
                                                              std::string_view data,
                                                              std::chrono::milliseconds timeout,
                                                              int max_replies,
                                                              const Headers& headers) {
  Message msg{std::string(subject), "", std::string(data), headers};
  msg.headers[std::string(kHeaderTimeoutMs)] = std::to_string(timeout.count());
  std::vector<SubEntry> targets;
  {
    std::lock_guard lock(state_->mu);
    state_->requested.emplace_back(subject);
    WISP_RETURN_IF_ERROR(state_->CheckConnectedLocked());
    WISP_RETURN_IF_ERROR(state_->SubjectFaultLocked(subject));
    msg.reply = "_INBOX.inmemory." + std::to_string(state_->next_request++);
    if (Shared::AnyMatch(state_->drop_replies, subject)) return std::vector<Message>{};
    targets = state_->RouteLocked(subject);
  }
  std::vector<Message> out;
  const auto received = std::chrono::steady_clock::now();
  for (const auto& sub : targets) {
    if (max_replies > 0 && static_cast<int>(out.size()) >= max_replies) break;
    if (sub.message_handler) {
      sub.message_handler(msg);
    } else if (sub.request_handler) {
      Reply r = ServeRequest(sub.request_handler, msg, received);
      out.push_back(Message{msg.reply, "", std::move(r.data), std::move(r.headers)});
    }
  }
  return out;
}

absl::StatusOr<SubscriptionPtr> InMemoryBus::Serve(std::string_view subject,
                                                   std::string_view queue_group,
                                                   RequestHandler handler) {
  if (subject.empty()) return absl::InvalidArgumentError("Serve: empty subject");
  if (!handler) return absl::InvalidArgumentError("Serve: empty handler");
  std::lock_guard lock(state_->mu);
  if (state_->conn == ConnectionState::kClosed) return state_->CheckConnectedLocked();
  const uint64_t id = state_->next_id++;
  state_->subs[id] =
      SubEntry{id, std::string(subject), std::string(queue_group), std::move(handler), nullptr};
  return SubscriptionPtr(std::make_unique<InMemorySubscription>(state_, id));
}

absl::StatusOr<SubscriptionPtr> InMemoryBus::Subscribe(std::string_view subject,
                                                       std::string_view queue_group,
                                                       MessageHandler handler) {
  if (subject.empty()) return absl::InvalidArgumentError("Subscribe: empty subject");
  if (!handler) return absl::InvalidArgumentError("Subscribe: empty handler");
  std::lock_guard lock(state_->mu);
  if (state_->conn == ConnectionState::kClosed) return state_->CheckConnectedLocked();
  const uint64_t id = state_->next_id++;
  state_->subs[id] =
      SubEntry{id, std::string(subject), std::string(queue_group), nullptr, std::move(handler)};
  return SubscriptionPtr(std::make_unique<InMemorySubscription>(state_, id));
}

JetStream& InMemoryBus::Js() { return *js_; }

absl::StatusOr<KeyValuePtr> InMemoryBus::OpenBucket(const BucketConfig& config) {
  if (!ValidName(config.name)) {
    return absl::InvalidArgumentError("bucket name \"" + config.name +
                                      "\" must be non-empty letters, digits, '-' or '_'");
  }
  std::lock_guard lock(state_->mu);
  WISP_RETURN_IF_ERROR(state_->CheckConnectedLocked());
  auto [it, inserted] = state_->buckets.try_emplace(config.name);
  if (inserted) it->second.config = config;
  return KeyValuePtr(std::make_unique<InMemoryKeyValue>(state_, config.name));
}

ConnectionState InMemoryBus::State() const {
  std::lock_guard lock(state_->mu);
  return state_->conn;
}

absl::Status InMemoryBus::Drain(std::chrono::milliseconds /*timeout*/) {
  std::lock_guard lock(state_->mu);
  state_->conn = ConnectionState::kClosed;
  state_->subs.clear();
  state_->cv.notify_all();
  return absl::OkStatus();
}

void InMemoryBus::FailSubject(std::string_view pattern, absl::Status status) {
  std::lock_guard lock(state_->mu);
  state_->fail_subjects.push_back(Fault{std::string(pattern), std::move(status)});
}

void InMemoryBus::DropReplies(std::string_view pattern) {
  std::lock_guard lock(state_->mu);
  state_->drop_replies.emplace_back(pattern);
}

void InMemoryBus::ExpireRequests(std::string_view pattern) {
  std::lock_guard lock(state_->mu);
  state_->expire_requests.emplace_back(pattern);
}

void InMemoryBus::FailBucket(std::string_view bucket, absl::Status status) {
  std::lock_guard lock(state_->mu);
  state_->fail_buckets[std::string(bucket)] = std::move(status);
}

void InMemoryBus::SetConnected(bool connected) {
  std::lock_guard lock(state_->mu);
  if (state_->conn == ConnectionState::kClosed) return;
  state_->conn = connected ? ConnectionState::kConnected : ConnectionState::kReconnecting;
  state_->cv.notify_all();
}

void InMemoryBus::ClearFaults() {
  std::lock_guard lock(state_->mu);
  state_->fail_subjects.clear();
  state_->drop_replies.clear();
  state_->expire_requests.clear();
  state_->fail_buckets.clear();
}

std::vector<Message> InMemoryBus::Published(std::string_view pattern) const {
  std::lock_guard lock(state_->mu);
  std::vector<Message> out;
  for (const auto& m : state_->published) {
    if (SubjectMatches(pattern, m.subject)) out.push_back(m);
  }
  return out;
}

int InMemoryBus::RequestCount(std::string_view pattern) const {
  std::lock_guard lock(state_->mu);
  return static_cast<int>(
      std::count_if(state_->requested.begin(), state_->requested.end(),
                    [&](const std::string& s) { return SubjectMatches(pattern, s); }));
}

size_t InMemoryBus::StreamSize(std::string_view stream) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->streams.find(stream);
  return it == state_->streams.end() ? 0 : it->second.msgs.size();
}

size_t InMemoryBus::KvStoredCount(std::string_view bucket) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->buckets.find(bucket);
  return it == state_->buckets.end() ? 0 : it->second.entries.size();
}

size_t InMemoryBus::PendingCount(std::string_view stream, std::string_view durable) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->streams.find(stream);
  if (it == state_->streams.end()) return 0;
  auto c = it->second.consumers.find(durable);
  return c == it->second.consumers.end() ? 0 : c->second->pending.size();
}

}  // namespace wisp::bus::testing
