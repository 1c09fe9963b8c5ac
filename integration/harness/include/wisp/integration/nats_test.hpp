#pragma once
// NatsBus clients for integration tests, and NatsTest, the fixture of the tests that talk to one
// real nats-server of their own. One place for how a test connects, so the tests differ only in
// what they check. Target wisp::integration_nats (header only: the harness plus wisp::bus).
//
// Contract:
//   - TestBusOptions(): servers and connection name, and quick reconnects (50 ms doubling up to
//     500 ms) so a test that kills and restarts the server waits little; everything else is
//     NatsBusOptions' default. A test adds credentials, TLS or threads on the copy it gets.
//   - ConnectTestBus() fails the running test (EXPECT, naming the connection and the status) and
//     returns nullptr when the connection cannot be made; callers ASSERT_NE(bus, nullptr).
//   - TestResponders serves the three answers the request tests ask for, under a prefix:
//     <prefix>echo answers "echo:<data>" with headers X-Rid (the request id) and X-Timeout (the
//     caller's budget in ms); <prefix>err answers PermissionDenied("not you"); <prefix>slow
//     answers "late" once Release() was called (or after 5 s), to test timeouts.
//   - OkRequests() reads a client's wisp_bus_client_requests_total{subject, code="OK"} from the
//     registry it was connected with.
//   - NatsTest::SetUp() starts a nats-server (JetStream on) on a free port and connects bus_ as
//     "it"; a failure there stops the test. bus_ is closed before the server goes.
//
// Example:
//   class MyTest : public NatsTest {};
//   TEST_F(MyTest, Echo) {
//     auto other = NewBus();            // a second connection, like bus_
//     nats_->Kill();                    // and back with nats_->Restart()
//   }
//   TestResponders responders;
//   ASSERT_TRUE(responders.Serve(*bus_, "it.a").ok());  // it.aecho, it.aerr, it.aslow
//   auto client = ConnectTestBus(TestBusOptions({stack->nats().url()}, "upload-test"));
//   ASSERT_NE(client, nullptr);
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/integration/harness.hpp"

namespace wisp::integration {

inline bus::NatsBusOptions TestBusOptions(std::vector<std::string> servers, std::string name) {
  bus::NatsBusOptions o;
  o.servers = std::move(servers);
  o.name = std::move(name);
  o.reconnect_wait = std::chrono::milliseconds(50);
  o.reconnect_wait_max = std::chrono::milliseconds(500);
  return o;
}

inline std::unique_ptr<bus::NatsBus> ConnectTestBus(const bus::NatsBusOptions& options) {
  auto bus = bus::NatsBus::Connect(options);
  EXPECT_TRUE(bus.ok()) << options.name << ": " << bus.status();
  return bus.ok() ? *std::move(bus) : nullptr;
}

class TestResponders {
 public:
  absl::Status Serve(bus::Bus& bus, const std::string& prefix) {
    WISP_ASSIGN_OR_RETURN(auto echo, bus.Serve(prefix + "echo", "", [](const bus::Request& r) {
      bus::Reply reply = bus::Reply::Ok("echo:" + r.msg.data);
      reply.headers["X-Rid"] = r.request_id;
      reply.headers["X-Timeout"] = std::string(r.msg.Header(bus::kHeaderTimeoutMs));
      return reply;
    }));
    WISP_ASSIGN_OR_RETURN(auto err, bus.Serve(prefix + "err", "", [](const bus::Request&) {
      return bus::Reply::Error(absl::PermissionDeniedError("not you"));
    }));
    WISP_ASSIGN_OR_RETURN(
        auto slow, bus.Serve(prefix + "slow", "", [released = released_](const bus::Request&) {
          released.wait_for(std::chrono::seconds(5));
          return bus::Reply::Ok("late");
        }));
    subs_.push_back(std::move(echo));
    subs_.push_back(std::move(err));
    subs_.push_back(std::move(slow));
    return absl::OkStatus();
  }
  // Lets <prefix>slow answer; its late reply finds no pending request.
  void Release() { release_.set_value(); }

 private:
  std::promise<void> release_;
  std::shared_future<void> released_ = release_.get_future().share();
  std::vector<bus::SubscriptionPtr> subs_;  // last: unsubscribed before the promise goes
};

inline double OkRequests(prometheus::Registry& registry, const std::string& subject) {
  double ok = 0;
  for (const auto& f : registry.Collect()) {
    if (f.name != "wisp_bus_client_requests_total") continue;
    for (const auto& m : f.metric) {
      bool subject_ok = false, code_ok = false;
      for (const auto& l : m.label) {
        subject_ok |= l.name == "subject" && l.value == subject;
        code_ok |= l.name == "code" && l.value == "OK";
      }
      if (subject_ok && code_ok) ok += m.counter.value;
    }
  }
  return ok;
}

class NatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = NatsServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    nats_ = *std::move(server);
    options_ = TestBusOptions({nats_->url()}, "it");
    bus_ = ConnectTestBus(options_);
    ASSERT_NE(bus_, nullptr);
  }

  // Another connection like bus_, with `registry` for its metrics and `threads` handler threads
  // per served subject.
  std::unique_ptr<bus::NatsBus> NewBus(prometheus::Registry* registry = nullptr, int threads = 1,
                                       std::string name = "it") {
    bus::NatsBusOptions o = options_;
    o.registry = registry;
    o.serve_threads = threads;
    o.name = std::move(name);
    return ConnectTestBus(o);
  }

  bus::NatsBusOptions options_;  // what bus_ connected with
  std::unique_ptr<NatsServer> nats_;
  std::unique_ptr<bus::NatsBus> bus_;
};

}  // namespace wisp::integration
