#include "wisp/kube/reflector.hpp"

#include <condition_variable>
#include <mutex>

#include <gtest/gtest.h>

#include "fake_api.hpp"

namespace wisp::kube {
namespace {

using testing::FakeClient;
using testing::SequencedClient;

constexpr const char* kApi = "https://k:6443";

// Records handler calls as "add a", "update a 5->6", "delete b", "synced".
class Recorder : public ReflectorHandler {
 public:
  void OnAdd(const Json& o) override { Push("add " + Name(o)); }
  void OnUpdate(const Json& old_o, const Json& new_o) override {
    Push("update " + Name(new_o) + " " + Rv(old_o) + "->" + Rv(new_o));
  }
  void OnDelete(const Json& o) override { Push("delete " + Name(o)); }
  void OnSynced() override { Push("synced"); }

  // Waits (at most 5 s) until `n` calls were seen; all of them.
  std::vector<std::string> WaitFor(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(5), [&] { return calls_.size() >= n; });
    return calls_;
  }

 private:
  static std::string Name(const Json& o) { return o["metadata"]["name"].get<std::string>(); }
  static std::string Rv(const Json& o) {
    return o["metadata"]["resourceVersion"].get<std::string>();
  }
  void Push(std::string s) {
    std::lock_guard lock(mu_);
    calls_.push_back(std::move(s));
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> calls_;
};

std::string Obj(const std::string& name, const std::string& rv) {
  return R"({"metadata":{"name":")" + name + R"(","namespace":"ns","resourceVersion":")" + rv +
         R"("}})";
}
std::string List(const std::string& rv, const std::vector<std::string>& objects) {
  std::string items;
  for (const auto& o : objects) items += (items.empty() ? "" : ",") + o;
  return R"({"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":")" + rv +
         R"("},"items":[)" + items + "]}";
}
std::string Event(const std::string& type, const std::string& object) {
  return R"({"type":")" + type + R"(","object":)" + object + "}\n";
}
std::string WatchUrl(const std::string& rv) {
  return std::string(kApi) + "/api/v1/namespaces/ns/configmaps?watch=1&resourceVersion=" + rv +
         "&allowWatchBookmarks=true&timeoutSeconds=1";
}
const std::string kListUrl = std::string(kApi) + "/api/v1/namespaces/ns/configmaps?limit=500";

ReflectorOptions Fast() {
  return {.namespace_name = "ns",
          .watch_timeout = std::chrono::seconds(1),
          .initial_backoff = std::chrono::milliseconds(20),
          .max_backoff = std::chrono::milliseconds(100)};
}

ClientPtr MakeClient(http::Client& http) {
  return NewClient(http, Config{.server = kApi}, {.qps = 0});
}

// Tests that the reflector lists, then watches from the list's resourceVersion; that a 410 ERROR
// event makes it list again, deleting what vanished and updating what changed.
TEST(ReflectorTest, RelistsOnGoneAndDeletesWhatVanished) {
  SequencedClient seq([](int n, const http::ClientRequest&, FakeClient& fake) {
    if (n == 0) {
      fake.On("GET", kListUrl, FakeClient::Ok(List("10", {Obj("a", "5"), Obj("b", "6")})));
      fake.On("GET", WatchUrl("10"),
              FakeClient::Answer{
                  FakeClient::Ok(""),
                  {Event("ADDED", Obj("c", "11")),
                   Event("ERROR",
                         R"({"kind":"Status","code":410,"reason":"Expired","message":"old"})")},
                  absl::OkStatus()});
    } else if (n == 2) {
      // The relist: b was deleted and a changed while the watch was gone.
      fake.On("GET", kListUrl, FakeClient::Ok(List("20", {Obj("a", "15"), Obj("c", "11")})));
      fake.On("GET", WatchUrl("20"), absl::UnavailableError("no more in this test"));
    }
  });
  auto client = MakeClient(seq);
  Recorder rec;
  Reflector r(*client, kConfigMaps, Fast(), rec);
  r.Start();
  auto calls = rec.WaitFor(7);
  r.Stop();
  EXPECT_EQ(calls, (std::vector<std::string>{"add a", "add b", "synced", "add c", "delete b",
                                             "update a 5->15", "synced"}));
  EXPECT_EQ(r.stats().lists, 2);
  EXPECT_EQ(r.stats().gone, 1);
  EXPECT_EQ(r.Objects().size(), 2u);
  EXPECT_TRUE(r.HasSynced());
}

// Tests that a cut stream is watched again from the last resourceVersion seen (bookmarks count),
// without a relist, and that later events arrive.
TEST(ReflectorTest, ReconnectsAfterCutStreamFromLastResourceVersion) {
  SequencedClient seq([](int n, const http::ClientRequest&, FakeClient& fake) {
    if (n == 0) {
      fake.On("GET", kListUrl, FakeClient::Ok(List("10", {Obj("a", "5")})));
      fake.On(
          "GET", WatchUrl("10"),
          FakeClient::Answer{
              FakeClient::Ok(""),
              {Event("MODIFIED", Obj("a", "11")),
               Event("BOOKMARK", R"({"kind":"ConfigMap","metadata":{"resourceVersion":"14"}})")},
              absl::UnavailableError("HTTP body truncated")});
      fake.On("GET", WatchUrl("14"),
              FakeClient::Answer{FakeClient::Ok(""),
                                 {Event("ADDED", Obj("b", "15")), Event("DELETED", Obj("a", "16"))},
                                 absl::OkStatus()});
      fake.On("GET", WatchUrl("16"), absl::UnavailableError("no more in this test"));
    }
  });
  auto client = MakeClient(seq);
  Recorder rec;
  Reflector r(*client, kConfigMaps, Fast(), rec);
  r.Start();
  auto calls = rec.WaitFor(5);
  r.Stop();
  EXPECT_EQ(calls,
            (std::vector<std::string>{"add a", "synced", "update a 5->11", "add b", "delete a"}));
  EXPECT_EQ(r.stats().lists, 1);
  EXPECT_GE(r.stats().errors, 1);
  EXPECT_EQ(r.LastResourceVersion(), "16");
  bool rewatched_from_bookmark = false;
  for (const auto& req : seq.fake().requests()) {
    if (req.url == WatchUrl("14")) rewatched_from_bookmark = true;
  }
  EXPECT_TRUE(rewatched_from_bookmark);
}

// Tests that a watch the server ends at once, with nothing in it, is backed off rather than
// repeated in a tight loop.
TEST(ReflectorTest, BacksOffWatchesThatEndAtOnce) {
  FakeClient fake;
  fake.On("GET", kListUrl, FakeClient::Ok(List("10", {})));
  fake.On("GET", WatchUrl("10"), FakeClient::Answer{FakeClient::Ok(""), {}, absl::OkStatus()});
  auto client = MakeClient(fake);
  Recorder rec;
  ReflectorOptions o = Fast();
  o.initial_backoff = std::chrono::milliseconds(100);
  o.max_backoff = std::chrono::milliseconds(100);
  Reflector r(*client, kConfigMaps, o, rec);
  r.Start();
  rec.WaitFor(1);  // synced
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  r.Stop();
  // About one watch per 100 ms backoff, not thousands.
  EXPECT_GE(r.stats().watches, 2);
  EXPECT_LE(r.stats().watches, 6);
  EXPECT_EQ(r.stats().errors, r.stats().watches);
}

// Tests that Stop() returns at once while the reflector waits out a backoff.
TEST(ReflectorTest, StopsPromptlyDuringBackoff) {
  FakeClient fake;
  fake.On("GET", kListUrl, absl::UnavailableError("down"));
  auto client = MakeClient(fake);
  Recorder rec;
  ReflectorOptions o = Fast();
  o.initial_backoff = std::chrono::seconds(30);
  Reflector r(*client, kConfigMaps, o, rec);
  r.Start();
  while (fake.requests().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto t0 = std::chrono::steady_clock::now();
  r.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_FALSE(r.HasSynced());
}

}  // namespace
}  // namespace wisp::kube
