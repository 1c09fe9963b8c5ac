#pragma once
// The behaviour every wisp::bus::Bus promises (bus.hpp), as one typed GoogleTest suite run against
// each implementation: InMemoryBus (common/bus/test/in_memory_bus_contract_test.cpp, a unit test)
// and NatsBus over a real nats-server (integration/bus_contract_test.cpp, label integration). A
// test that passes on one and fails on the other is a bug in the fake or in NatsBus.
//
// An environment type `Env` provides:
//   absl::Status Start();                       // called in SetUp
//   Bus& bus();
//   void Elapse(std::chrono::milliseconds d);   // let `d` pass: FakeClock::Advance, or sleep
//
// Deliveries may be asynchronous (NatsBus runs handlers on its own threads), so tests wait for
// them with Collector::WaitFor rather than expecting them on return.
//
// Example:
//   using Envs = ::testing::Types<InMemoryEnv>;
//   INSTANTIATE_TYPED_TEST_SUITE_P(InMemory, BusContractTest, Envs);
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "wisp/bus/bus.hpp"

namespace wisp::bus::testing {

// Collects what handlers receive on any thread.
template <typename T>
class Collector {
 public:
  void Add(T item) {
    std::lock_guard lock(mu_);
    items_.push_back(std::move(item));
    cv_.notify_all();
  }
  // True once at least `n` items arrived, waiting at most `timeout` of real time.
  bool WaitFor(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return items_.size() >= n; });
  }
  std::vector<T> items() const {
    std::lock_guard lock(mu_);
    return items_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<T> items_;
};

template <typename Env>
class BusContractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Status st = env_.Start();
    ASSERT_TRUE(st.ok()) << st;
  }
  Bus& bus() { return env_.bus(); }
  Env env_;
};

TYPED_TEST_SUITE_P(BusContractTest);

using std::chrono_literals::operator""ms;
using std::chrono_literals::operator""s;

// Tests that a publish reaches every plain subscriber whose pattern matches, headers included.
TYPED_TEST_P(BusContractTest, PublishReachesEveryMatchingSubscriber) {
  Collector<Message> exact, star, tail, other;
  auto a = this->bus().Subscribe("ct.pub.one", "", [&](const Message& m) { exact.Add(m); });
  auto b = this->bus().Subscribe("ct.pub.*", "", [&](const Message& m) { star.Add(m); });
  auto c = this->bus().Subscribe("ct.>", "", [&](const Message& m) { tail.Add(m); });
  auto d = this->bus().Subscribe("ct.other", "", [&](const Message& m) { other.Add(m); });
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  ASSERT_TRUE(this->bus().Publish("ct.pub.one", "hello", {{"X-Kind", "greeting"}}).ok());
  ASSERT_TRUE(exact.WaitFor(1) && star.WaitFor(1) && tail.WaitFor(1));
  EXPECT_EQ(exact.items()[0].data, "hello");
  EXPECT_EQ(exact.items()[0].subject, "ct.pub.one");
  EXPECT_EQ(exact.items()[0].Header("X-Kind"), "greeting");
  EXPECT_FALSE(other.WaitFor(1, 100ms));
}

// Tests that each message reaches exactly one member of a queue group, and every plain subscriber.
TYPED_TEST_P(BusContractTest, QueueGroupDeliversOncePerGroup) {
  Collector<int> member1, member2, plain;
  auto a = this->bus().Subscribe("ct.q", "workers", [&](const Message&) { member1.Add(1); });
  auto b = this->bus().Subscribe("ct.q", "workers", [&](const Message&) { member2.Add(2); });
  auto c = this->bus().Subscribe("ct.q", "", [&](const Message&) { plain.Add(0); });
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  constexpr int kMessages = 20;
  for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(this->bus().Publish("ct.q", "x").ok());
  ASSERT_TRUE(plain.WaitFor(kMessages));
  // The group's share arrives with the plain subscriber's; give stragglers a moment.
  for (int i = 0; i < 50 && member1.items().size() + member2.items().size() < kMessages; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(member1.items().size() + member2.items().size(), static_cast<size_t>(kMessages));
}

// Tests request/reply: the handler sees the data, the timeout header, a request id and its
// deadline; the caller gets the reply's data and headers.
TYPED_TEST_P(BusContractTest, RequestReply) {
  auto sub = this->bus().Serve("ct.echo", "", [](const Request& r) {
    Reply reply = Reply::Ok("echo:" + r.msg.data);
    reply.headers["X-Timeout"] = std::string(r.msg.Header(kHeaderTimeoutMs));
    reply.headers["X-Rid"] = r.request_id;
    reply.headers["X-Expired"] = r.Expired() ? "yes" : "no";
    return reply;
  });
  ASSERT_TRUE(sub.ok()) << sub.status();
  auto reply = this->bus().Request("ct.echo", "hi", 2s, {{std::string(kHeaderRequestId), "r-9"}});
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->data, "echo:hi");
  EXPECT_EQ(reply->Header("X-Timeout"), "2000");
  EXPECT_EQ(reply->Header("X-Rid"), "r-9");
  EXPECT_EQ(reply->Header("X-Expired"), "no");
  auto generated = this->bus().Request("ct.echo", "", 2s);
  ASSERT_TRUE(generated.ok()) << generated.status();
  EXPECT_FALSE(generated->Header("X-Rid").empty());
}

// Tests that a handler's error comes back as the same Status (micro error headers).
TYPED_TEST_P(BusContractTest, HandlerErrorsKeepCodeAndMessage) {
  auto sub = this->bus().Serve("ct.err", "", [](const Request& r) {
    return Reply::Error(
        absl::Status(static_cast<absl::StatusCode>(std::stoi(r.msg.data)), "failed " + r.msg.data));
  });
  ASSERT_TRUE(sub.ok());
  for (int code : {3, 5, 6, 7, 9, 10, 13, 14, 16}) {
    SCOPED_TRACE(code);
    EXPECT_EQ(this->bus().Request("ct.err", std::to_string(code), 2s).status(),
              absl::Status(static_cast<absl::StatusCode>(code), "failed " + std::to_string(code)));
  }
  // RequestMany hands the raw reply over, error headers included.
  auto many = this->bus().RequestMany("ct.err", "7", 500ms, 1);
  ASSERT_TRUE(many.ok()) << many.status();
  ASSERT_EQ(many->size(), 1u);
  EXPECT_EQ(StatusFromHeaders((*many)[0].headers), absl::PermissionDeniedError("failed 7"));
}

// Tests that a request nobody serves is Unavailable marked as no responders (a handler's own
// Unavailable is not), and one with no time left DeadlineExceeded.
TYPED_TEST_P(BusContractTest, NoRespondersAndNoTime) {
  const absl::Status nobody = this->bus().Request("ct.nobody", "", 1s).status();
  EXPECT_EQ(nobody.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsNoResponders(nobody)) << nobody;
  auto sub = this->bus().Serve("ct.quick", "", [](const Request&) { return Reply::Ok("ok"); });
  ASSERT_TRUE(sub.ok());
  auto busy = this->bus().Serve(
      "ct.busy", "", [](const Request&) { return Reply::Error(absl::UnavailableError("busy")); });
  ASSERT_TRUE(busy.ok());
  const absl::Status answered = this->bus().Request("ct.busy", "", 1s).status();
  EXPECT_EQ(answered.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(IsNoResponders(answered)) << answered;
  EXPECT_EQ(this->bus().Request("ct.quick", "", 0ms).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// Tests that a handler slower than the caller's timeout leaves the caller with DeadlineExceeded.
TYPED_TEST_P(BusContractTest, SlowHandlerIsDeadlineExceeded) {
  auto sub = this->bus().Serve("ct.slow", "", [this](const Request&) {
    this->env_.Elapse(600ms);
    return Reply::Ok("late");
  });
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(this->bus().Request("ct.slow", "", 200ms).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// Tests that a destroyed subscription no longer receives, and empty subjects or handlers are
// refused.
TYPED_TEST_P(BusContractTest, UnsubscribeAndBadArguments) {
  Collector<int> got;
  auto sub = this->bus().Subscribe("ct.unsub", "", [&](const Message&) { got.Add(1); });
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE(this->bus().Publish("ct.unsub", "").ok());
  ASSERT_TRUE(got.WaitFor(1));
  sub->reset();
  ASSERT_TRUE(this->bus().Publish("ct.unsub", "").ok());
  EXPECT_FALSE(got.WaitFor(2, 200ms));
  EXPECT_EQ(this->bus().Subscribe("", "", [](const Message&) {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(this->bus().Serve("ct.x", "", nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Tests KV: put/get with per-bucket revisions, create, compare-and-set, delete, keys.
TYPED_TEST_P(BusContractTest, KeyValueRevisionsAndConflicts) {
  auto kv = this->bus().OpenBucket({.name = "ct_kv"});
  ASSERT_TRUE(kv.ok()) << kv.status();
  KeyValue& b = **kv;
  auto r1 = b.Put("a", "1");
  ASSERT_TRUE(r1.ok()) << r1.status();
  auto r2 = b.Put("b", "2");
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(*r2, *r1 + 1);
  auto got = b.Get("a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->value, "1");
  EXPECT_EQ(got->revision, *r1);
  EXPECT_EQ(b.Create("a", "x").status().code(), absl::StatusCode::kAlreadyExists);
  auto r3 = b.Update("a", "3", *r1);
  ASSERT_TRUE(r3.ok()) << r3.status();
  EXPECT_EQ(b.Update("a", "4", *r1).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(b.Get("a")->value, "3");
  ASSERT_TRUE(b.Delete("a").ok());
  EXPECT_EQ(b.Get("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(b.Get("never").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(b.Create("a", "again").ok());  // a deleted key may be created again
  auto keys = b.Keys();
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(b.Put("bad key", "v").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.PurgeDeletes(-1ms).code(), absl::StatusCode::kInvalidArgument);
}

// Tests KV watch: the live entries, the end marker, then each change and delete.
TYPED_TEST_P(BusContractTest, KeyValueWatch) {
  auto kv = this->bus().OpenBucket({.name = "ct_watch"});
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_TRUE((*kv)->Put("w.a", "1").ok());
  ASSERT_TRUE((*kv)->Put("w.gone", "x").ok());
  ASSERT_TRUE((*kv)->Delete("w.gone").ok());
  ASSERT_TRUE((*kv)->Put("other", "o").ok());
  Collector<KvEntry> seen;
  auto watch = (*kv)->Watch("w.*", [&](const KvEntry& e) { seen.Add(e); });
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(seen.WaitFor(2));
  EXPECT_EQ(seen.items()[0].key, "w.a");
  EXPECT_EQ(seen.items()[0].value, "1");
  EXPECT_EQ(seen.items()[1].key, "");  // end of the initial values
  ASSERT_TRUE((*kv)->Put("w.b", "2").ok());
  ASSERT_TRUE((*kv)->Delete("w.a").ok());
  ASSERT_TRUE(seen.WaitFor(4));
  const auto items = seen.items();
  EXPECT_EQ(items[2].key, "w.b");
  EXPECT_FALSE(items[2].deleted);
  EXPECT_EQ(items[3].key, "w.a");
  EXPECT_TRUE(items[3].deleted);
  EXPECT_EQ(items.size(), 4u);  // "other" is not watched
}

// Tests a durable pull consumer: publish acks with sequences, de-duplication by message id,
// ack, nak with delay, redelivery after ack_wait (delivery count grows) up to max_deliver.
TYPED_TEST_P(BusContractTest, JetStreamDurableConsumer) {
  JetStream& js = this->bus().Js();
  ASSERT_TRUE(js.EnsureStream({.name = "CT_JOBS", .subjects = {"ct.jobs.>"}}).ok());
  EXPECT_EQ(js.EnsureStream({.name = ""}).code(), absl::StatusCode::kInvalidArgument);
  auto s1 = js.Publish("ct.jobs.a", "one", {}, "id-1");
  ASSERT_TRUE(s1.ok()) << s1.status();
  auto dup = js.Publish("ct.jobs.a", "one again", {}, "id-1");
  ASSERT_TRUE(dup.ok()) << dup.status();
  EXPECT_EQ(*dup, *s1);
  auto s2 = js.Publish("ct.jobs.b", "two");
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(*s2, *s1 + 1);
  EXPECT_EQ(js.Publish("ct.nostream", "x").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(js.PullSubscribe("CT_JOBS", {.durable = ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(js.PullSubscribe("CT_MISSING", {.durable = "d"}).status().code(),
            absl::StatusCode::kNotFound);

  auto c = js.PullSubscribe("CT_JOBS", {.durable = "ct", .ack_wait = 2s, .max_deliver = 2});
  ASSERT_TRUE(c.ok()) << c.status();
  auto batch = (*c)->Fetch(2, 2s);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->size(), 2u);
  EXPECT_EQ((*batch)[0]->msg().data, "one");
  EXPECT_EQ((*batch)[0]->stream_sequence(), *s1);
  EXPECT_EQ((*batch)[0]->delivery_count(), 1u);
  ASSERT_TRUE((*batch)[0]->Ack().ok());
  ASSERT_TRUE((*batch)[1]->Nak(1s).ok());
  auto none = (*c)->Fetch(1, 200ms);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty()) << "a nak'd message waits out its delay";
  this->env_.Elapse(1200ms);
  auto again = (*c)->Fetch(1, 2s);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0]->msg().data, "two");
  EXPECT_EQ((*again)[0]->delivery_count(), 2u);
  // Not acked: after ack_wait it would come again, but max_deliver (2) is reached.
  this->env_.Elapse(2500ms);
  auto exhausted = (*c)->Fetch(1, 300ms);
  ASSERT_TRUE(exhausted.ok());
  EXPECT_TRUE(exhausted->empty());
  EXPECT_EQ((*c)->Fetch(0, 10ms).status().code(), absl::StatusCode::kInvalidArgument);
}

// Tests that after Drain the bus is closed and refuses work with Unavailable.
TYPED_TEST_P(BusContractTest, DrainCloses) {
  ASSERT_TRUE(this->bus().Drain(5s).ok());
  EXPECT_EQ(this->bus().State(), ConnectionState::kClosed);
  EXPECT_EQ(this->bus().Publish("ct.after", "").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(this->bus().Request("ct.after", "", 1s).status().code(),
            absl::StatusCode::kUnavailable);
}

REGISTER_TYPED_TEST_SUITE_P(BusContractTest, PublishReachesEveryMatchingSubscriber,
                            QueueGroupDeliversOncePerGroup, RequestReply,
                            HandlerErrorsKeepCodeAndMessage, NoRespondersAndNoTime,
                            SlowHandlerIsDeadlineExceeded, UnsubscribeAndBadArguments,
                            KeyValueRevisionsAndConflicts, KeyValueWatch, JetStreamDurableConsumer,
                            DrainCloses);

}  // namespace wisp::bus::testing
