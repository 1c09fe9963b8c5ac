// The ServiceAccount cache against kube::testing::FakeApiServer: the watch's copy, the live GET
// when the copy lags (a pod created right after its ServiceAccount), remembered answers.
#include "cluster/service_account_cache.hpp"

#include <condition_variable>
#include <future>
#include <mutex>

#include <gtest/gtest.h>

#include "wisp/kube/testing/fake_apiserver.hpp"
#include "wisp/status/fake_clock.hpp"

namespace wisp::gateway::cluster {
namespace {

using namespace std::chrono_literals;
using admission::ServiceAccountAnswer;
using kube::Json;
using kube::testing::FakeApiServer;
using Kind = ServiceAccountAnswer::Kind;

// FakeApiServer with what the cache's tests steer: the watch can be held (the reflector then
// lags behind every write after its list), GETs counted, failed or held.
class SteeredApi final : public kube::Client {
 public:
  explicit SteeredApi(FakeApiServer& api) : api_(api) {}

  void HoldWatch(bool hold) {
    std::lock_guard lock(mu_);
    hold_watch_ = hold;
    cv_.notify_all();
  }
  void HoldGets(bool hold) {
    std::lock_guard lock(mu_);
    hold_gets_ = hold;
    cv_.notify_all();
  }
  void FailGets(absl::Status status) {
    std::lock_guard lock(mu_);
    get_error_ = std::move(status);
  }
  int gets() {
    std::lock_guard lock(mu_);
    return gets_;
  }
  // Waits until `n` GETs have started.
  bool WaitForGets(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 5s, [&] { return gets_ >= n; });
  }

  absl::StatusOr<Json> Get(const kube::Resource& r, std::string_view ns,
                           std::string_view name) override {
    {
      std::unique_lock lock(mu_);
      ++gets_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !hold_gets_; });
      if (!get_error_.ok()) return get_error_;
    }
    return api_.Get(r, ns, name);
  }
  absl::StatusOr<kube::ListResult> List(const kube::Resource& r, std::string_view ns,
                                        const kube::ListOptions& o) override {
    return api_.List(r, ns, o);
  }
  absl::StatusOr<kube::WatchPtr> Watch(const kube::Resource& r, std::string_view ns,
                                       const kube::WatchOptions& o) override {
    {
      std::unique_lock lock(mu_);
      // Held: the watch ends empty after a while, as a watch with nothing to say does.
      if (cv_.wait_for(lock, 300ms, [&] { return !hold_watch_; }) == false) {
        return kube::WatchPtr(new Empty());
      }
    }
    return api_.Watch(r, ns, o);
  }
  absl::StatusOr<Json> Create(const kube::Resource& r, std::string_view ns,
                              const Json& o) override {
    return api_.Create(r, ns, o);
  }
  absl::StatusOr<Json> Update(const kube::Resource& r, std::string_view ns,
                              const Json& o) override {
    return api_.Update(r, ns, o);
  }
  absl::StatusOr<Json> UpdateStatus(const kube::Resource& r, std::string_view ns,
                                    const Json& o) override {
    return api_.UpdateStatus(r, ns, o);
  }
  absl::StatusOr<Json> Patch(const kube::Resource& r, std::string_view ns, std::string_view name,
                             const Json& p, const kube::PatchOptions& o) override {
    return api_.Patch(r, ns, name, p, o);
  }
  absl::Status Delete(const kube::Resource& r, std::string_view ns, std::string_view name,
                      const kube::DeleteOptions& o) override {
    return api_.Delete(r, ns, name, o);
  }

 private:
  class Empty final : public kube::WatchStream {
   public:
    absl::StatusOr<std::optional<kube::WatchEvent>> Next() override {
      return std::optional<kube::WatchEvent>();
    }
  };

  FakeApiServer& api_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_watch_ = false;
  bool hold_gets_ = false;
  absl::Status get_error_;
  int gets_ = 0;
};

Json ServiceAccount(const std::string& ns, const std::string& name, Json annotations) {
  Json sa = {{"apiVersion", "v1"},
             {"kind", "ServiceAccount"},
             {"metadata", {{"name", name}, {"namespace", ns}}}};
  if (!annotations.is_null()) sa["metadata"]["annotations"] = std::move(annotations);
  return sa;
}

class ServiceAccountCacheTest : public ::testing::Test {
 protected:
  void StartCache(ServiceAccountCacheOptions options = {}) {
    options.reflector.watch_timeout = 1s;
    options.reflector.initial_backoff = 10ms;
    options.reflector.max_backoff = 50ms;
    cache_ = std::make_unique<ServiceAccountCache>(steered_, steered_, registry_, clock_, options);
    cache_->Start();
  }
  void TearDown() override {
    if (cache_) cache_->Stop();
  }

  bool WaitSynced() {
    for (int i = 0; i < 500 && !cache_->Synced(); ++i) std::this_thread::sleep_for(10ms);
    return cache_->Synced();
  }
  // Polls Cached() until `ready` holds for its answer.
  std::optional<ServiceAccountAnswer> WaitCached(
      const std::string& ns, const std::string& name,
      const std::function<bool(const std::optional<ServiceAccountAnswer>&)>& ready) {
    std::optional<ServiceAccountAnswer> a;
    for (int i = 0; i < 500; ++i) {
      a = cache_->Cached(ns, name);
      if (ready(a)) break;
      std::this_thread::sleep_for(10ms);
    }
    return a;
  }
  ServiceAccountAnswer FetchNow(const std::string& ns, const std::string& name) {
    std::promise<ServiceAccountAnswer> p;
    auto f = p.get_future();
    cache_->Fetch(ns, name, [&p](ServiceAccountAnswer a) { p.set_value(std::move(a)); });
    EXPECT_EQ(f.wait_for(5s), std::future_status::ready);
    return f.get();
  }
  // What pod admission does: the cache, else a live GET.
  ServiceAccountAnswer Lookup(const std::string& ns, const std::string& name) {
    if (auto a = cache_->Cached(ns, name)) return *a;
    return FetchNow(ns, name);
  }
  double Lookups(const std::string& source, const std::string& result) {
    for (const auto& family : registry_.Collect()) {
      if (family.name != "wisp_gateway_service_account_lookups_total") continue;
      for (const auto& m : family.metric) {
        std::string s, r;
        for (const auto& l : m.label) {
          if (l.name == "source") s = l.value;
          if (l.name == "result") r = l.value;
        }
        if (s == source && r == result) return m.counter.value;
      }
    }
    return -1;
  }

  FakeClock clock_;
  FakeApiServer api_;
  SteeredApi steered_{api_};
  prometheus::Registry registry_;
  std::unique_ptr<ServiceAccountCache> cache_;
};

// Tests that the watch's copy answers without a GET, and that kubectl's last-applied copy of the
// object is not passed on.
TEST_F(ServiceAccountCacheTest, AnswersFromTheWatchWithoutAGet) {
  api_.Put(kube::kServiceAccounts,
           ServiceAccount("ml", "loader",
                          {{"eks.amazonaws.com/role-arn", "arn:aws:iam::111122223333:role/loader"},
                           {"kubectl.kubernetes.io/last-applied-configuration", "{}"}}));
  StartCache();
  ASSERT_TRUE(WaitSynced());
  auto a = cache_->Cached("ml", "loader");
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->kind, Kind::kFound);
  EXPECT_EQ(*a->annotations,
            (Annotations{{"eks.amazonaws.com/role-arn", "arn:aws:iam::111122223333:role/loader"}}));
  EXPECT_EQ(steered_.gets(), 0);
  EXPECT_EQ(Lookups("watch", "found"), 1);
}

// Tests the race of IRSA's #174/#264: a ServiceAccount created after the watch's copy was last
// brought up to date is read from the apiserver, remembered until the watch delivers it, and the
// watch's copy is the answer from then on.
TEST_F(ServiceAccountCacheTest, ServiceAccountTheWatchHasNotSeenIsReadFromTheApiserver) {
  steered_.HoldWatch(true);
  StartCache();
  ASSERT_TRUE(WaitSynced());  // listed (nothing yet), then the watch lags
  api_.Put(kube::kServiceAccounts,
           ServiceAccount("ml", "fresh", {{"eks.amazonaws.com/role-arn", "arn:fresh"}}));
  EXPECT_FALSE(cache_->Cached("ml", "fresh").has_value());
  ServiceAccountAnswer a = FetchNow("ml", "fresh");
  ASSERT_EQ(a.kind, Kind::kFound);
  EXPECT_EQ(a.annotations->at("eks.amazonaws.com/role-arn"), "arn:fresh");
  EXPECT_EQ(steered_.gets(), 1);
  EXPECT_EQ(Lookups("get", "found"), 1);
  // Remembered: the next pod of that ServiceAccount needs no GET.
  auto again = cache_->Cached("ml", "fresh");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->kind, Kind::kFound);
  EXPECT_EQ(steered_.gets(), 1);
  EXPECT_EQ(Lookups("remembered", "found"), 1);
  // The watch catches up; a change it delivers is what the cache answers.
  steered_.HoldWatch(false);
  api_.Put(kube::kServiceAccounts,
           ServiceAccount("ml", "fresh", {{"eks.amazonaws.com/role-arn", "arn:changed"}}));
  auto changed = WaitCached("ml", "fresh", [](const std::optional<ServiceAccountAnswer>& c) {
    return c && c->kind == Kind::kFound &&
           c->annotations->at("eks.amazonaws.com/role-arn") == "arn:changed";
  });
  ASSERT_TRUE(changed.has_value());
  EXPECT_EQ(changed->annotations->at("eks.amazonaws.com/role-arn"), "arn:changed");
  EXPECT_EQ(steered_.gets(), 1);
}

// Tests that a ServiceAccount created and used at once, over and over, is always found with its
// annotations, whether the watch or a GET answers (what a Deployment created with its
// ServiceAccount in one `kubectl apply` does).
TEST_F(ServiceAccountCacheTest, CreatedThenUsedAtOnceIsAlwaysFound) {
  StartCache();
  ASSERT_TRUE(WaitSynced());
  for (int i = 0; i < 50; ++i) {
    SCOPED_TRACE(i);
    const std::string name = "sa-" + std::to_string(i);
    api_.Put(kube::kServiceAccounts,
             ServiceAccount("ml", name, {{"eks.amazonaws.com/role-arn", "arn:" + name}}));
    ServiceAccountAnswer a = Lookup("ml", name);
    ASSERT_EQ(a.kind, Kind::kFound);
    EXPECT_EQ(a.annotations->at("eks.amazonaws.com/role-arn"), "arn:" + name);
  }
}

// Tests that "no such ServiceAccount" is remembered only for missing_ttl, and forgotten at once
// when the watch delivers the ServiceAccount.
TEST_F(ServiceAccountCacheTest, MissingServiceAccountIsRememberedBriefly) {
  StartCache({.missing_ttl = 1s});
  ASSERT_TRUE(WaitSynced());
  EXPECT_EQ(FetchNow("ml", "nobody").kind, Kind::kNotFound);
  EXPECT_EQ(steered_.gets(), 1);
  auto remembered = cache_->Cached("ml", "nobody");
  ASSERT_TRUE(remembered.has_value());
  EXPECT_EQ(remembered->kind, Kind::kNotFound);
  EXPECT_EQ(Lookups("remembered", "not_found"), 1);
  clock_.Advance(1001ms);
  EXPECT_FALSE(cache_->Cached("ml", "nobody").has_value());
  EXPECT_EQ(FetchNow("ml", "nobody").kind, Kind::kNotFound);
  EXPECT_EQ(steered_.gets(), 2);
  // Created meanwhile: the watch's ADDED replaces the remembered "not found" before it expires.
  api_.Put(kube::kServiceAccounts, ServiceAccount("ml", "nobody", {{"k", "v"}}));
  auto found = WaitCached("ml", "nobody", [](const std::optional<ServiceAccountAnswer>& c) {
    return c && c->kind == Kind::kFound;
  });
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->kind, Kind::kFound);
  EXPECT_EQ(steered_.gets(), 2);
}

// Tests that a failed GET is an error for the caller and is not remembered.
TEST_F(ServiceAccountCacheTest, FailedGetIsAnErrorAndNotRemembered) {
  StartCache();
  ASSERT_TRUE(WaitSynced());
  steered_.FailGets(absl::UnavailableError("get serviceaccounts ml/x: connection refused"));
  ServiceAccountAnswer a = FetchNow("ml", "x");
  EXPECT_EQ(a.kind, Kind::kError);
  EXPECT_NE(a.error.find("connection refused"), std::string::npos) << a.error;
  EXPECT_FALSE(cache_->Cached("ml", "x").has_value());
  EXPECT_EQ(Lookups("get", "error"), 1);
}

// Tests that concurrent lookups of one ServiceAccount share one GET (a Deployment's replicas
// created together).
TEST_F(ServiceAccountCacheTest, ConcurrentFetchesShareOneGet) {
  StartCache();
  ASSERT_TRUE(WaitSynced());
  steered_.HoldWatch(true);
  api_.Put(kube::kServiceAccounts, ServiceAccount("ml", "shared", {{"k", "v"}}));
  steered_.HoldGets(true);
  std::mutex mu;
  std::vector<ServiceAccountAnswer> answers;
  std::condition_variable cv;
  for (int i = 0; i < 5; ++i) {
    cache_->Fetch("ml", "shared", [&](ServiceAccountAnswer a) {
      std::lock_guard lock(mu);
      answers.push_back(std::move(a));
      cv.notify_all();
    });
  }
  ASSERT_TRUE(steered_.WaitForGets(1));
  steered_.HoldGets(false);
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 5s, [&] { return answers.size() == 5; }));
  for (const auto& a : answers) EXPECT_EQ(a.kind, Kind::kFound);
  EXPECT_EQ(steered_.gets(), 1);
}

// Tests that a deleted ServiceAccount leaves the watch's copy.
TEST_F(ServiceAccountCacheTest, DeletedServiceAccountIsForgotten) {
  api_.Put(kube::kServiceAccounts, ServiceAccount("ml", "gone", Json()));
  StartCache();
  ASSERT_TRUE(WaitSynced());
  auto a = cache_->Cached("ml", "gone");
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->annotations->empty());
  api_.Remove(kube::kServiceAccounts, "ml", "gone");
  auto after = WaitCached(
      "ml", "gone", [](const std::optional<ServiceAccountAnswer>& c) { return !c.has_value(); });
  EXPECT_FALSE(after.has_value());
}

// Tests that stopping answers the lookups still waiting, with an error, and refuses new ones.
TEST_F(ServiceAccountCacheTest, StopAnswersWhatStillWaits) {
  StartCache({.fetch_threads = 1});
  ASSERT_TRUE(WaitSynced());
  steered_.HoldGets(true);
  std::promise<ServiceAccountAnswer> first, second;
  cache_->Fetch("ml", "a", [&](ServiceAccountAnswer a) { first.set_value(std::move(a)); });
  ASSERT_TRUE(steered_.WaitForGets(1));
  cache_->Fetch("ml", "b", [&](ServiceAccountAnswer a) { second.set_value(std::move(a)); });
  std::thread stopper([&] { cache_->Stop(); });
  auto queued = second.get_future();
  ASSERT_EQ(queued.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(queued.get().kind, Kind::kError);
  steered_.HoldGets(false);  // the GET in progress ends; its caller is answered
  stopper.join();
  auto in_progress = first.get_future();
  ASSERT_EQ(in_progress.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(in_progress.get().kind, Kind::kNotFound);  // there is no ml/a
  EXPECT_EQ(FetchNow("ml", "c").kind, Kind::kError);
}

}  // namespace
}  // namespace wisp::gateway::cluster
