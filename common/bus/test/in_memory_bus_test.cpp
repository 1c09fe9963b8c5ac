#include "wisp/bus/testing/in_memory_bus.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "wisp/status/fake_clock.hpp"

namespace wisp::bus::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

class InMemoryBusTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  InMemoryBus bus_{clock_};
};

Reply Echo(const Request& req) { return Reply::Ok("echo:" + req.msg.data); }

// Tests that a request reaches the handler and its reply comes back.
TEST_F(InMemoryBusTest, RequestReply) {
  auto sub = bus_.Serve("svc.echo", "", Echo);
  ASSERT_TRUE(sub.ok());
  auto reply = bus_.Request("svc.echo", "hi", 1s);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->data, "echo:hi");
  EXPECT_EQ(bus_.RequestCount("svc.>"), 1);
}

// Tests that the handler sees the deadline header and a generated request id.
TEST_F(InMemoryBusTest, HandlerSeesDeadlineAndRequestId) {
  auto sub = bus_.Serve("svc.x", "", [](const Request& req) {
    EXPECT_EQ(req.msg.Header(kHeaderTimeoutMs), "750");
    EXPECT_FALSE(req.request_id.empty());
    EXPECT_LE(req.Remaining(), 750ms);
    return Reply::Ok("");
  });
  ASSERT_TRUE(bus_.Request("svc.x", "", 750ms).ok());
}

// Tests that a handler error comes back to the caller with its code and message.
TEST_F(InMemoryBusTest, HandlerErrorKeepsCode) {
  auto sub = bus_.Serve("svc.err", "", [](const Request&) {
    return Reply::Error(absl::FailedPreconditionError("not ready"));
  });
  EXPECT_EQ(bus_.Request("svc.err", "", 1s).status(), absl::FailedPreconditionError("not ready"));
}

// Tests that a request nobody serves is Unavailable.
TEST_F(InMemoryBusTest, NoRespondersIsUnavailable) {
  EXPECT_EQ(bus_.Request("nobody", "", 1s).status().code(), absl::StatusCode::kUnavailable);
}

// Tests that queue-group members share requests round-robin.
TEST_F(InMemoryBusTest, QueueGroupRoundRobin) {
  int a = 0;
  int b = 0;
  auto s1 = bus_.Serve("svc.q", "grp", [&](const Request&) {
    ++a;
    return Reply::Ok("a");
  });
  auto s2 = bus_.Serve("svc.q", "grp", [&](const Request&) {
    ++b;
    return Reply::Ok("b");
  });
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(bus_.Request("svc.q", "", 1s).ok());
  EXPECT_EQ(a, 3);
  EXPECT_EQ(b, 3);
}

// Tests that plain subscribers all get a publish and queue members get one copy per group.
TEST_F(InMemoryBusTest, PublishFanOutAndQueues) {
  std::vector<std::string> got;
  auto s1 = bus_.Subscribe("ev.>", "", [&](const Message& m) { got.push_back("all1:" + m.data); });
  auto s2 = bus_.Subscribe("ev.*", "", [&](const Message& m) { got.push_back("all2:" + m.data); });
  auto s3 = bus_.Subscribe("ev.x", "g", [&](const Message& m) { got.push_back("g1:" + m.data); });
  auto s4 = bus_.Subscribe("ev.x", "g", [&](const Message& m) { got.push_back("g2:" + m.data); });
  ASSERT_TRUE(bus_.Publish("ev.x", "1").ok());
  ASSERT_TRUE(bus_.Publish("ev.x", "2").ok());
  EXPECT_THAT(got, ElementsAre("all1:1", "all2:1", "g1:1", "all1:2", "all2:2", "g2:2"));
  EXPECT_EQ(bus_.Published("ev.x").size(), 2u);
}

// Tests that a dropped subscription stops receiving.
TEST_F(InMemoryBusTest, UnsubscribeOnDestroyAndDrain) {
  int n = 0;
  {
    auto sub = bus_.Subscribe("ev", "", [&](const Message&) { ++n; });
    ASSERT_TRUE(bus_.Publish("ev", "").ok());
  }
  ASSERT_TRUE(bus_.Publish("ev", "").ok());
  auto sub = bus_.Subscribe("ev", "", [&](const Message&) { ++n; });
  ASSERT_TRUE((*sub)->Drain().ok());
  ASSERT_TRUE(bus_.Publish("ev", "").ok());
  EXPECT_EQ(n, 1);
}

// Tests that a handler may call the bus again (no lock held during handlers).
TEST_F(InMemoryBusTest, HandlersMayReenter) {
  auto inner = bus_.Serve("inner", "", Echo);
  auto outer = bus_.Serve("outer", "", [&](const Request& req) {
    auto r = bus_.Request("inner", req.msg.data, 1s);
    return r.ok() ? Reply::Ok("outer:" + r->data) : Reply::Error(r.status());
  });
  auto reply = bus_.Request("outer", "x", 1s);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->data, "outer:echo:x");
}

// Tests FailSubject, DropReplies and ExpireRequests fault injection.
TEST_F(InMemoryBusTest, FaultInjection) {
  int calls = 0;
  auto sub = bus_.Serve("svc.f", "", [&](const Request&) {
    ++calls;
    return Reply::Ok("");
  });

  bus_.FailSubject("svc.*", absl::ResourceExhaustedError("full"));
  EXPECT_EQ(bus_.Request("svc.f", "", 1s).status(), absl::ResourceExhaustedError("full"));
  EXPECT_EQ(bus_.Publish("svc.f", "").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(calls, 0);
  bus_.ClearFaults();

  bus_.DropReplies("svc.f");
  EXPECT_EQ(bus_.Request("svc.f", "", 1s).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(calls, 1);
  bus_.ClearFaults();

  bus_.ExpireRequests("svc.f");
  EXPECT_EQ(bus_.Request("svc.f", "", 1s).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(calls, 1);  // expired before it ran: handler not called
  bus_.ClearFaults();

  EXPECT_TRUE(bus_.Request("svc.f", "", 1s).ok());
  EXPECT_EQ(calls, 2);
}

// Tests that a simulated disconnect fails calls and subscriptions serve again afterwards.
TEST_F(InMemoryBusTest, DisconnectAndReconnect) {
  auto sub = bus_.Serve("svc.d", "", Echo);
  bus_.SetConnected(false);
  EXPECT_EQ(bus_.State(), ConnectionState::kReconnecting);
  EXPECT_EQ(bus_.Request("svc.d", "", 1s).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(bus_.Publish("svc.d", "").code(), absl::StatusCode::kUnavailable);
  bus_.SetConnected(true);
  EXPECT_EQ(bus_.State(), ConnectionState::kConnected);
  EXPECT_TRUE(bus_.Request("svc.d", "", 1s).ok());
  ASSERT_TRUE(bus_.Drain(1s).ok());
  EXPECT_EQ(bus_.State(), ConnectionState::kClosed);
  EXPECT_EQ(bus_.Request("svc.d", "", 1s).status().code(), absl::StatusCode::kUnavailable);
}

// Tests that RequestMany collects a reply from every non-queue responder.
TEST_F(InMemoryBusTest, RequestManyCollectsAll) {
  auto s1 = bus_.Serve("$SRV.PING", "", [](const Request&) { return Reply::Ok("1"); });
  auto s2 = bus_.Serve("$SRV.PING", "", [](const Request&) { return Reply::Ok("2"); });
  auto s3 = bus_.Serve("$SRV.PING", "",
                       [](const Request&) { return Reply::Error(absl::InternalError("bad")); });
  auto all = bus_.RequestMany("$SRV.PING", "", 100ms);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].data, "1");
  EXPECT_EQ(StatusFromHeaders((*all)[2].headers).code(), absl::StatusCode::kInternal);
  auto two = bus_.RequestMany("$SRV.PING", "", 100ms, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u);
  auto none = bus_.RequestMany("$SRV.NOPE", "", 100ms);
  ASSERT_TRUE(none.ok());
  EXPECT_THAT(*none, IsEmpty());
}

// ---- JetStream ----

class InMemoryJetStreamTest : public InMemoryBusTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        bus_.Js()
            .EnsureStream(StreamConfig{.name = "JOBS", .subjects = {"jobs.>"}, .work_queue = true})
            .ok());
    auto c = bus_.Js().PullSubscribe(
        "JOBS", ConsumerConfig{.durable = "runner", .ack_wait = 30s, .max_deliver = 3});
    ASSERT_TRUE(c.ok()) << c.status();
    consumer_ = *std::move(c);
  }
  std::vector<JsMessagePtr> Fetch(int n = 10) {
    auto r = consumer_->Fetch(n, 0ms);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : std::vector<JsMessagePtr>{};
  }
  PullConsumerPtr consumer_;
};

// Tests that a published job is fetched once, and an ack removes it from the work queue.
TEST_F(InMemoryJetStreamTest, PublishFetchAck) {
  auto seq = bus_.Js().Publish("jobs.n1", "job-1");
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(*seq, 1u);
  auto msgs = Fetch();
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0]->msg().data, "job-1");
  EXPECT_EQ(msgs[0]->msg().subject, "jobs.n1");
  EXPECT_EQ(msgs[0]->delivery_count(), 1u);
  EXPECT_EQ(msgs[0]->stream_sequence(), 1u);
  EXPECT_THAT(Fetch(), IsEmpty());  // pending, not redelivered yet
  EXPECT_EQ(bus_.PendingCount("JOBS", "runner"), 1u);
  ASSERT_TRUE(msgs[0]->Ack().ok());
  EXPECT_EQ(bus_.StreamSize("JOBS"), 0u);
  EXPECT_EQ(bus_.PendingCount("JOBS", "runner"), 0u);
  clock_.Advance(1min);
  EXPECT_THAT(Fetch(), IsEmpty());
}

// Tests that Nak with a delay redelivers only after the delay, with a higher delivery count.
TEST_F(InMemoryJetStreamTest, NakWithDelayRedelivers) {
  ASSERT_TRUE(bus_.Js().Publish("jobs.n1", "j").ok());
  auto first = Fetch();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(first[0]->Nak(5s).ok());
  clock_.Advance(4s);
  EXPECT_THAT(Fetch(), IsEmpty());
  clock_.Advance(1s);
  auto again = Fetch();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0]->delivery_count(), 2u);
  EXPECT_EQ(again[0]->stream_sequence(), first[0]->stream_sequence());
}

// Tests that an unacked message is redelivered after ack_wait, up to max_deliver times.
TEST_F(InMemoryJetStreamTest, AckWaitRedeliveryUntilMaxDeliver) {
  ASSERT_TRUE(bus_.Js().Publish("jobs.n1", "j").ok());
  ASSERT_EQ(Fetch().size(), 1u);
  clock_.Advance(29s);
  EXPECT_THAT(Fetch(), IsEmpty());
  clock_.Advance(1s);
  auto second = Fetch();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0]->delivery_count(), 2u);
  clock_.Advance(30s);
  auto third = Fetch();
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0]->delivery_count(), 3u);
  clock_.Advance(30s);
  EXPECT_THAT(Fetch(), IsEmpty());  // max_deliver = 3 reached
  EXPECT_EQ(bus_.StreamSize("JOBS"), 1u);
}

// Tests that InProgress restarts the ack-wait timer.
TEST_F(InMemoryJetStreamTest, InProgressExtendsAckWait) {
  ASSERT_TRUE(bus_.Js().Publish("jobs.n1", "j").ok());
  auto msgs = Fetch();
  ASSERT_EQ(msgs.size(), 1u);
  clock_.Advance(20s);
  ASSERT_TRUE(msgs[0]->InProgress().ok());
  clock_.Advance(20s);
  EXPECT_THAT(Fetch(), IsEmpty());
  clock_.Advance(10s);
  EXPECT_EQ(Fetch().size(), 1u);
}

// Tests that Term ends a message without redelivery.
TEST_F(InMemoryJetStreamTest, TermNeverRedelivers) {
  ASSERT_TRUE(bus_.Js().Publish("jobs.n1", "j").ok());
  auto msgs = Fetch();
  ASSERT_EQ(msgs.size(), 1u);
  ASSERT_TRUE(msgs[0]->Term().ok());
  clock_.Advance(1h);
  EXPECT_THAT(Fetch(), IsEmpty());
  EXPECT_EQ(bus_.StreamSize("JOBS"), 0u);
}

// Tests Nats-Msg-Id de-duplication within the window, and a new message after it.
TEST_F(InMemoryJetStreamTest, MsgIdDeduplicates) {
  auto a = bus_.Js().Publish("jobs.n1", "j", {}, "vol-1");
  auto b = bus_.Js().Publish("jobs.n1", "j", {}, "vol-1");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(bus_.StreamSize("JOBS"), 1u);
  clock_.Advance(121s);
  auto c = bus_.Js().Publish("jobs.n1", "j", {}, "vol-1");
  ASSERT_TRUE(c.ok());
  EXPECT_GT(*c, *a);
}

// Tests that a Fetch blocked on another thread returns once the FakeClock makes a nak'd job due.
TEST_F(InMemoryJetStreamTest, BlockedFetchSeesClockAdvance) {
  ASSERT_TRUE(bus_.Js().Publish("jobs.n1", "j").ok());
  auto first = Fetch();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(first[0]->Nak(10s).ok());
  std::thread runner([&] {
    auto again = consumer_->Fetch(1, 30s);
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(again->size(), 1u);
    EXPECT_EQ((*again)[0]->delivery_count(), 2u);
  });
  clock_.Advance(10s);
  runner.join();  // returns within milliseconds, not after the 30 s timeout
}

// Tests that batches respect filter subjects and that two handles of a durable share its state.
TEST_F(InMemoryJetStreamTest, FilterAndSharedDurable) {
  auto n2 =
      bus_.Js().PullSubscribe("JOBS", ConsumerConfig{.durable = "n2", .filter_subject = "jobs.n2"});
  ASSERT_TRUE(n2.ok());
  ASSERT_TRUE(bus_.Js().Publish("jobs.n1", "a").ok());
  ASSERT_TRUE(bus_.Js().Publish("jobs.n2", "b").ok());
  auto got = (*n2)->Fetch(10, 0ms);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0]->msg().data, "b");

  auto twin = bus_.Js().PullSubscribe("JOBS", ConsumerConfig{.durable = "runner"});
  ASSERT_TRUE(twin.ok());
  auto first = (*twin)->Fetch(1, 0ms);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);
  EXPECT_THAT(Fetch(), ElementsAre(::testing::_));  // "b": the twin already took "a"
}

// Tests that publishing where no stream listens is Unavailable and bad configs are rejected.
TEST_F(InMemoryJetStreamTest, ErrorsNameTheProblem) {
  EXPECT_EQ(bus_.Js().Publish("nowhere", "x").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(bus_.Js().EnsureStream(StreamConfig{.name = "bad name", .subjects = {"x"}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bus_.Js().EnsureStream(StreamConfig{.name = "OTHER", .subjects = {"jobs.n1"}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bus_.Js().PullSubscribe("MISSING", ConsumerConfig{.durable = "d"}).status().code(),
            absl::StatusCode::kNotFound);
}

// Tests that core publishes on stream subjects are stored and Js publishes reach core subscribers.
TEST_F(InMemoryJetStreamTest, CoreAndJsInterplay) {
  int seen = 0;
  auto sub = bus_.Subscribe("jobs.>", "", [&](const Message&) { ++seen; });
  ASSERT_TRUE(bus_.Publish("jobs.n1", "core").ok());
  ASSERT_TRUE(bus_.Js().Publish("jobs.n1", "js").ok());
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(Fetch().size(), 2u);
}

// ---- Key-value ----

class InMemoryKvTest : public InMemoryBusTest {
 protected:
  void SetUp() override {
    auto kv = bus_.OpenBucket(BucketConfig{.name = "wisp_volumes"});
    ASSERT_TRUE(kv.ok());
    kv_ = *std::move(kv);
  }
  KeyValuePtr kv_;
};

// Tests put/get/create/update/delete/keys with revisions.
TEST_F(InMemoryKvTest, CrudWithRevisions) {
  EXPECT_EQ(kv_->bucket(), "wisp_volumes");
  EXPECT_EQ(kv_->Get("v1").status().code(), absl::StatusCode::kNotFound);
  auto r1 = kv_->Create("v1", "a");
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(kv_->Create("v1", "b").status().code(), absl::StatusCode::kAlreadyExists);
  auto r2 = kv_->Update("v1", "b", *r1);
  ASSERT_TRUE(r2.ok());
  EXPECT_GT(*r2, *r1);
  EXPECT_EQ(kv_->Update("v1", "c", *r1).status().code(), absl::StatusCode::kAborted);
  auto e = kv_->Get("v1");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->value, "b");
  EXPECT_EQ(e->revision, *r2);
  ASSERT_TRUE(kv_->Put("v2", "x").ok());
  EXPECT_THAT(*kv_->Keys(), ElementsAre("v1", "v2"));
  ASSERT_TRUE(kv_->Delete("v1").ok());
  EXPECT_EQ(kv_->Get("v1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(*kv_->Keys(), ElementsAre("v2"));
  EXPECT_TRUE(kv_->Create("v1", "again").ok());  // create over a delete marker is allowed
}

// Tests that a second handle of the same bucket sees the same data.
TEST_F(InMemoryKvTest, HandlesShareBucket) {
  ASSERT_TRUE(kv_->Put("k", "v").ok());
  auto other = bus_.OpenBucket(BucketConfig{.name = "wisp_volumes"});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->Get("k")->value, "v");
}

// Tests that Watch delivers current values, the end marker, then changes including deletes.
TEST_F(InMemoryKvTest, WatchInitialThenChanges) {
  ASSERT_TRUE(kv_->Put("pods.a", "1").ok());
  ASSERT_TRUE(kv_->Put("other", "x").ok());
  std::vector<std::string> seen;
  auto w = kv_->Watch("pods.*", [&](const KvEntry& e) {
    seen.push_back(e.key.empty() ? "<end>" : e.key + "=" + e.value + (e.deleted ? "(del)" : ""));
  });
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(kv_->Put("pods.b", "2").ok());
  ASSERT_TRUE(kv_->Put("other", "y").ok());
  ASSERT_TRUE(kv_->Delete("pods.a").ok());
  w->reset();
  ASSERT_TRUE(kv_->Put("pods.c", "3").ok());
  EXPECT_THAT(seen, ElementsAre("pods.a=1", "<end>", "pods.b=2", "pods.a=(del)"));
}

// Tests that PurgeDeletes drops the markers older than the age by the injected clock (every one
// for 0), keeps live keys and younger markers, tells no watcher, and lets a purged key be created
// again.
TEST_F(InMemoryKvTest, PurgeDeletesDropsOldMarkers) {
  ASSERT_TRUE(kv_->Put("live", "v").ok());
  ASSERT_TRUE(kv_->Put("old", "v").ok());
  ASSERT_TRUE(kv_->Delete("old").ok());
  clock_.Advance(std::chrono::minutes(10));
  ASSERT_TRUE(kv_->Put("young", "v").ok());
  ASSERT_TRUE(kv_->Delete("young").ok());
  clock_.Advance(std::chrono::minutes(1));
  EXPECT_EQ(bus_.KvStoredCount("wisp_volumes"), 3u);
  int changes = 0;
  auto w = kv_->Watch(">", [&](const KvEntry& e) { changes += e.key.empty() ? 0 : 1; });
  ASSERT_TRUE(w.ok());
  const int initial = changes;

  ASSERT_TRUE(kv_->PurgeDeletes(std::chrono::minutes(11)).ok());  // "old" is exactly 11 min old
  EXPECT_EQ(bus_.KvStoredCount("wisp_volumes"), 3u);
  ASSERT_TRUE(kv_->PurgeDeletes(std::chrono::minutes(5)).ok());
  EXPECT_EQ(bus_.KvStoredCount("wisp_volumes"), 2u);             // live + young's marker
  ASSERT_TRUE(kv_->PurgeDeletes(std::chrono::minutes(5)).ok());  // idempotent
  EXPECT_EQ(bus_.KvStoredCount("wisp_volumes"), 2u);
  ASSERT_TRUE(kv_->PurgeDeletes(std::chrono::milliseconds(0)).ok());
  EXPECT_EQ(bus_.KvStoredCount("wisp_volumes"), 1u);
  EXPECT_EQ(changes, initial);
  EXPECT_EQ(kv_->Get("live")->value, "v");
  EXPECT_THAT(*kv_->Keys(), ElementsAre("live"));
  EXPECT_TRUE(kv_->Create("old", "again").ok());

  EXPECT_EQ(kv_->PurgeDeletes(std::chrono::milliseconds(-1)).code(),
            absl::StatusCode::kInvalidArgument);
  bus_.FailBucket("wisp_volumes", absl::UnavailableError("kv down"));
  EXPECT_EQ(kv_->PurgeDeletes(std::chrono::milliseconds(0)), absl::UnavailableError("kv down"));
}

// Tests bucket faults and key validation.
TEST_F(InMemoryKvTest, FaultsAndValidation) {
  EXPECT_EQ(kv_->Put("bad key", "v").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv_->Put(".dot", "v").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bus_.OpenBucket(BucketConfig{.name = "bad.name"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  bus_.FailBucket("wisp_volumes", absl::UnavailableError("kv down"));
  EXPECT_EQ(kv_->Get("k").status(), absl::UnavailableError("kv down"));
  EXPECT_EQ(kv_->Put("k", "v").status(), absl::UnavailableError("kv down"));
  bus_.ClearFaults();
  EXPECT_TRUE(kv_->Put("k", "v").ok());
}

// Tests that the CAS loop of two writers converges: exactly one wins each round.
TEST_F(InMemoryKvTest, CasOneWinnerPerRevision) {
  auto rev = kv_->Put("counter", "0");
  ASSERT_TRUE(rev.ok());
  auto w1 = kv_->Update("counter", "1", *rev);
  auto w2 = kv_->Update("counter", "1", *rev);
  EXPECT_TRUE(w1.ok());
  EXPECT_EQ(w2.status().code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace wisp::bus::testing
