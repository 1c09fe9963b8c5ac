#include "cluster/committed_objects.hpp"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"

namespace wisp::gateway::cluster {
namespace {

using namespace std::chrono_literals;
using kube::Json;

// A kube::Client with one list per resource and a queue of watch events the test pushes; the
// other verbs answer Unimplemented, since a Reflector never calls them.
class FakeKube final : public kube::Client {
 public:
  void SetList(const std::string& plural, std::vector<Json> items) {
    std::lock_guard lock(mu_);
    lists_[plural] = std::move(items);
  }
  // OkStatus() clears the error.
  void SetListError(const std::string& plural, absl::Status status) {
    std::lock_guard lock(mu_);
    if (status.ok()) {
      list_errors_.erase(plural);
    } else {
      list_errors_[plural] = std::move(status);
    }
  }
  void Push(const std::string& plural, kube::EventType type, Json object) {
    std::lock_guard lock(mu_);
    events_[plural].push_back({type, std::move(object)});
    cv_.notify_all();
  }

  absl::StatusOr<kube::ListResult> List(const kube::Resource& r, std::string_view,
                                        const kube::ListOptions&) override {
    std::lock_guard lock(mu_);
    if (auto it = list_errors_.find(r.plural); it != list_errors_.end()) return it->second;
    return kube::ListResult{lists_[r.plural], "1"};
  }
  absl::StatusOr<kube::WatchPtr> Watch(const kube::Resource& r, std::string_view,
                                       const kube::WatchOptions&) override {
    return kube::WatchPtr(new Stream(*this, r.plural));
  }
  absl::StatusOr<Json> Get(const kube::Resource&, std::string_view, std::string_view) override {
    return absl::UnimplementedError("FakeKube serves List and Watch, all a Reflector calls");
  }
  absl::StatusOr<Json> Create(const kube::Resource&, std::string_view, const Json&) override {
    return absl::UnimplementedError("FakeKube serves List and Watch, all a Reflector calls");
  }
  absl::StatusOr<Json> Update(const kube::Resource&, std::string_view, const Json&) override {
    return absl::UnimplementedError("FakeKube serves List and Watch, all a Reflector calls");
  }
  absl::StatusOr<Json> UpdateStatus(const kube::Resource&, std::string_view, const Json&) override {
    return absl::UnimplementedError("FakeKube serves List and Watch, all a Reflector calls");
  }
  absl::StatusOr<Json> Patch(const kube::Resource&, std::string_view, std::string_view, const Json&,
                             const kube::PatchOptions&) override {
    return absl::UnimplementedError("FakeKube serves List and Watch, all a Reflector calls");
  }
  absl::Status Delete(const kube::Resource&, std::string_view, std::string_view,
                      const kube::DeleteOptions&) override {
    return absl::UnimplementedError("FakeKube serves List and Watch, all a Reflector calls");
  }

 private:
  // Hands out the pushed events; ends the watch (nullopt) after 200 ms without one, as a server
  // ends a watch at its timeout.
  class Stream final : public kube::WatchStream {
   public:
    Stream(FakeKube& kube, std::string plural) : kube_(kube), plural_(std::move(plural)) {}
    absl::StatusOr<std::optional<kube::WatchEvent>> Next() override {
      std::unique_lock lock(kube_.mu_);
      auto& q = kube_.events_[plural_];
      if (!kube_.cv_.wait_for(lock, 200ms, [&] { return !q.empty(); })) {
        return std::optional<kube::WatchEvent>();
      }
      kube::WatchEvent e = std::move(q.front());
      q.pop_front();
      return std::optional<kube::WatchEvent>(std::move(e));
    }

   private:
    FakeKube& kube_;
    std::string plural_;
  };

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<Json>> lists_;
  std::map<std::string, absl::Status> list_errors_;
  std::map<std::string, std::deque<kube::WatchEvent>> events_;
};

Json Pvc(const std::string& name, const std::string& rv, const std::string& uid = "u1") {
  return {
      {"metadata", {{"name", name}, {"namespace", "ns"}, {"resourceVersion", rv}, {"uid", uid}}},
      {"spec", {{"accessModes", {"ReadWriteOnce"}}}}};
}

// wisp-policy's record endpoint, as a test double: keeps what it was sent; can refuse to answer
// (Unavailable) the first `fail_first` times.
class PolicyStandIn {
 public:
  explicit PolicyStandIn(bus::testing::InMemoryBus& bus, int fail_first = 0)
      : fail_left_(fail_first) {
    sub_ = *bus.Serve(bus::subjects::kPolicyRecord, "wisp-policy", [this](const bus::Request& r) {
      auto object = bus::ParseBody<v1::CommittedObject>(r);
      if (!object.ok()) return bus::Reply::Error(object.status());
      std::lock_guard lock(mu_);
      if (fail_left_ > 0) {
        --fail_left_;
        return bus::Reply::Error(absl::UnavailableError("KV down"));
      }
      seen_.push_back(object->event() + " " + object->kind().kind() + " " +
                      (object->event() == "SYNCED" ? object->object_json()
                                                   : object->namespace_() + "/" + object->name()));
      objects_.push_back(*object);
      cv_.notify_all();
      v1::CommitResult result;
      result.set_writes(1);
      return bus::ProtoReply(result);
    });
  }
  std::vector<std::string> WaitFor(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 5s, [&] { return seen_.size() >= n; });
    return seen_;
  }
  v1::CommittedObject Object(size_t i) {
    std::lock_guard lock(mu_);
    return objects_.at(i);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int fail_left_;
  std::vector<std::string> seen_;
  std::vector<v1::CommittedObject> objects_;
  bus::SubscriptionPtr sub_;
};

// Synced() turns true just after wisp-policy's answer to SYNCED: poll for it (at most 5 s).
bool WaitSynced(const CommittedObjects& watch) {
  for (int i = 0; i < 500 && !watch.Synced(); ++i) std::this_thread::sleep_for(10ms);
  return watch.Synced();
}

CommittedObjectsOptions PvcsOnly() {
  CommittedObjectsOptions o;
  o.kinds = {RecordedKinds()[0]};
  o.initial_backoff = 10ms;
  o.max_backoff = 40ms;
  o.reflector.watch_timeout = 1s;
  o.reflector.initial_backoff = 10ms;
  o.reflector.max_backoff = 50ms;
  return o;
}

// Tests that a list's items go to wisp-policy as ADDED with apiVersion and kind filled in (a
// list's items carry neither), then SYNCED naming every object, then watch events in order.
TEST(CommittedObjectsTest, ListThenSyncedThenWatchEventsInOrder) {
  FakeKube kube;
  kube.SetList("persistentvolumeclaims", {Pvc("a", "1"), Pvc("b", "1")});
  bus::testing::InMemoryBus bus;
  PolicyStandIn policy(bus);
  prometheus::Registry registry;
  CommittedObjects watch(kube, bus, registry, PvcsOnly());
  watch.Start();
  ASSERT_EQ(policy.WaitFor(3).size(), 3u);
  EXPECT_TRUE(WaitSynced(watch));
  kube.Push("persistentvolumeclaims", kube::EventType::kModified, Pvc("a", "2"));
  kube.Push("persistentvolumeclaims", kube::EventType::kDeleted, Pvc("b", "3"));
  kube.Push("persistentvolumeclaims", kube::EventType::kAdded, Pvc("c", "4"));
  auto seen = policy.WaitFor(6);
  watch.Stop();
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "ADDED PersistentVolumeClaim ns/a", "ADDED PersistentVolumeClaim ns/b",
                      R"(SYNCED PersistentVolumeClaim ["ns/a","ns/b"])",
                      "MODIFIED PersistentVolumeClaim ns/a", "DELETED PersistentVolumeClaim ns/b",
                      "ADDED PersistentVolumeClaim ns/c"}));
  v1::CommittedObject first = policy.Object(0);
  EXPECT_EQ(first.kind().group(), "");
  EXPECT_EQ(first.kind().version(), "v1");
  Json stored = Json::parse(first.object_json());
  EXPECT_EQ(stored["apiVersion"], "v1");
  EXPECT_EQ(stored["kind"], "PersistentVolumeClaim");
  EXPECT_EQ(stored["metadata"]["uid"], "u1");
}

// Tests that an event wisp-policy does not take (Unavailable) is sent again until it is, before
// any later event: the watch waits, nothing is skipped or reordered.
TEST(CommittedObjectsTest, RetriesUntilPolicyTakesItAndKeepsOrder) {
  FakeKube kube;
  kube.SetList("persistentvolumeclaims", {Pvc("a", "1")});
  bus::testing::InMemoryBus bus;
  PolicyStandIn policy(bus, /*fail_first=*/3);
  prometheus::Registry registry;
  CommittedObjects watch(kube, bus, registry, PvcsOnly());
  watch.Start();
  kube.Push("persistentvolumeclaims", kube::EventType::kAdded, Pvc("b", "2"));
  auto seen = policy.WaitFor(3);
  watch.Stop();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], "ADDED PersistentVolumeClaim ns/a");
  EXPECT_EQ(seen[1], R"(SYNCED PersistentVolumeClaim ["ns/a"])");
  EXPECT_EQ(seen[2], "ADDED PersistentVolumeClaim ns/b");
  auto families = registry.Collect();
  double retried = 0;
  for (const auto& f : families) {
    if (f.name != "wisp_gateway_committed_objects_total") continue;
    for (const auto& m : f.metric) {
      for (const auto& l : m.label) {
        if (l.name == "result" && l.value == "retried") retried += m.counter.value;
      }
    }
  }
  EXPECT_EQ(retried, 3);
}

// Tests that a kind whose API is not served (CRD not installed) does not hold up the others,
// and that the whole watch is not Synced() until it is.
TEST(CommittedObjectsTest, MissingCrdDoesNotHoldUpOtherKinds) {
  FakeKube kube;
  kube.SetList("persistentvolumeclaims", {Pvc("a", "1")});
  kube.SetListError("datavolumes", absl::NotFoundError("the server could not find the resource"));
  bus::testing::InMemoryBus bus;
  PolicyStandIn policy(bus);
  prometheus::Registry registry;
  CommittedObjectsOptions options = PvcsOnly();
  options.kinds = {RecordedKinds()[0], RecordedKinds()[1]};
  CommittedObjects watch(kube, bus, registry, options);
  watch.Start();
  auto seen = policy.WaitFor(2);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], R"(SYNCED PersistentVolumeClaim ["ns/a"])");
  EXPECT_FALSE(watch.Synced());
  kube.SetListError("datavolumes", absl::OkStatus());
  kube.SetList("datavolumes", {});
  auto after = policy.WaitFor(3);
  watch.Stop();
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after[2], "SYNCED DataVolume []");
  EXPECT_TRUE(WaitSynced(watch));
}

TEST(CommittedObjectsTest, ToCommittedNamesTheKindsApiGroup) {
  v1::CommittedObject dv = ToCommitted(RecordedKinds()[1], "ADDED",
                                       Json{{"metadata", {{"name", "d"}, {"namespace", "vms"}}}});
  EXPECT_EQ(dv.kind().group(), "cdi.kubevirt.io");
  EXPECT_EQ(dv.kind().version(), "v1beta1");
  EXPECT_EQ(dv.kind().kind(), "DataVolume");
  EXPECT_EQ(Json::parse(dv.object_json())["apiVersion"], "cdi.kubevirt.io/v1beta1");
  v1::CommittedObject vis = ToCommitted(RecordedKinds()[2], "DELETED",
                                        Json{{"metadata", {{"name", "v"}, {"namespace", "vms"}}}});
  EXPECT_EQ(vis.kind().group(), "wisp.dev");
  EXPECT_EQ(vis.event(), "DELETED");
  EXPECT_EQ(vis.namespace_(), "vms");
  EXPECT_EQ(vis.name(), "v");
  v1::CommittedObject cdi = ToCommitted(RecordedKinds()[3], "ADDED",
                                        Json{{"metadata", {{"name", "v"}, {"namespace", "vms"}}}});
  EXPECT_EQ(cdi.kind().group(), "cdi.kubevirt.io");
  EXPECT_EQ(cdi.kind().version(), "v1beta1");
  EXPECT_EQ(cdi.kind().kind(), "VolumeImportSource");
  EXPECT_EQ(Json::parse(cdi.object_json())["apiVersion"], "cdi.kubevirt.io/v1beta1");
}

// Tests that every watched kind has a metrics label of its own: the two VolumeImportSources share
// a kind name, and one synced gauge for both would say Synced while CDI's CRD is missing.
TEST(CommittedObjectsTest, EveryKindHasItsOwnLabel) {
  std::set<std::string> labels;
  for (const WatchedKind& k : RecordedKinds()) {
    EXPECT_TRUE(labels.insert(k.Label()).second) << k.Label();
  }
  EXPECT_EQ(RecordedKinds()[2].Label(), "VolumeImportSource");
  EXPECT_EQ(RecordedKinds()[3].Label(), "VolumeImportSource.cdi.kubevirt.io");
}

}  // namespace
}  // namespace wisp::gateway::cluster
