// NatsBus against a real nats-server (started per test on a free port by the harness).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/service.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/nats_test.hpp"

namespace wisp::bus {
namespace {

using namespace std::chrono_literals;
using integration::Eventually;

double MetricValue(prometheus::Registry& r, const std::string& name) {
  for (const auto& f : r.Collect()) {
    if (f.name != name || f.metric.empty()) continue;
    const auto& m = f.metric[0];
    return f.type == prometheus::MetricType::Gauge ? m.gauge.value : m.counter.value;
  }
  return -1;
}

class NatsBusTest : public integration::NatsTest {};

// Tests request/reply with headers and the request id reaching the handler.
TEST_F(NatsBusTest, RequestReply) {
  auto sub = bus_->Serve("it.echo", "", [](const Request& r) {
    Reply reply = Reply::Ok("echo:" + r.msg.data);
    reply.headers["X-Rid"] = r.request_id;
    reply.headers["X-Timeout"] = std::string(r.msg.Header(kHeaderTimeoutMs));
    return reply;
  });
  ASSERT_TRUE(sub.ok()) << sub.status();
  auto reply = bus_->Request("it.echo", "hi", 2s, {{std::string(kHeaderRequestId), "rid-7"}});
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->data, "echo:hi");
  EXPECT_EQ(reply->Header("X-Rid"), "rid-7");
  EXPECT_EQ(reply->Header("X-Timeout"), "2000");
  // Without a caller id the bus generates one.
  auto generated = bus_->Request("it.echo", "", 2s);
  ASSERT_TRUE(generated.ok());
  EXPECT_FALSE(generated->Header("X-Rid").empty());
}

// Tests that handler errors arrive with their gRPC code and message in both directions.
TEST_F(NatsBusTest, ErrorsByCode) {
  auto sub = bus_->Serve("it.err", "", [](const Request& r) {
    const int code = std::stoi(r.msg.data);
    return Reply::Error(absl::Status(static_cast<absl::StatusCode>(code), "failed " + r.msg.data));
  });
  ASSERT_TRUE(sub.ok());
  for (int code : {3, 5, 6, 7, 9, 10, 13, 14, 16}) {
    SCOPED_TRACE(code);
    auto reply = bus_->Request("it.err", std::to_string(code), 2s);
    EXPECT_EQ(reply.status(),
              absl::Status(static_cast<absl::StatusCode>(code), "failed " + std::to_string(code)));
  }
  EXPECT_EQ(bus_->Request("it.nobody", "", 2s).status().code(), absl::StatusCode::kUnavailable);
}

// Waits for one RequestAsync answer.
absl::StatusOr<Message> AsyncCall(Bus& bus, std::string_view subject, std::string_view data,
                                  std::chrono::milliseconds timeout, const Headers& headers = {}) {
  auto answer = std::make_shared<std::promise<absl::StatusOr<Message>>>();
  auto future = answer->get_future();
  bus.RequestAsync(subject, data, timeout, headers, [answer](absl::StatusOr<Message> reply) {
    answer->set_value(std::move(reply));
  });
  return future.get();
}

// Tests RequestAsync against the real server: replies with headers, micro errors, no responders,
// the timeout, many requests in flight at once from one thread, and the client metrics.
TEST_F(NatsBusTest, RequestAsync) {
  prometheus::Registry registry;
  auto client = NewBus(&registry);
  ASSERT_NE(client, nullptr);
  integration::TestResponders responders;
  absl::Status served = responders.Serve(*bus_, "it.a");  // it.aecho, it.aerr, it.aslow
  ASSERT_TRUE(served.ok()) << served;
  // Subscribed last on the same connection: once it answers, the server has the others too.
  auto warm = bus_->Serve("it.awarm", "", [](const Request&) { return Reply::Ok("warm"); });
  ASSERT_TRUE(warm.ok());
  ASSERT_TRUE(Eventually([&] { return client->Request("it.awarm", "", 1s).ok(); }));
  auto reply = AsyncCall(*client, "it.aecho", "hi", 2s, {{std::string(kHeaderRequestId), "r-1"}});
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->data, "echo:hi");
  EXPECT_EQ(reply->Header("X-Rid"), "r-1");
  EXPECT_EQ(reply->Header("X-Timeout"), "2000");
  EXPECT_EQ(AsyncCall(*client, "it.aerr", "", 2s).status(), absl::PermissionDeniedError("not you"));
  EXPECT_EQ(AsyncCall(*client, "it.anobody", "", 2s).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(AsyncCall(*client, "it.aecho", "", 0ms).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  // A handler that never answers in time: DeadlineExceeded from the timer, close to the timeout.
  const auto start = std::chrono::steady_clock::now();
  auto timed_out = AsyncCall(*client, "it.aslow", "", 200ms);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(timed_out.status().code(), absl::StatusCode::kDeadlineExceeded) << timed_out.status();
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 2s);
  responders.Release();  // its late reply finds no pending request and is dropped

  // Many in flight from this one thread, each answered once with its own reply.
  constexpr int kCalls = 200;
  std::mutex mu;
  std::condition_variable cv;
  int answered = 0, wrong = 0;
  for (int i = 0; i < kCalls; ++i) {
    client->RequestAsync("it.aecho", std::to_string(i), 5s, {}, [&, i](absl::StatusOr<Message> r) {
      std::lock_guard lock(mu);
      if (!r.ok() || r->data != "echo:" + std::to_string(i)) ++wrong;
      ++answered;
      cv.notify_all();
    });
  }
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return answered == kCalls; })) << answered;
    EXPECT_EQ(wrong, 0);
  }
  EXPECT_EQ(integration::OkRequests(registry, "it.aecho"), kCalls + 1);
}

// Tests that requests still pending when the bus closes are answered Unavailable, once.
TEST_F(NatsBusTest, RequestAsyncPendingFailOnClose) {
  auto client = NewBus();
  ASSERT_NE(client, nullptr);
  std::promise<void> release;
  auto released = release.get_future().share();
  auto slow = bus_->Serve("it.ahang", "", [released](const Request&) {
    released.wait_for(5s);
    return Reply::Ok("late");
  });
  ASSERT_TRUE(slow.ok());
  auto warm = bus_->Serve("it.ahwarm", "", [](const Request&) { return Reply::Ok("warm"); });
  ASSERT_TRUE(warm.ok());
  ASSERT_TRUE(Eventually([&] { return client->Request("it.ahwarm", "", 1s).ok(); }));
  auto answer = std::make_shared<std::promise<absl::StatusOr<Message>>>();
  auto calls = std::make_shared<std::atomic<int>>(0);
  client->RequestAsync("it.ahang", "", 10s, {}, [answer, calls](absl::StatusOr<Message> r) {
    if (calls->fetch_add(1) == 0) answer->set_value(std::move(r));
  });
  std::this_thread::sleep_for(100ms);  // the request reaches the handler
  client.reset();
  auto r = answer->get_future().get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(calls->load(), 1);
  release.set_value();
}

// Tests that a caller timeout is DeadlineExceeded and a request whose deadline passed while queued
// behind a slow one is never handed to the handler.
TEST_F(NatsBusTest, DeadlineExpiryDoesNotCallHandler) {
  std::atomic<int> calls{0};
  std::atomic<bool> first_running{false};
  auto sub = bus_->Serve("it.slow", "", [&](const Request& r) {
    ++calls;
    if (r.msg.data == "first") {
      first_running = true;
      std::this_thread::sleep_for(400ms);
    }
    return Reply::Ok("done");
  });
  ASSERT_TRUE(sub.ok());
  auto first =
      std::async(std::launch::async, [&] { return bus_->Request("it.slow", "first", 3s); });
  ASSERT_TRUE(Eventually([&] { return first_running.load(); }));
  auto second = bus_->Request("it.slow", "second", 100ms);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(first.get().ok());
  // Once the slow handler returns, the queued request is found expired and dropped.
  auto probe = bus_->Request("it.slow", "probe", 2s);
  ASSERT_TRUE(probe.ok());
  EXPECT_EQ(calls.load(), 2);  // "first" and "probe", never "second"
}

// Tests that serve_threads > 1 runs requests of one subscription in parallel.
TEST_F(NatsBusTest, ServeThreadsRunInParallel) {
  auto server = NewBus(nullptr, /*threads=*/4);
  std::atomic<int> now{0}, peak{0};
  auto sub = server->Serve("it.par", "", [&](const Request& r) {
    if (r.msg.data == "warm") return Reply::Ok("");
    const int n = ++now;
    int p = peak.load();
    while (n > p && !peak.compare_exchange_weak(p, n)) {
    }
    std::this_thread::sleep_for(300ms);
    --now;
    return Reply::Ok("");
  });
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE(Eventually([&] { return bus_->Request("it.par", "warm", 1s).ok(); }));
  std::vector<std::future<absl::StatusOr<Message>>> calls;
  for (int i = 0; i < 4; ++i) {
    calls.push_back(
        std::async(std::launch::async, [&] { return bus_->Request("it.par", "", 5s); }));
  }
  for (auto& c : calls) EXPECT_TRUE(c.get().ok());
  EXPECT_GE(peak.load(), 3);  // at least 3 of 4 overlapped (all 4 unless the machine is starved)
}

// Tests that queue-group members share requests and a plain subscriber sees every message.
TEST_F(NatsBusTest, QueueGroups) {
  auto other = NewBus();
  std::atomic<int> a{0}, b{0}, watcher{0};
  auto s1 = bus_->Serve("it.q", "grp", [&](const Request&) {
    ++a;
    return Reply::Ok("a");
  });
  auto s2 = other->Serve("it.q", "grp", [&](const Request&) {
    ++b;
    return Reply::Ok("b");
  });
  std::atomic<bool> saw_barrier{false};
  auto s3 = other->Subscribe("it.q", "", [&](const Message& m) {
    ++watcher;
    if (m.data == "barrier") saw_barrier = true;
  });
  ASSERT_TRUE(s1.ok() && s2.ok() && s3.ok());
  // Warm up until both members and the watcher are live on the server, then start counting.
  int warm = 0;
  ASSERT_TRUE(Eventually([&] {
    ++warm;
    (void)bus_->Request("it.q", "", 1s);
    return a > 0 && b > 0 && watcher > 0;
  }));
  // The watcher gets messages in publish order: once it saw the barrier, warm-up is all in.
  ASSERT_TRUE(bus_->Request("it.q", "barrier", 1s).ok());
  ASSERT_TRUE(Eventually([&] { return saw_barrier.load(); })) << "warm=" << warm;
  a = 0;
  b = 0;
  watcher = 0;
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(bus_->Request("it.q", "", 2s).ok());
  EXPECT_EQ(a + b, 40);
  EXPECT_GT(a.load(), 0);
  EXPECT_GT(b.load(), 0);
  EXPECT_TRUE(Eventually([&] { return watcher.load() == 40; }));
}

// Tests RequestMany collecting one reply per responder.
TEST_F(NatsBusTest, RequestManyCollectsEveryResponder) {
  auto other = NewBus();
  auto s1 = bus_->Serve("it.all", "", [](const Request&) { return Reply::Ok("1"); });
  auto s2 = other->Serve("it.all", "", [](const Request&) { return Reply::Ok("2"); });
  ASSERT_TRUE(s1.ok() && s2.ok());
  auto warm = other->Request("it.all", "", 1s);  // both subscriptions are registered
  ASSERT_TRUE(warm.ok()) << warm.status();
  auto replies = bus_->RequestMany("it.all", "", 300ms);
  ASSERT_TRUE(replies.ok()) << replies.status();
  EXPECT_EQ(replies->size(), 2u);
  auto one = bus_->RequestMany("it.all", "", 300ms, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size(), 1u);
  auto none = bus_->RequestMany("it.none", "", 200ms);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

// Tests that Service answers $SRV discovery over NATS and Discover sees both instances.
TEST_F(NatsBusTest, MicroServiceDiscovery) {
  auto other = NewBus();
  auto s1 = Service::Start(*bus_, {.name = "it-svc", .version = "1.0.0"});
  auto s2 = Service::Start(*other, {.name = "it-svc", .version = "1.0.0"});
  ASSERT_TRUE(s1.ok() && s2.ok());
  ASSERT_TRUE((*s1)
                  ->AddEndpoint("echo", "it.svc.echo", "",
                                [](const Request& r) { return Reply::Ok(r.msg.data); })
                  .ok());
  ASSERT_TRUE(bus_->Request("it.svc.echo", "x", 2s).ok());
  absl::StatusOr<std::vector<ServiceInstance>> found;
  ASSERT_TRUE(Eventually([&] {
    found = Discover(*bus_, 300ms);
    return found.ok() && found->size() == 2u;
  })) << (found.ok() ? std::to_string(found->size()) + " instances" : found.status().ToString());
  int with_endpoint = 0;
  for (const auto& inst : *found) {
    EXPECT_EQ(inst.name, "it-svc");
    EXPECT_TRUE(inst.answered_info);
    EXPECT_TRUE(inst.answered_stats);
    if (!inst.endpoints.empty()) {
      ++with_endpoint;
      EXPECT_EQ(inst.endpoints[0].num_requests, 1u);
      EXPECT_EQ(inst.endpoints[0].queue_group, "it-svc");
    }
  }
  EXPECT_EQ(with_endpoint, 1);
}

// Tests JetStream work queue: ack, nak with delay, redelivery after ack wait, term, dedupe.
TEST_F(NatsBusTest, JetStreamAckNakRedelivery) {
  StreamConfig sc{.name = "IT_JOBS", .subjects = {"it.jobs.>"}, .work_queue = true};
  ASSERT_TRUE(bus_->Js().EnsureStream(sc).ok());
  sc.max_age = std::chrono::hours(1);
  ASSERT_TRUE(bus_->Js().EnsureStream(sc).ok()) << "update of an existing stream";
  auto consumer = bus_->Js().PullSubscribe(
      "IT_JOBS", ConsumerConfig{.durable = "it-runner", .ack_wait = 1s, .max_deliver = 5});
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  auto& c = **consumer;

  auto seq = bus_->Js().Publish("it.jobs.n1", "job-1", {{"X-Job", "1"}}, "job-1");
  ASSERT_TRUE(seq.ok()) << seq.status();
  auto dup = bus_->Js().Publish("it.jobs.n1", "job-1", {}, "job-1");
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(*dup, *seq);

  auto m1 = c.Fetch(10, 2s);
  ASSERT_TRUE(m1.ok()) << m1.status();
  ASSERT_EQ(m1->size(), 1u);  // the duplicate was not stored
  EXPECT_EQ((*m1)[0]->msg().data, "job-1");
  EXPECT_EQ((*m1)[0]->msg().Header("X-Job"), "1");
  EXPECT_EQ((*m1)[0]->delivery_count(), 1u);
  EXPECT_EQ((*m1)[0]->stream_sequence(), *seq);
  ASSERT_TRUE((*m1)[0]->Nak(200ms).ok());

  auto m2 = c.Fetch(1, 3s);
  ASSERT_TRUE(m2.ok());
  ASSERT_EQ(m2->size(), 1u);
  EXPECT_EQ((*m2)[0]->delivery_count(), 2u);
  // Not acked: redelivered after ack_wait (1s).
  auto m3 = c.Fetch(1, 4s);
  ASSERT_TRUE(m3.ok());
  ASSERT_EQ(m3->size(), 1u);
  EXPECT_EQ((*m3)[0]->delivery_count(), 3u);
  ASSERT_TRUE((*m3)[0]->InProgress().ok());
  ASSERT_TRUE((*m3)[0]->Ack().ok());
  auto empty = c.Fetch(1, 1500ms);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());

  ASSERT_TRUE(bus_->Js().Publish("it.jobs.n1", "job-2").ok());
  auto t = c.Fetch(1, 2s);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->size(), 1u);
  ASSERT_TRUE((*t)[0]->Term().ok());
  auto after_term = c.Fetch(1, 1500ms);
  ASSERT_TRUE(after_term.ok());
  EXPECT_TRUE(after_term->empty());

  EXPECT_EQ(bus_->Js().Publish("it.nostream", "x").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(bus_->Js().PullSubscribe("IT_MISSING", {.durable = "x"}).status().code(),
            absl::StatusCode::kNotFound);
}

// Tests KV CRUD and that concurrent CAS increments never lose an update.
TEST_F(NatsBusTest, KeyValueCasRace) {
  auto kv = bus_->OpenBucket({.name = "it_kv"});
  ASSERT_TRUE(kv.ok()) << kv.status();
  auto again = bus_->OpenBucket({.name = "it_kv"});
  ASSERT_TRUE(again.ok());
  auto& store = **kv;
  EXPECT_EQ(store.Get("missing").status().code(), absl::StatusCode::kNotFound);
  auto r1 = store.Create("k", "v1");
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(store.Create("k", "v2").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store.Update("k", "v2", *r1 + 100).status().code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(store.Update("k", "v2", *r1).ok());
  ASSERT_TRUE(store.Delete("k").ok());
  EXPECT_EQ(store.Get("k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store.Create("k", "v3").ok()) << "create over a delete marker";

  ASSERT_TRUE(store.Put("counter", "0").ok());
  constexpr int kWriters = 4;
  constexpr int kEach = 15;
  std::atomic<int> conflicts{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&] {
      auto mine = bus_->OpenBucket({.name = "it_kv"});
      ASSERT_TRUE(mine.ok());
      for (int i = 0; i < kEach; ++i) {
        while (true) {
          auto cur = (*mine)->Get("counter");
          ASSERT_TRUE(cur.ok());
          auto next =
              (*mine)->Update("counter", std::to_string(std::stoi(cur->value) + 1), cur->revision);
          if (next.ok()) break;
          ASSERT_EQ(next.status().code(), absl::StatusCode::kAborted) << next.status();
          ++conflicts;
        }
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(store.Get("counter")->value, std::to_string(kWriters * kEach));
  auto keys = store.Keys();
  ASSERT_TRUE(keys.ok());
  EXPECT_THAT(*keys, ::testing::ElementsAre("counter", "k"));
  RecordProperty("cas_conflicts", conflicts.load());
}

// Tests that Watch delivers the current values, the end marker, then puts and deletes.
TEST_F(NatsBusTest, KeyValueWatch) {
  auto kv = bus_->OpenBucket({.name = "it_watch"});
  ASSERT_TRUE(kv.ok());
  ASSERT_TRUE((*kv)->Put("pods.a", "1").ok());
  ASSERT_TRUE((*kv)->Put("pods.gone", "x").ok());
  ASSERT_TRUE((*kv)->Delete("pods.gone").ok());
  std::mutex mu;
  std::vector<std::string> seen;
  auto w = (*kv)->Watch("pods.*", [&](const KvEntry& e) {
    std::lock_guard lock(mu);
    seen.push_back(e.key.empty() ? "<end>" : e.key + "=" + e.value + (e.deleted ? "(del)" : ""));
  });
  ASSERT_TRUE(w.ok()) << w.status();
  auto count = [&] {
    std::lock_guard lock(mu);
    return seen.size();
  };
  ASSERT_TRUE(Eventually([&] { return count() >= 2; }));
  ASSERT_TRUE((*kv)->Put("pods.b", "2").ok());
  ASSERT_TRUE((*kv)->Delete("pods.a").ok());
  ASSERT_TRUE(Eventually([&] { return count() >= 4; }));
  std::lock_guard lock(mu);
  EXPECT_THAT(seen, ::testing::ElementsAre("pods.a=1", "<end>", "pods.b=2", "pods.a=(del)"));
}

// Tests that PurgeDeletes removes the old delete markers from the bucket's stream (its message
// count drops), keeps younger markers with an age and live keys always, and that a purged key can
// be created again. nats.c measures a marker's age by its stream timestamp against local time.
TEST_F(NatsBusTest, KeyValuePurgeDeletes) {
  auto kv = bus_->OpenBucket({.name = "it_purge"});
  ASSERT_TRUE(kv.ok()) << kv.status();
  auto messages = [&]() -> int64_t {
    auto info = bus_->Request("$JS.API.STREAM.INFO.KV_it_purge", "", 2s);
    if (!info.ok()) return -1;
    const auto at = info->data.find("\"messages\":");
    return at == std::string::npos ? -1 : std::stoll(info->data.substr(at + 11));
  };
  ASSERT_TRUE((*kv)->Put("live", "v").ok());
  for (const char* k : {"old.1", "old.2"}) {
    ASSERT_TRUE((*kv)->Put(k, "v").ok());
    ASSERT_TRUE((*kv)->Delete(k).ok());
  }
  std::this_thread::sleep_for(1500ms);
  ASSERT_TRUE((*kv)->Put("young", "v").ok());
  ASSERT_TRUE((*kv)->Delete("young").ok());
  EXPECT_EQ(messages(), 4);  // one message per key (history 1): a value or a marker

  ASSERT_TRUE((*kv)->PurgeDeletes(1h).ok());  // every marker is younger
  EXPECT_EQ(messages(), 4);
  ASSERT_TRUE((*kv)->PurgeDeletes(1s).ok());
  EXPECT_EQ(messages(), 2);                   // live + young's marker
  ASSERT_TRUE((*kv)->PurgeDeletes(1s).ok());  // idempotent
  EXPECT_EQ(messages(), 2);
  ASSERT_TRUE((*kv)->PurgeDeletes(0ms).ok());  // 0: every marker
  EXPECT_EQ(messages(), 1);
  EXPECT_EQ((*kv)->Get("live")->value, "v");
  EXPECT_THAT(*(*kv)->Keys(), ::testing::ElementsAre("live"));
  EXPECT_TRUE((*kv)->Create("old.1", "again").ok());
  EXPECT_EQ((*kv)->PurgeDeletes(-1ms).code(), absl::StatusCode::kInvalidArgument);

  // A bucket without markers, and an empty one, purge cleanly too.
  ASSERT_TRUE((*kv)->PurgeDeletes(0ms).ok());
  auto empty = bus_->OpenBucket({.name = "it_purge_empty"});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE((*empty)->PurgeDeletes(0ms).ok());
}

// Tests that after nats-server is SIGKILLed and restarted on the same port the bus reconnects
// and the same subscription serves again, with the metrics telling the story.
TEST_F(NatsBusTest, ReconnectsAfterServerKill) {
  prometheus::Registry registry;
  auto bus = NewBus(&registry);
  auto sub = bus->Serve("it.re", "q", [](const Request&) { return Reply::Ok("up"); });
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE(bus->Request("it.re", "", 2s).ok());
  EXPECT_EQ(MetricValue(registry, "wisp_bus_connected"), 1);

  nats_->Kill();
  ASSERT_TRUE(Eventually([&] { return bus->State() == ConnectionState::kReconnecting; }));
  // The gauge follows from nats.c's disconnected callback, which runs on its own thread.
  EXPECT_TRUE(Eventually([&] { return MetricValue(registry, "wisp_bus_connected") == 0; }));
  EXPECT_EQ(bus->Request("it.re", "", 500ms).status().code(), absl::StatusCode::kUnavailable);

  ASSERT_TRUE(nats_->Restart().ok());
  ASSERT_TRUE(Eventually([&] { return bus->State() == ConnectionState::kConnected; }, 15s));
  ASSERT_TRUE(Eventually([&] { return bus->Request("it.re", "", 1s).ok(); }, 10s));
  EXPECT_TRUE(Eventually([&] { return MetricValue(registry, "wisp_bus_connected") == 1; }));
  EXPECT_EQ(MetricValue(registry, "wisp_bus_reconnects_total"), 1);
  // The other connection (bus_) also came back and can call it.
  ASSERT_TRUE(Eventually([&] { return bus_->Request("it.re", "", 1s).ok(); }, 10s));
}

// Tests that a durable pull consumer and a KV watch opened before a nats-server SIGKILL keep
// working after it restarts with the same store.
TEST_F(NatsBusTest, JetStreamAndWatchSurviveServerKill) {
  ASSERT_TRUE(bus_->Js()
                  .EnsureStream({.name = "IT_RE", .subjects = {"it.re.jobs.>"}, .work_queue = true})
                  .ok());
  auto consumer = bus_->Js().PullSubscribe("IT_RE", {.durable = "it-re", .ack_wait = 2s});
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  auto kv = bus_->OpenBucket({.name = "it_re_kv"});
  ASSERT_TRUE(kv.ok());
  std::mutex mu;
  std::vector<std::string> seen;
  auto w = (*kv)->Watch(">", [&](const KvEntry& e) {
    std::lock_guard lock(mu);
    seen.push_back(e.key.empty() ? "<end>" : e.key + "=" + e.value);
  });
  ASSERT_TRUE(w.ok());
  auto saw = [&](const std::string& what) {
    std::lock_guard lock(mu);
    return std::find(seen.begin(), seen.end(), what) != seen.end();
  };
  ASSERT_TRUE(Eventually([&] { return saw("<end>"); }));
  ASSERT_TRUE(bus_->Js().Publish("it.re.jobs.a", "before").ok());

  nats_->Kill();
  ASSERT_TRUE(nats_->Restart().ok());
  ASSERT_TRUE(Eventually([&] { return bus_->State() == ConnectionState::kConnected; }, 15s));

  // The message stored before the crash is still there for the same durable.
  std::vector<std::string> got;
  ASSERT_TRUE(Eventually(
      [&] {
        auto batch = (*consumer)->Fetch(5, 500ms);
        if (!batch.ok()) return false;
        for (auto& m : *batch) {
          got.push_back(m->msg().data);
          EXPECT_TRUE(m->Ack().ok());
        }
        return !got.empty();
      },
      15s));
  EXPECT_EQ(got.front(), "before");
  ASSERT_TRUE(Eventually([&] { return bus_->Js().Publish("it.re.jobs.a", "after").ok(); }, 10s));
  ASSERT_TRUE(Eventually(
      [&] {
        auto batch = (*consumer)->Fetch(1, 500ms);
        if (!batch.ok() || batch->empty()) return false;
        EXPECT_EQ((*batch)[0]->msg().data, "after");
        return (*batch)[0]->Ack().ok();
      },
      10s));

  ASSERT_TRUE(Eventually([&] { return (*kv)->Put("k", "after-restart").ok(); }, 10s));
  EXPECT_TRUE(Eventually([&] { return saw("k=after-restart"); }, 10s));
}

// Tests that Drain lets an in-flight request finish and answer, then closes.
TEST_F(NatsBusTest, DrainFinishesInFlight) {
  auto server = NewBus();
  std::atomic<bool> running{false};
  auto sub = server->Serve("it.drain", "", [&](const Request& r) {
    if (r.msg.data == "warm") return Reply::Ok("");
    running = true;
    std::this_thread::sleep_for(300ms);
    return Reply::Ok("finished");
  });
  ASSERT_TRUE(sub.ok());
  // The subscription is live on the server once a request gets through.
  ASSERT_TRUE(Eventually([&] { return bus_->Request("it.drain", "warm", 1s).ok(); }));
  auto call = std::async(std::launch::async, [&] { return bus_->Request("it.drain", "", 3s); });
  ASSERT_TRUE(Eventually([&] { return running.load(); }));
  EXPECT_TRUE(server->Drain(5s).ok());
  auto reply = call.get();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->data, "finished");
  EXPECT_EQ(server->State(), ConnectionState::kClosed);
}

// Tests that Connect fails with Unavailable when nothing listens, and bad options are rejected.
TEST(NatsBusConnectTest, FailsClearly) {
  NatsBusOptions o;
  o.servers = {"nats://127.0.0.1:" + std::to_string(integration::FreePort())};
  o.connect_timeout = 300ms;
  EXPECT_EQ(NatsBus::Connect(o).status().code(), absl::StatusCode::kUnavailable);
  o.token = "t";
  o.user = "u";
  auto bad = NatsBus::Connect(o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  o = NatsBusOptions{};
  o.servers = {};
  EXPECT_EQ(NatsBus::Connect(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// Tests a 3-node cluster: the bus knows all URLs and keeps serving when its server dies.
TEST(NatsClusterTest, FailsOverToAnotherNode) {
  auto cluster = integration::NatsCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  NatsBusOptions o;
  o.servers = (*cluster)->urls();
  o.reconnect_wait = 50ms;
  auto server_bus = NatsBus::Connect(o);
  auto client_bus = NatsBus::Connect(o);
  ASSERT_TRUE(server_bus.ok() && client_bus.ok());
  auto sub =
      (*server_bus)->Serve("it.cluster", "q", [](const Request&) { return Reply::Ok("ok"); });
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE(Eventually([&] { return (*client_bus)->Request("it.cluster", "", 1s).ok(); }));
  const std::string url = (*server_bus)->ConnectedUrl();
  for (int i = 0; i < (*cluster)->size(); ++i) {
    if ((*cluster)->node(i).url() == url) (*cluster)->node(i).Kill();
  }
  ASSERT_TRUE(Eventually(
      [&] {
        return (*server_bus)->ConnectedUrl() != url &&
               (*client_bus)->Request("it.cluster", "", 1s).ok();
      },
      15s));
}

}  // namespace
}  // namespace wisp::bus
