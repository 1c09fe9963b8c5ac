// The populator and DataVolume controllers against kube::testing::FakeApiServer, with the test
// playing the parts of external-provisioner, the PV controller and wisp-populator (the e2e suite
// runs the real ones: integration/e2e, Story3Population).
#include "cluster/populate_controller.hpp"

#include <map>
#include <mutex>

#include <gtest/gtest.h>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/kube/testing/fake_apiserver.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp::gateway::cluster {
namespace {

using namespace std::chrono_literals;
using kube::testing::FakeApiServer;
using Found = std::optional<Json>;

// wisp-populator's volume.get by name, with phases the test sets.
class FakeVolumes {
 public:
  explicit FakeVolumes(bus::Bus& bus) {
    sub_ = *bus.Serve(bus::subjects::kVolumeGet, "wisp-populator", [this](const bus::Request& r) {
      auto get = bus::ParseBody<v1::GetVolumeRequest>(r);
      if (!get.ok()) return bus::Reply::Error(get.status());
      std::lock_guard lock(mu_);
      auto it = volumes_.find(get->name());
      if (it == volumes_.end()) return bus::Reply::Error(absl::NotFoundError("no such volume"));
      v1::GetVolumeResponse resp;
      *resp.mutable_volume() = it->second;
      return bus::Reply::Ok(resp.SerializeAsString());
    });
  }
  void Set(const std::string& name, v1::VolumePhase phase, const std::string& progress,
           const std::string& message = "") {
    std::lock_guard lock(mu_);
    v1::VolumeStatus& v = volumes_[name];
    v.set_volume_id("v-" + name);
    v.set_phase(phase);
    v.set_progress(progress);
    v.set_message(message);
  }

 private:
  std::mutex mu_;
  std::map<std::string, v1::VolumeStatus> volumes_;
  bus::SubscriptionPtr sub_;
};

class PopulateControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_.Put(kStorageClasses, {{"metadata", {{"name", "wisp-populated"}}},
                               {"provisioner", "csi.wisp.dev"},
                               {"volumeBindingMode", "Immediate"}});
    PopulateControllerOptions options;
    options.poll_interval = 50ms;
    options.upload_poll_interval = 100ms;
    options.initial_backoff = 20ms;
    options.reflector.watch_timeout = std::chrono::seconds(1);
    options.reflector.initial_backoff = 20ms;
    controller_ = std::make_unique<PopulateController>(api_, bus_, registry_, options);
  }
  void TearDown() override { controller_->Stop(); }

  static Json HttpDataVolume(const std::string& name) {
    return {{"apiVersion", "cdi.kubevirt.io/v1beta1"},
            {"kind", "DataVolume"},
            {"metadata", {{"name", name}, {"namespace", "vms"}}},
            {"spec",
             {{"source", {{"http", {{"url", "http://images/disk.qcow2"}}}}},
              {"storage",
               {{"storageClassName", "wisp-populated"},
                {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}}}};
  }
  std::string Phase(const std::string& dv) {
    auto o = api_.Find(kube::kDataVolumes, "vms", dv);
    return o ? o->value("/status/phase"_json_pointer, std::string()) : "";
  }
  // The reasons of every event posted, once one with `last` is among them (or after 5 s).
  std::vector<std::string> WaitEventReasons(const std::string& last) {
    std::vector<std::string> reasons;
    for (auto deadline = std::chrono::steady_clock::now() + 5s;;) {
      reasons.clear();
      for (const Json& e : api_.All(kube::kEvents)) reasons.push_back(e["reason"]);
      if (std::find(reasons.begin(), reasons.end(), last) != reasons.end() ||
          std::chrono::steady_clock::now() > deadline) {
        return reasons;
      }
      std::this_thread::sleep_for(5ms);
    }
  }
  bool WaitPhase(const std::string& dv, const std::string& phase) {
    return api_.WaitFor(kube::kDataVolumes, "vms", dv, [&](const Found& o) {
      return o && o->value("/status/phase"_json_pointer, std::string()) == phase;
    });
  }
  // external-provisioner and the PV controller: a PV for the prime, and the prime bound to it.
  std::string ProvisionPrime(const Json& prime) {
    const std::string pv = "pvc-" + prime["metadata"]["uid"].get<std::string>();
    api_.Put(kube::kPersistentVolumes,
             {{"metadata", {{"name", pv}}},
              {"spec",
               {{"csi", {{"driver", "csi.wisp.dev"}, {"volumeHandle", "v-1"}}},
                {"claimRef",
                 {{"namespace", "vms"},
                  {"name", prime["metadata"]["name"]},
                  {"uid", prime["metadata"]["uid"]}}}}}});
    Json bound = prime;
    bound["spec"]["volumeName"] = pv;
    bound["status"] = {{"phase", "Bound"}};
    api_.Put(kube::kPersistentVolumeClaims, bound);
    return pv;
  }

  FakeApiServer api_;
  bus::testing::InMemoryBus bus_;
  FakeVolumes volumes_{bus_};
  prometheus::Registry registry_;
  std::unique_ptr<PopulateController> controller_;
};

// Tests the whole way of an http DataVolume: VolumeImportSource and PVC, the prime, progress, the
// PV handed over, the prime deleted, Succeeded, and the events on the way.
TEST_F(PopulateControllerTest, HttpDataVolumeToSucceeded) {
  api_.Put(kube::kDataVolumes, HttpDataVolume("golden"));
  controller_->Start();

  ASSERT_TRUE(api_.WaitFor(kube::kVolumeImportSources, "vms", "golden",
                           [](const Found& o) { return o.has_value(); }));
  ASSERT_TRUE(api_.WaitFor(kube::kPersistentVolumeClaims, "vms", "golden",
                           [](const Found& o) { return o.has_value(); }));
  const Json pvc = *api_.Find(kube::kPersistentVolumeClaims, "vms", "golden");
  EXPECT_EQ(pvc["spec"]["dataSourceRef"]["kind"], "VolumeImportSource");
  const std::string uid = pvc["metadata"]["uid"];
  const std::string prime_name = "wisp-prime-" + uid;
  ASSERT_TRUE(api_.WaitFor(kube::kPersistentVolumeClaims, "vms", prime_name,
                           [](const Found& o) { return o.has_value(); }));
  Json prime = *api_.Find(kube::kPersistentVolumeClaims, "vms", prime_name);
  EXPECT_EQ(prime["metadata"]["annotations"]["wisp.dev/prime-for"], "golden");
  ASSERT_TRUE(WaitPhase("golden", "ImportScheduled")) << Phase("golden");

  // wisp-populator reports progress on the prime's volume (external-provisioner's name for it).
  const std::string volume = "pvc-" + prime["metadata"]["uid"].get<std::string>();
  volumes_.Set(volume, v1::IMPORT_IN_PROGRESS, "45.30%");
  ASSERT_TRUE(api_.WaitFor(kube::kDataVolumes, "vms", "golden", [](const Found& o) {
    return o && o->value("/status/progress"_json_pointer, std::string()) == "45.30%";
  }));
  EXPECT_EQ(Phase("golden"), "ImportInProgress");

  volumes_.Set(volume, v1::SUCCEEDED, "100.0%");
  const std::string pv = ProvisionPrime(prime);
  ASSERT_TRUE(api_.WaitFor(kube::kPersistentVolumes, "", pv, [&](const Found& o) {
    return o && o->value("/spec/claimRef/uid"_json_pointer, std::string()) == uid;
  }));
  const Json handed = *api_.Find(kube::kPersistentVolumes, "", pv);
  EXPECT_EQ(handed["spec"]["claimRef"]["name"], "golden");
  EXPECT_FALSE(handed["spec"]["claimRef"].contains("resourceVersion"));

  // The PV controller binds the PVC.
  Json bound = *api_.Find(kube::kPersistentVolumeClaims, "vms", "golden");
  bound["spec"]["volumeName"] = pv;
  bound["status"] = {{"phase", "Bound"}};
  api_.Put(kube::kPersistentVolumeClaims, bound);
  ASSERT_TRUE(api_.WaitFor(kube::kPersistentVolumeClaims, "vms", prime_name,
                           [](const Found& o) { return !o.has_value(); }));
  ASSERT_TRUE(WaitPhase("golden", "Succeeded")) << Phase("golden");

  // The events follow the status write that they tell of.
  const std::vector<std::string> reasons = WaitEventReasons("ImportSucceeded");
  for (const char* want :
       {"Populating", "Populated", "ImportScheduled", "ImportInProgress", "ImportSucceeded"}) {
    EXPECT_NE(std::find(reasons.begin(), reasons.end(), want), reasons.end()) << want;
  }
  // Succeeded is written once: a DataVolume that does not change is not written again.
  std::this_thread::sleep_for(200ms);
  int succeeded_writes = 0;
  for (const auto& w : api_.Writes()) {
    if (w.plural == "datavolumes" && w.subresource == "status" &&
        w.body.value("/status/phase"_json_pointer, std::string()) == "Succeeded") {
      ++succeeded_writes;
    }
  }
  EXPECT_EQ(succeeded_writes, 1);
}

// Tests that a failed import fails the DataVolume with the populator's message and warns on the
// PVC once, and that the PVC is never handed a volume.
TEST_F(PopulateControllerTest, FailedImportFailsTheDataVolumeNamingTheCause) {
  api_.Put(kube::kDataVolumes, HttpDataVolume("bad"));
  controller_->Start();
  ASSERT_TRUE(api_.WaitFor(kube::kPersistentVolumeClaims, "vms", "bad",
                           [](const Found& o) { return o.has_value(); }));
  const std::string uid =
      (*api_.Find(kube::kPersistentVolumeClaims, "vms", "bad"))["metadata"]["uid"];
  ASSERT_TRUE(api_.WaitFor(kube::kPersistentVolumeClaims, "vms", "wisp-prime-" + uid,
                           [](const Found& o) { return o.has_value(); }));
  const Json prime = *api_.Find(kube::kPersistentVolumeClaims, "vms", "wisp-prime-" + uid);
  volumes_.Set("pvc-" + prime["metadata"]["uid"].get<std::string>(), v1::FAILED, "3.00%",
               "HTTP 404 Not Found from http://images/disk.qcow2");
  ASSERT_TRUE(WaitPhase("bad", "Failed")) << Phase("bad");
  const Json dv = *api_.Find(kube::kDataVolumes, "vms", "bad");
  bool named = false;
  for (const auto& c : dv["status"]["conditions"]) {
    if (c["type"] == "Ready")
      named = c["message"] == "HTTP 404 Not Found from http://images/disk.qcow2";
  }
  EXPECT_TRUE(named) << dv.dump(2);
  auto warnings = [&] {
    int n = 0;
    for (const Json& e : api_.All(kube::kEvents)) n += e["reason"] == "PopulationFailed";
    return n;
  };
  for (int i = 0; i < 100 && warnings() == 0; ++i) std::this_thread::sleep_for(50ms);
  std::this_thread::sleep_for(300ms);  // several more looks at the failed volume
  EXPECT_EQ(warnings(), 1);
  EXPECT_EQ(api_.Find(kube::kPersistentVolumeClaims, "vms", "bad")
                ->value("/spec/volumeName"_json_pointer, std::string()),
            "");
}

// Tests an upload DataVolume: an upload VolumeImportSource and the PVC naming it, the prime, the
// DataVolume UploadScheduled then UploadReady and annotated with the volume's id, an upload that
// fails (a Warning, still UploadReady, nothing handed over), then one that succeeds: the PV is
// handed over and the DataVolume Succeeded, with CDI's upload events.
TEST_F(PopulateControllerTest, UploadDataVolumeToSucceeded) {
  Json dv = HttpDataVolume("up");
  dv["spec"]["source"] = {{"upload", Json::object()}};
  api_.Put(kube::kDataVolumes, dv);
  controller_->Start();

  ASSERT_TRUE(api_.WaitFor(kube::kVolumeImportSources, "vms", "up",
                           [](const Found& o) { return o.has_value(); }));
  EXPECT_EQ((*api_.Find(kube::kVolumeImportSources, "vms", "up"))["spec"]["source"],
            Json({{"upload", Json::object()}}));
  ASSERT_TRUE(api_.WaitFor(kube::kPersistentVolumeClaims, "vms", "up",
                           [](const Found& o) { return o.has_value(); }));
  const Json pvc = *api_.Find(kube::kPersistentVolumeClaims, "vms", "up");
  EXPECT_EQ(pvc["spec"]["dataSourceRef"],
            Json({{"apiGroup", "wisp.dev"}, {"kind", "VolumeImportSource"}, {"name", "up"}}));
  const std::string uid = pvc["metadata"]["uid"];
  const std::string prime_name = "wisp-prime-" + uid;
  ASSERT_TRUE(api_.WaitFor(kube::kPersistentVolumeClaims, "vms", prime_name,
                           [](const Found& o) { return o.has_value(); }));
  const Json prime = *api_.Find(kube::kPersistentVolumeClaims, "vms", prime_name);
  ASSERT_TRUE(WaitPhase("up", "UploadScheduled")) << Phase("up");
  EXPECT_FALSE(api_.Find(kube::kDataVolumes, "vms", "up")
                   ->contains("/metadata/annotations/wisp.dev~1upload-volume-id"_json_pointer));

  // external-provisioner's CreateVolume made the upload target; it waits for the bytes.
  const std::string volume = "pvc-" + prime["metadata"]["uid"].get<std::string>();
  volumes_.Set(volume, v1::UPLOAD_READY, "N/A", "waiting for an upload");
  ASSERT_TRUE(WaitPhase("up", "UploadReady")) << Phase("up");
  ASSERT_TRUE(api_.WaitFor(kube::kDataVolumes, "vms", "up", [&](const Found& o) {
    return o && o->value("/metadata/annotations/wisp.dev~1upload-volume-id"_json_pointer,
                         std::string()) == "v-" + volume;
  }));
  Json ready = *api_.Find(kube::kDataVolumes, "vms", "up");
  for (const auto& c : ready["status"]["conditions"]) {
    if (c["type"] == "Running") {
      EXPECT_EQ(c["status"], "True");
      EXPECT_EQ(c["message"], "waiting for an upload: wispctl datavolume upload vms/up FILE");
    }
  }
  // The DataVolume's spec is never written: only its annotation and status.
  for (const auto& w : api_.Writes()) {
    if (w.plural == "datavolumes" && w.subresource.empty()) {
      EXPECT_FALSE(w.body.contains("spec")) << w.body.dump();
    }
  }

  // A bad image: wisp-populator sends the volume back to UPLOAD_READY with the cause.
  const std::string cause = "upload failed: sha256 mismatch; PUT the image again to retry";
  volumes_.Set(volume, v1::UPLOAD_READY, "N/A", cause);
  auto upload_failures = [&] {
    int n = 0;
    for (const Json& e : api_.All(kube::kEvents)) {
      n += e["reason"] == "UploadFailed" && e["message"] == cause;
    }
    return n;
  };
  for (int i = 0; i < 200 && upload_failures() == 0; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(upload_failures(), 1);
  EXPECT_EQ(Phase("up"), "UploadReady");
  EXPECT_EQ(api_.Find(kube::kPersistentVolumeClaims, "vms", "up")
                ->value("/spec/volumeName"_json_pointer, std::string()),
            "");

  // The upload runs, then completes; external-provisioner's next CreateVolume returns the volume.
  volumes_.Set(volume, v1::UPLOAD_IN_PROGRESS, "40.00%", "upload in progress");
  ASSERT_TRUE(api_.WaitFor(kube::kDataVolumes, "vms", "up", [](const Found& o) {
    return o && o->value("/status/progress"_json_pointer, std::string()) == "40.00%";
  }));
  volumes_.Set(volume, v1::SUCCEEDED, "100.0%");
  const std::string pv = ProvisionPrime(prime);
  ASSERT_TRUE(api_.WaitFor(kube::kPersistentVolumes, "", pv, [&](const Found& o) {
    return o && o->value("/spec/claimRef/uid"_json_pointer, std::string()) == uid;
  }));
  Json bound = *api_.Find(kube::kPersistentVolumeClaims, "vms", "up");
  bound["spec"]["volumeName"] = pv;
  bound["status"] = {{"phase", "Bound"}};
  api_.Put(kube::kPersistentVolumeClaims, bound);
  ASSERT_TRUE(WaitPhase("up", "Succeeded")) << Phase("up");
  ASSERT_TRUE(api_.WaitFor(kube::kPersistentVolumeClaims, "vms", prime_name,
                           [](const Found& o) { return !o.has_value(); }));

  const std::vector<std::string> reasons = WaitEventReasons("UploadSucceeded");
  for (const char* want :
       {"Populating", "Populated", "UploadScheduled", "UploadReady", "UploadSucceeded"}) {
    EXPECT_NE(std::find(reasons.begin(), reasons.end(), want), reasons.end()) << want;
  }
  EXPECT_EQ(std::find(reasons.begin(), reasons.end(), "ImportScheduled"), reasons.end());
}

// Tests that a replica that does not lead writes nothing, and one that starts leading catches up.
TEST_F(PopulateControllerTest, OnlyTheLeaderWrites) {
  controller_->SetLeading(false);
  api_.Put(kube::kDataVolumes, HttpDataVolume("waits"));
  controller_->Start();
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(api_.Writes().empty())
      << api_.Writes().front().verb << " " << api_.Writes().front().plural;
  controller_->SetLeading(true);
  EXPECT_TRUE(api_.WaitFor(kube::kPersistentVolumeClaims, "vms", "waits",
                           [](const Found& o) { return o.has_value(); }));
}

// Tests that a PVC of another provisioner's class, or without a wisp source, is left alone.
TEST_F(PopulateControllerTest, LeavesOtherClaimsAlone) {
  api_.Put(kStorageClasses,
           {{"metadata", {{"name", "other"}}}, {"provisioner", "ebs.csi.aws.com"}});
  api_.Put(kube::kPersistentVolumeClaims,
           {{"metadata", {{"name", "theirs"}, {"namespace", "vms"}}},
            {"spec",
             {{"storageClassName", "other"},
              {"dataSourceRef",
               {{"apiGroup", "wisp.dev"}, {"kind", "VolumeImportSource"}, {"name", "x"}}}}}});
  api_.Put(kube::kPersistentVolumeClaims, {{"metadata", {{"name", "plain"}, {"namespace", "vms"}}},
                                           {"spec", {{"storageClassName", "wisp-populated"}}}});
  controller_->Start();
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(api_.Writes().empty());
}

}  // namespace
}  // namespace wisp::gateway::cluster
