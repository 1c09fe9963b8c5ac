#include <gtest/gtest.h>

#include <functional>

#include "wisp/policy/rules.hpp"
#include "test_util.hpp"
#include "wisp/bus/subjects.hpp"

namespace wisp::policy {
namespace {

using k8s::Json;
using testing::Input;

// Scenario 3: a DataVolume importing a golden image over HTTPS.
Json GoldenDv() {
  return Json::parse(R"({"apiVersion":"cdi.kubevirt.io/v1beta1","kind":"DataVolume",
    "metadata":{"name":"cirros","namespace":"vms","uid":"dv-uid"},
    "spec":{"source":{"http":{"url":"https://mirror.example/cirros.qcow2.xz"}},
            "pvc":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"10Gi"}},
                   "storageClassName":"wisp-populated"}}})");
}

AdmissionInput Dv(const Json& dv, const std::string& op = "CREATE") {
  return Input("cdi.kubevirt.io", "DataVolume", op, dv.dump(), "vms");
}

// Tests that scenario 3's DataVolume is allowed and its population spec recorded.
TEST(DataVolumeTest, AllowsAndRecordsHttpImport) {
  Verdict v = EvaluateDataVolume(Dv(GoldenDv()), Policy{});
  ASSERT_TRUE(v.allowed) << v.message;
  ASSERT_EQ(v.writes.size(), 1u);
  EXPECT_EQ(v.writes[0].bucket, bus::buckets::kSources);
  EXPECT_EQ(v.writes[0].key, "vms.DataVolume.cirros");
  v1::PopulationRecord r;
  ASSERT_TRUE(r.ParseFromString(v.writes[0].value));
  EXPECT_EQ(r.kind(), "DataVolume");
  EXPECT_EQ(r.source().http().url(), "https://mirror.example/cirros.qcow2.xz");
  EXPECT_EQ(r.capacity_bytes(), 10737418240LL);
  EXPECT_EQ(r.storage_class_name(), "wisp-populated");
  EXPECT_EQ(r.access_modes(0), "ReadWriteOnce");
  EXPECT_EQ(r.content_type(), "kubevirt");
  // UPDATE validates but does not re-record.
  EXPECT_TRUE(EvaluateDataVolume(Dv(GoldenDv(), "UPDATE"), Policy{}).writes.empty());
}

// Tests each CDI webhook rule with CDI's message.
TEST(DataVolumeTest, DeniesWithCdiMessages) {
  struct Case {
    std::string name;
    std::function<void(Json&)> edit;
    std::string message;
  } cases[] = {
      {"no target", [](Json& d) { d["spec"].erase("pvc"); }, "Missing Data volume PVC"},
      {"both targets", [](Json& d) { d["spec"]["storage"] = Json::object(); },
       "Duplicate storage definition, both target storage and target pvc defined"},
      {"no access mode", [](Json& d) { d["spec"]["pvc"].erase("accessModes"); },
       "Required value: at least 1 access mode is required"},
      {"two access modes",
       [](Json& d) {
         d["spec"]["pvc"]["accessModes"] = {"ReadWriteOnce", "ReadOnlyMany"};
       },
       "PVC multiple accessModes"},
      {"unknown access mode", [](Json& d) { d["spec"]["pvc"]["accessModes"] = {"ReadWriteSome"}; },
       "Unsupported value: \"ReadWriteSome\": supported values: \"ReadOnlyMany\", "
       "\"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""},
      {"external population with source",
       [](Json& d) {
         d["spec"]["pvc"]["dataSourceRef"] = {
             {"apiGroup", "wisp.dev"}, {"kind", "VolumeImportSource"}, {"name", "golden"}};
       },
       "External population is incompatible with Source and SourceRef"},
      {"cross-namespace dataSourceRef",
       [](Json& d) {
         d["spec"].erase("source");
         d["spec"]["pvc"]["dataSourceRef"] = {{"apiGroup", "wisp.dev"},
                                              {"kind", "VolumeImportSource"},
                                              {"name", "golden"},
                                              {"namespace", "images"}};
       },
       "Invalid value: DataSourceRef namespace not supported"},
      {"dataSource and dataSourceRef",
       [](Json& d) {
         d["spec"].erase("source");
         Json ref = {{"apiGroup", "wisp.dev"}, {"kind", "VolumeImportSource"}, {"name", "g"}};
         d["spec"]["pvc"]["dataSourceRef"] = ref;
         d["spec"]["pvc"]["dataSource"] = ref;
       },
       "DataSourceRef and DataSource must match"},
      {"ref without name, kind, apiGroup",
       [](Json& d) {
         d["spec"].erase("source");
         d["spec"]["pvc"]["dataSourceRef"] = Json::object();
       },
       "Required value: DataSourceRef name, Required value: DataSourceRef kind, Required value: "
       "DataSourceRef apiGroup when kind is not 'PersistentVolumeClaim'"},
      {"dataSource without apiGroup",
       [](Json& d) {
         d["spec"].erase("source");
         d["spec"]["pvc"]["dataSource"] = {{"kind", "VolumeImportSource"}, {"name", "g"}};
       },
       "Required value: DataSource apiGroup when kind is not 'PersistentVolumeClaim'"},
      {"neither source nor sourceRef", [](Json& d) { d["spec"].erase("source"); },
       "Data volume should have either Source or SourceRef, or be externally populated"},
      {"both source and sourceRef",
       [](Json& d) {
         d["spec"]["sourceRef"] = {{"kind", "DataSource"}, {"name", "x"}};
       },
       "Data volume should have either Source or SourceRef, or be externally populated"},
      {"sourceRef kind",
       [](Json& d) {
         d["spec"].erase("source");
         d["spec"]["sourceRef"] = {{"kind", "PersistentVolumeClaim"}, {"name", "x"}};
       },
       "Unsupported sourceRef kind PersistentVolumeClaim, currently only DataSource is supported"},
      {"source PVC without namespace",
       [](Json& d) {
         d["spec"]["source"] = {{"pvc", {{"name", "src"}}}};
       },
       "spec.source.pvc source PVC is not valid"},
      {"source snapshot without name",
       [](Json& d) {
         d["spec"]["source"] = {{"snapshot", {{"namespace", "vms"}}}};
       },
       "spec.source.snapshot source snapshot is not valid"},
      {"bad url", [](Json& d) { d["spec"]["source"]["http"]["url"] = "ftp://x/y"; },
       "spec.source.http.url: Invalid value: \"ftp://x/y\": must be an http:// or https:// URL"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Json dv = GoldenDv();
    c.edit(dv);
    Verdict v = EvaluateDataVolume(Dv(dv), Policy{});
    EXPECT_FALSE(v.allowed);
    EXPECT_EQ(v.message, c.message);
    EXPECT_TRUE(v.writes.empty());
  }
}

// Tests that an externally populated DataVolume records the reference it is populated from.
TEST(DataVolumeTest, RecordsExternalPopulation) {
  Json dv = GoldenDv();
  dv["spec"].erase("source");
  dv["spec"].erase("pvc");
  dv["spec"]["storage"] = Json::parse(R"({"resources":{"requests":{"storage":"1Gi"}},
    "dataSourceRef":{"apiGroup":"wisp.dev","kind":"VolumeImportSource","name":"golden"}})");
  Verdict v = EvaluateDataVolume(Dv(dv), Policy{});
  ASSERT_TRUE(v.allowed) << v.message;
  v1::PopulationRecord r;
  ASSERT_TRUE(r.ParseFromString(v.writes.at(0).value));
  EXPECT_EQ(r.data_source_ref(), "wisp.dev/VolumeImportSource/golden");
  EXPECT_EQ(r.capacity_bytes(), 1073741824);
}

// Tests that a source wisp does not import is allowed without a record, and DryRun-free DELETE
// erases the record.
TEST(DataVolumeTest, UnsupportedSourceAndDelete) {
  Json dv = GoldenDv();
  dv["spec"]["source"] = {{"registry", {{"url", "docker://x"}}}};
  Verdict v = EvaluateDataVolume(Dv(dv), Policy{});
  EXPECT_TRUE(v.allowed);
  EXPECT_TRUE(v.writes.empty());
  EXPECT_EQ(v.warnings.at(0),
            "wisp: wisp-populator does not import source type \"registry\"; no "
            "population record written");
  auto del = Input("cdi.kubevirt.io", "DataVolume", "DELETE", "", "vms", "1.30", GoldenDv().dump());
  del.call.set_name("cirros");
  Verdict d = EvaluateDataVolume(del, Policy{});
  ASSERT_EQ(d.writes.size(), 1u);
  EXPECT_TRUE(d.writes[0].erase);
  EXPECT_EQ(d.writes[0].key, "vms.DataVolume.cirros");
}

Json GoldenVis() {
  return Json::parse(R"({"apiVersion":"wisp.dev/v1alpha1","kind":"VolumeImportSource",
    "metadata":{"name":"golden","namespace":"vms"},
    "spec":{"source":{"http":{"url":"https://mirror.example/cirros.qcow2.xz",
      "sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}},"format":"qcow2"}})");
}

// Tests that a VolumeImportSource is validated, recorded, and immutable.
TEST(VolumeImportSourceTest, ValidatesRecordsAndIsImmutable) {
  auto in = Input("wisp.dev", "VolumeImportSource", "CREATE", GoldenVis().dump(), "vms");
  Verdict v = EvaluateVolumeImportSource(in, Policy{});
  ASSERT_TRUE(v.allowed) << v.message;
  EXPECT_EQ(v.writes.at(0).key, "vms.VolumeImportSource.golden");
  v1::PopulationRecord r;
  ASSERT_TRUE(r.ParseFromString(v.writes.at(0).value));
  EXPECT_EQ(r.source().format(), "qcow2");
  EXPECT_EQ(r.source().sha256().size(), 64u);

  Json changed = GoldenVis();
  changed["spec"]["format"] = "raw";
  auto update = Input("wisp.dev", "VolumeImportSource", "UPDATE", changed.dump(), "vms", "1.30",
                      GoldenVis().dump());
  Verdict u = EvaluateVolumeImportSource(update, Policy{});
  EXPECT_FALSE(u.allowed);
  EXPECT_EQ(u.message, "Cannot update VolumeImportSource Spec");

  // An upload source (what wisp's DataVolume controller makes of source.upload) is recorded.
  Json upload = GoldenVis();
  upload["spec"]["source"] = {{"upload", Json::object()}};
  Verdict up = EvaluateVolumeImportSource(
      Input("wisp.dev", "VolumeImportSource", "CREATE", upload.dump(), "vms"), Policy{});
  ASSERT_TRUE(up.allowed) << up.message;
  v1::PopulationRecord ur;
  ASSERT_TRUE(ur.ParseFromString(up.writes.at(0).value));
  EXPECT_TRUE(ur.source().has_upload());

  struct Case {
    std::string name;
    std::function<void(Json&)> edit;
    std::string message;
  } cases[] = {
      {"no source", [](Json& s) { s["spec"].erase("source"); },
       "spec.source: exactly one import source (http, blank, pvc or upload) is required"},
      {"two sources", [](Json& s) { s["spec"]["source"]["blank"] = Json::object(); },
       "spec.source: exactly one import source (http, blank, pvc or upload) is required"},
      {"bad checksum", [](Json& s) { s["spec"]["source"]["http"]["sha256"] = "abc"; },
       "spec.source.http.sha256: Invalid value: \"abc\": must be 64 lower-case hexadecimal "
       "characters"},
      {"bad format", [](Json& s) { s["spec"]["format"] = "vmdk"; },
       "spec.format: Unsupported value: \"vmdk\": supported values: \"raw\", \"qcow2\""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Json vis = GoldenVis();
    c.edit(vis);
    Verdict d = EvaluateVolumeImportSource(
        Input("wisp.dev", "VolumeImportSource", "CREATE", vis.dump(), "vms"), Policy{});
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.message, c.message);
  }
}

Json ImportPvc(const std::string& ref_extra = "") {
  return Json::parse(R"({"apiVersion":"v1","kind":"PersistentVolumeClaim",
    "metadata":{"name":"vm-disk","namespace":"vms"},
    "spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"10Gi"}},
      "dataSourceRef":{"apiGroup":"wisp.dev","kind":"VolumeImportSource","name":"golden")" +
                     ref_extra + R"(}}})");
}

// Tests PVC dataSourceRef rules: cross-namespace denied, a source not stored yet allowed with a
// warning and recorded by reference, a stored one recorded with its spec.
TEST(PvcSourcesTest, ChecksReferencesAndRecords) {
  std::map<std::string, std::string> store;
  RecordLookup lookup = [&](std::string_view bucket,
                            std::string_view key) -> absl::StatusOr<std::optional<std::string>> {
    auto it = store.find(std::string(bucket) + "/" + std::string(key));
    if (it == store.end()) return std::optional<std::string>();
    return std::optional(it->second);
  };
  auto pvc = [](const Json& obj) {
    return Input("", "PersistentVolumeClaim", "CREATE", obj.dump(), "vms");
  };
  Verdict cross = EvaluatePvc(pvc(ImportPvc(R"(,"namespace":"images")")), Policy{}, lookup);
  EXPECT_FALSE(cross.allowed);
  EXPECT_EQ(cross.message,
            "spec.dataSourceRef.namespace: Invalid value: DataSourceRef namespace not supported");

  // A source that does not exist yet: allowed (Kubernetes lets a PVC name its data source
  // first), with a warning at admission; the record keeps the reference for the populator.
  Verdict missing = EvaluatePvc(pvc(ImportPvc()), Policy{}, lookup);
  ASSERT_TRUE(missing.allowed) << missing.message;
  EXPECT_EQ(missing.warnings,
            std::vector<std::string>{"wisp: VolumeImportSource vms/golden does not exist yet; the "
                                     "volume is populated once it does"});
  ASSERT_EQ(missing.writes.size(), 1u);
  v1::PopulationRecord ref_only;
  ASSERT_TRUE(ref_only.ParseFromString(missing.writes[0].value));
  EXPECT_EQ(ref_only.data_source_ref(), "wisp.dev/VolumeImportSource/golden");
  EXPECT_FALSE(ref_only.has_source());
  AdmissionInput committed = pvc(ImportPvc());
  committed.committed = true;
  EXPECT_TRUE(EvaluatePvc(committed, Policy{}, lookup).warnings.empty());

  Verdict vis = EvaluateVolumeImportSource(
      Input("wisp.dev", "VolumeImportSource", "CREATE", GoldenVis().dump(), "vms"), Policy{});
  store["wisp_sources/" + vis.writes.at(0).key] = vis.writes.at(0).value;
  Verdict ok = EvaluatePvc(pvc(ImportPvc()), Policy{}, lookup);
  ASSERT_TRUE(ok.allowed) << ok.message;
  EXPECT_EQ(ok.writes.at(0).key, "vms.PersistentVolumeClaim.vm-disk");
  v1::PopulationRecord r;
  ASSERT_TRUE(r.ParseFromString(ok.writes.at(0).value));
  EXPECT_EQ(r.source().http().url(), "https://mirror.example/cirros.qcow2.xz");
  EXPECT_EQ(r.capacity_bytes(), 10737418240LL);
  EXPECT_EQ(r.data_source_ref(), "wisp.dev/VolumeImportSource/golden");

  // Other populators' references are not wisp's business: CDI's other kinds, other groups.
  for (const auto& [group, kind] : std::vector<std::pair<std::string, std::string>>{
           {"cdi.kubevirt.io", "VolumeUploadSource"}, {"example.com", "VolumeImportSource"}}) {
    SCOPED_TRACE(group + " " + kind);
    Json other = ImportPvc();
    other["spec"]["dataSourceRef"]["apiGroup"] = group;
    other["spec"]["dataSourceRef"]["kind"] = kind;
    Verdict plain = EvaluatePvc(pvc(other), Policy{}, lookup);
    ASSERT_TRUE(plain.allowed) << plain.message;
    v1::PopulationRecord p;
    ASSERT_TRUE(p.ParseFromString(plain.writes.at(0).value));
    EXPECT_TRUE(p.data_source_ref().empty());
    EXPECT_FALSE(p.has_source());
  }
  // A store failure is an error for the gateway's failure mode, not a denial.
  RecordLookup broken = [](std::string_view,
                           std::string_view) -> absl::StatusOr<std::optional<std::string>> {
    return absl::UnavailableError("kv down");
  };
  EXPECT_EQ(EvaluatePvc(pvc(ImportPvc()), Policy{}, broken).error.code(),
            absl::StatusCode::kUnavailable);
}

// A store of records keyed "<bucket>/<key>", as PolicyService keeps them in KV.
struct Store {
  std::map<std::string, std::string> records;
  void Apply(const Verdict& v) {
    for (const auto& w : v.writes) {
      if (w.erase) {
        records.erase(w.bucket + "/" + w.key);
      } else {
        records[w.bucket + "/" + w.key] = w.value;
      }
    }
  }
  RecordLookup Lookup() {
    return [this](std::string_view bucket,
                  std::string_view key) -> absl::StatusOr<std::optional<std::string>> {
      auto it = records.find(std::string(bucket) + "/" + std::string(key));
      if (it == records.end()) return std::optional<std::string>();
      return std::optional(it->second);
    };
  }
};

Json PlainPvc(const std::string& name, const std::string& metadata_extra = "") {
  return Json::parse(R"({"apiVersion":"v1","kind":"PersistentVolumeClaim",
    "metadata":{"name":")" +
                     name + R"(","namespace":"vms")" + metadata_extra + R"(},
    "spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}})");
}

// Tests CDI's "Destination PVC %s/%s already exists": a PVC admitted through wisp (rule e records
// every PVC) blocks a DataVolume of its name unless CDI may adopt it (populatedFor annotation or a
// DataVolume controller owner); deleting the PVC frees the name; a store failure is an error.
TEST(DataVolumeTest, DestinationPvcExists) {
  struct Case {
    std::string name;
    std::string pvc_metadata;  // extra metadata of the admitted PVC; "-" = no PVC
    std::string message;       // "" = allowed
  } cases[] = {
      {"no PVC", "-", ""},
      {"plain PVC", "", "Destination PVC vms/cirros already exists"},
      {"PVC owned by a pod", R"(,"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"p",
          "uid":"u","controller":true}])",
       "Destination PVC vms/cirros already exists"},
      {"populatedFor another DataVolume",
       R"(,"annotations":{"cdi.kubevirt.io/storage.populatedFor":"other"})",
       "Destination PVC vms/cirros already exists"},
      {"populatedFor this DataVolume",
       R"(,"annotations":{"cdi.kubevirt.io/storage.populatedFor":"cirros"})", ""},
      {"controlled by a DataVolume",
       R"(,"ownerReferences":[{"apiVersion":"cdi.kubevirt.io/v1beta1","kind":"DataVolume",
          "name":"cirros","uid":"u","controller":true}])",
       ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Store store;
    if (c.pvc_metadata != "-") {
      Verdict pvc = EvaluatePvc(Input("", "PersistentVolumeClaim", "CREATE",
                                      PlainPvc("cirros", c.pvc_metadata).dump(), "vms"),
                                Policy{}, store.Lookup());
      ASSERT_TRUE(pvc.allowed) << pvc.message;
      ASSERT_EQ(pvc.writes.size(), 1u);
      EXPECT_EQ(pvc.writes[0].key, "vms.PersistentVolumeClaim.cirros");
      EXPECT_TRUE(pvc.audit_annotations.empty());
      store.Apply(pvc);
    }
    Verdict v = EvaluateDataVolume(Dv(GoldenDv()), Policy{}, store.Lookup());
    if (c.message.empty()) {
      EXPECT_TRUE(v.allowed) << v.message;
    } else {
      EXPECT_FALSE(v.allowed);
      EXPECT_EQ(v.message, c.message);
      EXPECT_EQ(v.code, 422);
      EXPECT_TRUE(v.writes.empty());
    }
  }
  // CDI checks the PVC before the spec: an invalid DataVolume over an existing PVC gets the PVC
  // message.
  Store store;
  store.Apply(
      EvaluatePvc(Input("", "PersistentVolumeClaim", "CREATE", PlainPvc("cirros").dump(), "vms"),
                  Policy{}, store.Lookup()));
  Json bad = GoldenDv();
  bad["spec"].erase("pvc");
  EXPECT_EQ(EvaluateDataVolume(Dv(bad), Policy{}, store.Lookup()).message,
            "Destination PVC vms/cirros already exists");
  // UPDATE does not look (the DataVolume's own PVC exists by then).
  Json old = GoldenDv();
  EXPECT_TRUE(EvaluateDataVolume(Input("cdi.kubevirt.io", "DataVolume", "UPDATE", old.dump(), "vms",
                                       "1.30", old.dump()),
                                 Policy{}, store.Lookup())
                  .allowed);
  // Deleting the PVC frees the name.
  auto del =
      Input("", "PersistentVolumeClaim", "DELETE", "", "vms", "1.30", PlainPvc("cirros").dump());
  del.call.set_name("cirros");
  store.Apply(EvaluatePvc(del, Policy{}, store.Lookup()));
  EXPECT_TRUE(EvaluateDataVolume(Dv(GoldenDv()), Policy{}, store.Lookup()).allowed);
  // A store failure goes to the gateway's failure mode.
  RecordLookup broken = [](std::string_view,
                           std::string_view) -> absl::StatusOr<std::optional<std::string>> {
    return absl::UnavailableError("kv down");
  };
  EXPECT_EQ(EvaluateDataVolume(Dv(GoldenDv()), Policy{}, broken).error.code(),
            absl::StatusCode::kUnavailable);
  // generateName: the name is not known yet, so there is nothing to look up.
  Json generated = GoldenDv();
  generated["metadata"].erase("name");
  generated["metadata"]["generateName"] = "cirros";
  EXPECT_TRUE(EvaluateDataVolume(Dv(generated), Policy{}, broken).allowed);
}

// Tests that a plain PVC's record carries what adoption needs and no source, so the populator
// ignores it.
TEST(PvcSourcesTest, RecordsPlainPvc) {
  Verdict v = EvaluatePvc(
      Input("", "PersistentVolumeClaim", "CREATE",
            PlainPvc("data", R"(,"annotations":{"cdi.kubevirt.io/storage.populatedFor":"data"},
              "ownerReferences":[{"kind":"DataVolume","name":"data","uid":"u","controller":true}])")
                .dump(),
            "vms"),
      Policy{}, testing::NoRecords());
  ASSERT_TRUE(v.allowed);
  v1::PopulationRecord r;
  ASSERT_TRUE(r.ParseFromString(v.writes.at(0).value));
  EXPECT_EQ(r.kind(), "PersistentVolumeClaim");
  EXPECT_EQ(r.populated_for(), "data");
  EXPECT_EQ(r.controller_kind(), "DataVolume");
  EXPECT_EQ(r.capacity_bytes(), 1073741824);
  EXPECT_EQ(r.source().kind_case(), v1::PopulationSource::KIND_NOT_SET);
  EXPECT_TRUE(r.data_source_ref().empty());
}

// Tests CDI's DataVolume spec immutability, with the multi-stage checkpoint exception.
TEST(DataVolumeTest, SpecIsImmutable) {
  Json old = GoldenDv();
  Json changed = GoldenDv();
  changed["spec"]["source"]["http"]["url"] = "https://mirror.example/other.img";
  Verdict v = EvaluateDataVolume(
      Input("cdi.kubevirt.io", "DataVolume", "UPDATE", changed.dump(), "vms", "1.30", old.dump()),
      Policy{});
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.message, "Cannot update DataVolume Spec");
  Json labelled = GoldenDv();
  labelled["metadata"]["labels"] = {{"a", "b"}};
  EXPECT_TRUE(EvaluateDataVolume(Input("cdi.kubevirt.io", "DataVolume", "UPDATE", labelled.dump(),
                                       "vms", "1.30", old.dump()),
                                 Policy{})
                  .allowed);
  Json stage = GoldenDv();
  stage["spec"]["source"] = {
      {"vddk", {{"url", "https://vcenter"}, {"backingFile", "[ds] vm.vmdk"}}}};
  stage["spec"]["checkpoints"] = {{{"previous", ""}, {"current", "snap-1"}}};
  Json next = stage;
  next["spec"]["checkpoints"].push_back({{"previous", "snap-1"}, {"current", "snap-2"}});
  next["spec"]["finalCheckpoint"] = true;
  Verdict ms = EvaluateDataVolume(
      Input("cdi.kubevirt.io", "DataVolume", "UPDATE", next.dump(), "vms", "1.30", stage.dump()),
      Policy{});
  EXPECT_TRUE(ms.allowed) << ms.message;
}

// Tests the populator controller's prime PVC: recorded with the source of the PVC it populates
// (so the volume external-provisioner creates for it is filled from that source), and with no
// record at all while that PVC has none (never a blank volume by mistake).
TEST(PvcSourcesTest, PrimeTakesTheSourceOfThePvcItPopulates) {
  Store store;
  v1::PopulationRecord target;
  target.set_kind("PersistentVolumeClaim");
  target.mutable_source()->mutable_http()->set_url("https://images.example/disk.qcow2");
  target.set_data_source_ref("wisp.dev/VolumeImportSource/img");
  store.records[std::string(bus::buckets::kSources) + "/vms.PersistentVolumeClaim.disk"] =
      target.SerializeAsString();
  const std::string prime =
      PlainPvc("wisp-prime-u1", R"(,"annotations":{"wisp.dev/prime-for":"disk"})").dump();
  Verdict v = EvaluatePvc(Input("", "PersistentVolumeClaim", "CREATE", prime, "vms"), Policy{},
                          store.Lookup());
  ASSERT_TRUE(v.allowed);
  ASSERT_EQ(v.writes.size(), 1u);
  EXPECT_EQ(v.writes[0].key, "vms.PersistentVolumeClaim.wisp-prime-u1");
  v1::PopulationRecord r;
  ASSERT_TRUE(r.ParseFromString(v.writes[0].value));
  EXPECT_EQ(r.source().http().url(), "https://images.example/disk.qcow2");
  EXPECT_EQ(r.data_source_ref(), "wisp.dev/VolumeImportSource/img");
  EXPECT_EQ(r.populated_for(), "disk");
  EXPECT_EQ(r.capacity_bytes(), 1073741824);

  const std::string orphan =
      PlainPvc("wisp-prime-u2", R"(,"annotations":{"wisp.dev/prime-for":"nothing"})").dump();
  v = EvaluatePvc(Input("", "PersistentVolumeClaim", "CREATE", orphan, "vms"), Policy{},
                  store.Lookup());
  EXPECT_TRUE(v.allowed);
  EXPECT_TRUE(v.writes.empty());
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_NE(v.warnings[0].find("has no wisp data source"), std::string::npos);
}

// CDI's own VolumeImportSource, as CDI's documentation writes one.
Json CdiVis(const std::string& source_json = "") {
  return Json::parse(R"({"apiVersion":"cdi.kubevirt.io/v1beta1","kind":"VolumeImportSource",
    "metadata":{"name":"golden","namespace":"vms","uid":"cdi-vis-uid"},
    "spec":{"source":)" +
                     (source_json.empty()
                          ? std::string(R"({"http":{"url":"https://mirror.example/cirros.img",
        "checksum":"sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"}})")
                          : source_json) +
                     "}}");
}

AdmissionInput CdiVisInput(const Json& vis, const std::string& op = "CREATE") {
  return Input("cdi.kubevirt.io", "VolumeImportSource", op, vis.dump(), "vms");
}

// Tests that CDI's VolumeImportSource with an http source (sha256 checksum, any case) or a blank
// one is recorded like wisp.dev's, under its own key.
TEST(CdiVolumeImportSourceTest, RecordsHttpAndBlank) {
  Verdict v = EvaluateCdiVolumeImportSource(CdiVisInput(CdiVis()), Policy{});
  ASSERT_TRUE(v.allowed) << v.message;
  ASSERT_EQ(v.writes.size(), 1u);
  EXPECT_EQ(v.writes[0].bucket, bus::buckets::kSources);
  EXPECT_EQ(v.writes[0].key, "vms.cdi.kubevirt.io.VolumeImportSource.golden");
  v1::PopulationRecord r;
  ASSERT_TRUE(r.ParseFromString(v.writes[0].value));
  EXPECT_EQ(r.kind(), "cdi.kubevirt.io.VolumeImportSource");
  EXPECT_EQ(r.uid(), "cdi-vis-uid");
  EXPECT_EQ(r.source().http().url(), "https://mirror.example/cirros.img");
  EXPECT_EQ(r.source().sha256(),
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  EXPECT_EQ(r.content_type(), "kubevirt");
  EXPECT_TRUE(v.warnings.empty());

  Verdict b = EvaluateCdiVolumeImportSource(CdiVisInput(CdiVis(R"({"blank":{}})")), Policy{});
  ASSERT_TRUE(b.allowed) << b.message;
  ASSERT_TRUE(r.ParseFromString(b.writes.at(0).value));
  EXPECT_TRUE(r.source().has_blank());

  // UPDATE (a multi-stage import's checkpoints) is checked, not recorded; DELETE erases its key.
  EXPECT_TRUE(
      EvaluateCdiVolumeImportSource(CdiVisInput(CdiVis(), "UPDATE"), Policy{}).writes.empty());
  AdmissionInput del = CdiVisInput(Json::object(), "DELETE");
  del.call.set_name("golden");
  Verdict d = EvaluateCdiVolumeImportSource(del, Policy{});
  ASSERT_EQ(d.writes.size(), 1u);
  EXPECT_TRUE(d.writes[0].erase);
  EXPECT_EQ(d.writes[0].key, "vms.cdi.kubevirt.io.VolumeImportSource.golden");
  // wisp.dev's kind is not this rule's, nor this one the wisp.dev rule's.
  EXPECT_TRUE(
      EvaluateCdiVolumeImportSource(
          Input("wisp.dev", "VolumeImportSource", "CREATE", GoldenVis().dump(), "vms"), Policy{})
          .writes.empty());
  EXPECT_TRUE(EvaluateVolumeImportSource(CdiVisInput(CdiVis()), Policy{}).writes.empty());
  Policy off;
  off.rules.pvc_sources = false;
  EXPECT_TRUE(EvaluateCdiVolumeImportSource(CdiVisInput(CdiVis()), off).writes.empty());
}

// Tests that the sources wisp cannot import are refused naming the field.
TEST(CdiVolumeImportSourceTest, RefusesWhatWispCannotImport) {
  struct Case {
    std::string source;
    std::string message;
    std::string content_type = "";
  } cases[] = {
      {R"({"registry":{"url":"docker://quay.io/containerdisks/fedora:40"}})",
       "spec.source.registry: Unsupported value: wisp imports http and blank sources"},
      {R"({"s3":{"url":"https://s3.example/bucket/disk.img"}})",
       "spec.source.s3: Unsupported value: wisp imports http and blank sources"},
      {R"({"gcs":{"url":"gs://bucket/disk.img"}})",
       "spec.source.gcs: Unsupported value: wisp imports http and blank sources"},
      {R"({"imageio":{"url":"https://engine/ovirt-engine/api","diskId":"d1"}})",
       "spec.source.imageio: Unsupported value: wisp imports http and blank sources"},
      {R"({"vddk":{"url":"https://vcenter","backingFile":"[ds] vm.vmdk"}})",
       "spec.source.vddk: Unsupported value: wisp imports http and blank sources"},
      {R"({})", "spec.source: Required value: wisp imports http and blank sources"},
      {R"({"http":{"url":"https://a.example/x.img"},"blank":{}})",
       "spec.source: Invalid value: exactly one source type must be set"},
      {R"({"http":{"url":"ftp://a.example/x.img"}})",
       "spec.source.http.url: Invalid value: \"ftp://a.example/x.img\": must be an http:// or "
       "https:// URL"},
      {R"({"http":{"url":"https://a.example/x.img","checksum":"md5:5678efgh"}})",
       "spec.source.http.checksum: Unsupported value: \"md5:5678efgh\": wisp verifies sha256 "
       "checksums (sha256:<64 hexadecimal characters>)"},
      {R"({"http":{"url":"https://a.example/x.img","checksum":"sha256:abc"}})",
       "spec.source.http.checksum: Invalid value: \"sha256:abc\": must be sha256:<64 hexadecimal "
       "characters>"},
      {R"({"http":{"url":"https://a.example/x.img"}})",
       "spec.contentType: Unsupported value: \"archive\": wisp imports disk images (\"kubevirt\")",
       "archive"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.source);
    Json vis = CdiVis(c.source);
    if (!c.content_type.empty()) vis["spec"]["contentType"] = c.content_type;
    Verdict v = EvaluateCdiVolumeImportSource(CdiVisInput(vis), Policy{});
    EXPECT_FALSE(v.allowed);
    EXPECT_EQ(v.code, 422);
    EXPECT_EQ(v.message, c.message);
    EXPECT_TRUE(v.writes.empty());
  }
}

// Tests that a PVC whose dataSourceRef names CDI's VolumeImportSource is recorded as one naming
// wisp.dev's: by reference while the source is not stored, with its source once it is, never with
// a wisp.dev source of the same name; its prime takes the same.
TEST(PvcSourcesTest, NamesCdiVolumeImportSource) {
  Store store;
  auto pvc = [](const std::string& group, bool committed = false) {
    Json obj = ImportPvc();
    obj["spec"]["dataSourceRef"]["apiGroup"] = group;
    AdmissionInput in = Input("", "PersistentVolumeClaim", "CREATE", obj.dump(), "vms");
    in.committed = committed;
    return in;
  };
  // A wisp.dev source of the same name is another object.
  store.Apply(EvaluateVolumeImportSource(
      Input("wisp.dev", "VolumeImportSource", "CREATE", GoldenVis().dump(), "vms"), Policy{}));
  Verdict missing = EvaluatePvc(pvc("cdi.kubevirt.io"), Policy{}, store.Lookup());
  ASSERT_TRUE(missing.allowed) << missing.message;
  EXPECT_EQ(missing.warnings,
            std::vector<std::string>{"wisp: cdi.kubevirt.io VolumeImportSource vms/golden does not "
                                     "exist yet; the volume is populated once it does"});
  v1::PopulationRecord r;
  ASSERT_TRUE(r.ParseFromString(missing.writes.at(0).value));
  EXPECT_EQ(r.data_source_ref(), "cdi.kubevirt.io/VolumeImportSource/golden");
  EXPECT_FALSE(r.has_source());

  store.Apply(EvaluateCdiVolumeImportSource(CdiVisInput(CdiVis()), Policy{}));
  Verdict ok = EvaluatePvc(pvc("cdi.kubevirt.io", true), Policy{}, store.Lookup());
  ASSERT_TRUE(ok.allowed) << ok.message;
  EXPECT_TRUE(ok.warnings.empty());
  EXPECT_EQ(ok.writes.at(0).key, "vms.PersistentVolumeClaim.vm-disk");
  ASSERT_TRUE(r.ParseFromString(ok.writes.at(0).value));
  EXPECT_EQ(r.source().http().url(), "https://mirror.example/cirros.img");
  EXPECT_EQ(r.source().sha256(),
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  EXPECT_EQ(r.data_source_ref(), "cdi.kubevirt.io/VolumeImportSource/golden");
  EXPECT_EQ(r.capacity_bytes(), 10737418240LL);
  store.Apply(ok);

  // The prime the populator controller creates for it carries the same source.
  const std::string prime =
      PlainPvc("wisp-prime-u1", R"(,"annotations":{"wisp.dev/prime-for":"vm-disk"})").dump();
  Verdict p = EvaluatePvc(Input("", "PersistentVolumeClaim", "CREATE", prime, "vms"), Policy{},
                          store.Lookup());
  ASSERT_TRUE(p.allowed) << p.message;
  ASSERT_TRUE(r.ParseFromString(p.writes.at(0).value));
  EXPECT_EQ(r.source().http().url(), "https://mirror.example/cirros.img");
  EXPECT_EQ(r.data_source_ref(), "cdi.kubevirt.io/VolumeImportSource/golden");
  EXPECT_EQ(r.populated_for(), "vm-disk");

  // The wisp.dev reference still reads wisp.dev's source.
  Verdict wisp = EvaluatePvc(pvc("wisp.dev", true), Policy{}, store.Lookup());
  ASSERT_TRUE(r.ParseFromString(wisp.writes.at(0).value));
  EXPECT_EQ(r.source().http().url(), "https://mirror.example/cirros.qcow2.xz");
}

// The verdicts of the three kinds that carry CDI's http source (a DataVolume, wisp's and CDI's
// VolumeImportSource), each with `edit` applied to its spec.source.http.
std::vector<Verdict> VerdictsWithHttp(const std::function<void(Json&)>& edit) {
  Json dv = GoldenDv();
  edit(dv["spec"]["source"]["http"]);
  Json vis = GoldenVis();
  edit(vis["spec"]["source"]["http"]);
  Json cdi = CdiVis();
  edit(cdi["spec"]["source"]["http"]);
  std::vector<Verdict> out;
  out.push_back(EvaluateDataVolume(Dv(dv), Policy{}));
  out.push_back(EvaluateVolumeImportSource(
      Input("wisp.dev", "VolumeImportSource", "CREATE", vis.dump(), "vms"), Policy{}));
  out.push_back(EvaluateCdiVolumeImportSource(CdiVisInput(cdi), Policy{}));
  return out;
}

// Tests that the http source fields wisp does not apply (credentials from Secrets, skipping TLS
// verification) are refused, naming the field, by all three kinds that carry CDI's http source:
// none of them is accepted and then ignored by the import.
TEST(HttpSourceFieldsTest, UnappliedFieldsAreRefusedByEveryKind) {
  const std::string secret_ref =
      "spec.source.http.secretRef: Unsupported value: \"mirror-auth\": wisp-populator does not "
      "fetch with credentials from Secrets: an import's source is stored in JetStream "
      "(wisp_sources, the populate job stream), where a Secret's values must not go";
  struct Case {
    std::string field;
    Json value;
    std::string message_start;
  } cases[] = {
      {"secretRef", "mirror-auth", secret_ref},
      {"secretExtraHeaders", Json::array({"mirror-token"}),
       "spec.source.http.secretExtraHeaders: Unsupported value: [\"mirror-token\"]: "
       "wisp-populator does not fetch with credentials from Secrets"},
      {"insecureSkipVerify", true,
       "spec.source.http.insecureSkipVerify: Unsupported value: true: wisp-populator always "
       "verifies the server's certificate"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.field);
    for (const Verdict& v : VerdictsWithHttp([&](Json& http) { http[c.field] = c.value; })) {
      EXPECT_FALSE(v.allowed);
      EXPECT_EQ(v.code, 422);
      EXPECT_EQ(v.message.rfind(c.message_start, 0), 0u) << v.message;
      EXPECT_TRUE(v.writes.empty());
    }
  }
  // CDI's spellings of "none" pass and record no credentials.
  Json none = CdiVis();
  none["spec"]["source"]["http"]["secretRef"] = "";
  none["spec"]["source"]["http"]["secretExtraHeaders"] = Json::array();
  none["spec"]["source"]["http"]["insecureSkipVerify"] = false;
  Verdict v = EvaluateCdiVolumeImportSource(CdiVisInput(none), Policy{});
  ASSERT_TRUE(v.allowed) << v.message;
  v1::PopulationRecord r;
  ASSERT_TRUE(r.ParseFromString(v.writes.at(0).value));
  EXPECT_TRUE(r.source().http().secret_ref().empty());
  EXPECT_TRUE(r.source().http().headers().empty());
}

// Tests that certConfigMap and extraHeaders, which the import applies, are recorded by every kind
// that carries CDI's http source; a bad header is refused naming its index.
TEST(HttpSourceFieldsTest, CertConfigMapAndExtraHeadersAreRecorded) {
  const auto verdicts = VerdictsWithHttp([](Json& http) {
    http["certConfigMap"] = "mirror-ca";
    http["extraHeaders"] = Json::array({"X-Tenant: vms", "Accept:application/octet-stream"});
  });
  for (const Verdict& v : verdicts) {
    ASSERT_TRUE(v.allowed) << v.message;
    v1::PopulationRecord r;
    ASSERT_TRUE(r.ParseFromString(v.writes.at(0).value));
    EXPECT_EQ(r.source().http().cert_config_map(), "mirror-ca");
    ASSERT_EQ(r.source().http().headers().size(), 2u);
    EXPECT_EQ(r.source().http().headers().at("X-Tenant"), "vms");
    EXPECT_EQ(r.source().http().headers().at("Accept"), "application/octet-stream");
    EXPECT_TRUE(r.source().http().ca_pem().empty());  // read when the volume is created
  }
  Json bad = CdiVis();
  bad["spec"]["source"]["http"]["extraHeaders"] = Json::array({"Host: elsewhere"});
  Verdict d = EvaluateCdiVolumeImportSource(CdiVisInput(bad), Policy{});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.message.rfind("spec.source.http.extraHeaders[0]: Forbidden: \"Host\": ", 0), 0u)
      << d.message;
}

}  // namespace
}  // namespace wisp::policy
