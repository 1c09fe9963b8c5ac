// Faults: a 3-node NATS cluster on loopback with JetStream R3 KV, its routes over mutually
// verified TLS (a test CA's certificate, as the chart's nats.routeTls runs them); one node is
// SIGKILLed in the middle of a steady loop of KV writes and bus requests made through NatsBus with
// every server URL.
//
// What it proves:
//   - the cluster forms over TLS routes only: every route port demands TLS in its INFO, every node
//     has both routes, and JetStream R3 replicates across them; a server that routes in plain TCP,
//     or with a certificate of another CA, gets no route and sees none of the cluster's traffic;
//   - no request and no KV write keeps failing for longer than the retry window (kRetryWindow):
//     clients fail over to the surviving nodes and the R3 bucket elects a new leader;
//   - no acknowledged KV write is lost: every Put that returned a revision is read back with its
//     value after the kill, and again after the killed node has restarted and caught up.
// The measured worst outage per operation is printed (and recorded as a test property).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
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

// A test CA in `dir` and one route certificate that serves every node on loopback: IP:127.0.0.1,
// serverAuth and clientAuth (each node dials routes and is dialled).
absl::StatusOr<RouteTls> MakeRouteTls(const std::string& dir, const std::string& ca_name) {
  WISP_ASSIGN_OR_RETURN(TestCa ca, TestCa::Create(dir, ca_name));
  const std::string cert = ca_name + "-route";
  WISP_RETURN_IF_ERROR(ca.Issue(cert,
                                "subjectAltName=IP:127.0.0.1\n"
                                "extendedKeyUsage=serverAuth,clientAuth\n"));
  return RouteTls{
      .cert_file = ca.cert_file(cert), .key_file = ca.key_file(cert), .ca_file = ca.ca_file()};
}

// What a plain-TCP client reads first from a route port in 3 s (a plain route listener sends its
// INFO line at once; a TLS one waits for a TLS handshake).
std::string PlainRouteGreeting(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  timeval tv{.tv_sec = 3, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::string line;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    char c;
    while (line.size() < 65536 && ::recv(fd, &c, 1, 0) == 1 && c != '\n') line += c;
  }
  ::close(fd);
  return line;
}

// The INFO line of a route port read through a TLS handshake (openssl s_client) that presents
// `tls`'s certificate and verifies the server's against its CA; "" when the handshake fails.
std::string TlsRouteGreeting(int port, const RouteTls& tls) {
  const std::string cmd =
      "sleep 1 | timeout 10 openssl s_client -connect 127.0.0.1:" + std::to_string(port) +
      " -cert '" + tls.cert_file + "' -key '" + tls.key_file + "' -CAfile '" + tls.ca_file +
      "' -verify_return_error -quiet -no_ign_eof 2>/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  ::pclose(pipe);
  return out.substr(0, out.find('\n'));
}

// num_routes from the node's /routez, or -1 when the monitoring port does not answer.
int RouteCount(int monitor_port) {
  auto r = HttpGet("127.0.0.1", monitor_port, "/routez", 2s);
  if (!r.ok() || r->status != 200) return -1;
  const auto at = r->body.find("\"num_routes\":");
  if (at == std::string::npos) return -1;
  return std::atoi(r->body.c_str() + at + std::string_view("\"num_routes\":").size());
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
  TempDir pki("wisp-route-tls");
  auto route_tls = MakeRouteTls(pki.path(), "route-ca");
  ASSERT_TRUE(route_tls.ok()) << route_tls.status();
  auto started = NatsCluster::Start({.nodes = 3, .route_tls = *route_tls});
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

// Tests that the cluster's routes are TLS only, verified both ways: the cluster forms and
// replicates an R3 bucket over them, and servers routing in plain TCP or with another CA's
// certificate are left out.
TEST(FaultsClusterTest, RoutesRequireTlsFromTheClusterCa) {
  TempDir pki("wisp-route-tls");
  auto route_tls = MakeRouteTls(pki.path(), "route-ca");
  ASSERT_TRUE(route_tls.ok()) << route_tls.status();
  auto rogue_tls = MakeRouteTls(pki.path(), "rogue-ca");
  ASSERT_TRUE(rogue_tls.ok()) << rogue_tls.status();
  auto started = NatsCluster::Start({.nodes = 3, .route_tls = *route_tls});
  ASSERT_TRUE(started.ok()) << started.status();
  NatsCluster& cluster = **started;

  for (int i = 0; i < cluster.size(); ++i) {
    SCOPED_TRACE("node " + std::to_string(i));
    // The route port speaks NATS only inside TLS, with the cluster CA's certificate.
    EXPECT_EQ(PlainRouteGreeting(cluster.node(i).cluster_port()).find("INFO"), std::string::npos);
    const std::string info = TlsRouteGreeting(cluster.node(i).cluster_port(), *route_tls);
    EXPECT_EQ(info.rfind("INFO ", 0), 0u) << info;
    EXPECT_NE(info.find("\"tls_required\":true"), std::string::npos) << info;
    EXPECT_EQ(TlsRouteGreeting(cluster.node(i).cluster_port(), *rogue_tls), "");
    EXPECT_EQ(RouteCount(cluster.node(i).monitor_port()), 2);
  }

  // JetStream R3 over the TLS routes: written through node 0, read through node 2.
  auto writer = Connect({cluster.node(0).url()}, "writer");
  auto reader = Connect({cluster.node(2).url()}, "reader");
  ASSERT_TRUE(writer && reader);
  std::unique_ptr<bus::KeyValue> wkv, rkv;
  ASSERT_TRUE(WithRetry([&] {
    auto opened = writer->OpenBucket({.name = "it_route_tls", .history = 1, .replicas = 3});
    if (!opened.ok()) return false;
    wkv = *std::move(opened);
    return true;
  })) << "R3 bucket could not be created over TLS routes";
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(wkv->Put("k" + std::to_string(i), "v" + std::to_string(i)).ok());
  }
  ASSERT_TRUE(WithRetry([&] {
    auto opened = reader->OpenBucket({.name = "it_route_tls", .history = 1, .replicas = 3});
    if (!opened.ok()) return false;
    rkv = *std::move(opened);
    return true;
  }));
  for (int i = 0; i < 20; ++i) {
    auto e = rkv->Get("k" + std::to_string(i));
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->value, "v" + std::to_string(i));
  }
  // Core NATS crosses the routes too: a subscriber on node 2 answers a request sent to node 0.
  auto sub = reader->Serve("it.routes.echo", "it-routes", [](const bus::Request& r) {
    return bus::Reply::Ok("re:" + r.msg.data);
  });
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_TRUE(WithRetry([&] {
    auto reply = writer->Request("it.routes.echo", "x", 1s);
    return reply.ok() && reply->data == "re:x";
  }));

  // Intruders route to every node: one in plain TCP, one with a certificate of another CA.
  struct Intruder {
    const char* what;
    std::optional<RouteTls> tls;
  };
  for (const Intruder& in :
       {Intruder{"plain TCP", std::nullopt}, Intruder{"rogue CA", *rogue_tls}}) {
    SCOPED_TRACE(in.what);
    NatsServer::Options o;
    o.server_name = std::string("intruder-") + (in.tls ? "tls" : "plain");
    o.cluster_name = "wisp-it";
    o.cluster_port = FreePort();
    o.routes = cluster.route_urls();
    o.route_tls = in.tls;
    o.monitor_port = FreePort();
    o.jetstream = false;
    auto intruder = NatsServer::Start(o);
    ASSERT_TRUE(intruder.ok()) << intruder.status();
    // The intruder dials each node every second or so; give it a few attempts.
    std::this_thread::sleep_for(3s);
    EXPECT_EQ(RouteCount((*intruder)->monitor_port()), 0) << (*intruder)->process()->Log();
    for (int i = 0; i < cluster.size(); ++i) {
      EXPECT_EQ(RouteCount(cluster.node(i).monitor_port()), 2) << "node " << i;
    }
    // Nothing of the cluster's traffic reaches a client of the intruder.
    NatsBusOptions co;
    co.servers = {(*intruder)->url()};
    co.name = "intruder-client";
    co.connect_timeout = 2s;
    auto client = NatsBus::Connect(co);
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_FALSE((*client)->Request("it.routes.echo", "x", 500ms).ok());
  }
}

}  // namespace
}  // namespace wisp::integration
