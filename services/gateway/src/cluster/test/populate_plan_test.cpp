#include "cluster/populate_plan.hpp"

#include <gtest/gtest.h>

namespace wisp::gateway::cluster {
namespace {

Json Pvc(const std::string& name = "disk") {
  return Json::parse(R"({
    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
    "metadata": {"name": ")" +
                     name + R"(", "namespace": "vms", "uid": "u-1"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
             "storageClassName": "wisp-populated", "volumeMode": "Filesystem",
             "dataSourceRef": {"apiGroup": "wisp.dev", "kind": "VolumeImportSource",
                               "name": "img"}},
    "status": {"phase": "Pending"}})");
}

Json Class(const std::string& mode = "Immediate", const std::string& provisioner = "csi.wisp.dev") {
  return {{"metadata", {{"name", "wisp-populated"}}},
          {"provisioner", provisioner},
          {"volumeBindingMode", mode}};
}

Json Prime(const std::string& volume_name = "") {
  Json p = {{"metadata",
             {{"name", "wisp-prime-u-1"},
              {"namespace", "vms"},
              {"uid", "p-1"},
              {"annotations", {{"wisp.dev/prime-for", "disk"}}}}},
            {"spec", {{"storageClassName", "wisp-populated"}}}};
  if (!volume_name.empty()) p["spec"]["volumeName"] = volume_name;
  return p;
}

Json Pv(const std::string& claim, const std::string& uid) {
  return {{"metadata", {{"name", "pvc-p-1"}}},
          {"spec", {{"claimRef", {{"namespace", "vms"}, {"name", claim}, {"uid", uid}}}}}};
}

TEST(PlanPvc, LeavesAPvcWithoutAWispSourceAlone) {
  Json pvc = Pvc();
  pvc["spec"]["dataSourceRef"] = {{"kind", "PersistentVolumeClaim"}, {"name", "other"}};
  Json sc = Class();
  EXPECT_EQ(PlanPvc({&pvc, &sc}, {}).step, PvcStep::kNotOurs);
  pvc["spec"].erase("dataSourceRef");
  EXPECT_EQ(PlanPvc({&pvc, &sc}, {}).step, PvcStep::kNotOurs);
}

// Tests the kinds wisp populates: a VolumeImportSource of wisp.dev or of CDI (its manifests
// unchanged), named; nothing else of either group or of another.
TEST(IsPopulatedKind, WispAndCdiVolumeImportSources) {
  auto ref = [](const std::string& group, const std::string& kind, const std::string& name) {
    return Json{{"apiGroup", group}, {"kind", kind}, {"name", name}};
  };
  EXPECT_TRUE(IsPopulatedKind(ref("wisp.dev", "VolumeImportSource", "img")));
  EXPECT_TRUE(IsPopulatedKind(ref("cdi.kubevirt.io", "VolumeImportSource", "img")));
  EXPECT_FALSE(IsPopulatedKind(ref("cdi.kubevirt.io", "VolumeUploadSource", "img")));
  EXPECT_FALSE(IsPopulatedKind(ref("cdi.kubevirt.io", "VolumeCloneSource", "img")));
  EXPECT_FALSE(IsPopulatedKind(ref("example.com", "VolumeImportSource", "img")));
  EXPECT_FALSE(IsPopulatedKind(ref("cdi.kubevirt.io", "VolumeImportSource", "")));
  EXPECT_FALSE(IsPopulatedKind(Json("cdi.kubevirt.io")));
}

// Tests that a PVC naming CDI's VolumeImportSource gets the same prime as one naming wisp's.
TEST(PlanPvc, CreatesAPrimeForACdiVolumeImportSource) {
  Json pvc = Pvc();
  pvc["spec"]["dataSourceRef"]["apiGroup"] = "cdi.kubevirt.io";
  Json sc = Class();
  PvcPlan plan = PlanPvc({&pvc, &sc}, {});
  ASSERT_EQ(plan.step, PvcStep::kCreatePrime);
  EXPECT_EQ(plan.object["metadata"]["name"], "wisp-prime-u-1");
  EXPECT_EQ(plan.object["metadata"]["annotations"]["wisp.dev/prime-for"], "disk");
  EXPECT_FALSE(plan.object["spec"].contains("dataSourceRef"));
  Json other = Class("Immediate", "ebs.csi.aws.com");
  EXPECT_EQ(PlanPvc({&pvc, &other}, {}).step, PvcStep::kNotOurs);
}

TEST(PlanPvc, LeavesAnotherProvisionersClassAlone) {
  Json pvc = Pvc();
  Json sc = Class("Immediate", "ebs.csi.aws.com");
  EXPECT_EQ(PlanPvc({&pvc, &sc}, {}).step, PvcStep::kNotOurs);
}

TEST(PlanPvc, WaitsForAnUnknownClassAndSaysWhich) {
  Json pvc = Pvc();
  PvcPlan plan = PlanPvc({&pvc, nullptr}, {});
  EXPECT_EQ(plan.step, PvcStep::kWaitForClass);
  EXPECT_EQ(plan.message, "StorageClass wisp-populated does not exist");
}

TEST(PlanPvc, CreatesAPrimeLikeTheClaimOwnedByIt) {
  Json pvc = Pvc();
  Json sc = Class();
  PvcPlan plan = PlanPvc({&pvc, &sc}, {});
  ASSERT_EQ(plan.step, PvcStep::kCreatePrime);
  const Json& p = plan.object;
  EXPECT_EQ(p["metadata"]["name"], "wisp-prime-u-1");
  EXPECT_EQ(p["metadata"]["namespace"], "vms");
  EXPECT_EQ(p["metadata"]["annotations"]["wisp.dev/prime-for"], "disk");
  EXPECT_EQ(p["metadata"]["ownerReferences"][0]["uid"], "u-1");
  EXPECT_EQ(p["metadata"]["ownerReferences"][0]["kind"], "PersistentVolumeClaim");
  EXPECT_EQ(p["spec"]["resources"], pvc["spec"]["resources"]);
  EXPECT_EQ(p["spec"]["accessModes"], pvc["spec"]["accessModes"]);
  EXPECT_EQ(p["spec"]["volumeMode"], "Filesystem");
  EXPECT_EQ(p["spec"]["storageClassName"], "wisp-populated");
  EXPECT_FALSE(p["spec"].contains("dataSourceRef"));
  EXPECT_FALSE(p["spec"].contains("dataSource"));
}

TEST(PlanPvc, WaitsForTheFirstConsumerThenCopiesItsNode) {
  Json pvc = Pvc();
  Json sc = Class("WaitForFirstConsumer");
  PvcPlan plan = PlanPvc({&pvc, &sc}, {});
  EXPECT_EQ(plan.step, PvcStep::kWaitForNode);
  EXPECT_NE(plan.message.find("first pod that uses PVC vms/disk"), std::string::npos);
  pvc["metadata"]["annotations"] = {{"volume.kubernetes.io/selected-node", "node-a"}};
  plan = PlanPvc({&pvc, &sc}, {});
  ASSERT_EQ(plan.step, PvcStep::kCreatePrime);
  EXPECT_EQ(plan.object["metadata"]["annotations"]["volume.kubernetes.io/selected-node"], "node-a");
}

TEST(PlanPvc, WaitsWhileThePrimeIsProvisioned) {
  Json pvc = Pvc();
  Json sc = Class();
  Json prime = Prime();
  EXPECT_EQ(PlanPvc({&pvc, &sc, &prime}, {}).step, PvcStep::kWaitForPrime);
  prime = Prime("pvc-p-1");  // bound, but the PV not in the copy yet
  EXPECT_EQ(PlanPvc({&pvc, &sc, &prime, nullptr}, {}).step, PvcStep::kWaitForPrime);
}

TEST(PlanPvc, HandsThePrimesVolumeToTheClaim) {
  Json pvc = Pvc();
  Json sc = Class();
  Json prime = Prime("pvc-p-1");
  Json pv = Pv("wisp-prime-u-1", "p-1");
  PvcPlan plan = PlanPvc({&pvc, &sc, &prime, &pv}, {});
  ASSERT_EQ(plan.step, PvcStep::kRebind);
  EXPECT_EQ(plan.name, "pvc-p-1");
  const Json& ref = plan.object["spec"]["claimRef"];
  EXPECT_EQ(ref["name"], "disk");
  EXPECT_EQ(ref["namespace"], "vms");
  EXPECT_EQ(ref["uid"], "u-1");
  EXPECT_TRUE(ref["resourceVersion"].is_null());  // the merge patch removes the prime's

  pv = Pv("disk", "u-1");
  EXPECT_EQ(PlanPvc({&pvc, &sc, &prime, &pv}, {}).step, PvcStep::kWaitForBind);
}

TEST(PlanPvc, DeletesThePrimeOnceWhenTheClaimIsBoundOrGoing) {
  Json pvc = Pvc();
  Json sc = Class();
  Json prime = Prime("pvc-p-1");
  pvc["spec"]["volumeName"] = "pvc-p-1";
  pvc["status"]["phase"] = "Bound";
  PvcPlan plan = PlanPvc({&pvc, &sc, &prime}, {});
  ASSERT_EQ(plan.step, PvcStep::kDeletePrime);
  EXPECT_EQ(plan.name, "wisp-prime-u-1");
  EXPECT_EQ(PlanPvc({&pvc, &sc, nullptr}, {}).step, PvcStep::kDone);

  Json going = Pvc();
  going["metadata"]["deletionTimestamp"] = "2026-12-06T07:00:00Z";
  EXPECT_EQ(PlanPvc({&going, &sc, &prime}, {}).step, PvcStep::kDeletePrime);

  // A prime already deleted, held by its finalizer: not deleted again.
  prime["metadata"]["deletionTimestamp"] = "2026-12-06T07:00:01Z";
  EXPECT_EQ(PlanPvc({&pvc, &sc, &prime}, {}).step, PvcStep::kDone);
  EXPECT_EQ(PlanPvc({&going, &sc, &prime}, {}).step, PvcStep::kDone);
}

// ---- DataVolumes ----------------------------------------------------------------------------

Json HttpDataVolume() {
  return Json::parse(R"({
    "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
    "metadata": {"name": "fedora", "namespace": "vms", "uid": "dv-1", "resourceVersion": "7"},
    "spec": {"source": {"http": {"url": "https://images.example/f.qcow2.xz"}},
             "storage": {"resources": {"requests": {"storage": "2Gi"}},
                         "storageClassName": "wisp-populated"}}})");
}

const Json* Condition(const Json& status, const std::string& type) {
  for (const auto& c : status["conditions"]) {
    if (c["type"] == type) return &c;
  }
  return nullptr;
}

TEST(PlanDataVolume, HttpSourceGetsAnImportSourceAndAPvcNamingIt) {
  Json dv = HttpDataVolume();
  DataVolumePlan plan = PlanDataVolume({&dv}, {}, "2026-12-06T07:00:00Z");
  ASSERT_TRUE(plan.create_source.has_value());
  const Json& vis = *plan.create_source;
  EXPECT_EQ(vis["apiVersion"], "wisp.dev/v1alpha1");
  EXPECT_EQ(vis["metadata"]["name"], "fedora");
  EXPECT_EQ(vis["spec"]["source"]["http"]["url"], "https://images.example/f.qcow2.xz");
  EXPECT_EQ(vis["metadata"]["ownerReferences"][0]["kind"], "DataVolume");
  EXPECT_EQ(vis["metadata"]["ownerReferences"][0]["controller"], true);
  ASSERT_TRUE(plan.create_pvc.has_value());
  const Json& pvc = *plan.create_pvc;
  EXPECT_EQ(pvc["metadata"]["name"], "fedora");
  EXPECT_EQ(pvc["spec"]["accessModes"], Json::array({"ReadWriteOnce"}));
  EXPECT_EQ(pvc["spec"]["dataSourceRef"],
            Json({{"apiGroup", "wisp.dev"}, {"kind", "VolumeImportSource"}, {"name", "fedora"}}));
  EXPECT_EQ(pvc["spec"]["resources"]["requests"]["storage"], "2Gi");
  EXPECT_EQ(pvc["metadata"]["ownerReferences"][0]["uid"], "dv-1");
  ASSERT_TRUE(plan.status.has_value());
  EXPECT_EQ((*plan.status)["phase"], "Pending");
  EXPECT_EQ((*plan.status)["claimName"], "fedora");
}

TEST(PlanDataVolume, ChecksumBecomesTheSourcesSha256) {
  Json dv = HttpDataVolume();
  dv["spec"]["source"]["http"]["checksum"] = "sha256:" + std::string(64, 'a');
  DataVolumePlan plan = PlanDataVolume({&dv}, {}, "t");
  EXPECT_EQ((*plan.create_source)["spec"]["source"]["http"]["sha256"], std::string(64, 'a'));
}

TEST(PlanDataVolume, CertConfigMapAndExtraHeadersGoToTheImportSource) {
  Json dv = HttpDataVolume();
  dv["spec"]["source"]["http"]["certConfigMap"] = "mirror-ca";
  dv["spec"]["source"]["http"]["extraHeaders"] = Json::array({"X-Tenant: vms"});
  DataVolumePlan plan = PlanDataVolume({&dv}, {}, "t");
  ASSERT_TRUE(plan.create_source.has_value());
  EXPECT_EQ((*plan.create_source)["spec"]["source"]["http"],
            Json({{"url", "https://images.example/f.qcow2.xz"},
                  {"certConfigMap", "mirror-ca"},
                  {"extraHeaders", Json::array({"X-Tenant: vms"})}}));
}

TEST(PlanDataVolume, DataSourceRefGetsOnlyThePvc) {
  Json dv = HttpDataVolume();
  dv["spec"].erase("source");
  dv["spec"]["storage"]["dataSourceRef"] = {
      {"apiGroup", "example.io"}, {"kind", "Thing"}, {"name", "t"}};
  DataVolumePlan plan = PlanDataVolume({&dv}, {}, "t");
  EXPECT_FALSE(plan.create_source.has_value());
  ASSERT_TRUE(plan.create_pvc.has_value());
  EXPECT_EQ((*plan.create_pvc)["spec"]["dataSourceRef"]["kind"], "Thing");
}

TEST(PlanDataVolume, UnservedSourceFailsNamingTheField) {
  Json dv = HttpDataVolume();
  dv["spec"]["source"] = {{"registry", {{"url", "docker://x"}}}};
  DataVolumePlan plan = PlanDataVolume({&dv}, {}, "t");
  EXPECT_FALSE(plan.create_pvc.has_value());
  ASSERT_TRUE(plan.status.has_value());
  EXPECT_EQ((*plan.status)["phase"], "Failed");
  const Json* ready = Condition(*plan.status, "Ready");
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ((*ready)["message"].get<std::string>().rfind("spec.source.registry: Unsupported", 0),
            0u);
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].type, "Warning");
}

// A DataVolume that got in without wisp-policy (its webhook off, or failing open) and asks for
// what wisp does not apply ends Failed naming each field; nothing is created for it.
TEST(PlanDataVolume, UnappliedHttpFieldsFailNamingTheField) {
  Json dv = HttpDataVolume();
  dv["spec"]["source"]["http"]["secretRef"] = "mirror-auth";
  dv["spec"]["source"]["http"]["insecureSkipVerify"] = true;
  DataVolumePlan plan = PlanDataVolume({&dv}, {}, "t");
  EXPECT_FALSE(plan.create_source.has_value());
  EXPECT_FALSE(plan.create_pvc.has_value());
  ASSERT_TRUE(plan.status.has_value());
  EXPECT_EQ((*plan.status)["phase"], "Failed");
  const Json* ready = Condition(*plan.status, "Ready");
  ASSERT_NE(ready, nullptr);
  const std::string message = (*ready)["message"];
  EXPECT_EQ(message.rfind("spec.source.http.secretRef: Unsupported value: \"mirror-auth\": "
                          "wisp-populator does not fetch with credentials from Secrets",
                          0),
            0u)
      << message;
  EXPECT_NE(message.find("; spec.source.http.insecureSkipVerify: Unsupported value: true"),
            std::string::npos)
      << message;
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].type, "Warning");
  EXPECT_EQ(plan.events[0].message, message);

  // CDI's "none" spellings are not refusals.
  Json none = HttpDataVolume();
  none["spec"]["source"]["http"]["secretRef"] = "";
  none["spec"]["source"]["http"]["insecureSkipVerify"] = false;
  plan = PlanDataVolume({&none}, {}, "t");
  ASSERT_TRUE(plan.create_source.has_value());
  EXPECT_EQ((*plan.create_source)["spec"]["source"]["http"],
            Json({{"url", "https://images.example/f.qcow2.xz"}}));
}

TEST(PlanDataVolume, BlockVolumeModeIsCarriedToThePvc) {
  Json dv = HttpDataVolume();
  dv["spec"]["storage"]["volumeMode"] = "Block";
  DataVolumePlan plan = PlanDataVolume({&dv}, {}, "t");
  ASSERT_TRUE(plan.create_pvc.has_value());
  EXPECT_EQ((*plan.create_pvc)["spec"]["volumeMode"], "Block");
}

struct Fixture {
  Json dv = HttpDataVolume();
  Json pvc = Pvc("fedora");
  Json sc = Class();
  Json prime = Prime();
  Fixture() { pvc["metadata"]["ownerReferences"] = {{{"uid", "dv-1"}}}; }
};

TEST(PlanDataVolume, PhasesFollowThePopulation) {
  Fixture f;
  DataVolumeView view{&f.dv, &f.pvc, nullptr, &f.sc, &f.prime};
  DataVolumePlan plan = PlanDataVolume(view, {}, "t");
  EXPECT_EQ(plan.phase, "ImportScheduled");
  EXPECT_FALSE(plan.create_pvc.has_value());

  view.volume = VolumeView{"IMPORT_IN_PROGRESS", "45.30%", ""};
  plan = PlanDataVolume(view, {}, "t");
  EXPECT_EQ(plan.phase, "ImportInProgress");
  EXPECT_EQ((*plan.status)["progress"], "45.30%");
  EXPECT_EQ((*Condition(*plan.status, "Running"))["status"], "True");

  view.volume = VolumeView{"FAILED", "12.00%", "checksum mismatch: got ab, want cd"};
  plan = PlanDataVolume(view, {}, "t");
  EXPECT_EQ(plan.phase, "Failed");
  EXPECT_EQ((*Condition(*plan.status, "Ready"))["message"], "checksum mismatch: got ab, want cd");
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].message, "checksum mismatch: got ab, want cd");

  f.pvc["spec"]["volumeName"] = "pvc-p-1";
  f.pvc["status"]["phase"] = "Bound";
  view.volume.reset();
  view.prime = nullptr;
  plan = PlanDataVolume(view, {}, "t");
  EXPECT_EQ(plan.phase, "Succeeded");
  EXPECT_EQ((*plan.status)["progress"], "100.0%");
  EXPECT_EQ((*Condition(*plan.status, "Bound"))["status"], "True");
  EXPECT_EQ((*Condition(*plan.status, "Ready"))["status"], "True");
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "ImportSucceeded");
}

TEST(PlanDataVolume, WaitingForTheFirstConsumerIsPendingPopulation) {
  Fixture f;
  f.sc = Class("WaitForFirstConsumer");
  DataVolumeView view{&f.dv, &f.pvc, nullptr, &f.sc, nullptr};
  view.pvc_plan_message = "StorageClass waits";
  DataVolumePlan plan = PlanDataVolume(view, {}, "t");
  EXPECT_EQ(plan.phase, "PendingPopulation");
}

TEST(PlanDataVolume, AnUnchangedDataVolumeIsNotWrittenAgain) {
  Fixture f;
  DataVolumeView view{&f.dv, &f.pvc, nullptr, &f.sc, &f.prime};
  view.volume = VolumeView{"IMPORT_IN_PROGRESS", "10.00%", ""};
  DataVolumePlan first = PlanDataVolume(view, {}, "2026-12-06T07:00:00Z");
  ASSERT_TRUE(first.status.has_value());
  f.dv["status"] = *first.status;
  DataVolumePlan again = PlanDataVolume(view, {}, "2026-12-06T07:00:05Z");
  EXPECT_FALSE(again.status.has_value());
  EXPECT_TRUE(again.events.empty());
  // Progress moves: the status is written, the conditions keep their times.
  view.volume->progress = "20.00%";
  DataVolumePlan moved = PlanDataVolume(view, {}, "2026-12-06T07:00:09Z");
  ASSERT_TRUE(moved.status.has_value());
  EXPECT_EQ((*Condition(*moved.status, "Running"))["lastTransitionTime"], "2026-12-06T07:00:00Z");
  EXPECT_TRUE(moved.events.empty());
}

// Tests that source.upload gets a VolumeImportSource with an upload source and a PVC naming it,
// as http and blank do.
TEST(PlanDataVolume, UploadSourceGetsAnUploadImportSourceAndAPvcNamingIt) {
  Json dv = HttpDataVolume();
  dv["spec"]["source"] = {{"upload", Json::object()}};
  DataVolumePlan plan = PlanDataVolume({&dv}, {}, "t");
  ASSERT_TRUE(plan.create_source.has_value());
  EXPECT_EQ((*plan.create_source)["spec"]["source"], Json({{"upload", Json::object()}}));
  ASSERT_TRUE(plan.create_pvc.has_value());
  EXPECT_EQ((*plan.create_pvc)["spec"]["dataSourceRef"],
            Json({{"apiGroup", "wisp.dev"}, {"kind", "VolumeImportSource"}, {"name", "fedora"}}));
  EXPECT_EQ(plan.phase, "Pending");
  EXPECT_FALSE(plan.annotate.has_value());
}

// Tests the phases of an upload DataVolume, as CDI's: UploadScheduled until the upload target
// exists, UploadReady (annotated with the volume's id) while it waits and while the bytes arrive,
// UploadReady with a Warning when an upload failed, Succeeded once the PVC is bound; never
// Succeeded before.
TEST(PlanDataVolume, UploadPhasesFollowTheUploadTarget) {
  Fixture f;
  f.dv["spec"]["source"] = {{"upload", Json::object()}};
  DataVolumeView view{&f.dv, &f.pvc, nullptr, &f.sc, &f.prime};
  view.pvc_plan_message = "populating PVC vms/fedora through wisp-prime-u-1";
  DataVolumePlan plan = PlanDataVolume(view, {}, "t");
  EXPECT_EQ(plan.phase, "UploadScheduled");
  EXPECT_FALSE(plan.annotate.has_value());
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "UploadScheduled");
  EXPECT_EQ(plan.events[0].message, "Upload into fedora scheduled");
  f.dv["status"] = *plan.status;

  view.volume = VolumeView{"UPLOAD_READY", "N/A", "waiting for an upload: ...", "v-abc"};
  plan = PlanDataVolume(view, {}, "t");
  EXPECT_EQ(plan.phase, "UploadReady");
  EXPECT_EQ((*plan.status)["progress"], "N/A");
  ASSERT_TRUE(plan.annotate.has_value());
  EXPECT_EQ(*plan.annotate,
            Json::parse(R"({"metadata":{"annotations":{"wisp.dev/upload-volume-id":"v-abc"}}})"));
  const Json* running = Condition(*plan.status, "Running");
  EXPECT_EQ((*running)["status"], "True");
  EXPECT_EQ((*running)["message"],
            "waiting for an upload: wispctl datavolume upload vms/fedora FILE");
  EXPECT_EQ((*Condition(*plan.status, "Ready"))["reason"], "TransferRunning");
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "UploadReady");
  EXPECT_EQ(plan.events[0].message, "Upload into fedora ready");
  f.dv["status"] = *plan.status;
  f.dv["metadata"]["annotations"] = (*plan.annotate)["metadata"]["annotations"];
  plan = PlanDataVolume(view, {}, "t");
  EXPECT_FALSE(plan.annotate.has_value());
  EXPECT_FALSE(plan.status.has_value());
  EXPECT_TRUE(plan.events.empty());

  // A checksum mismatch: still UploadReady, the cause in Running, one Warning.
  view.volume->message = "upload failed: sha256 mismatch; PUT the image again to retry";
  plan = PlanDataVolume(view, {}, "t");
  EXPECT_EQ(plan.phase, "UploadReady");
  EXPECT_EQ((*Condition(*plan.status, "Running"))["message"], view.volume->message);
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].type, "Warning");
  EXPECT_EQ(plan.events[0].reason, "UploadFailed");
  f.dv["status"] = *plan.status;
  EXPECT_TRUE(PlanDataVolume(view, {}, "t").events.empty());

  view.volume = VolumeView{"UPLOAD_IN_PROGRESS", "62.50%", "upload in progress", "v-abc"};
  plan = PlanDataVolume(view, {}, "t");
  EXPECT_EQ(plan.phase, "UploadReady");
  EXPECT_EQ((*plan.status)["progress"], "62.50%");
  EXPECT_TRUE(plan.events.empty());

  // The bytes are in, the PVC not bound yet: not Succeeded.
  view.volume = VolumeView{"SUCCEEDED", "100.0%", "", "v-abc"};
  plan = PlanDataVolume(view, {}, "t");
  EXPECT_EQ(plan.phase, "UploadReady");
  EXPECT_EQ((*plan.status)["progress"], "100.0%");

  f.pvc["spec"]["volumeName"] = "pvc-p-1";
  f.pvc["status"]["phase"] = "Bound";
  view.prime = nullptr;
  plan = PlanDataVolume(view, {}, "t");
  EXPECT_EQ(plan.phase, "Succeeded");
  EXPECT_EQ((*Condition(*plan.status, "Running"))["message"], "Upload Complete");
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "UploadSucceeded");
  EXPECT_EQ(plan.events[0].message, "Successfully uploaded into fedora");
}

// Tests that an upload DataVolume of a WaitForFirstConsumer class waits for the node, as an import.
TEST(PlanDataVolume, UploadWaitsForTheFirstConsumerToo) {
  Fixture f;
  f.dv["spec"]["source"] = {{"upload", Json::object()}};
  f.sc = Class("WaitForFirstConsumer");
  DataVolumeView view{&f.dv, &f.pvc, nullptr, &f.sc, nullptr};
  EXPECT_EQ(PlanDataVolume(view, {}, "t").phase, "PendingPopulation");
}

TEST(Rfc3339, FormatsUtcSeconds) { EXPECT_EQ(Rfc3339(0), "1970-01-01T00:00:00Z"); }

}  // namespace
}  // namespace wisp::gateway::cluster
