// The event-loop connections against a real nats-server: LoopRequester's, driven by asio
// io_contexts on their own threads as the gateway's HTTPS I/O threads drive them, and the ones
// NatsBus::ServeOnLoops serves a subject on (wisp-policy's --serve-loops).
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "wisp/bus/loop_requester.hpp"
#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/service.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/nats_test.hpp"

namespace wisp::bus {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using integration::Eventually;

// A Requester that counts what reaches it and passes it on: the fallback, so a test sees which
// requests did not go over a loop connection.
class CountingRequester final : public Requester {
 public:
  explicit CountingRequester(Requester& next) : next_(next) {}
  absl::StatusOr<Message> Request(std::string_view subject, std::string_view data,
                                  std::chrono::milliseconds timeout,
                                  const Headers& headers) override {
    ++sync;
    return next_.Request(subject, data, timeout, headers);
  }
  void RequestAsync(std::string_view subject, std::string_view data,
                    std::chrono::milliseconds timeout, const Headers& headers,
                    ReplyCallback done) override {
    ++async;
    next_.RequestAsync(subject, data, timeout, headers, std::move(done));
  }
  std::atomic<int> sync{0};
  std::atomic<int> async{0};

 private:
  Requester& next_;
};

// io_contexts each run by a thread of its own, like http::Server's I/O threads.
class Loops {
 public:
  explicit Loops(int n) {
    for (int i = 0; i < n; ++i) iocs_.push_back(std::make_unique<asio::io_context>(1));
    for (auto& ioc : iocs_) {
      work_.push_back(asio::make_work_guard(*ioc));
      threads_.emplace_back([ioc = ioc.get()] { ioc->run(); });
    }
  }
  ~Loops() { Stop(); }
  void Stop() {
    work_.clear();
    for (auto& ioc : iocs_) ioc->stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  std::vector<asio::io_context*> contexts() {
    std::vector<asio::io_context*> out;
    for (auto& ioc : iocs_) out.push_back(ioc.get());
    return out;
  }
  asio::io_context& operator[](size_t i) { return *iocs_[i]; }

 private:
  std::vector<std::unique_ptr<asio::io_context>> iocs_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
};

struct Answer {
  absl::StatusOr<Message> reply;
  bool on_loop = false;  // the callback ran on the loop thread that sent the request
};

// Sends one RequestAsync from `ioc`'s thread and waits for its answer.
Answer CallFrom(asio::io_context& ioc, Requester& req, std::string subject, std::string data,
                std::chrono::milliseconds timeout, Headers headers = {}) {
  auto answer = std::make_shared<std::promise<Answer>>();
  auto future = answer->get_future();
  asio::post(ioc, [&, answer, subject, data, timeout, headers] {
    req.RequestAsync(subject, data, timeout, headers, [answer, &ioc](absl::StatusOr<Message> r) {
      answer->set_value({std::move(r), ioc.get_executor().running_in_this_thread()});
    });
  });
  return future.get();
}

class LoopRequesterTest : public integration::NatsTest {
 protected:
  void SetUp() override {
    integration::NatsTest::SetUp();
    if (HasFatalFailure()) return;
    fallback_ = std::make_unique<CountingRequester>(*bus_);
  }

  std::unique_ptr<LoopRequester> Connect(Loops& loops, prometheus::Registry* registry = nullptr) {
    NatsBusOptions o = options_;
    o.registry = registry;
    auto r = LoopRequester::Connect(o, loops.contexts(), *fallback_);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : nullptr;
  }

  // A bus of its own, for the serving side of a test.
  std::unique_ptr<NatsBus> ServerBus(const std::string& name) {
    return NewBus(/*registry=*/nullptr, /*threads=*/1, name);
  }

  std::unique_ptr<CountingRequester> fallback_;
};

// Tests replies, headers, micro errors, no responders and the timeout over the loop connections,
// each answered on the thread that asked; and that other threads and Request use the fallback.
TEST_F(LoopRequesterTest, AnswersOnTheLoopThatAsked) {
  prometheus::Registry registry;
  Loops loops(2);
  auto req = Connect(loops, &registry);
  ASSERT_NE(req, nullptr);
  integration::TestResponders responders;
  absl::Status served = responders.Serve(*bus_, "it.l");  // it.lecho, it.lerr, it.lslow
  ASSERT_TRUE(served.ok()) << served;
  ASSERT_TRUE(Eventually([&] { return bus_->Request("it.lecho", "", 1s).ok(); }));
  const int sync_before = fallback_->sync.load();

  for (size_t i = 0; i < 2; ++i) {
    Answer a = CallFrom(loops[i], *req, "it.lecho", "hi", 2s,
                        {{std::string(kHeaderRequestId), "r-" + std::to_string(i)}});
    ASSERT_TRUE(a.reply.ok()) << a.reply.status();
    EXPECT_TRUE(a.on_loop);
    EXPECT_EQ(a.reply->data, "echo:hi");
    EXPECT_EQ(a.reply->Header("X-Rid"), "r-" + std::to_string(i));
    EXPECT_EQ(a.reply->Header("X-Timeout"), "2000");
  }
  Answer denied = CallFrom(loops[0], *req, "it.lerr", "", 2s);
  EXPECT_EQ(denied.reply.status(), absl::PermissionDeniedError("not you"));
  EXPECT_TRUE(denied.on_loop);
  Answer nobody = CallFrom(loops[1], *req, "it.lnobody", "", 2s);
  EXPECT_EQ(nobody.reply.status().code(), absl::StatusCode::kUnavailable) << nobody.reply.status();

  const auto start = std::chrono::steady_clock::now();
  Answer late = CallFrom(loops[0], *req, "it.lslow", "", 200ms);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(late.reply.status().code(), absl::StatusCode::kDeadlineExceeded) << late.reply.status();
  EXPECT_TRUE(late.on_loop);
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 2s);
  responders.Release();  // its late reply finds nothing pending
  EXPECT_EQ(fallback_->async.load(), 0) << "loop threads' requests went to the fallback";

  // Many in flight from both loops at once, each answered once with its own reply.
  constexpr int kCalls = 500;
  std::atomic<int> answered{0}, wrong{0};
  std::promise<void> all;
  for (int i = 0; i < kCalls; ++i) {
    asio::io_context& ioc = loops[i % 2];
    asio::post(ioc, [&, i] {
      req->RequestAsync("it.lecho", std::to_string(i), 5s, {}, [&, i](absl::StatusOr<Message> r) {
        if (!r.ok() || r->data != "echo:" + std::to_string(i) ||
            !ioc.get_executor().running_in_this_thread()) {
          ++wrong;
        }
        if (++answered == kCalls) all.set_value();
      });
    });
  }
  ASSERT_EQ(all.get_future().wait_for(10s), std::future_status::ready) << answered.load();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(fallback_->async.load(), 0);

  // Not a loop thread: the fallback (NatsBus) answers.
  std::promise<absl::StatusOr<Message>> off;
  req->RequestAsync("it.lecho", "off", 2s, {},
                    [&](absl::StatusOr<Message> r) { off.set_value(std::move(r)); });
  auto off_reply = off.get_future().get();
  ASSERT_TRUE(off_reply.ok()) << off_reply.status();
  EXPECT_EQ(off_reply->data, "echo:off");
  EXPECT_EQ(fallback_->async.load(), 1);
  // Synchronous requests always use the fallback.
  ASSERT_TRUE(req->Request("it.lecho", "sync", 2s).ok());
  EXPECT_EQ(fallback_->sync.load(), sync_before + 1);

  EXPECT_EQ(integration::OkRequests(registry, "it.lecho"), kCalls + 2);
}

// Tests that a loop connection survives a nats-server SIGKILL: while it is down its thread's
// requests go to the fallback (which fails fast too), and once the server is back they go over
// the loop connection again.
TEST_F(LoopRequesterTest, ReconnectsAfterServerKill) {
  Loops loops(1);
  auto req = Connect(loops);
  ASSERT_NE(req, nullptr);
  auto sub = bus_->Serve("it.lre", "q", [](const Request&) { return Reply::Ok("up"); });
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE(Eventually([&] { return bus_->Request("it.lre", "", 1s).ok(); }));
  ASSERT_TRUE(CallFrom(loops[0], *req, "it.lre", "", 2s).reply.ok());
  EXPECT_EQ(fallback_->async.load(), 0);

  nats_->Kill();
  Answer down = CallFrom(loops[0], *req, "it.lre", "", 500ms);
  EXPECT_FALSE(down.reply.ok());
  ASSERT_TRUE(nats_->Restart().ok());
  // Both connections come back; then the loop connection answers without the fallback.
  ASSERT_TRUE(Eventually([&] { return bus_->Request("it.lre", "", 1s).ok(); }, 15s));
  ASSERT_TRUE(Eventually(
      [&] {
        const int before = fallback_->async.load();
        Answer a = CallFrom(loops[0], *req, "it.lre", "", 1s);
        return a.reply.ok() && a.on_loop && fallback_->async.load() == before;
      },
      15s));
}

// Tests that Close answers the requests still pending with Unavailable, once, both while the
// loops run and after they have stopped.
TEST_F(LoopRequesterTest, CloseFailsPendingRequests) {
  std::promise<void> release;
  auto released = release.get_future().share();
  auto hang = bus_->Serve("it.lhang", "", [released](const Request&) {
    released.wait_for(5s);
    return Reply::Ok("late");
  });
  ASSERT_TRUE(hang.ok());
  ASSERT_TRUE(Eventually([&] {
    return bus_->Request("it.lnone", "", 1s).status().code() == absl::StatusCode::kUnavailable;
  }));
  for (bool stop_loops_first : {false, true}) {
    SCOPED_TRACE(stop_loops_first ? "loops stopped first" : "loops running");
    Loops loops(2);
    auto req = Connect(loops);
    ASSERT_NE(req, nullptr);
    auto calls = std::make_shared<std::atomic<int>>(0);
    auto answer = std::make_shared<std::promise<absl::StatusOr<Message>>>();
    std::promise<void> sent;
    asio::post(loops[1], [r = req.get(), &sent, calls, answer] {
      r->RequestAsync("it.lhang", "", 10s, {}, [calls, answer](absl::StatusOr<Message> reply) {
        if (calls->fetch_add(1) == 0) answer->set_value(std::move(reply));
      });
      sent.set_value();
    });
    sent.get_future().wait();
    std::this_thread::sleep_for(200ms);  // the request reaches the handler
    if (stop_loops_first) loops.Stop();
    const auto start = std::chrono::steady_clock::now();
    req.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
    auto r = answer->get_future().get();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
    EXPECT_EQ(calls->load(), 1);
  }
  release.set_value();
}

// Tests that with retry_on_failed_connect a LoopRequester starts while NATS is down, uses the
// fallback meanwhile, and takes over once its connections are up.
TEST_F(LoopRequesterTest, StartsBeforeNats) {
  nats_->Kill();
  Loops loops(1);
  NatsBusOptions o = options_;
  o.retry_on_failed_connect = true;
  auto req = LoopRequester::Connect(o, loops.contexts(), *fallback_);
  ASSERT_TRUE(req.ok()) << req.status();
  Answer early = CallFrom(loops[0], **req, "it.lstart", "", 300ms);
  EXPECT_FALSE(early.reply.ok());
  EXPECT_EQ(fallback_->async.load(), 1);
  ASSERT_TRUE(nats_->Restart().ok());
  auto sub = bus_->Serve("it.lstart", "", [](const Request&) { return Reply::Ok("up"); });
  ASSERT_TRUE(Eventually([&] { return sub.ok() && bus_->Request("it.lstart", "", 1s).ok(); }, 15s));
  ASSERT_TRUE(Eventually(
      [&] {
        const int before = fallback_->async.load();
        Answer a = CallFrom(loops[0], **req, "it.lstart", "", 1s);
        return a.reply.ok() && fallback_->async.load() == before;
      },
      15s));
}

// ---- ServeOnLoops ----

// Tests requests served on two event-loop connections: replies, request ids, micro errors and
// the deadline header reach the handler as Serve gives them; 400 requests in flight are each
// answered once, by at most two threads that are neither the caller's nor nats.c's; and a
// bus::Service endpoint on loops counts them in STATS.
TEST_F(LoopRequesterTest, ServeOnLoopsAnswers) {
  std::mutex mu;
  std::set<std::thread::id> threads;
  auto sub = bus_->ServeOnLoops(
      "it.sl", "q",
      [&](const Request& r) {
        {
          std::lock_guard lock(mu);
          threads.insert(std::this_thread::get_id());
        }
        if (r.msg.data == "deny") return Reply::Error(absl::PermissionDeniedError("not you"));
        Reply reply = Reply::Ok("served:" + r.msg.data);
        reply.headers["X-Rid"] = r.request_id;
        reply.headers["X-Timeout"] = std::string(r.msg.Header(kHeaderTimeoutMs));
        return reply;
      },
      2);
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_TRUE(Eventually([&] { return bus_->Request("it.sl", "x", 1s).ok(); }));

  auto one = bus_->Request("it.sl", "hi", 2s, {{std::string(kHeaderRequestId), "r-1"}});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->data, "served:hi");
  EXPECT_EQ(one->Header("X-Rid"), "r-1");
  EXPECT_EQ(one->Header("X-Timeout"), "2000");
  EXPECT_EQ(bus_->Request("it.sl", "deny", 2s).status(), absl::PermissionDeniedError("not you"));

  constexpr int kCalls = 400;
  std::atomic<int> answered{0}, wrong{0};
  std::promise<void> all;
  for (int i = 0; i < kCalls; ++i) {
    bus_->RequestAsync("it.sl", std::to_string(i), 5s, {}, [&, i](absl::StatusOr<Message> r) {
      if (!r.ok() || r->data != "served:" + std::to_string(i)) ++wrong;
      if (++answered == kCalls) all.set_value();
    });
  }
  ASSERT_EQ(all.get_future().wait_for(10s), std::future_status::ready) << answered.load();
  EXPECT_EQ(wrong.load(), 0);
  {
    std::lock_guard lock(mu);
    EXPECT_LE(threads.size(), 2u);
    EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
  }

  auto svc = Service::Start(*bus_, {.name = "it-loops", .version = "1.0.0"});
  ASSERT_TRUE(svc.ok()) << svc.status();
  ASSERT_TRUE((*svc)
                  ->AddEndpoint("work", "it.slsvc", "",
                                [](const Request&) { return Reply::Ok("done"); },
                                {.loop_connections = 2})
                  .ok());
  ASSERT_TRUE(Eventually([&] { return bus_->Request("it.slsvc", "", 1s).ok(); }));
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(bus_->Request("it.slsvc", "", 2s).ok());
  const std::string stats = (*svc)->StatsJson();
  EXPECT_NE(stats.find("\"num_requests\":10"), std::string::npos) << stats;
}

// Tests that draining a subject served on loops answers every request the server had sent
// before the drain (none is dropped), then stops serving; through Subscription::Drain and
// through NatsBus::Drain.
TEST_F(LoopRequesterTest, ServeOnLoopsDrainsWithoutLoss) {
  for (bool whole_bus : {false, true}) {
    SCOPED_TRACE(whole_bus ? "NatsBus::Drain" : "Subscription::Drain");
    auto server_bus = ServerBus("it-drain");
    ASSERT_NE(server_bus, nullptr);
    auto sub = server_bus->ServeOnLoops(
        "it.sldrain", "q",
        [](const Request& r) {
          std::this_thread::sleep_for(20ms);
          return Reply::Ok("done:" + r.msg.data);
        },
        2);
    ASSERT_TRUE(sub.ok()) << sub.status();
    ASSERT_TRUE(Eventually([&] { return bus_->Request("it.sldrain", "warm", 2s).ok(); }));

    constexpr int kCalls = 30;  // about 0.3 s of work per connection
    std::atomic<int> answered{0}, failed{0};
    std::promise<void> all;
    for (int i = 0; i < kCalls; ++i) {
      bus_->RequestAsync("it.sldrain", std::to_string(i), 10s, {},
                         [&, i](absl::StatusOr<Message> r) {
                           if (!r.ok() || r->data != "done:" + std::to_string(i)) ++failed;
                           if (++answered == kCalls) all.set_value();
                         });
    }
    std::this_thread::sleep_for(50ms);  // the requests reach the server and the loops
    const absl::Status drained = whole_bus ? server_bus->Drain(10s) : (*sub)->Drain();
    EXPECT_TRUE(drained.ok()) << drained;
    ASSERT_EQ(all.get_future().wait_for(10s), std::future_status::ready) << answered.load();
    EXPECT_EQ(failed.load(), 0);
    // Nobody serves the subject any more.
    EXPECT_EQ(bus_->Request("it.sldrain", "after", 1s).status().code(),
              absl::StatusCode::kUnavailable);
  }
}

// Tests that connections serving on loops come back after a nats-server SIGKILL and serve again.
TEST_F(LoopRequesterTest, ServeOnLoopsReconnects) {
  auto server_bus = ServerBus("it-serve-re");
  ASSERT_NE(server_bus, nullptr);
  auto sub = server_bus->ServeOnLoops(
      "it.slre", "q", [](const Request&) { return Reply::Ok("up"); }, 2);
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_TRUE(Eventually([&] { return bus_->Request("it.slre", "", 1s).ok(); }));
  nats_->Kill();
  EXPECT_FALSE(bus_->Request("it.slre", "", 300ms).ok());
  ASSERT_TRUE(nats_->Restart().ok());
  ASSERT_TRUE(Eventually([&] { return bus_->Request("it.slre", "", 1s).ok(); }, 15s));
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(bus_->Request("it.slre", "", 2s).ok());
}

}  // namespace
}  // namespace wisp::bus
