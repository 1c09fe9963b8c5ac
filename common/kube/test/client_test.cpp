#include "wisp/kube/client.hpp"

#include <fstream>

#include <gtest/gtest.h>

#include "fake_api.hpp"
#include "wisp/status/fake_clock.hpp"

namespace wisp::kube {
namespace {

using testing::FakeClient;
using testing::SequencedClient;
using testing::StatusAnswer;

constexpr const char* kApi = "https://k:6443";

std::string HeaderOf(const http::ClientRequest& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

class KubeClientTest : public ::testing::Test {
 protected:
  ClientPtr Make(http::Client& http, ClientOptions o = {}) {
    o.clock = &clock_;
    o.sleeper = &sleeper_;
    Config c;
    c.server = std::string(kApi) + "/";  // a trailing slash is dropped
    c.token = "sekret";
    return NewClient(http, c, o);
  }
  FakeClock clock_;
  FakeSleeper sleeper_{clock_};
};

// Tests the paths of core and group resources, namespaced and cluster-scoped, and subresources.
TEST_F(KubeClientTest, BuildsApiserverPaths) {
  EXPECT_EQ(ResourcePath(kPods, "default", "web-0"), "/api/v1/namespaces/default/pods/web-0");
  EXPECT_EQ(ResourcePath(kPods, ""), "/api/v1/pods");
  EXPECT_EQ(ResourcePath(kPersistentVolumes, "ignored", "pv-1"), "/api/v1/persistentvolumes/pv-1");
  EXPECT_EQ(ResourcePath(kDataVolumes, "vms", "disk", "status"),
            "/apis/cdi.kubevirt.io/v1beta1/namespaces/vms/datavolumes/disk/status");
  EXPECT_EQ(ResourcePath(kVolumeImportSources, "ns"),
            "/apis/wisp.dev/v1alpha1/namespaces/ns/volumeimportsources");
  EXPECT_EQ(ResourcePath(kVirtualMachineInstances, "ns", "vm"),
            "/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances/vm");
  EXPECT_EQ(ResourcePath(kConfigMaps, "ns", "a/b"), "/api/v1/namespaces/ns/configmaps/a%2Fb");
  EXPECT_EQ(kDataVolumes.ApiVersion(), "cdi.kubevirt.io/v1beta1");
  EXPECT_EQ(kPods.ApiVersion(), "v1");
  EXPECT_EQ(QueryEscape("app=web,tier in (a,b)"), "app%3Dweb%2Ctier%20in%20%28a%2Cb%29");
}

// Tests that Get sends the token and Accept, and returns the object.
TEST_F(KubeClientTest, GetsAnObjectWithTheBearerToken) {
  FakeClient fake;
  fake.On("GET", std::string(kApi) + "/api/v1/namespaces/default/configmaps/app",
          FakeClient::Ok(R"({"kind":"ConfigMap","metadata":{"name":"app"}})"));
  auto client = Make(fake);
  auto cm = client->Get(kConfigMaps, "default", "app");
  ASSERT_TRUE(cm.ok()) << cm.status();
  EXPECT_EQ((*cm)["metadata"]["name"], "app");
  ASSERT_EQ(fake.requests().size(), 1u);
  EXPECT_EQ(fake.requests()[0].bearer_token, "sekret");
  EXPECT_EQ(HeaderOf(fake.requests()[0], "Accept"), "application/json");
}

// Tests that List follows continue tokens, encodes selectors, fills in apiVersion/kind and returns
// the last page's resourceVersion.
TEST_F(KubeClientTest, ListsEveryPageWithSelectors) {
  FakeClient fake;
  const std::string base = std::string(kApi) + "/apis/cdi.kubevirt.io/v1beta1/datavolumes";
  const std::string sel =
      "&labelSelector=app%3Dweb%2Ctier%20in%20%28a%2Cb%29&fieldSelector=metadata.name%21%3Dx";
  fake.On("GET", base + "?limit=2" + sel,
          FakeClient::Ok(R"({"kind":"DataVolumeList","apiVersion":"cdi.kubevirt.io/v1beta1",
                             "metadata":{"resourceVersion":"10","continue":"c/1=="},
                             "items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]})"));
  fake.On("GET", base + "?limit=2&continue=c%2F1%3D%3D" + sel,
          FakeClient::Ok(R"({"kind":"DataVolumeList","apiVersion":"cdi.kubevirt.io/v1beta1",
                             "metadata":{"resourceVersion":"11"},
                             "items":[{"metadata":{"name":"c"}}]})"));
  auto client = Make(fake);
  auto list = client->List(kDataVolumes, "",
                           {.label_selector = "app=web,tier in (a,b)",
                            .field_selector = "metadata.name!=x",
                            .page_size = 2});
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->items.size(), 3u);
  EXPECT_EQ(list->items[2]["metadata"]["name"], "c");
  EXPECT_EQ(list->items[0]["kind"], "DataVolume");
  EXPECT_EQ(list->items[0]["apiVersion"], "cdi.kubevirt.io/v1beta1");
  EXPECT_EQ(list->resource_version, "11");
}

// Tests that an expired continue token restarts the list once, without pages.
TEST_F(KubeClientTest, RestartsListWhenContinueExpires) {
  FakeClient fake;
  const std::string base = std::string(kApi) + "/api/v1/namespaces/ns/pods";
  fake.On("GET", base + "?limit=1",
          FakeClient::Ok(R"({"metadata":{"resourceVersion":"5","continue":"t"},"items":[{}]})"));
  fake.On("GET", base + "?limit=1&continue=t", StatusAnswer(410, "Expired", "too old"));
  fake.On("GET", base, FakeClient::Ok(R"({"metadata":{"resourceVersion":"9"},"items":[{},{}]})"));
  auto list = Make(fake)->List(kPods, "ns", {.page_size = 1});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->items.size(), 2u);
  EXPECT_EQ(list->resource_version, "9");
}

// Tests the verbs' methods, content types, query parameters and bodies.
TEST_F(KubeClientTest, WritesWithTheRightMethodsAndContentTypes) {
  FakeClient fake;
  const std::string ns = std::string(kApi) + "/api/v1/namespaces/ns";
  const std::string dv =
      std::string(kApi) + "/apis/cdi.kubevirt.io/v1beta1/namespaces/ns/datavolumes/d";
  fake.On("POST", ns + "/configmaps", FakeClient::Ok("{}", 201));
  fake.On("PUT", ns + "/configmaps/c", FakeClient::Ok("{}"));
  fake.On("PUT", dv + "/status", FakeClient::Ok("{}"));
  fake.On("PATCH", ns + "/configmaps/c", FakeClient::Ok("{}"));
  fake.On("PATCH", ns + "/configmaps/c?fieldManager=wisp&force=true", FakeClient::Ok("{}"));
  fake.On("PATCH", dv + "/status", FakeClient::Ok("{}"));
  fake.On("DELETE", ns + "/configmaps/c", FakeClient::Ok("{}"));
  auto client = Make(fake);
  const Json cm = {{"metadata", {{"name", "c"}, {"resourceVersion", "3"}}}};
  ASSERT_TRUE(client->Create(kConfigMaps, "ns", cm).ok());
  ASSERT_TRUE(client->Update(kConfigMaps, "ns", cm).ok());
  ASSERT_TRUE(client->UpdateStatus(kDataVolumes, "ns", {{"metadata", {{"name", "d"}}}}).ok());
  ASSERT_TRUE(client->Patch(kConfigMaps, "ns", "c", {{"data", {{"k", "v"}}}}).ok());
  ASSERT_TRUE(client
                  ->Patch(kConfigMaps, "ns", "c", cm,
                          {.type = PatchType::kApply, .field_manager = "wisp", .force = true})
                  .ok());
  ASSERT_TRUE(
      client
          ->Patch(kDataVolumes, "ns", "d",
                  Json::array({{{"op", "add"}, {"path", "/status"}, {"value", Json::object()}}}),
                  {.type = PatchType::kJson, .subresource = "status"})
          .ok());
  ASSERT_TRUE(
      client
          ->Delete(kConfigMaps, "ns", "c",
                   {.propagation_policy = "Foreground", .uid = "u-1", .resource_version = "3"})
          .ok());
  auto reqs = fake.requests();
  ASSERT_EQ(reqs.size(), 7u);
  EXPECT_EQ(HeaderOf(reqs[0], "Content-Type"), "application/json");
  EXPECT_EQ(Json::parse(reqs[1].body), cm);
  EXPECT_EQ(HeaderOf(reqs[3], "Content-Type"), "application/merge-patch+json");
  EXPECT_EQ(HeaderOf(reqs[4], "Content-Type"), "application/apply-patch+yaml");
  EXPECT_EQ(HeaderOf(reqs[5], "Content-Type"), "application/json-patch+json");
  EXPECT_EQ(
      Json::parse(reqs[6].body),
      Json::parse(R"({"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground",
                            "preconditions":{"uid":"u-1","resourceVersion":"3"}})"));
  // Refused before any request.
  EXPECT_EQ(client->Patch(kConfigMaps, "ns", "c", cm, {.type = PatchType::kApply}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Update(kConfigMaps, "ns", Json::object()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      client->Create(kConfigMaps, "ns", {{"metadata", {{"namespace", "other"}}}}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fake.requests().size(), 7u);
}

// Tests that an apiserver Status becomes a typed error whose message names the call.
TEST_F(KubeClientTest, MapsApiserverErrors) {
  FakeClient fake;
  fake.On("GET", std::string(kApi) + "/api/v1/namespaces/ns/configmaps/gone",
          StatusAnswer(404, "NotFound", "configmaps \\\"gone\\\" not found"));
  fake.On("POST", std::string(kApi) + "/api/v1/namespaces/ns/configmaps",
          StatusAnswer(409, "AlreadyExists", "configmaps \\\"c\\\" already exists"));
  fake.On(
      "GET", std::string(kApi) + "/api/v1/persistentvolumes/pv",
      absl::UnavailableError("GET https://k:6443/api/v1/persistentvolumes/pv: connection refused"));
  auto client = Make(fake);
  auto got = client->Get(kConfigMaps, "ns", "gone");
  EXPECT_TRUE(kube::IsNotFound(got.status()));
  EXPECT_EQ(got.status().message(),
            "kube get configmaps ns/gone: configmaps \"gone\" not found (NotFound, HTTP 404)");
  auto dup = client->Create(kConfigMaps, "ns", {{"metadata", {{"name", "c"}}}});
  EXPECT_TRUE(kube::IsAlreadyExists(dup.status())) << dup.status();
  EXPECT_NE(dup.status().message().find("kube create configmaps ns/c"), std::string::npos);
  auto down = client->Get(kPersistentVolumes, "", "pv");
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(down.status().message().find("kube get persistentvolumes pv: "), std::string::npos);
}

// Tests that a 429 is retried after its Retry-After (capped), up to max_attempts tries, and that a
// 5xx is retried only when it carries Retry-After.
TEST_F(KubeClientTest, RetriesTooManyRequestsHonoringRetryAfter) {
  const std::string url = std::string(kApi) + "/api/v1/namespaces/ns/pods/p";
  SequencedClient seq([&](int n, const http::ClientRequest&, FakeClient& fake) {
    if (n == 0) {
      auto busy = StatusAnswer(429, "TooManyRequests", "slow down");
      busy.headers.emplace_back("retry-after", "3");
      fake.On("GET", url, busy);
    } else if (n == 1) {
      auto busy = StatusAnswer(429, "TooManyRequests", "slow down");
      busy.headers.emplace_back("retry-after", "120");
      fake.On("GET", url, busy);
    } else if (n == 2) {
      fake.On("GET", url, FakeClient::Ok(R"({"metadata":{"name":"p"}})"));
    }
  });
  auto client = Make(seq, {.qps = 0});
  auto pod = client->Get(kPods, "ns", "p");
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_EQ(sleeper_.sleeps().size(), 2u);
  EXPECT_EQ(sleeper_.sleeps()[0], std::chrono::seconds(3));
  EXPECT_EQ(sleeper_.sleeps()[1], std::chrono::seconds(10));  // capped at max_retry_after

  // Always 429: max_attempts tries, then the error.
  FakeClient busy_fake;
  busy_fake.On("GET", url, StatusAnswer(429, "TooManyRequests", "slow down"));
  FakeSleeper counting(clock_);
  ClientOptions o{.qps = 0, .max_attempts = 3};
  o.clock = &clock_;
  o.sleeper = &counting;
  auto busy = NewClient(busy_fake, Config{.server = kApi}, o);
  auto r = busy->Get(kPods, "ns", "p");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(busy_fake.requests().size(), 3u);
  EXPECT_EQ(counting.sleeps().size(), 2u);
  EXPECT_EQ(counting.sleeps()[0], std::chrono::seconds(1));  // no Retry-After: 1 s

  // 503 without Retry-After: not retried.
  FakeClient down;
  down.On("GET", url, StatusAnswer(503, "ServiceUnavailable", "down"));
  auto c2 = NewClient(down, Config{.server = kApi}, o);
  EXPECT_EQ(c2->Get(kPods, "ns", "p").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(down.requests().size(), 1u);
}

// Tests that every request takes a token of the client-side rate limit.
TEST_F(KubeClientTest, RateLimitsRequests) {
  FakeClient fake;
  fake.On("GET", std::string(kApi) + "/api/v1/namespaces/ns/pods/p", FakeClient::Ok("{}"));
  auto client = Make(fake, {.qps = 2, .burst = 2});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(client->Get(kPods, "ns", "p").ok());
  std::chrono::nanoseconds waited(0);
  for (auto d : sleeper_.sleeps()) waited += d;
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count(), 1000);
}

// Tests that a 401 makes the client re-read its token file once (kubelet rotated it).
TEST_F(KubeClientTest, RereadsTokenFileAfterUnauthorized) {
  const std::string path = ::testing::TempDir() + "/kube_client_token";
  std::ofstream(path) << "old";
  const std::string url = std::string(kApi) + "/api/v1/namespaces/ns/pods/p";
  SequencedClient seq([&](int n, const http::ClientRequest&, FakeClient& fake) {
    if (n == 0) {
      fake.On("GET", url, StatusAnswer(401, "Unauthorized", "Unauthorized"));
      std::ofstream(path) << "new";
    } else {
      fake.On("GET", url, FakeClient::Ok("{}"));
    }
  });
  ClientOptions o{.qps = 0};
  o.clock = &clock_;
  o.sleeper = &sleeper_;
  auto client = NewClient(seq, Config{.server = kApi, .token_file = path}, o);
  ASSERT_TRUE(client->Get(kPods, "ns", "p").ok());
  auto reqs = seq.fake().requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].bearer_token, "old");
  EXPECT_EQ(reqs[1].bearer_token, "new");
}

// Tests the watch URL and event parsing: events in order, a 410 ERROR event as OutOfRange.
TEST_F(KubeClientTest, WatchesEventsAndTurnsGoneIntoOutOfRange) {
  FakeClient fake;
  const std::string url = std::string(kApi) +
                          "/api/v1/namespaces/ns/configmaps?watch=1&resourceVersion=7&"
                          "allowWatchBookmarks=true&timeoutSeconds=30&labelSelector=a%3Db";
  fake.On(
      "GET", url,
      FakeClient::Answer{
          FakeClient::Ok(""),
          {R"({"type":"ADDED","object":{"metadata":{"name":"x","resourceVersion":"8"}}})"
           "\n",
           R"({"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"9"}}})"
           "\n{\"type\":\"DELETED\",",
           R"("object":{"metadata":{"name":"x","resourceVersion":"10"}}})"
           "\n",
           R"({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},)"
           R"j("status":"Failure","message":"too old resource version: 7 (200)",)j"
           R"("reason":"Expired","code":410}})"
           "\n"},
          absl::OkStatus()});
  auto client = Make(fake);
  auto w = client->Watch(kConfigMaps, "ns",
                         {.resource_version = "7", .label_selector = "a=b", .timeout_seconds = 30});
  ASSERT_TRUE(w.ok()) << w.status();
  auto e1 = (*w)->Next();
  ASSERT_TRUE(e1.ok() && e1->has_value());
  EXPECT_EQ((*e1)->type, EventType::kAdded);
  EXPECT_EQ((**e1).object["metadata"]["name"], "x");
  auto e2 = (*w)->Next();
  EXPECT_EQ((*e2)->type, EventType::kBookmark);
  auto e3 = (*w)->Next();
  EXPECT_EQ((*e3)->type, EventType::kDeleted);
  auto e4 = (*w)->Next();
  EXPECT_TRUE(kube::IsGone(e4.status())) << e4.status();
  EXPECT_NE(e4.status().message().find("too old resource version"), std::string::npos);

  // Other ERROR events are events; junk is InvalidArgument.
  auto err = ParseWatchEvent(
      R"({"type":"ERROR","object":{"kind":"Status","code":500,"message":"m"}})", "w");
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->type, EventType::kError);
  EXPECT_EQ(ParseWatchEvent("{\"type\":\"NOPE\",\"object\":{}}", "w").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseWatchEvent("not json", "w").status().code(), absl::StatusCode::kInvalidArgument);
}

// Tests that a watch refused at its start (a 410 answer, a 403) is an error with its Status.
TEST_F(KubeClientTest, WatchRefusedAtStartIsAnError) {
  FakeClient fake;
  fake.On("GET",
          std::string(kApi) + "/api/v1/pods?watch=1&resourceVersion=1&allowWatchBookmarks=true",
          FakeClient::Answer{StatusAnswer(410, "Gone", "gone"), {}, absl::OkStatus()});
  auto client = Make(fake);
  auto w = client->Watch(kPods, "", {.resource_version = "1"});
  EXPECT_TRUE(kube::IsGone(w.status())) << w.status();
  EXPECT_NE(w.status().message().find("kube watch pods in all namespaces"), std::string::npos);
}

}  // namespace
}  // namespace wisp::kube
