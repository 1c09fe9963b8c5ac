// Faults: a 3-node NATS cluster on loopback with JetStream R3 KV; one node is SIGKILLed in the
// middle of a steady loop of KV writes and bus requests made through NatsBus with every server URL.
//
// What it proves:
//   - no request and no KV write keeps failing for longer than the retry window (kRetryWindow):
//     clients fail over to the surviving nodes and the R3 bucket elects a new leader;
//   - no acknowledged KV write is lost: every Put that returned a revision is read back with its
//     value after the kill, and again after the killed node has restarted and caught up.
// The measured worst outage per operation is printed (and recorded as a test property).
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/integration/harness.hpp"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;
using bus::NatsBus;
using bus::NatsBusOptions;
using Clock = std::chrono::steady_clock;

constexpr auto kRetryWindow = 10s;  // the longest a caller retries before it reports a failure
constexpr auto kLoadBefore = 2s;    // steady load before the kill
constexpr auto kLoadAfter = 6s;     // and after it

std::unique_ptr<NatsBus> Connect(const std::vector<std::string>& urls, const std::string& name) {
  NatsBusOptions o;
  o.servers = urls;
  o.name = name;
  o.reconnect_wait = 50ms;
  o.reconnect_wait_max = 500ms;
  o.ping_interval = 1000ms;
  o.jetstream_timeout = 2000ms;
  o.serve_threads = 2;
  auto b = NatsBus::Connect(o);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

// Runs `op` until it succeeds or kRetryWindow passes; returns the time spent failing, or nullopt
// when the window ran out.
template <typename Op>
std::optional<std::chrono::milliseconds> WithRetry(Op op) {
  const auto start = Clock::now();
  while (true) {
    if (op()) return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (Clock::now() - start > kRetryWindow) return std::nullopt;
    std::this_thread::sleep_for(20ms);
  }
}

int NodeOf(NatsCluster& cluster, const std::string& url) {
  for (int i = 0; i < cluster.size(); ++i) {
    if (cluster.node(i).url() == url) return i;
  }
  return -1;
}

// Tests that killing one node of three under load loses no acknowledged KV write and fails no
// request or write beyond the retry window.
TEST(FaultsClusterTest, NodeKilledUnderLoad) {
  auto started = NatsCluster::Start(3);
  ASSERT_TRUE(started.ok()) << started.status();
  NatsCluster& cluster = **started;
  const auto urls = cluster.urls();

  // Two replicas of a service in one queue group, and a client, all knowing every URL.
  auto replica_a = Connect(urls, "replica-a");
  auto replica_b = Connect(urls, "replica-b");
  auto client = Connect(urls, "client");
  ASSERT_TRUE(replica_a && replica_b && client);
  std::atomic<int> served{0};
  auto handler = [&](const bus::Request& r) {
    served++;
    return bus::Reply::Ok("re:" + r.msg.data);
  };
  auto sub_a = replica_a->Serve("it.faults.echo", "it-faults", handler);
  auto sub_b = replica_b->Serve("it.faults.echo", "it-faults", handler);
  ASSERT_TRUE(sub_a.ok() && sub_b.ok());

  std::unique_ptr<bus::KeyValue> kv;
  ASSERT_TRUE(WithRetry([&] {
    auto opened = client->OpenBucket({.name = "it_faults", .history = 1, .replicas = 3});
    if (!opened.ok()) return false;
    kv = *std::move(opened);
    return true;
  })) << "R3 bucket could not be created";

  std::map<std::string, std::string> acked;  // key -> value of every acknowledged Put
  std::chrono::milliseconds worst_put{0}, worst_request{0};
  int puts = 0, requests = 0, put_retries = 0, request_retries = 0;
  bool killed = false;
  int killed_node = -1;
  const auto begin = Clock::now();
  for (int i = 0; Clock::now() - begin < kLoadBefore + kLoadAfter; ++i) {
    if (!killed && Clock::now() - begin >= kLoadBefore) {
      // Kill the node the client talks to: its connection, and possibly the stream leader, go.
      killed_node = NodeOf(cluster, client->ConnectedUrl());
      ASSERT_GE(killed_node, 0) << client->ConnectedUrl();
      cluster.node(killed_node).Kill();
      killed = true;
    }
    const std::string key = "k" + std::to_string(i % 200);
    const std::string value = "v" + std::to_string(i);
    int attempts = 0;
    auto put_time = WithRetry([&] {
      attempts++;
      return kv->Put(key, value).ok();
    });
    ASSERT_TRUE(put_time.has_value())
        << "Put " << key << " failed for longer than the retry window";
    put_retries += attempts - 1;
    acked[key] = value;
    worst_put = std::max(worst_put, *put_time);
    puts++;

    attempts = 0;
    auto req_time = WithRetry([&] {
      attempts++;
      auto reply = client->Request("it.faults.echo", value, 1s);
      return reply.ok() && reply->data == "re:" + value;
    });
    ASSERT_TRUE(req_time.has_value()) << "request failed for longer than the retry window";
    request_retries += attempts - 1;
    worst_request = std::max(worst_request, *req_time);
    requests++;
  }
  ASSERT_TRUE(killed);
  EXPECT_NE(client->ConnectedUrl(), cluster.node(killed_node).url()) << "client did not fail over";
  std::printf(
      "[ faults   ] %d puts (%d retries, worst outage %lld ms), %d requests (%d retries, "
      "worst outage %lld ms)\n",
      puts, put_retries, static_cast<long long>(worst_put.count()), requests, request_retries,
      static_cast<long long>(worst_request.count()));
  ::testing::Test::RecordProperty("worst_put_outage_ms", static_cast<int>(worst_put.count()));
  ::testing::Test::RecordProperty("worst_request_outage_ms",
                                  static_cast<int>(worst_request.count()));

  // Every acknowledged write is there, read through a fresh connection to the survivors.
  auto check = [&](NatsBus& reader, const std::string& when) {
    std::unique_ptr<bus::KeyValue> rkv;
    ASSERT_TRUE(WithRetry([&] {
      auto opened = reader.OpenBucket({.name = "it_faults", .history = 1, .replicas = 3});
      if (!opened.ok()) return false;
      rkv = *std::move(opened);
      return true;
    }));
    int lost = 0;
    for (const auto& [key, value] : acked) {
      std::string got;
      ASSERT_TRUE(WithRetry([&] {
        auto e = rkv->Get(key);
        if (!e.ok()) return false;
        got = e->value;
        return true;
      })) << when
          << ": " << key << " unreadable";
      if (got != value) {
        ++lost;
        ADD_FAILURE() << when << ": " << key << " = " << got << ", acknowledged " << value;
      }
    }
    EXPECT_EQ(lost, 0) << when;
  };
  std::vector<std::string> survivors;
  for (int i = 0; i < cluster.size(); ++i) {
    if (i != killed_node) survivors.push_back(cluster.node(i).url());
  }
  auto reader = Connect(survivors, "reader");
  ASSERT_NE(reader, nullptr);
  check(*reader, "after the kill");

  // The killed node comes back with its store; once it has caught up it serves the same data.
  ASSERT_TRUE(cluster.node(killed_node).Restart().ok());
  ASSERT_TRUE(cluster.node(killed_node).process()->WaitForLog("JetStream cluster", 20s).ok());
  auto rejoined = Connect({cluster.node(killed_node).url()}, "rejoined");
  ASSERT_NE(rejoined, nullptr);
  check(*rejoined, "after the restart");
  EXPECT_GT(served.load(), 0);
}

}  // namespace
}  // namespace wisp::integration
