// Records follow committed objects: EvaluateCommitted, StaleRecordKeys, and PolicyService's
// wisp.v1.policy.record endpoint (admission writes nothing).
#include <gtest/gtest.h>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/policy/policy_service.hpp"
#include "wisp/policy/rules.hpp"
#include "wisp/status/fake_clock.hpp"
#include "service_fixture.hpp"

namespace wisp::policy {
namespace {

using namespace std::chrono_literals;
using k8s::Json;

Json PlainPvc(const std::string& name, const std::string& uid) {
  return {
      {"apiVersion", "v1"},
      {"kind", "PersistentVolumeClaim"},
      {"metadata", {{"name", name}, {"namespace", "vms"}, {"uid", uid}}},
      {"spec",
       {{"accessModes", {"ReadWriteOnce"}}, {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}};
}

Json GoldenDv(const std::string& name = "cirros") {
  return Json::parse(R"({"apiVersion":"cdi.kubevirt.io/v1beta1","kind":"DataVolume",
    "metadata":{"name":")" +
                     name + R"(","namespace":"vms","uid":"dv-uid"},
    "spec":{"source":{"http":{"url":"https://mirror.example/cirros.qcow2.xz"}},
            "pvc":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"10Gi"}}}}})");
}

v1::CommittedObject Committed(const std::string& event, const std::string& group,
                              const std::string& kind, const Json& object) {
  v1::CommittedObject c;
  c.set_event(event);
  c.mutable_kind()->set_group(group);
  c.mutable_kind()->set_version(group.empty() ? "v1" : "v1beta1");
  c.mutable_kind()->set_kind(kind);
  c.set_namespace_("vms");
  c.set_name(object["metadata"]["name"].get<std::string>());
  c.set_object_json(object.dump());
  return c;
}

RecordLookup Lookup(const std::map<std::string, std::string>& store) {
  return [&store](std::string_view bucket,
                  std::string_view key) -> absl::StatusOr<std::optional<std::string>> {
    auto it = store.find(std::string(bucket) + "/" + std::string(key));
    if (it == store.end()) return std::optional<std::string>();
    return std::optional(it->second);
  };
}

// Tests that a committed DataVolume is recorded although a PVC of its name exists (the
// DataVolume's own PVC, by then): the destination-PVC check is admission's alone.
TEST(EvaluateCommittedTest, DataVolumeIsRecordedOverItsOwnPvc) {
  std::map<std::string, std::string> store;
  auto pvc = EvaluateCommitted(
      Committed("ADDED", "", "PersistentVolumeClaim", PlainPvc("cirros", "pvc-uid")), Policy{},
      Lookup(store), 1);
  ASSERT_TRUE(pvc.ok()) << pvc.status();
  ASSERT_EQ(pvc->writes.size(), 1u);
  store["wisp_sources/" + pvc->writes[0].key] = pvc->writes[0].value;
  auto dv = EvaluateCommitted(Committed("MODIFIED", "cdi.kubevirt.io", "DataVolume", GoldenDv()),
                              Policy{}, Lookup(store), 1);
  ASSERT_TRUE(dv.ok()) << dv.status();
  EXPECT_TRUE(dv->refused.empty()) << dv->refused;
  ASSERT_EQ(dv->writes.size(), 1u);
  EXPECT_EQ(dv->writes[0].key, "vms.DataVolume.cirros");
  v1::PopulationRecord r;
  ASSERT_TRUE(r.ParseFromString(dv->writes[0].value));
  EXPECT_EQ(r.source().http().url(), "https://mirror.example/cirros.qcow2.xz");
  EXPECT_EQ(r.uid(), "dv-uid");
}

// Tests that DELETED erases the record, and that an object the rules refuse as stored (here a
// DataVolume without a target) has its record erased with the reason.
TEST(EvaluateCommittedTest, DeletedAndRefusedEraseTheRecord) {
  std::map<std::string, std::string> store;
  auto gone = EvaluateCommitted(Committed("DELETED", "cdi.kubevirt.io", "DataVolume", GoldenDv()),
                                Policy{}, Lookup(store), 1);
  ASSERT_TRUE(gone.ok()) << gone.status();
  ASSERT_EQ(gone->writes.size(), 1u);
  EXPECT_TRUE(gone->writes[0].erase);
  EXPECT_EQ(gone->writes[0].key, "vms.DataVolume.cirros");

  Json bad = GoldenDv();
  bad["spec"].erase("pvc");
  auto refused = EvaluateCommitted(Committed("ADDED", "cdi.kubevirt.io", "DataVolume", bad),
                                   Policy{}, Lookup(store), 1);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->refused, "Missing Data volume PVC");
  ASSERT_EQ(refused->writes.size(), 1u);
  EXPECT_TRUE(refused->writes[0].erase);
}

TEST(EvaluateCommittedTest, BadInputNamesTheField) {
  std::map<std::string, std::string> store;
  auto event =
      EvaluateCommitted(Committed("BOOKMARK", "", "PersistentVolumeClaim", PlainPvc("a", "u")),
                        Policy{}, Lookup(store), 1);
  EXPECT_TRUE(absl::IsInvalidArgument(event.status()));
  EXPECT_NE(event.status().message().find("event:"), std::string::npos);
  auto pod = EvaluateCommitted(Committed("ADDED", "", "Pod", PlainPvc("a", "u")), Policy{},
                               Lookup(store), 1);
  EXPECT_TRUE(absl::IsInvalidArgument(pod.status()));
  EXPECT_NE(pod.status().message().find("kind:"), std::string::npos);
  v1::CommittedObject broken = Committed("ADDED", "", "PersistentVolumeClaim", PlainPvc("a", "u"));
  broken.set_object_json("{not json");
  EXPECT_TRUE(
      absl::IsInvalidArgument(EvaluateCommitted(broken, Policy{}, Lookup(store), 1).status()));
}

TEST(StaleRecordKeysTest, OnlyTheKindsRecordsThatNameNoLiveObject) {
  v1::GroupVersionKind pvc;
  pvc.set_kind("PersistentVolumeClaim");
  auto stale = StaleRecordKeys(
      pvc, {"vms/a", "vms/b.c"},
      {"vms.PersistentVolumeClaim.a", "vms.PersistentVolumeClaim.b.c",
       "vms.PersistentVolumeClaim.gone", "vms.DataVolume.gone", "other.PersistentVolumeClaim.a"});
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_EQ(*stale, (std::vector<std::string>{"vms.PersistentVolumeClaim.gone",
                                              "other.PersistentVolumeClaim.a"}));
  v1::GroupVersionKind pod;
  pod.set_kind("Pod");
  EXPECT_TRUE(absl::IsInvalidArgument(StaleRecordKeys(pod, {}, {}).status()));
}

// Tests that wisp.dev's and CDI's VolumeImportSources keep apart: each kind's SYNCED sweeps only
// its own records, whatever their names.
TEST(StaleRecordKeysTest, TheTwoVolumeImportSourcesKeepApart) {
  const std::vector<std::string> keys = {
      "vms.VolumeImportSource.a", "vms.VolumeImportSource.cdi.kubevirt.io.x",
      "vms.cdi.kubevirt.io.VolumeImportSource.a", "vms.cdi.kubevirt.io.VolumeImportSource.b"};
  v1::GroupVersionKind wisp;
  wisp.set_group("wisp.dev");
  wisp.set_kind("VolumeImportSource");
  auto stale = StaleRecordKeys(wisp, {"vms/a"}, keys);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_EQ(*stale, (std::vector<std::string>{"vms.VolumeImportSource.cdi.kubevirt.io.x"}));
  v1::GroupVersionKind cdi;
  cdi.set_group("cdi.kubevirt.io");
  cdi.set_kind("VolumeImportSource");
  stale = StaleRecordKeys(cdi, {"vms/a"}, keys);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_EQ(*stale, (std::vector<std::string>{"vms.cdi.kubevirt.io.VolumeImportSource.b"}));
}

// Tests that a stored CDI VolumeImportSource is recorded, and one with a source wisp cannot import
// (registry) is refused naming the field, erasing its own record and not wisp.dev's of its name.
TEST(EvaluateCommittedTest, CdiVolumeImportSource) {
  std::map<std::string, std::string> store;
  Json vis = Json::parse(R"({"apiVersion":"cdi.kubevirt.io/v1beta1","kind":"VolumeImportSource",
      "metadata":{"name":"golden","namespace":"vms","uid":"u1"},
      "spec":{"source":{"http":{"url":"http://images.example/disk.img"}}}})");
  auto added = EvaluateCommitted(Committed("ADDED", "cdi.kubevirt.io", "VolumeImportSource", vis),
                                 Policy{}, Lookup(store), 1);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_TRUE(added->refused.empty()) << added->refused;
  ASSERT_EQ(added->writes.size(), 1u);
  EXPECT_EQ(added->writes[0].key, "vms.cdi.kubevirt.io.VolumeImportSource.golden");
  EXPECT_FALSE(added->writes[0].erase);

  vis["spec"]["source"] = {{"registry", {{"url", "docker://quay.io/containerdisks/fedora:40"}}}};
  auto refused =
      EvaluateCommitted(Committed("MODIFIED", "cdi.kubevirt.io", "VolumeImportSource", vis),
                        Policy{}, Lookup(store), 1);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->refused,
            "spec.source.registry: Unsupported value: wisp imports http and blank sources");
  ASSERT_EQ(refused->writes.size(), 1u);
  EXPECT_TRUE(refused->writes[0].erase);
  EXPECT_EQ(refused->writes[0].key, "vms.cdi.kubevirt.io.VolumeImportSource.golden");
}

using RecordEndpointTest = testing::PolicyServiceFixture;

// Tests the ghost-record story: a PVC that admission allowed but the apiserver never stored
// (a ResourceQuota refused it) leaves nothing; only the committed object is recorded.
TEST_F(RecordEndpointTest, AdmissionRecordsNothingCommitRecords) {
  v1::AdmissionCall call;
  call.set_uid("u1");
  call.mutable_kind()->set_version("v1");
  call.mutable_kind()->set_kind("PersistentVolumeClaim");
  call.set_operation("CREATE");
  call.set_namespace_("vms");
  call.set_name("scratch");
  call.set_object_json(PlainPvc("scratch", "u1").dump());
  auto verdict = bus::Call<v1::AdmissionVerdict>(bus_, bus::subjects::kPolicyValidate, call, 1s);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_TRUE(verdict->allowed());
  EXPECT_FALSE(Has("vms.PersistentVolumeClaim.scratch"));

  auto result = Send(Committed("ADDED", "", "PersistentVolumeClaim", PlainPvc("scratch", "u1")));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->writes(), 1);
  EXPECT_TRUE(Has("vms.PersistentVolumeClaim.scratch"));
}

// Tests that a status-only MODIFIED (same record) writes nothing, even a minute later, and that
// a DELETED of an older object of the same name (another uid) leaves the newer record.
TEST_F(RecordEndpointTest, UnchangedWritesNothingAndDeleteChecksUid) {
  ASSERT_EQ(Send(Committed("ADDED", "", "PersistentVolumeClaim", PlainPvc("a", "new")))->writes(),
            1);
  auto revision = sources_->Get("vms.PersistentVolumeClaim.a")->revision;
  clock_.Advance(60s);
  Json bound = PlainPvc("a", "new");
  bound["status"] = {{"phase", "Bound"}};
  ASSERT_EQ(Send(Committed("MODIFIED", "", "PersistentVolumeClaim", bound))->writes(), 0);
  EXPECT_EQ(sources_->Get("vms.PersistentVolumeClaim.a")->revision, revision);

  EXPECT_EQ(Send(Committed("DELETED", "", "PersistentVolumeClaim", PlainPvc("a", "old")))->writes(),
            0);
  EXPECT_TRUE(Has("vms.PersistentVolumeClaim.a"));
  EXPECT_EQ(Send(Committed("DELETED", "", "PersistentVolumeClaim", PlainPvc("a", "new")))->writes(),
            1);
  EXPECT_FALSE(Has("vms.PersistentVolumeClaim.a"));
}

// Tests that SYNCED deletes the records of its kind whose objects vanished while nobody watched,
// and only those.
TEST_F(RecordEndpointTest, SyncedSweepsVanishedObjects) {
  for (const char* n : {"keep", "gone"}) {
    ASSERT_TRUE(Send(Committed("ADDED", "", "PersistentVolumeClaim", PlainPvc(n, n))).ok());
  }
  ASSERT_TRUE(Send(Committed("ADDED", "cdi.kubevirt.io", "DataVolume", GoldenDv("gone"))).ok());
  v1::CommittedObject synced;
  synced.set_event("SYNCED");
  synced.mutable_kind()->set_version("v1");
  synced.mutable_kind()->set_kind("PersistentVolumeClaim");
  synced.set_object_json(R"(["vms/keep"])");
  auto result = Send(synced);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->writes(), 1);
  EXPECT_TRUE(Has("vms.PersistentVolumeClaim.keep"));
  EXPECT_FALSE(Has("vms.PersistentVolumeClaim.gone"));
  EXPECT_TRUE(Has("vms.DataVolume.gone"));  // another kind's SYNCED decides that one

  synced.set_object_json(R"({"not":"a list"})");
  auto bad = Send(synced);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
}

}  // namespace
}  // namespace wisp::policy
