// Least privilege on the bus, proven against a real nats-server running the users and permissions
// that scripts/nats-auth generates (one NATS user per service). Every denial below is the server's
// doing: the clients are plain NatsBus connections that try what a compromised service would try.
//
// How a denial is observed (nats-server drops a denied PUB/SUB and only reports it asynchronously):
//   - a denied request gets no reply (DeadlineExceeded) instead of an answer;
//   - a denied publish never reaches a subscriber, checked with a permitted publish sent right
//   after
//     it on the same connection (NATS keeps per-connection order, so once the permitted one has
//     arrived the denied one would have arrived first);
//   - a denied subscription has no interest at the server, so a request to it finds no responders.
// An extra user `it-observer` (all permissions, test only, in account WISP with every service but
// wisp-token, which has account TOKEN to itself) watches and calls from outside.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/stack.hpp"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;
using bus::NatsBus;
using bus::NatsBusOptions;
namespace subjects = bus::subjects;

constexpr char kObserver[] = "it-observer";
constexpr char kObserverPassword[] = "observer-only-in-tests";

// One nats-server with scripts/nats-auth's users (plus the observer) shared by every test here.
class BusPermissionsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("wisp-sec");
    const std::string d = dir_->path();
    CommandResult r = RunCommand(SourceDir() + "/scripts/nats-auth " + d +
                                 "/secrets node-a node-b > " + d + "/users.conf");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::string conf = fsutil::ReadTrimmedFile(d + "/users.conf").value_or("");
    // Add the observer as the first user of account WISP (every service but wisp-token), so it
    // sees that account as any service in it would, with no permission limits.
    const auto account = conf.find("  WISP {");
    ASSERT_NE(account, std::string::npos) << conf;
    const auto users = conf.find("users = [", account);
    ASSERT_NE(users, std::string::npos) << conf;
    conf.insert(users + std::string_view("users = [").size(), std::string("\n      { user: ") +
                                                                  kObserver + ", password: \"" +
                                                                  kObserverPassword + "\" }");
    std::ofstream(d + "/nats.conf") << conf << "\n";
    NatsServer::Options o;
    o.extra_args = {"-c", d + "/nats.conf"};
    auto server = NatsServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    nats_ = server->release();
  }
  static void TearDownTestSuite() {
    delete nats_;
    nats_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }

  static std::string Password(const std::string& user) {
    if (user == kObserver) return kObserverPassword;
    return NatsAuthPassword(dir_->path() + "/secrets", user);
  }

  // A connection as `user` with its reply inboxes under `_INBOX.<user>` (what the binaries use,
  // or `inbox_prefix` when given); JetStream calls give up after 0.5 s (a denied JS API call gets
  // no reply).
  static std::unique_ptr<NatsBus> Connect(const std::string& user, std::string inbox_prefix = "") {
    NatsBusOptions o;
    o.servers = {nats_->url()};
    o.name = "sec-" + user;
    o.user = user;
    o.password = Password(user);
    o.inbox_prefix = inbox_prefix.empty() ? "_INBOX." + user : inbox_prefix;
    o.jetstream_timeout = 500ms;
    auto bus = NatsBus::Connect(o);
    EXPECT_TRUE(bus.ok()) << user << ": " << bus.status();
    return bus.ok() ? *std::move(bus) : nullptr;
  }

  static bus::BucketConfig Keys() {
    return bus::BucketConfig{.name = std::string(bus::buckets::kKeys)};
  }

  static TempDir* dir_;
  static NatsServer* nats_;
};
TempDir* BusPermissionsTest::dir_ = nullptr;
NatsServer* BusPermissionsTest::nats_ = nullptr;

// Counts messages on one subject as seen by a connection.
struct Tap {
  std::atomic<int> n{0};
  bus::SubscriptionPtr sub;
};
std::unique_ptr<Tap> Listen(NatsBus& b, std::string_view subject) {
  auto tap = std::make_unique<Tap>();
  auto sub = b.Subscribe(subject, "", [t = tap.get()](const bus::Message&) { t->n++; });
  EXPECT_TRUE(sub.ok()) << sub.status();
  if (sub.ok()) tap->sub = *std::move(sub);
  return tap;
}

// Tests that a wrong password is refused at connect.
TEST_F(BusPermissionsTest, RefusesWrongPassword) {
  NatsBusOptions o;
  o.servers = {nats_->url()};
  o.user = "wisp-token";
  o.password = "not-the-password";
  auto bus = NatsBus::Connect(o);
  EXPECT_FALSE(bus.ok());
  o.user = "";
  o.password = "";
  EXPECT_FALSE(NatsBus::Connect(o).ok()) << "anonymous connections must be refused";
}

// Tests that wisp-token can create, write and read the wisp_keys bucket.
TEST_F(BusPermissionsTest, TokenOwnsKeysBucket) {
  auto token = Connect("wisp-token");
  ASSERT_NE(token, nullptr);
  auto kv = token->OpenBucket(Keys());
  ASSERT_TRUE(kv.ok()) << kv.status();
  auto rev = (*kv)->Put("sealed-key-1", "ciphertext");
  ASSERT_TRUE(rev.ok()) << rev.status();
  auto got = (*kv)->Get("sealed-key-1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value, "ciphertext");
  auto keys = (*kv)->Keys();
  ASSERT_TRUE(keys.ok()) << keys.status();
}

// Tests that wisp-policy, wisp-gateway, wisp-populator and wispctl cannot open, read, write or
// watch the wisp_keys bucket by any JetStream API or raw subject, while wisp-token can.
TEST_F(BusPermissionsTest, OthersCannotTouchKeysBucket) {
  auto token = Connect("wisp-token");
  ASSERT_NE(token, nullptr);
  auto kv = token->OpenBucket(Keys());
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_TRUE((*kv)->Put("sealed-key-1", "ciphertext").ok());
  const std::string bucket(bus::buckets::kKeys);
  const std::string stream = "KV_" + bucket;

  for (const std::string user : {"wisp-policy", "wisp-gateway", "wisp-populator", "wispctl"}) {
    SCOPED_TRACE(user);
    auto b = Connect(user);
    ASSERT_NE(b, nullptr);
    // The KV API: open (stream info, then create) fails.
    auto opened = b->OpenBucket(Keys());
    EXPECT_FALSE(opened.ok()) << "opened " << bucket;
    // Raw JetStream API calls a hand-written client would use: no answer at all.
    for (const std::string& api :
         {"$JS.API.STREAM.INFO." + stream, "$JS.API.STREAM.MSG.GET." + stream,
          "$JS.API.DIRECT.GET." + stream + ".$KV." + bucket + ".sealed-key-1",
          "$JS.API.DIRECT.GET." + stream, "$JS.API.STREAM.PURGE." + stream,
          "$JS.API.STREAM.DELETE." + stream, "$JS.API.CONSUMER.CREATE." + stream,
          "$JS.API.STREAM.UPDATE." + stream}) {
      SCOPED_TRACE(api);
      auto reply =
          b->Request(api, R"({"last_by_subj":"$KV.wisp_keys.sealed-key-1","seq":1})", 250ms);
      EXPECT_FALSE(reply.ok()) << "answered: " << (reply.ok() ? reply->data : "");
    }
    // A raw write into the bucket's subject is dropped.
    EXPECT_TRUE(b->Publish("$KV." + bucket + ".planted-by-" + user, "evil").ok());
    // Watching the bucket's subjects delivers nothing.
    auto tap = Listen(*b, "$KV." + bucket + ".>");
    ASSERT_TRUE(b->Request("$JS.API.INFO", "", 2s).ok() || user == "wispctl");
    ASSERT_TRUE((*kv)->Put("sealed-key-1", "ciphertext-2").ok());
    // Round trip on `b` after the acknowledged put: a delivered $KV message would be ahead of it.
    auto rtt = token->Request("$JS.API.INFO", "", 2s);
    ASSERT_TRUE(rtt.ok()) << rtt.status();
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(tap->n.load(), 0) << user << " saw a wisp_keys write";
  }
  for (const std::string user : {"wisp-policy", "wisp-gateway", "wisp-populator", "wispctl"}) {
    EXPECT_EQ((*kv)->Get("planted-by-" + user).status().code(), absl::StatusCode::kNotFound);
  }
}

// Tests that every service can reach its own buckets (permitted JetStream traffic works).
TEST_F(BusPermissionsTest, ServicesOpenTheirOwnBuckets) {
  const std::vector<std::pair<std::string, std::string_view>> cases = {
      {"wisp-policy", bus::buckets::kSources},
      {"wisp-gateway", bus::buckets::kProjections},
      {"wisp-gateway", bus::buckets::kVolumes},
      {"wisp-populator", bus::buckets::kVolumes},
      {"wisp-populator", bus::buckets::kSources}};
  for (const auto& [user, bucket] : cases) {
    SCOPED_TRACE(user + " " + std::string(bucket));
    auto b = Connect(user);
    ASSERT_NE(b, nullptr);
    auto kv = b->OpenBucket(bus::BucketConfig{.name = std::string(bucket)});
    ASSERT_TRUE(kv.ok()) << kv.status();
    auto rev = (*kv)->Put("k-" + user, "v");
    ASSERT_TRUE(rev.ok()) << rev.status();
    auto got = (*kv)->Get("k-" + user);
    ASSERT_TRUE(got.ok()) << got.status();
    auto keys = (*kv)->Keys();  // an ordered consumer: stream lookup, consumer create, flow control
    ASSERT_TRUE(keys.ok()) << keys.status();
    std::atomic<int> seen{0};
    auto watch = (*kv)->Watch(">", [&](const bus::KvEntry& e) {
      if (!e.key.empty()) seen++;
    });
    ASSERT_TRUE(watch.ok()) << watch.status();
    EXPECT_TRUE(Eventually([&] { return seen.load() >= 1; }));
  }
  // And not each other's: the gateway has no business in wisp_sources, policy none in
  // wisp_projections.
  auto gw = Connect("wisp-gateway");
  EXPECT_FALSE(gw->OpenBucket(bus::BucketConfig{.name = std::string(bus::buckets::kSources)}).ok());
  auto policy = Connect("wisp-policy");
  EXPECT_FALSE(
      policy->OpenBucket(bus::BucketConfig{.name = std::string(bus::buckets::kProjections)}).ok());
}

// Tests that the gateway's calls to the subjects it translates to work end to end.
TEST_F(BusPermissionsTest, GatewayCallsItsSubjects) {
  auto policy = Connect("wisp-policy");
  auto token = Connect("wisp-token");
  auto populator = Connect("wisp-populator");
  auto gw = Connect("wisp-gateway");
  ASSERT_TRUE(policy && token && populator && gw);
  auto echo = [](std::string who) {
    return [who](const bus::Request& r) { return bus::Reply::Ok(who + ":" + r.msg.data); };
  };
  std::vector<bus::SubscriptionPtr> subs;
  for (auto s : {subjects::kPolicyMutate, subjects::kPolicyValidate}) {
    subs.push_back(*policy->Serve(s, bus::queues::kPolicy, echo("policy")));
  }
  for (auto s : {subjects::kTokenIssue, subjects::kTokenExchange, subjects::kTokenKeys,
                 subjects::kTokenReview}) {
    subs.push_back(*token->Serve(s, bus::queues::kToken, echo("token")));
  }
  for (auto s : {subjects::kVolumeCreate, subjects::kVolumeGet}) {
    subs.push_back(*populator->Serve(s, bus::queues::kPopulator, echo("populator")));
  }
  // Node-routed work as the code routes it: the controller gateway asks a node gateway for its
  // capacity (csi_server.cpp / controller_service.cpp), a populator forwards a delete to the
  // volume's node (volume_service.cpp), the gateway asks a node's populator about a volume.
  const std::string node_volume = subjects::Node("node-a", "volume.delete");
  subs.push_back(*populator->Serve(node_volume, "", echo("populator")));
  const std::string node_capacity = subjects::Node("node-a", "csi.capacity");
  subs.push_back(*gw->Serve(node_capacity, "", echo("gateway")));
  ASSERT_TRUE(gw->Request("$JS.API.INFO", "", 2s).ok());
  ASSERT_TRUE(populator->Request("$JS.API.INFO", "", 2s).ok());

  for (auto s : {subjects::kPolicyMutate, subjects::kPolicyValidate, subjects::kTokenIssue,
                 subjects::kTokenExchange, subjects::kTokenKeys, subjects::kTokenReview,
                 subjects::kVolumeCreate, subjects::kVolumeGet}) {
    SCOPED_TRACE(std::string(s));
    auto reply = gw->Request(s, "x", 2s);
    ASSERT_TRUE(reply.ok()) << reply.status();
  }
  auto reply = gw->Request(node_volume, "x", 2s);
  EXPECT_TRUE(reply.ok()) << "gateway -> node populator: " << reply.status();
  reply = populator->Request(node_volume, "x", 2s);
  EXPECT_TRUE(reply.ok()) << "populator -> node populator: " << reply.status();
  reply = gw->Request(node_capacity, "x", 2s);
  EXPECT_TRUE(reply.ok()) << "controller gateway -> node gateway: " << reply.status();
}

// Tests that the gateway cannot publish to subjects it does not translate to: the populate work
// queue, token events, the key bucket and other services' control subjects.
TEST_F(BusPermissionsTest, GatewayCannotPublishElsewhere) {
  auto observer = Connect(kObserver);
  auto gw = Connect("wisp-gateway");
  ASSERT_TRUE(observer && gw);
  const std::vector<std::string> denied = {subjects::PopulateJobs("x"),
                                           std::string(subjects::kTokenKeysChanged),
                                           subjects::VolumeEvents("v1"),
                                           "$KV.wisp_keys.k",
                                           "$JS.API.STREAM.CREATE.WISP_POPULATE",
                                           subjects::Node("node-a", "policy.mutate"),
                                           "_INBOX.someone-else"};
  std::vector<std::unique_ptr<Tap>> taps;
  for (const auto& s : denied) taps.push_back(Listen(*observer, s));
  auto control = Listen(*observer, subjects::kVolumeCreate);
  ASSERT_TRUE(observer->Request("$JS.API.INFO", "", 2s).ok());  // subscriptions registered

  for (const auto& s : denied) ASSERT_TRUE(gw->Publish(s, "evil").ok());
  ASSERT_TRUE(gw->Publish(subjects::kVolumeCreate, "ok").ok());
  ASSERT_TRUE(Eventually([&] { return control->n.load() == 1; })) << "permitted publish lost";
  for (size_t i = 0; i < denied.size(); ++i) {
    EXPECT_EQ(taps[i]->n.load(), 0) << "gateway published to " << denied[i];
  }
  // A request to a denied subject gets no answer even though someone serves it.
  auto serving = observer->Serve(subjects::PopulateJobs("x"), "",
                                 [](const bus::Request&) { return bus::Reply::Ok("served"); });
  ASSERT_TRUE(serving.ok());
  ASSERT_TRUE(observer->Request("$JS.API.INFO", "", 2s).ok());
  auto reply = gw->Request(subjects::PopulateJobs("x"), "evil", 500ms);
  EXPECT_FALSE(reply.ok());
}

// Tests G3's per-node users: node-a's gateway user serves and calls node-a's subjects and asks
// for tokens, but can neither answer nor request as node-b (its gateway.status, csi.capacity and
// uploads), nor call the controller's subjects, nor read node-b's replies, even with node-b's
// inbox prefix.
TEST_F(BusPermissionsTest, NodeUsersAreBoundToTheirNode) {
  auto observer = Connect(kObserver);
  auto token = Connect("wisp-token");
  auto node_a = Connect("wisp-gateway-node-a");
  auto node_b = Connect("wisp-gateway-node-b");
  ASSERT_TRUE(observer && token && node_a && node_b);

  // Serving: its own node's subjects work; node-b's find no responder.
  std::atomic<int> forged{0};
  std::vector<bus::SubscriptionPtr> subs;
  for (const char* verb : {"gateway.status", "csi.capacity"}) {
    SCOPED_TRACE(verb);
    auto own = node_a->Serve(subjects::Node("node-a", verb), "",
                             [](const bus::Request&) { return bus::Reply::Ok("node-a"); });
    ASSERT_TRUE(own.ok());
    subs.push_back(*std::move(own));
    auto impostor = node_a->Serve(subjects::Node("node-b", verb), "", [&](const bus::Request&) {
      forged++;
      return bus::Reply::Ok("forged");
    });
    ASSERT_TRUE(impostor.ok());  // nats.c accepts the SUB locally; the server refuses it
    subs.push_back(*std::move(impostor));
    ASSERT_TRUE(node_a->Request("$JS.API.INFO", "", 2s).ok());
    auto ok = observer->Request(subjects::Node("node-a", verb), "who", 2s);
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(ok->data, "node-a");
    auto denied = observer->Request(subjects::Node("node-b", verb), "who", 500ms);
    EXPECT_FALSE(denied.ok()) << "node-a answered for node-b: " << denied->data;
  }
  EXPECT_EQ(forged.load(), 0);

  // Requesting: node-a's uploads and a token work; node-b's uploads and the controller's
  // subjects get no answer although someone serves them.
  std::vector<std::string> served = {
      subjects::Node("node-a", subjects::kNodeUploadOpen),
      subjects::Node("node-b", subjects::kNodeUploadOpen), subjects::Node("node-b", "csi.capacity"),
      std::string(subjects::kVolumeCreate), std::string(subjects::kVolumeDelete)};
  std::atomic<int> reached{0};
  for (const auto& s : served) {
    auto sub = observer->Serve(s, "", [&, s](const bus::Request&) {
      if (s != served[0]) reached++;
      return bus::Reply::Ok("served");
    });
    ASSERT_TRUE(sub.ok());
    subs.push_back(*std::move(sub));
  }
  auto issue = token->Serve(subjects::kTokenIssue, "",
                            [](const bus::Request&) { return bus::Reply::Ok("token"); });
  ASSERT_TRUE(issue.ok());
  ASSERT_TRUE(observer->Request("$JS.API.INFO", "", 2s).ok());
  ASSERT_TRUE(token->Request("$JS.API.INFO", "", 2s).ok());
  auto up = node_a->Request(served[0], "open", 2s);
  ASSERT_TRUE(up.ok()) << up.status();
  auto tok = node_a->Request(subjects::kTokenIssue, "issue", 2s);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->data, "token");
  for (size_t i = 1; i < served.size(); ++i) {
    SCOPED_TRACE(served[i]);
    EXPECT_FALSE(node_a->Request(served[i], "evil", 500ms).ok());
  }
  EXPECT_EQ(reached.load(), 0) << "node-a reached another node's or the controller's subject";

  // Replies: node-b's answer from its populator reaches node-b only. node-a listening on every
  // inbox or on node-b's, or asking with node-b's inbox prefix, gets nothing.
  auto spy_all = Listen(*node_a, "_INBOX.>");
  auto spy_b = Listen(*node_a, "_INBOX.wisp-gateway-node-b.>");
  auto b_up = observer->Serve(subjects::Node("node-b", "upload.i-1"), "",
                              [](const bus::Request&) { return bus::Reply::Ok("for node-b"); });
  ASSERT_TRUE(b_up.ok());
  ASSERT_TRUE(observer->Request("$JS.API.INFO", "", 2s).ok());
  ASSERT_TRUE(node_a->Request("$JS.API.INFO", "", 2s).ok());
  auto b_reply = node_b->Request(subjects::Node("node-b", "upload.i-1"), "chunk", 2s);
  ASSERT_TRUE(b_reply.ok()) << b_reply.status();
  EXPECT_EQ(b_reply->data, "for node-b");
  auto as_b = Connect("wisp-gateway-node-a", "_INBOX.wisp-gateway-node-b");
  ASSERT_NE(as_b, nullptr);
  EXPECT_FALSE(as_b->Request(served[0], "open", 500ms).ok())
      << "a reply reached node-a under node-b's inbox prefix";
  ASSERT_TRUE(node_a->Request("$JS.API.INFO", "", 2s).ok());
  EXPECT_EQ(spy_all->n.load(), 0);
  EXPECT_EQ(spy_b->n.load(), 0);
}

// Tests that no service can serve (subscribe to) another service's subjects: a request then finds
// no responders and the impostor's handler never runs; each one serves its own subjects.
TEST_F(BusPermissionsTest, ServiceCannotAnswerOthersSubjects) {
  auto observer = Connect(kObserver);
  ASSERT_NE(observer, nullptr);
  struct Case {
    std::string user;
    std::string_view foreign;
    std::string_view own;
  };
  const std::vector<Case> cases = {
      {"wisp-policy", subjects::kTokenIssue, subjects::kPolicyMutate},
      {"wisp-policy", subjects::kVolumeCreate, subjects::kPolicyValidate},
      {"wisp-gateway", subjects::kTokenIssue, ""},
      {"wisp-gateway", subjects::kPolicyMutate, ""},
      {"wisp-gateway", subjects::kTokenExchange, ""},
      {"wisp-populator", subjects::kTokenIssue, subjects::kVolumeCreate},
      {"wisp-populator", subjects::kPolicyValidate, subjects::kVolumeGet},
      {"wisp-token", subjects::kPolicyMutate, subjects::kTokenIssue},
      {"wisp-token", subjects::kVolumeCreate, subjects::kTokenExchange},
      {"wispctl", subjects::kTokenIssue, ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.user + " serving " + std::string(c.foreign));
    auto b = Connect(c.user);
    ASSERT_NE(b, nullptr);
    std::atomic<int> calls{0};
    auto impostor = b->Serve(c.foreign, "", [&](const bus::Request&) {
      calls++;
      return bus::Reply::Ok("forged");
    });
    // nats.c accepts the SUB locally; the server refuses it. Round trip so the refusal happened.
    ASSERT_TRUE(b->Request("$JS.API.INFO", "", 2s).ok() || c.user == "wispctl");
    auto reply = observer->Request(c.foreign, "who", 500ms);
    EXPECT_FALSE(reply.ok()) << "answered by an impostor: " << reply->data;
    EXPECT_EQ(calls.load(), 0);
    if (!c.own.empty()) {
      auto own = b->Serve(c.own, "", [](const bus::Request&) { return bus::Reply::Ok("mine"); });
      ASSERT_TRUE(own.ok());
      ASSERT_TRUE(b->Request("$JS.API.INFO", "", 2s).ok());
      auto ok = observer->Request(c.own, "who", 2s);
      ASSERT_TRUE(ok.ok()) << ok.status();
      EXPECT_EQ(ok->data, "mine");
    }
  }
}

// Tests that a reply reaches only the user that asked: the gateway's token request is answered,
// while every other service user (and wispctl) trying to listen on all inboxes, on the gateway's
// inboxes, or to receive replies under someone else's prefix, sees nothing and gets no answers.
TEST_F(BusPermissionsTest, RepliesReachOnlyTheirRequester) {
  auto token = Connect("wisp-token");
  auto gw = Connect("wisp-gateway");
  ASSERT_TRUE(token && gw);
  auto serving = token->Serve(subjects::kTokenIssue, "",
                              [](const bus::Request&) { return bus::Reply::Ok("a-token"); });
  ASSERT_TRUE(serving.ok()) << serving.status();
  ASSERT_TRUE(token->Request("$JS.API.INFO", "", 2s).ok());

  std::vector<std::unique_ptr<NatsBus>> spies;
  std::vector<std::unique_ptr<Tap>> taps;
  for (const std::string user : {"wisp-policy", "wisp-populator", "wisp-token", "wispctl"}) {
    auto spy = Connect(user);
    ASSERT_NE(spy, nullptr) << user;
    taps.push_back(Listen(*spy, "_INBOX.>"));
    taps.push_back(Listen(*spy, "_INBOX.wisp-gateway.>"));
    taps.push_back(Listen(*spy, ">"));
    // Round trip so the server has refused those subscriptions (wispctl may not call $JS.API).
    (void)spy->Request("$SRV.PING", "", 300ms);
    spies.push_back(std::move(spy));
  }
  for (int i = 0; i < 5; ++i) {
    auto reply = gw->Request(subjects::kTokenIssue, "issue", 2s);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->data, "a-token");
  }
  std::this_thread::sleep_for(100ms);
  for (size_t i = 0; i < taps.size(); ++i) EXPECT_EQ(taps[i]->n.load(), 0) << "spy tap " << i;

  // A client that makes its inboxes under another user's prefix (or the shared default) cannot
  // subscribe to them, so even its own permitted requests go unanswered.
  for (const std::string prefix : {"_INBOX", "_INBOX.wisp-gateway"}) {
    auto impostor = Connect("wisp-policy", prefix);
    ASSERT_NE(impostor, nullptr);
    auto reply = impostor->Request("$JS.API.INFO", "", 500ms);  // permitted to publish
    EXPECT_FALSE(reply.ok()) << "wisp-policy got a reply under " << prefix;
  }
}

// A JetStream API reply as JSON (an unanswered call, e.g. one the server's permissions dropped, is
// the request's error status).
absl::StatusOr<nlohmann::json> JsApi(NatsBus& b, const std::string& api, const std::string& body) {
  auto reply = b.Request(api, body, 2s);
  if (!reply.ok()) return reply.status();
  auto j = nlohmann::json::parse(reply->data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::DataLossError("not JSON: " + reply->data);
  return j;
}

// Whether `stream` holds a message on `subject` (STREAM.MSG.GET last_by_subj).
bool StreamHas(NatsBus& b, const std::string& stream, const std::string& subject) {
  auto r = JsApi(b, "$JS.API.STREAM.MSG.GET." + stream,
                 nlohmann::json{{"last_by_subj", subject}}.dump());
  return r.ok() && r->contains("message");
}

// Tests that no service can copy the key bucket into a stream it can read (gap G2): wisp-policy
// updates its own bucket's stream to source KV_wisp_keys (and, as a control, KV_it_control), and an
// unrestricted user of the services' account creates a stream sourcing it, also through the
// cross-account API prefix. The control's message arrives; the key set never does, because
// KV_wisp_keys lives in wisp-token's own account and does not exist in the services' one.
TEST_F(BusPermissionsTest, NoStreamCanSourceTheKeyBucket) {
  static constexpr std::string_view kControlBucket = "it_control";
  auto token = Connect("wisp-token");
  auto policy = Connect("wisp-policy");
  auto observer = Connect(kObserver);
  ASSERT_TRUE(token && policy && observer);
  auto keys = token->OpenBucket(Keys());
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_TRUE((*keys)->Put("keyset", "sealed-key-set").ok());
  // The control: a bucket of the services' account that the unrestricted user makes.
  auto control = observer->OpenBucket(bus::BucketConfig{.name = std::string(kControlBucket)});
  auto sources = policy->OpenBucket(bus::BucketConfig{.name = std::string(bus::buckets::kSources)});
  ASSERT_TRUE(control.ok() && sources.ok()) << control.status() << " " << sources.status();
  ASSERT_TRUE((*control)->Put("marker", "sourced").ok());

  // wisp-policy: STREAM.UPDATE of its own stream with the extra sources (permitted by subject).
  const std::string own = "KV_" + std::string(bus::buckets::kSources);
  auto info = JsApi(*policy, "$JS.API.STREAM.INFO." + own, "");
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_TRUE(info->contains("config")) << info->dump();
  nlohmann::json config = (*info)["config"];
  config["sources"] = nlohmann::json::array(
      {{{"name", "KV_wisp_keys"}}, {{"name", "KV_" + std::string(kControlBucket)}}});
  auto updated = JsApi(*policy, "$JS.API.STREAM.UPDATE." + own, config.dump());
  ASSERT_TRUE(updated.ok()) << updated.status();
  ASSERT_FALSE(updated->contains("error")) << updated->dump();

  // An unrestricted user of the same account: a new stream sourcing the keys by name and through
  // the JetStream API of wisp-token's account (which that account does not export).
  nlohmann::json steal = {{"name", "IT_STEAL"},
                          {"subjects", nlohmann::json::array({"it.steal.>"})},
                          {"storage", "memory"},
                          {"sources",
                           {{{"name", "KV_wisp_keys"}, {"external", {{"api", "$JS.TOKEN.API"}}}},
                            {{"name", "KV_" + std::string(kControlBucket)}}}}};
  auto created = JsApi(*observer, "$JS.API.STREAM.CREATE.IT_STEAL", steal.dump());
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_FALSE(created->contains("error")) << created->dump();
  steal["name"] = "IT_STEAL_LOCAL";
  steal["subjects"] = nlohmann::json::array({"it.steal-local.>"});
  steal["sources"] = nlohmann::json::array(
      {{{"name", "KV_wisp_keys"}}, {{"name", "KV_" + std::string(kControlBucket)}}});
  created = JsApi(*observer, "$JS.API.STREAM.CREATE.IT_STEAL_LOCAL", steal.dump());
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_FALSE(created->contains("error")) << created->dump();

  // Sourcing works (the control arrives everywhere)...
  for (const std::string& stream : {own, std::string("IT_STEAL"), std::string("IT_STEAL_LOCAL")}) {
    SCOPED_TRACE(stream);
    EXPECT_TRUE(
        Eventually([&] { return StreamHas(*observer, stream, "$KV.it_control.marker"); }, 10s))
        << "control message never sourced";
  }
  // ...and a key set written now would be copied as fast as the control was.
  ASSERT_TRUE((*keys)->Put("keyset", "sealed-key-set-2").ok());
  ASSERT_TRUE((*control)->Put("marker2", "sourced").ok());
  EXPECT_TRUE(Eventually([&] { return StreamHas(*observer, own, "$KV.it_control.marker2"); }, 10s));
  std::this_thread::sleep_for(300ms);
  for (const std::string& stream : {own, std::string("IT_STEAL"), std::string("IT_STEAL_LOCAL")}) {
    EXPECT_FALSE(StreamHas(*observer, stream, "$KV.wisp_keys.keyset"))
        << stream << " holds a copy of the key set";
  }
  EXPECT_FALSE(StreamHas(*policy, own, "$KV.wisp_keys.keyset"));
  // The key stream does not exist in the services' account, even for an unrestricted user.
  auto keys_info = JsApi(*observer, "$JS.API.STREAM.INFO.KV_wisp_keys", "");
  ASSERT_TRUE(keys_info.ok()) << keys_info.status();
  EXPECT_TRUE(keys_info->contains("error")) << keys_info->dump();
  EXPECT_FALSE(keys_info->contains("config")) << keys_info->dump();
  for (const std::string stream : {"IT_STEAL", "IT_STEAL_LOCAL"}) {
    (void)JsApi(*observer, "$JS.API.STREAM.DELETE." + stream, "");
  }
}

// Tests that the token services, their discovery and their events cross from wisp-token's account
// to the services' one: two wisp-token connections and wisp-policy all answer one `$SRV.PING`
// from wispctl (as `wispctl status` sends it), and the gateway calls wisp.v1.token.issue.
TEST_F(BusPermissionsTest, TokenAccountServesAcrossAccounts) {
  auto token1 = Connect("wisp-token");
  auto token2 = Connect("wisp-token");
  auto policy = Connect("wisp-policy");
  auto ctl = Connect("wispctl");
  auto gw = Connect("wisp-gateway");
  ASSERT_TRUE(token1 && token2 && policy && ctl && gw);
  std::vector<bus::SubscriptionPtr> subs;
  const std::vector<std::pair<NatsBus*, std::string>> responders = {
      {token1.get(), "token1"}, {token2.get(), "token2"}, {policy.get(), "policy"}};
  for (const auto& [b, name] : responders) {
    auto sub = b->Serve(subjects::kSrvPing, "",
                        [who = name](const bus::Request&) { return bus::Reply::Ok(who); });
    ASSERT_TRUE(sub.ok()) << sub.status();
    subs.push_back(*std::move(sub));
    ASSERT_TRUE(b->Request("$JS.API.INFO", "", 2s).ok());
  }
  auto replies = ctl->RequestMany(subjects::kSrvPing, "", 1s);
  ASSERT_TRUE(replies.ok()) << replies.status();
  std::multiset<std::string> who;
  for (const auto& m : *replies) who.insert(m.data);
  EXPECT_EQ(who, (std::multiset<std::string>{"policy", "token1", "token2"}));

  auto issue = token1->Serve(subjects::kTokenIssue, bus::queues::kToken,
                             [](const bus::Request&) { return bus::Reply::Ok("a-token"); });
  ASSERT_TRUE(issue.ok()) << issue.status();
  ASSERT_TRUE(token1->Request("$JS.API.INFO", "", 2s).ok());
  auto reply = gw->Request(subjects::kTokenIssue, "issue", 2s);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->data, "a-token");
}

// Tests that key administration (wisp.v1.token.key_admin: rotate, taint, revoke) crosses to
// wisp-token for wispctl only: the gateway, the policy and the populator get no answer.
TEST_F(BusPermissionsTest, OnlyWispctlAdministersKeys) {
  auto token = Connect("wisp-token");
  auto ctl = Connect("wispctl");
  ASSERT_TRUE(token && ctl);
  auto admin = token->Serve(subjects::kTokenKeyAdmin, bus::queues::kToken,
                            [](const bus::Request&) { return bus::Reply::Ok("rotated"); });
  ASSERT_TRUE(admin.ok()) << admin.status();
  ASSERT_TRUE(token->Request("$JS.API.INFO", "", 2s).ok());
  auto reply = ctl->Request(subjects::kTokenKeyAdmin, "rotate", 2s);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->data, "rotated");
  for (const char* user : {"wisp-gateway", "wisp-policy", "wisp-populator"}) {
    auto other = Connect(user);
    ASSERT_TRUE(other);
    EXPECT_FALSE(other->Request(subjects::kTokenKeyAdmin, "rotate", 500ms).ok()) << user;
  }
}

// Tests that only wisp-token can announce key changes, and that the gateway receives them.
TEST_F(BusPermissionsTest, OnlyTokenAnnouncesKeys) {
  auto gw = Connect("wisp-gateway");
  auto token = Connect("wisp-token");
  auto policy = Connect("wisp-policy");
  ASSERT_TRUE(gw && token && policy);
  auto tap = Listen(*gw, subjects::kTokenKeysChanged);
  ASSERT_TRUE(gw->Request("$JS.API.INFO", "", 2s).ok());
  ASSERT_TRUE(policy->Publish(subjects::kTokenKeysChanged, "forged").ok());
  ASSERT_TRUE(policy->Request("$JS.API.INFO", "", 2s).ok());  // the server has handled the forgery
  ASSERT_TRUE(token->Publish(subjects::kTokenKeysChanged, "real").ok());
  ASSERT_TRUE(Eventually([&] { return tap->n.load() >= 1; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(tap->n.load(), 1) << "a forged key-change event reached the gateway";
}

// Tests that the gateway user may purge wisp_projections' delete markers (CSI MarkerPurger:
// KeyValue::PurgeDeletes, i.e. an ordered consumer plus $JS.API.STREAM.PURGE.KV_wisp_projections)
// and that a user without the bucket may not purge its stream.
TEST_F(BusPermissionsTest, GatewayPurgesProjectionMarkers) {
  auto gw = Connect("wisp-gateway");
  ASSERT_NE(gw, nullptr);
  auto kv = gw->OpenBucket(bus::BucketConfig{.name = std::string(bus::buckets::kProjections)});
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_TRUE((*kv)->Put("purge-live", "v").ok());
  ASSERT_TRUE((*kv)->Put("purge-probe", "v").ok());
  ASSERT_TRUE((*kv)->Delete("purge-probe").ok());
  auto last = [&](const std::string& key) {
    auto r = gw->Request("$JS.API.STREAM.MSG.GET.KV_wisp_projections",
                         R"({"last_by_subj":"$KV.wisp_projections.)" + key + R"("})", 2s);
    return r.ok() ? r->data : r.status().ToString();
  };
  EXPECT_NE(last("purge-probe").find("\"message\""), std::string::npos);  // the marker
  auto st = (*kv)->PurgeDeletes(0ms);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(last("purge-probe").find("\"message\""), std::string::npos) << "marker still there";
  EXPECT_TRUE((*kv)->Get("purge-live").ok());

  auto policy = Connect("wisp-policy");
  ASSERT_NE(policy, nullptr);
  EXPECT_FALSE(policy->Request("$JS.API.STREAM.PURGE.KV_wisp_projections", "{}", 500ms).ok());
  EXPECT_TRUE((*kv)->Get("purge-live").ok());
}

}  // namespace
}  // namespace wisp::integration
