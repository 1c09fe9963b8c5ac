// wisp::kube against a real kube-apiserver (issue 22 item 1; label e2e, ctest e2e_kube_client).
// The same cluster as the e2e suite (KubeCluster: a kube-apiserver started from
// WISP_E2E_KUBE_BIN_DIR, or the cluster of WISP_E2E_KUBECONFIG); neither given: one SKIP line, exit
// code 77. The client reads the cluster's kubeconfig with LoadKubeconfig, as wisp would out of
// cluster, and every claim below is the apiserver's answer: pages, conflicts, server-side apply's
// field ownership, a CRD's status subresource, watch events, the end of a watch.
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "wisp/integration/kube.hpp"
#include "wisp/integration/stack.hpp"
#include "wisp/kube/client.hpp"
#include "wisp/kube/config.hpp"
#include "wisp/kube/reflector.hpp"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;
using kube::Json;

constexpr const char* kNs = "kube-client";

KubeCluster* g_kube = nullptr;

// Counts the requests that reach the real client, so tests can tell how many pages a list took.
class CountingClient final : public http::Client {
 public:
  explicit CountingClient(http::ClientPtr real) : real_(std::move(real)) {}
  absl::StatusOr<http::ClientResponse> Send(const http::ClientRequest& r) override {
    Record(r);
    const auto t0 = std::chrono::steady_clock::now();
    auto answer = real_->Send(r);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    std::lock_guard lock(mu_);
    urls_.back() += (answer.ok() ? " -> " + std::to_string(answer->status) : " -> error") + " in " +
                    std::to_string(ms) + " ms";
    return answer;
  }
  absl::StatusOr<http::ResponseStreamPtr> Open(const http::ClientRequest& r) override {
    Record(r);
    return real_->Open(r);
  }
  std::vector<std::string> urls() const {
    std::lock_guard lock(mu_);
    return urls_;
  }

 private:
  void Record(const http::ClientRequest& r) {
    std::lock_guard lock(mu_);
    urls_.push_back(r.method + " " + r.url);
  }
  http::ClientPtr real_;
  mutable std::mutex mu_;
  std::vector<std::string> urls_;
};

class KubeClientE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = kube::LoadKubeconfig(g_kube->kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto client = kube::NewClient(config_);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }
  static Json ConfigMap(const std::string& name, const Json& data = Json::object(),
                        const Json& labels = Json::object()) {
    return {{"apiVersion", "v1"},
            {"kind", "ConfigMap"},
            {"metadata", {{"name", name}, {"namespace", kNs}, {"labels", labels}}},
            {"data", data}};
  }
  kube::Config config_;
  kube::ClientPtr client_;
};

// Tests create, get, merge patch, update with a stale resourceVersion (Conflict), delete, get
// after delete (NotFound) and a duplicate create (AlreadyExists).
TEST_F(KubeClientE2eTest, CrudWithTypedErrors) {
  auto created = client_->Create(kube::kConfigMaps, kNs, ConfigMap("crud", {{"a", "1"}}));
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string rv0 = (*created)["metadata"]["resourceVersion"];
  EXPECT_FALSE((*created)["metadata"]["uid"].get<std::string>().empty());

  auto got = client_->Get(kube::kConfigMaps, kNs, "crud");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["data"]["a"], "1");

  auto dup = client_->Create(kube::kConfigMaps, kNs, ConfigMap("crud"));
  EXPECT_TRUE(kube::IsAlreadyExists(dup.status())) << dup.status();
  std::cout << "duplicate create: " << dup.status() << "\n";

  auto patched = client_->Patch(kube::kConfigMaps, kNs, "crud", {{"data", {{"b", "2"}}}});
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["data"], (Json{{"a", "1"}, {"b", "2"}}));
  EXPECT_NE((*patched)["metadata"]["resourceVersion"], rv0);

  Json stale = *created;  // still carries rv0
  stale["data"]["c"] = "3";
  auto conflict = client_->Update(kube::kConfigMaps, kNs, stale);
  EXPECT_TRUE(kube::IsConflict(conflict.status())) << conflict.status();
  std::cout << "stale update: " << conflict.status() << "\n";

  Json fresh = *patched;
  fresh["data"]["c"] = "3";
  auto updated = client_->Update(kube::kConfigMaps, kNs, fresh);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["data"]["c"], "3");

  // A delete whose uid precondition is wrong is refused; the right one goes through.
  auto wrong = client_->Delete(kube::kConfigMaps, kNs, "crud", {.uid = "not-the-uid"});
  EXPECT_TRUE(kube::IsConflict(wrong)) << wrong;
  ASSERT_TRUE(client_
                  ->Delete(kube::kConfigMaps, kNs, "crud",
                           {.uid = (*created)["metadata"]["uid"].get<std::string>()})
                  .ok());
  auto gone = client_->Get(kube::kConfigMaps, kNs, "crud");
  EXPECT_TRUE(kube::IsNotFound(gone.status())) << gone.status();
  std::cout << "get after delete: " << gone.status() << "\n";
}

// Tests that List walks every page (limit 2 over 5 objects: 3 requests) with a label selector.
TEST_F(KubeClientE2eTest, ListsAllPages) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(client_
                    ->Create(kube::kConfigMaps, kNs,
                             ConfigMap("page-" + std::to_string(i), {}, {{"set", "pages"}}))
                    .ok());
  }
  auto http = http::NewClient({.tls = config_.tls});
  ASSERT_TRUE(http.ok()) << http.status();
  CountingClient counting(*std::move(http));
  auto client = kube::NewClient(counting, config_);
  auto list = client->List(kube::kConfigMaps, kNs, {.label_selector = "set=pages", .page_size = 2});
  ASSERT_TRUE(list.ok()) << list.status();
  std::set<std::string> names;
  for (const auto& item : list->items) {
    names.insert(item["metadata"]["name"].get<std::string>());
    EXPECT_EQ(item["kind"], "ConfigMap");
  }
  EXPECT_EQ(names.size(), 5u);
  EXPECT_FALSE(list->resource_version.empty());
  EXPECT_EQ(counting.urls().size(), 3u);
  for (const auto& u : counting.urls()) std::cout << "list page: " << u << "\n";
}

// Tests server-side apply: twice the same is idempotent (no new resourceVersion), a second field
// manager changing an owned field conflicts without force and wins with it.
TEST_F(KubeClientE2eTest, ServerSideApply) {
  const Json desired = ConfigMap("applied", {{"k", "v1"}});
  const kube::PatchOptions a{.type = kube::PatchType::kApply, .field_manager = "wisp-a"};
  auto first = client_->Patch(kube::kConfigMaps, kNs, "applied", desired, a);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = client_->Patch(kube::kConfigMaps, kNs, "applied", desired, a);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*first)["metadata"]["resourceVersion"], (*second)["metadata"]["resourceVersion"]);

  const Json other = ConfigMap("applied", {{"k", "v2"}});
  kube::PatchOptions b{.type = kube::PatchType::kApply, .field_manager = "wisp-b"};
  auto conflict = client_->Patch(kube::kConfigMaps, kNs, "applied", other, b);
  EXPECT_TRUE(kube::IsConflict(conflict.status())) << conflict.status();
  std::cout << "apply conflict: " << conflict.status() << "\n";
  b.force = true;
  auto forced = client_->Patch(kube::kConfigMaps, kNs, "applied", other, b);
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_EQ((*forced)["data"]["k"], "v2");
}

// Tests UpdateStatus and a status merge patch on a CRD with a status subresource (CDI's
// DataVolume), and that a plain Update leaves status alone.
TEST_F(KubeClientE2eTest, StatusSubresourceOfACrd) {
  const Json dv = {{"apiVersion", "cdi.kubevirt.io/v1beta1"},
                   {"kind", "DataVolume"},
                   {"metadata", {{"name", "status-dv"}, {"namespace", kNs}}},
                   {"spec",
                    {{"source", {{"blank", Json::object()}}},
                     {"storage", {{"resources", {{"requests", {{"storage", "1Gi"}}}}}}}}}};
  auto http = http::NewClient({.tls = config_.tls});
  ASSERT_TRUE(http.ok()) << http.status();
  CountingClient counting(*std::move(http));
  client_ = kube::NewClient(counting, config_);
  auto created = client_->Create(kube::kDataVolumes, kNs, dv);
  ASSERT_TRUE(created.ok()) << created.status();

  Json with_status = *created;
  with_status["status"] = {{"phase", "ImportInProgress"}, {"progress", "45.30%"}};
  auto updated = client_->UpdateStatus(kube::kDataVolumes, kNs, with_status);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["status"]["phase"], "ImportInProgress");

  // The main resource ignores status: a PUT that drops it keeps what the subresource wrote.
  Json plain = *updated;
  plain["status"] = {{"phase", "Failed"}};
  plain["metadata"]["labels"] = {{"touched", "yes"}};
  auto put = client_->Update(kube::kDataVolumes, kNs, plain);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ((*put)["status"]["phase"], "ImportInProgress");
  EXPECT_EQ((*put)["metadata"]["labels"]["touched"], "yes");

  auto patched = client_->Patch(kube::kDataVolumes, kNs, "status-dv",
                                {{"status", {{"phase", "Succeeded"}, {"progress", "100.0%"}}}},
                                {.subresource = "status"});
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["status"]["phase"], "Succeeded");
  ASSERT_TRUE(client_->Delete(kube::kDataVolumes, kNs, "status-dv").ok());
  for (const auto& u : counting.urls()) std::cout << "DataVolume: " << u << "\n";
  client_.reset();  // before `counting`
}

// Tests that a watch from a list's resourceVersion sees ADDED, MODIFIED and DELETED for a
// ConfigMap. (A 410 cannot be forced on a fresh apiserver: its watch cache still holds
// resourceVersion 1; the unit tests cover the 410 paths.)
TEST_F(KubeClientE2eTest, WatchSeesAddModifyDelete) {
  auto list = client_->List(kube::kConfigMaps, kNs);
  ASSERT_TRUE(list.ok()) << list.status();
  auto watch = client_->Watch(kube::kConfigMaps, kNs,
                              {.resource_version = list->resource_version,
                               .field_selector = "metadata.name=watched",
                               .timeout_seconds = 30});
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(client_->Create(kube::kConfigMaps, kNs, ConfigMap("watched", {{"n", "1"}})).ok());
  ASSERT_TRUE(client_->Patch(kube::kConfigMaps, kNs, "watched", {{"data", {{"n", "2"}}}}).ok());
  ASSERT_TRUE(client_->Delete(kube::kConfigMaps, kNs, "watched").ok());
  std::vector<std::string> seen;
  while (seen.size() < 3) {
    auto e = (*watch)->Next();
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE(e->has_value()) << "the watch ended early after " << seen.size() << " events";
    if ((*e)->type == kube::EventType::kBookmark) continue;
    seen.push_back(std::string(kube::EventTypeName((*e)->type)) + " " +
                   (*e)->object["metadata"]["name"].get<std::string>());
  }
  EXPECT_EQ(seen,
            (std::vector<std::string>{"ADDED watched", "MODIFIED watched", "DELETED watched"}));
}

// Records a Reflector's calls.
class Recorder : public kube::ReflectorHandler {
 public:
  void OnAdd(const Json& o) override { Push("add " + Name(o)); }
  void OnUpdate(const Json&, const Json& o) override { Push("update " + Name(o)); }
  void OnDelete(const Json& o) override { Push("delete " + Name(o)); }
  void OnSynced() override { Push("synced"); }
  bool WaitFor(const std::string& call, std::chrono::seconds limit = 20s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(
        lock, limit, [&] { return std::find(calls_.begin(), calls_.end(), call) != calls_.end(); });
  }
  std::vector<std::string> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  static std::string Name(const Json& o) { return o["metadata"]["name"].get<std::string>(); }
  void Push(std::string s) {
    std::lock_guard lock(mu_);
    calls_.push_back(std::move(s));
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> calls_;
};

// Tests that the Reflector keeps delivering events across watches the server ends
// (timeoutSeconds=1), and that Stop() is prompt.
TEST_F(KubeClientE2eTest, ReflectorSurvivesTheServerEndingWatches) {
  ASSERT_TRUE(
      client_->Create(kube::kConfigMaps, kNs, ConfigMap("refl-0", {}, {{"set", "reflector"}}))
          .ok());
  Recorder rec;
  kube::Reflector reflector(*client_, kube::kConfigMaps,
                            {.namespace_name = kNs,
                             .label_selector = "set=reflector",
                             .watch_timeout = 1s,
                             .initial_backoff = 100ms},
                            rec);
  reflector.Start();
  ASSERT_TRUE(rec.WaitFor("synced"));
  EXPECT_TRUE(reflector.HasSynced());
  EXPECT_EQ(rec.calls(), (std::vector<std::string>{"add refl-0", "synced"}));
  std::this_thread::sleep_for(3500ms);  // the apiserver ends at least two watches meanwhile
  const int64_t watches_before = reflector.stats().watches;
  EXPECT_GE(watches_before, 3) << "the server should have ended the 1 s watches";
  ASSERT_TRUE(
      client_->Create(kube::kConfigMaps, kNs, ConfigMap("refl-1", {}, {{"set", "reflector"}}))
          .ok());
  EXPECT_TRUE(rec.WaitFor("add refl-1"));
  ASSERT_TRUE(client_->Patch(kube::kConfigMaps, kNs, "refl-0", {{"data", {{"x", "y"}}}}).ok());
  EXPECT_TRUE(rec.WaitFor("update refl-0"));
  ASSERT_TRUE(client_->Delete(kube::kConfigMaps, kNs, "refl-1").ok());
  EXPECT_TRUE(rec.WaitFor("delete refl-1"));
  const auto stats = reflector.stats();
  EXPECT_EQ(stats.lists, 1);
  EXPECT_EQ(stats.errors, 0);
  const auto t0 = std::chrono::steady_clock::now();
  reflector.Stop();
  const auto stop_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_LT(stop_ms, 2500);
  std::cout << "reflector: " << stats.watches << " watches, " << stats.events << " events, "
            << stats.lists << " list; Stop() took " << stop_ms << " ms\n";
}

absl::Status InstallDataVolumeCrd() {
  if (g_kube->Kubectl({"get", "crd", "datavolumes.cdi.kubevirt.io"}).exit_code != 0) {
    CommandResult r = g_kube->Kubectl(
        {"create", "-f", SourceDir() + "/integration/k8s/crds/datavolumes.cdi.kubevirt.io.yaml"});
    if (r.exit_code != 0 && r.output.find("AlreadyExists") == std::string::npos) {
      return absl::InternalError("installing the DataVolume CRD: " + r.output);
    }
  }
  return g_kube
      ->MustKubectl({"wait", "--for=condition=Established", "--timeout=60s", "crd",
                     "datavolumes.cdi.kubevirt.io"})
      .status();
}

}  // namespace
}  // namespace wisp::integration

int main(int argc, char** argv) {
  using namespace wisp::integration;
  ::testing::InitGoogleTest(&argc, argv);
  auto kube = KubeCluster::FromEnvironment();
  if (!kube.ok()) return ExitCodeWithoutCluster(kube.status());
  g_kube = kube->get();
  for (auto step :
       {+[] { return g_kube->CreateNamespace(kNs); }, +[] { return InstallDataVolumeCrd(); }}) {
    if (absl::Status s = step(); !s.ok()) {
      std::cerr << "kube client e2e set-up failed: " << s << "\n"
                << g_kube->ApiserverLogTail() << std::endl;
      return 1;
    }
  }
  return RUN_ALL_TESTS();
}
