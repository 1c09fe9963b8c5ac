#include <gtest/gtest.h>

#include "wisp/policy/rules.hpp"
#include "test_util.hpp"
#include "wisp/bus/subjects.hpp"

namespace wisp::policy {
namespace {

using k8s::Json;
using testing::Apply;
using testing::Input;
using testing::Rerun;

// Scenario 2: a VMI with an IRSA token volume (VEP 94 serviceAccount shape) and its filesystem.
Json S3Vmi() {
  return Json::parse(R"({"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance",
    "metadata":{"name":"s3-vm","namespace":"vms","uid":"vmi-uid"},
    "spec":{"serviceAccountName":"s3-reader",
      "domain":{"devices":{"disks":[{"name":"root","disk":{"bus":"virtio"}}],
                           "filesystems":[{"name":"irsa","virtiofs":{}}]}},
      "volumes":[{"name":"root","containerDisk":{"image":"quay.io/containerdisks/fedora:40"}},
                 {"name":"irsa","serviceAccount":{"serviceAccountName":"s3-reader",
                   "serviceAccountToken":{"audience":"sts.amazonaws.com","expirationSeconds":3600,
                                          "path":"token"}}}]}})");
}

AdmissionInput Vmi(const Json& vmi, const std::string& op = "CREATE") {
  return Input("kubevirt.io", "VirtualMachineInstance", op, vmi.dump(), "vms");
}

Policy IrsaPolicy() {
  Policy p;
  p.audiences["vms"] = {"sts.amazonaws.com", "vault"};
  return p;
}

// Tests that scenario 2's VMI is allowed and its token volume recorded for the launcher pod.
TEST(VmiTokenVolumesTest, AllowsAndRecordsIrsaVolume) {
  Verdict v = EvaluateVmiTokenVolumes(Vmi(S3Vmi()), IrsaPolicy());
  ASSERT_TRUE(v.allowed) << v.message;
  ASSERT_EQ(v.writes.size(), 1u);
  EXPECT_EQ(v.writes[0].bucket, bus::buckets::kPods);
  EXPECT_EQ(v.writes[0].key, "vms.s3-vm");
  v1::VmiTokenRecord record;
  ASSERT_TRUE(record.ParseFromString(v.writes[0].value));
  EXPECT_EQ(record.service_account_name(), "s3-reader");
  EXPECT_EQ(record.uid(), "vmi-uid");
  ASSERT_EQ(record.volumes_size(), 1);
  EXPECT_EQ(record.volumes(0).name(), "irsa");
  EXPECT_EQ(record.volumes(0).audience(), "sts.amazonaws.com");
  EXPECT_EQ(record.volumes(0).expiration_seconds(), 3600);
  EXPECT_EQ(record.volumes(0).path(), "token");
}

// Tests the VEP 94 projected shape, with expirationSeconds defaulted to 3600.
TEST(VmiTokenVolumesTest, AllowsProjectedShape) {
  Json vmi = S3Vmi();
  vmi["spec"]["volumes"][1] = Json::parse(R"({"name":"irsa","projected":{"sources":[
    {"serviceAccountToken":{"audience":"sts.amazonaws.com","path":"token"}}]}})");
  Verdict v = EvaluateVmiTokenVolumes(Vmi(vmi), IrsaPolicy());
  ASSERT_TRUE(v.allowed) << v.message;
  v1::VmiTokenRecord record;
  ASSERT_TRUE(record.ParseFromString(v.writes.at(0).value));
  EXPECT_EQ(record.volumes(0).expiration_seconds(), 3600);
}

// Tests each KubeVirt and Kubernetes rule with its exact message.
TEST(VmiTokenVolumesTest, DeniesWithUpstreamMessages) {
  const std::string tok = "spec.volumes[1].serviceAccount.serviceAccountToken";
  struct Case {
    std::string name;
    std::function<void(Json&)> edit;
    std::string message;
  } cases[] = {
      {"300s lifetime",
       [](Json& v) {
         v["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"]["expirationSeconds"] =
             300;
       },
       tok + ".expirationSeconds: Invalid value: 300: may not specify a duration less than 10 "
             "minutes"},
      {"2^32+1 lifetime",
       [](Json& v) {
         v["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"]["expirationSeconds"] =
             (int64_t{1} << 32) + 1;
       },
       tok + ".expirationSeconds: Invalid value: 4294967297: may not specify a duration larger "
             "than 2^32 seconds"},
      {"over policy max",
       [](Json& v) {
         v["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"]["expirationSeconds"] =
             100000;
       },
       tok + ".expirationSeconds: Invalid value: 100000: may not specify a duration larger than "
             "the policy's maximum token lifetime of 86400 seconds"},
      {"dotdot path",
       [](Json& v) {
         v["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"]["path"] = "a/../b";
       },
       tok + ".path: Invalid value: \"a/../b\": must not contain '..'"},
      {"leading dotdot",
       [](Json& v) {
         v["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"]["path"] = "..token";
       },
       tok + ".path: Invalid value: \"..token\": must not start with '..'"},
      {"dotdot alone",
       [](Json& v) {
         v["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"]["path"] = "..";
       },
       tok + ".path: Invalid value: \"..\": must not contain '..', " + tok +
           ".path: Invalid value: \"..\": must not start with '..'"},
      {"absolute path",
       [](Json& v) {
         v["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"]["path"] = "/token";
       },
       tok + ".path: Invalid value: \"/token\": must be a relative path"},
      {"empty path",
       [](Json& v) {
         v["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"].erase("path");
       },
       tok + ".path: Required value"},
      {"long element",
       [](Json& v) {
         v["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"]["path"] =
             std::string(256, 'a');
       },
       tok + ".path: filenames must be less than or equal to 255 characters"},
      {"projected empty path reported on the projected volume",
       [](Json& v) {
         v["spec"]["volumes"][1] = Json::parse(R"({"name":"irsa","projected":{"sources":[
           {"serviceAccountToken":{"audience":"sts.amazonaws.com"}}]}})");
       },
       "spec.volumes[1].projected.path: Required value"},
      {"projected configMap source",
       [](Json& v) {
         v["spec"]["volumes"][1] = Json::parse(R"({"name":"irsa","projected":{"sources":[
           {"configMap":{"name":"x"}}]}})");
       },
       "spec.volumes[1].projected.sources[0]: Unsupported value: \"configMap\": supported values: "
       "\"serviceAccountToken\""},
      {"projected defaultMode out of range",
       [](Json& v) {
         v["spec"]["volumes"][1] = Json::parse(R"({"name":"irsa","projected":{"defaultMode":512,
           "sources":[{"serviceAccountToken":{"audience":"sts.amazonaws.com","path":"t"}}]}})");
       },
       "spec.volumes[1].projected.defaultMode: Invalid value: 512: must be a number between 0 and "
       "0777 (octal), both inclusive"},
      {"two types in one source",
       [](Json& v) {
         v["spec"]["volumes"][1] = Json::parse(R"({"name":"irsa","projected":{"sources":[
           {"configMap":{"name":"x"},"serviceAccountToken":{"path":"t"}}]}})");
       },
       "spec.volumes[1].projected.sources[0]: Forbidden: may not specify more than 1 volume type "
       "per source"},
      {"audience not allowed",
       [](Json& v) {
         v["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"]["audience"] = "gcp";
       },
       tok + ".audience: Forbidden: audience \"gcp\" is not allowed in namespace \"vms\" "
             "(allowed: \"sts.amazonaws.com\", \"vault\")"},
      {"two serviceAccount volumes",
       [](Json& v) {
         v["spec"]["volumes"].push_back(
             Json::parse(R"({"name":"sa2","serviceAccount":{"serviceAccountName":"s3-reader"}})"));
         v["spec"]["domain"]["devices"]["filesystems"].push_back(
             {{"name", "sa2"}, {"virtiofs", Json::object()}});
       },
       "spec.volumes must have max one serviceAccount volume set"},
      {"serviceAccountName missing",
       [](Json& v) {
         v["spec"]["volumes"][1]["serviceAccount"].erase("serviceAccountName");
         v["spec"].erase("serviceAccountName");
       },
       "spec.volumes[1].serviceAccount.serviceAccountName is a required field"},
      {"names differ", [](Json& v) { v["spec"]["serviceAccountName"] = "other"; },
       "spec.serviceAccountName \"other\" and serviceAccount volume \"s3-reader\" must reference "
       "the same service account"},
      {"invalid spec.serviceAccountName",
       [](Json& v) {
         v["spec"]["serviceAccountName"] = "S3_Reader";
         v["spec"]["volumes"][1]["serviceAccount"]["serviceAccountName"] = "S3_Reader";
       },
       "spec.serviceAccountName is not a valid service account name: a lowercase RFC 1123 "
       "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
       "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
       "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"},
      {"mapped to a disk",
       [](Json& v) {
         v["spec"]["domain"]["devices"]["filesystems"] = Json::array();
         v["spec"]["domain"]["devices"]["disks"].push_back({{"name", "irsa"}});
       },
       "ServiceAccount token volume 'irsa' must be mapped to a filesystem, not a disk"},
      {"no filesystem",
       [](Json& v) { v["spec"]["domain"]["devices"]["filesystems"] = Json::array(); },
       "ServiceAccount token volume 'irsa' must have a matching filesystem defined in "
       "spec.domain.devices.filesystems"},
      {"filesystem not virtiofs",
       [](Json& v) { v["spec"]["domain"]["devices"]["filesystems"][0].erase("virtiofs"); },
       "spec.domain.devices.filesystems[0].virtiofs is a required field"},
      {"tag longer than 36 bytes",
       [](Json& v) {
         std::string name(37, 'x');
         v["spec"]["volumes"][1]["name"] = name;
         v["spec"]["domain"]["devices"]["filesystems"][0]["name"] = name;
       },
       "spec.domain.devices.filesystems[0].name '" + std::string(37, 'x') +
           "' must be at most 36 bytes: it is the virtiofs tag the guest mounts"},
      {"duplicate names", [](Json& v) { v["spec"]["volumes"][0]["name"] = "irsa"; },
       "spec.volumes[1] and spec.volumes[0] must not have the same Name."},
      {"two sources in one volume",
       [](Json& v) {
         v["spec"]["volumes"][0]["emptyDisk"] = {{"capacity", "1Gi"}};
       },
       "spec.volumes[0] must have exactly one source type set"},
      {"volume without disk",
       [](Json& v) { v["spec"]["domain"]["devices"]["disks"] = Json::array(); },
       "spec.volumes[0].name 'root' not found."},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Json vmi = S3Vmi();
    c.edit(vmi);
    Verdict v = EvaluateVmiTokenVolumes(Vmi(vmi), IrsaPolicy());
    EXPECT_FALSE(v.allowed);
    EXPECT_EQ(v.message, c.message);
    EXPECT_EQ(v.code, 422);
    EXPECT_TRUE(v.writes.empty());
  }
}

// Tests that several causes are reported together, joined as KubeVirt does.
TEST(VmiTokenVolumesTest, JoinsCauses) {
  Json vmi = S3Vmi();
  vmi["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"]["expirationSeconds"] = 300;
  vmi["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"]["path"] = "../t";
  Verdict v = EvaluateVmiTokenVolumes(Vmi(vmi), IrsaPolicy());
  EXPECT_EQ(v.message,
            "spec.volumes[1].serviceAccount.serviceAccountToken.expirationSeconds: Invalid value: "
            "300: may not specify a duration less than 10 minutes, "
            "spec.volumes[1].serviceAccount.serviceAccountToken.path: Invalid value: \"../t\": "
            "must not contain '..'");
}

// Tests that deleting a VMI removes its record.
TEST(VmiTokenVolumesTest, DeleteErasesRecord) {
  auto in =
      Input("kubevirt.io", "VirtualMachineInstance", "DELETE", "", "vms", "1.30", S3Vmi().dump());
  in.call.set_name("s3-vm");
  Verdict v = EvaluateVmiTokenVolumes(in, IrsaPolicy());
  ASSERT_EQ(v.writes.size(), 1u);
  EXPECT_TRUE(v.writes[0].erase);
  EXPECT_EQ(v.writes[0].key, "vms.s3-vm");
}

Json LauncherPod() {
  return Json::parse(R"({"apiVersion":"v1","kind":"Pod",
    "metadata":{"name":"virt-launcher-s3-vm-abcde","namespace":"vms",
      "labels":{"kubevirt.io":"virt-launcher"},
      "ownerReferences":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance",
                          "name":"s3-vm","uid":"vmi-uid","controller":true}]},
    "spec":{"serviceAccountName":"s3-reader",
      "containers":[{"name":"compute","image":"quay.io/kubevirt/virt-launcher:v1.8.0",
                     "volumeMounts":[{"name":"private","mountPath":"/var/run/kubevirt-private"}]}],
      "volumes":[{"name":"private","emptyDir":{}}]}})");
}

RecordLookup RecordedVmi() {
  Verdict admitted = EvaluateVmiTokenVolumes(Vmi(S3Vmi()), IrsaPolicy());
  std::string value = admitted.writes.at(0).value;
  return [value](std::string_view bucket,
                 std::string_view key) -> absl::StatusOr<std::optional<std::string>> {
    if (bucket == bus::buckets::kPods && key == "vms.s3-vm") return std::optional(value);
    return std::optional<std::string>();
  };
}

// Tests that the launcher pod gets the projected token and the virtiofs container as KubeVirt
// renders it, and that a second run adds nothing.
TEST(VirtLauncherTest, AddsProjectedTokenAndVirtiofsContainer) {
  auto in = testing::Pod(LauncherPod().dump(), "vms");
  Verdict v = EvaluateVirtLauncher(in, IrsaPolicy(), RecordedVmi());
  ASSERT_TRUE(v.allowed);
  EXPECT_EQ(v.rule_outcomes.at("virt_launcher"), "mutated");
  Json out = Apply(in, v);
  EXPECT_EQ(out["spec"]["volumes"], Json::parse(R"([{"name":"private","emptyDir":{}},
    {"name":"virtiofs-containers","emptyDir":{}},
    {"name":"irsa","projected":{"sources":[{"serviceAccountToken":
      {"audience":"sts.amazonaws.com","expirationSeconds":3600,"path":"token"}}]}}])"));
  EXPECT_EQ(out["spec"]["containers"][0]["volumeMounts"][1],
            Json::parse(R"({"name":"virtiofs-containers",
                            "mountPath":"/var/run/kubevirt/virtiofs-containers"})"));
  EXPECT_EQ(out["spec"]["containers"][1], Json::parse(R"({
    "name":"virtiofs-irsa","image":"quay.io/kubevirt/virt-launcher:v1.8.0",
    "imagePullPolicy":"IfNotPresent","command":["/usr/libexec/virtiofsd"],
    "args":["--socket-path=/var/run/kubevirt/virtiofs-containers/irsa.sock",
            "--shared-dir=/virtiofs-data/irsa","--sandbox=none","--cache=auto",
            "--migration-on-error=guest-error","--migration-mode=find-paths",
            "--translate-uid=host:107:0:1"],
    "volumeMounts":[{"name":"virtiofs-containers","mountPath":"/var/run/kubevirt/virtiofs-containers"},
                    {"name":"irsa","mountPath":"/virtiofs-data/irsa","readOnly":true}],
    "resources":{"requests":{"cpu":"10m","memory":"1M"},"limits":{"cpu":"100m","memory":"80M"}},
    "securityContext":{"runAsUser":107,"runAsGroup":107,"runAsNonRoot":true,
                       "allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}})"));
  EXPECT_EQ(v.audit_annotations.at("virtiofs-containers"), "virtiofs-irsa");

  Verdict again = EvaluateVirtLauncher(Rerun(in, out), IrsaPolicy(), RecordedVmi());
  EXPECT_TRUE(again.patch.empty()) << again.patch;
}

// Tests the fail-open paths: no record, a failing store, no owner.
TEST(VirtLauncherTest, FailsOpenWithWarning) {
  auto in = testing::Pod(LauncherPod().dump(), "vms");
  Verdict none = EvaluateVirtLauncher(in, Policy{}, testing::NoRecords());
  EXPECT_TRUE(none.allowed);
  EXPECT_TRUE(none.patch.empty());
  ASSERT_EQ(none.warnings.size(), 1u);
  EXPECT_EQ(none.warnings[0],
            "wisp: no token-volume record for VirtualMachineInstance vms/s3-vm; "
            "token volumes not injected");
  RecordLookup broken = [](std::string_view,
                           std::string_view) -> absl::StatusOr<std::optional<std::string>> {
    return absl::UnavailableError("kv down");
  };
  Verdict err = EvaluateVirtLauncher(in, Policy{}, broken);
  EXPECT_TRUE(err.allowed);
  EXPECT_TRUE(err.error.ok());
  EXPECT_EQ(err.warnings.at(0),
            "wisp: no token-volume record for VirtualMachineInstance "
            "vms/s3-vm (kv down); token volumes not injected");
  Json orphan = LauncherPod();
  orphan["metadata"].erase("ownerReferences");
  Verdict o = EvaluateVirtLauncher(testing::Pod(orphan.dump(), "vms"), Policy{}, RecordedVmi());
  EXPECT_TRUE(o.patch.empty());
  EXPECT_EQ(o.warnings.size(), 1u);
  // An ordinary pod is not a launcher pod.
  Json plain = LauncherPod();
  plain["metadata"].erase("labels");
  EXPECT_EQ(EvaluateVirtLauncher(testing::Pod(plain.dump(), "vms"), Policy{}, RecordedVmi())
                .rule_outcomes.at("virt_launcher"),
            "skipped");
}

// Scenario: a VMI sharing the IRSA token that a third-party webhook injects into the launcher pod
// (VEP 165 containerPath) plus a containerPath into a config volume.
Json ContainerPathVmi() {
  return Json::parse(R"({"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance",
    "metadata":{"name":"cp-vm","namespace":"vms","uid":"vmi-uid"},
    "spec":{"domain":{"devices":{"disks":[{"name":"root","disk":{"bus":"virtio"}}],
                                 "filesystems":[{"name":"aws-token","virtiofs":{}},
                                                {"name":"app-config","virtiofs":{}}]}},
      "volumes":[{"name":"root","containerDisk":{"image":"quay.io/containerdisks/fedora:40"}},
                 {"name":"aws-token","containerPath":{
                    "path":"/var/run/secrets/eks.amazonaws.com/serviceaccount","readOnly":true}},
                 {"name":"app-config","containerPath":{"path":"/etc/app/conf.d","readOnly":true}}]}})");
}

Policy GatedPolicy() {
  Policy p = IrsaPolicy();
  p.feature_gates.container_path_volumes = true;
  return p;
}

// Tests VEP 165's containerPath rules with KubeVirt's and the CRD schema's messages.
TEST(VmiContainerPathTest, DeniesWithUpstreamMessages) {
  const std::string cp = "spec.volumes[1].containerPath";
  struct Case {
    std::string name;
    std::function<void(Json&)> edit;
    std::string message;
  } cases[] = {
      {"relative path", [](Json& v) { v["spec"]["volumes"][1]["containerPath"]["path"] = "tok"; },
       cp + ".path: Invalid value: \"string\": path must be absolute (start with '/')"},
      {"dotdot", [](Json& v) { v["spec"]["volumes"][1]["containerPath"]["path"] = "/a/../b"; },
       cp + ".path: Invalid value: \"string\": path must not contain '..'"},
      {"dotdot inside a name",
       [](Json& v) { v["spec"]["volumes"][1]["containerPath"]["path"] = "/a/b..c"; },
       cp + ".path: Invalid value: \"string\": path must not contain '..'"},
      {"no path", [](Json& v) { v["spec"]["volumes"][1]["containerPath"].erase("path"); },
       cp + ".path: Required value"},
      {"too long",
       [](Json& v) {
         v["spec"]["volumes"][1]["containerPath"]["path"] = "/" + std::string(4096, 'a');
       },
       cp + ".path: Too long: may not be more than 4096 bytes"},
      {"read-write", [](Json& v) { v["spec"]["volumes"][1]["containerPath"]["readOnly"] = false; },
       cp + ".readOnly: Invalid value: \"boolean\": readOnly must be true, write access is not "
            "supported"},
      {"reserved kubevirt prefix",
       [](Json& v) {
         v["spec"]["volumes"][1]["containerPath"]["path"] = "/var/run/kubevirt/sockets";
       },
       "ContainerPath volume 'aws-token' uses reserved path prefix '/var/run/kubevirt'"},
      {"reserved libvirt prefix",
       [](Json& v) { v["spec"]["volumes"][1]["containerPath"]["path"] = "/var/run/libvirt"; },
       "ContainerPath volume 'aws-token' uses reserved path prefix '/var/run/libvirt'"},
      {"mapped to a disk",
       [](Json& v) {
         v["spec"]["domain"]["devices"]["filesystems"].erase(0);
         v["spec"]["domain"]["devices"]["disks"].push_back({{"name", "aws-token"}});
       },
       "ContainerPath volume 'aws-token' must be mapped to a filesystem, not a disk"},
      {"no filesystem", [](Json& v) { v["spec"]["domain"]["devices"]["filesystems"].erase(0); },
       "ContainerPath volume 'aws-token' must have a matching filesystem defined in "
       "spec.domain.devices.filesystems"},
      {"filesystem not virtiofs",
       [](Json& v) { v["spec"]["domain"]["devices"]["filesystems"][0].erase("virtiofs"); },
       "spec.domain.devices.filesystems[0].virtiofs is a required field"},
      {"containerPath with a second source",
       [](Json& v) {
         v["spec"]["volumes"][1]["emptyDisk"] = {{"capacity", "1Gi"}};
       },
       "spec.volumes[1] must have exactly one source type set"},
      {"tag longer than 36 bytes",
       [](Json& v) {
         std::string name(37, 'x');
         v["spec"]["volumes"][1]["name"] = name;
         v["spec"]["domain"]["devices"]["filesystems"][0]["name"] = name;
       },
       "spec.domain.devices.filesystems[0].name '" + std::string(37, 'x') +
           "' must be at most 36 bytes: it is the virtiofs tag the guest mounts"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Json vmi = ContainerPathVmi();
    c.edit(vmi);
    Verdict v = EvaluateVmiTokenVolumes(Vmi(vmi), GatedPolicy());
    EXPECT_FALSE(v.allowed);
    EXPECT_EQ(v.message, c.message);
    EXPECT_EQ(v.code, 422);
  }
}

// Tests that an allowed containerPath VMI is recorded (path, explicit readOnly, QoS predicates),
// and that with the gate off it is still admitted, with a warning, as KubeVirt's admitter does.
TEST(VmiContainerPathTest, RecordsAndWarnsWhenGateIsOff) {
  Json vmi = ContainerPathVmi();
  vmi["spec"]["volumes"][2]["containerPath"].erase("readOnly");  // defaulted, not explicit
  vmi["spec"]["domain"]["cpu"] = {{"cores", 2}, {"dedicatedCpuPlacement", true}};
  Verdict v = EvaluateVmiTokenVolumes(Vmi(vmi), GatedPolicy());
  ASSERT_TRUE(v.allowed) << v.message;
  EXPECT_TRUE(v.warnings.empty());
  v1::VmiTokenRecord record;
  ASSERT_TRUE(record.ParseFromString(v.writes.at(0).value));
  ASSERT_EQ(record.container_path_volumes_size(), 2);
  EXPECT_EQ(record.container_path_volumes(0).name(), "aws-token");
  EXPECT_EQ(record.container_path_volumes(0).path(),
            "/var/run/secrets/eks.amazonaws.com/serviceaccount");
  EXPECT_TRUE(record.container_path_volumes(0).read_only_explicit());
  EXPECT_FALSE(record.container_path_volumes(1).read_only_explicit());
  EXPECT_TRUE(record.dedicated_cpus());
  EXPECT_FALSE(record.guaranteed_qos());
  EXPECT_EQ(v.audit_annotations.at("vmi-containerpath-volumes"), "aws-token,app-config");

  Verdict off = EvaluateVmiTokenVolumes(Vmi(ContainerPathVmi()), IrsaPolicy());
  ASSERT_TRUE(off.allowed) << off.message;
  EXPECT_EQ(off.warnings.at(0),
            "wisp: VMI has ContainerPath volumes but the ContainerPathVolumes feature gate is "
            "disabled (policy featureGates); its virt-launcher pod will be refused");
}

// Tests KubeVirt's virtiofs gate for storage-backed filesystems.
TEST(VmiContainerPathTest, StorageFilesystemsNeedTheirGate) {
  Json vmi = S3Vmi();
  vmi["spec"]["volumes"].push_back(
      {{"name", "data"}, {"persistentVolumeClaim", {{"claimName", "d"}}}});
  vmi["spec"]["domain"]["devices"]["filesystems"].push_back(
      {{"name", "data"}, {"virtiofs", Json::object()}});
  Verdict v = EvaluateVmiTokenVolumes(Vmi(vmi), IrsaPolicy());
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.message, "virtiofs is not allowed: virtiofs feature gate is not enabled for PVC");
  Policy gated = IrsaPolicy();
  gated.feature_gates.virtiofs_storage_volumes = true;
  EXPECT_TRUE(EvaluateVmiTokenVolumes(Vmi(vmi), gated).allowed);
}

Json ContainerPathLauncher() {
  return Json::parse(R"({"apiVersion":"v1","kind":"Pod",
    "metadata":{"name":"virt-launcher-cp-vm-abcde","namespace":"vms",
      "labels":{"kubevirt.io":"virt-launcher"},
      "ownerReferences":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance",
                          "name":"cp-vm","uid":"vmi-uid","controller":true}]},
    "spec":{"serviceAccountName":"s3-reader",
      "containers":[{"name":"compute","image":"quay.io/kubevirt/virt-launcher:v1.8.0",
        "volumeMounts":[{"name":"virtiofs-containers","mountPath":"/var/run/kubevirt/virtiofs-containers"},
                        {"name":"aws-iam-token","mountPath":"/var/run/secrets/eks.amazonaws.com/serviceaccount","readOnly":true},
                        {"name":"etc-app","mountPath":"/etc/app"}]}],
      "volumes":[{"name":"virtiofs-containers","emptyDir":{}},
                 {"name":"aws-iam-token","projected":{"sources":[{"serviceAccountToken":
                    {"audience":"sts.amazonaws.com","expirationSeconds":86400,"path":"token"}}]}},
                 {"name":"etc-app","configMap":{"name":"app"}}]}})");
}

RecordLookup Recorded(const Json& vmi, const Policy& policy) {
  Verdict admitted = EvaluateVmiTokenVolumes(Vmi(vmi), policy);
  EXPECT_TRUE(admitted.allowed) << admitted.message;
  std::string key = admitted.writes.at(0).key;
  std::string value = admitted.writes.at(0).value;
  return [key, value](std::string_view bucket,
                      std::string_view k) -> absl::StatusOr<std::optional<std::string>> {
    if (bucket == bus::buckets::kPods && k == key) return std::optional(value);
    return std::optional<std::string>();
  };
}

std::string VirtiofsContainerJson(const std::string& vol, const std::string& mount,
                                  const std::string& extra_arg, const std::string& resources) {
  return R"({"name":"virtiofs-)" + vol + R"(","image":"quay.io/kubevirt/virt-launcher:v1.8.0",
    "imagePullPolicy":"IfNotPresent","command":["/usr/libexec/virtiofsd"],
    "args":["--socket-path=/var/run/kubevirt/virtiofs-containers/)" +
         vol + R"(.sock",
            "--shared-dir=/virtiofs-data/)" +
         vol + R"(","--sandbox=none","--cache=auto",
            "--migration-on-error=guest-error","--migration-mode=find-paths")" +
         extra_arg + R"(],
    "volumeMounts":[{"name":"virtiofs-containers","mountPath":"/var/run/kubevirt/virtiofs-containers"},
                    )" +
         mount + R"(],
    "resources":)" +
         resources + R"(,
    "securityContext":{"runAsUser":107,"runAsGroup":107,"runAsNonRoot":true,
                       "allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}})";
}

const char kDefaultResources[] =
    R"({"requests":{"cpu":"10m","memory":"1M"},"limits":{"cpu":"100m","memory":"80M"}})";

// Tests the virt-api launcher-pod mutator's containerPath injection: longest-prefix mount with
// subPath, uid translation for a projected token, exact containers, reinvocation adds nothing.
TEST(VirtLauncherContainerPathTest, InjectsVirtiofsContainers) {
  auto in = testing::Pod(ContainerPathLauncher().dump(), "vms");
  Verdict v = EvaluateVirtLauncher(in, GatedPolicy(), Recorded(ContainerPathVmi(), GatedPolicy()));
  ASSERT_TRUE(v.allowed) << v.message;
  EXPECT_TRUE(v.warnings.empty());
  Json out = Apply(in, v);
  ASSERT_EQ(out["spec"]["containers"].size(), 3u);
  EXPECT_EQ(
      out["spec"]["containers"][1],
      Json::parse(VirtiofsContainerJson(
          "aws-token",
          R"({"name":"aws-iam-token","mountPath":"/virtiofs-data/aws-token","readOnly":true})",
          R"(,"--translate-uid=host:107:0:1")", kDefaultResources)));
  EXPECT_EQ(
      out["spec"]["containers"][2],
      Json::parse(VirtiofsContainerJson(
          "app-config",
          R"({"name":"etc-app","mountPath":"/virtiofs-data/app-config","subPath":"conf.d","readOnly":true})",
          "", kDefaultResources)));
  // Only containers are added: the pod's volumes and the compute mounts are untouched.
  EXPECT_EQ(out["spec"]["volumes"], in.object["spec"]["volumes"]);
  EXPECT_EQ(out["spec"]["containers"][0], in.object["spec"]["containers"][0]);
  for (const auto& op : Json::parse(v.patch)) {
    EXPECT_EQ(op["path"], "/spec/containers/-") << op.dump();
  }
  EXPECT_EQ(v.audit_annotations.at("virtiofs-containers"),
            "virtiofs-aws-token,virtiofs-app-config");
  Verdict again = EvaluateVirtLauncher(Rerun(in, out), GatedPolicy(),
                                       Recorded(ContainerPathVmi(), GatedPolicy()));
  EXPECT_TRUE(again.patch.empty()) << again.patch;
}

// Tests each skip of the mutator (a warning, the pod still allowed) and the gate.
TEST(VirtLauncherContainerPathTest, SkipsWithWarningsAndHonoursTheGate) {
  struct Case {
    std::string name;
    std::function<void(Json& vmi, Json& pod)> edit;
    std::string warning;
  } cases[] = {
      {"readOnly not explicit",
       [](Json& vmi, Json&) { vmi["spec"]["volumes"][1]["containerPath"].erase("readOnly"); },
       "wisp: ContainerPath volume aws-token does not have readOnly=true; skipping virtiofs "
       "container"},
      {"no compute mount",
       [](Json&, Json& pod) { pod["spec"]["containers"][0]["volumeMounts"].erase(1); },
       "wisp: No volumeMount found for containerPath "
       "/var/run/secrets/eks.amazonaws.com/serviceaccount in volume aws-token"},
      {"pod volume missing", [](Json&, Json& pod) { pod["spec"]["volumes"].erase(1); },
       "wisp: Pod volume aws-iam-token not found for containerPath volume aws-token"},
      {"unsupported pod volume",
       [](Json&, Json& pod) {
         pod["spec"]["volumes"][1] = {{"name", "aws-iam-token"},
                                      {"hostPath", {{"path", "/var/lib/x"}}}};
       },
       "wisp: Pod volume aws-iam-token has unsupported type for containerPath volume aws-token; "
       "supported types are: ConfigMap, Secret, Projected, DownwardAPI, EmptyDir"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Json vmi = ContainerPathVmi();
    Json pod = ContainerPathLauncher();
    c.edit(vmi, pod);
    auto in = testing::Pod(pod.dump(), "vms");
    Verdict v = EvaluateVirtLauncher(in, GatedPolicy(), Recorded(vmi, GatedPolicy()));
    EXPECT_TRUE(v.allowed);
    ASSERT_EQ(v.warnings.size(), 1u);
    EXPECT_EQ(v.warnings[0], c.warning);
    Json out = Apply(in, v);
    ASSERT_EQ(out["spec"]["containers"].size(), 2u);  // app-config still gets its container
    EXPECT_EQ(out["spec"]["containers"][1]["name"], "virtiofs-app-config");
  }
  auto in = testing::Pod(ContainerPathLauncher().dump(), "vms");
  Verdict off = EvaluateVirtLauncher(in, IrsaPolicy(), Recorded(ContainerPathVmi(), IrsaPolicy()));
  EXPECT_FALSE(off.allowed);
  EXPECT_EQ(off.message,
            "VMI has ContainerPath volumes but the ContainerPathVolumes feature gate is disabled");
  EXPECT_EQ(off.code, 403);
}

// Tests KubeVirt's virtiofs resources: dedicated CPUs raise the cpu request to the limit and (as
// the mutator treats them as guaranteed) the memory request; guaranteed QoS does both.
TEST(VirtLauncherContainerPathTest, DedicatedCpusAndGuaranteedQos) {
  const std::string kPinned =
      R"({"requests":{"cpu":"100m","memory":"80M"},"limits":{"cpu":"100m","memory":"80M"}})";
  struct Case {
    std::string name;
    std::function<void(Json&)> edit;
    std::string resources;
  } cases[] = {
      {"default", [](Json&) {}, kDefaultResources},
      {"dedicated CPUs",
       [](Json& v) {
         v["spec"]["domain"]["cpu"] = {{"dedicatedCpuPlacement", true}};
       },
       kPinned},
      {"guaranteed QoS",
       [](Json& v) {
         v["spec"]["domain"]["resources"] = {{"requests", {{"cpu", "2"}, {"memory", "2Gi"}}},
                                             {"limits", {{"cpu", "2000m"}, {"memory", "2Gi"}}}};
       },
       kPinned},
      {"requests below limits",
       [](Json& v) {
         v["spec"]["domain"]["resources"] = {{"requests", {{"cpu", "1"}, {"memory", "2Gi"}}},
                                             {"limits", {{"cpu", "2"}, {"memory", "2Gi"}}}};
       },
       kDefaultResources},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Json vmi = S3Vmi();
    c.edit(vmi);
    auto in = testing::Pod(LauncherPod().dump(), "vms");
    Verdict v = EvaluateVirtLauncher(in, IrsaPolicy(), Recorded(vmi, IrsaPolicy()));
    Json out = Apply(in, v);
    EXPECT_EQ(out["spec"]["containers"][1]["resources"], Json::parse(c.resources));
  }
  for (const auto& c : cases) {
    SCOPED_TRACE("containerPath " + c.name);
    Json vmi = ContainerPathVmi();
    c.edit(vmi);
    auto in = testing::Pod(ContainerPathLauncher().dump(), "vms");
    Verdict v = EvaluateVirtLauncher(in, GatedPolicy(), Recorded(vmi, GatedPolicy()));
    Json out = Apply(in, v);
    EXPECT_EQ(out["spec"]["containers"][2]["resources"], Json::parse(c.resources));
  }
}

}  // namespace
}  // namespace wisp::policy
