#include <gtest/gtest.h>

#include "wisp/policy/rules.hpp"
#include "test_util.hpp"

namespace wisp::policy {
namespace {

using k8s::Json;
using testing::Apply;
using testing::Input;
using testing::Rerun;

const std::string kOneServiceAccount =
    "Forbidden: a token is always for the VirtualMachineInstance's service account "
    "(spec.serviceAccountName, or the serviceAccount volume's serviceAccountName, which the "
    "launcher pod runs as); name it there, not per token";
const std::string kIrsaRequest =
    R"({"audience":"sts.amazonaws.com","expirationSeconds":3600,"path":"token"})";
const std::string kEksPath = "/var/run/secrets/eks.amazonaws.com/serviceaccount";

// Scenario 2 on a KubeVirt with VEP 94: an IRSA serviceAccount token volume and its filesystem.
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

// Scenario 2 on stock KubeVirt (v1.9.0): the token request is an annotation on a containerPath
// volume (integration/admission/manifests/vmi-token-annotation.yaml).
Json AnnotatedVmi() {
  Json vmi = Json::parse(R"({"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance",
    "metadata":{"name":"irsa-annotated","namespace":"vms","uid":"vmi-uid","annotations":{}},
    "spec":{"serviceAccountName":"s3-reader",
      "domain":{"devices":{"disks":[{"name":"root","disk":{"bus":"virtio"}}],
                           "filesystems":[{"name":"aws-token","virtiofs":{}}]}},
      "volumes":[{"name":"root","containerDisk":{"image":"quay.io/containerdisks/fedora:40"}},
                 {"name":"aws-token","containerPath":{
                    "path":"/var/run/secrets/eks.amazonaws.com/serviceaccount","readOnly":true}}]}})");
  vmi["metadata"]["annotations"]["wisp.dev/token.aws-token"] = kIrsaRequest;
  return vmi;
}

AdmissionInput Vmi(const Json& vmi, const std::string& op = "CREATE",
                   const std::string& old_json = "") {
  return Input("kubevirt.io", "VirtualMachineInstance", op, vmi.dump(), "vms", "1.30", old_json);
}

Policy IrsaPolicy() {
  Policy p;
  p.audiences["vms"] = {"sts.amazonaws.com", "vault"};
  return p;
}

Policy GatedPolicy() {
  Policy p = IrsaPolicy();
  p.feature_gates.container_path_volumes = true;
  return p;
}

// The VMI as wisp's mutating webhook leaves it (EvaluateMutate, as the API server calls it).
Json Mutated(const Json& vmi, const Policy& policy = GatedPolicy()) {
  AdmissionInput in = Vmi(vmi);
  Verdict v = EvaluateMutate(in, policy, testing::NoRecords());
  EXPECT_TRUE(v.allowed) << v.message;
  return Apply(in, v);
}

// Tests that the VEP 94 VMI gets the equivalent annotation, is then allowed, and that nothing is
// written anywhere.
TEST(VmiTokenVolumesTest, AnnotatesVep94VolumeAndWritesNothing) {
  AdmissionInput in = Vmi(S3Vmi());
  Verdict m = EvaluateVmiTokenAnnotations(in, IrsaPolicy());
  ASSERT_TRUE(m.allowed);
  EXPECT_EQ(m.rule_outcomes.at("vmi_token_annotations"), "mutated");
  EXPECT_TRUE(m.writes.empty());
  Json out = Apply(in, m);
  EXPECT_EQ(out["metadata"]["annotations"],
            Json::parse(R"({"wisp.dev/token.irsa":)" + Json(kIrsaRequest).dump() + "}"));
  EXPECT_TRUE(EvaluateVmiTokenAnnotations(Rerun(in, out), IrsaPolicy()).patch.empty());

  Verdict v = EvaluateVmiTokenVolumes(Vmi(out), IrsaPolicy());
  ASSERT_TRUE(v.allowed) << v.message;
  EXPECT_TRUE(v.writes.empty());
  EXPECT_EQ(v.audit_annotations.at("vmi-token-volumes"), "irsa");
}

// Tests the VEP 94 projected shape, with expirationSeconds defaulted to 3600.
TEST(VmiTokenVolumesTest, AllowsProjectedShape) {
  Json vmi = S3Vmi();
  vmi["spec"]["volumes"][1] = Json::parse(R"({"name":"irsa","projected":{"sources":[
    {"serviceAccountToken":{"audience":"sts.amazonaws.com","path":"token"}}]}})");
  Json out = Mutated(vmi, IrsaPolicy());
  EXPECT_EQ(out["metadata"]["annotations"]["wisp.dev/token.irsa"], kIrsaRequest);
  Verdict v = EvaluateVmiTokenVolumes(Vmi(out), IrsaPolicy());
  ASSERT_TRUE(v.allowed) << v.message;
  EXPECT_TRUE(v.writes.empty());
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
      {"serviceAccountName inside serviceAccountToken (germag's question)",
       [](Json& v) {
         v["spec"]["volumes"][1]["serviceAccount"]["serviceAccountToken"]["serviceAccountName"] =
             "other";
       },
       tok + ".serviceAccountName: " + kOneServiceAccount},
      {"serviceAccountName inside a projected token",
       [](Json& v) {
         v["spec"]["volumes"][1] = Json::parse(R"({"name":"irsa","projected":{"sources":[
           {"serviceAccountToken":{"audience":"sts.amazonaws.com","path":"t",
                                   "serviceAccountName":"other"}}]}})");
       },
       "spec.volumes[1].projected.sources[0].serviceAccountToken.serviceAccountName: " +
           kOneServiceAccount},
      {"two tokens in one projected volume",
       [](Json& v) {
         v["spec"]["volumes"][1] = Json::parse(R"({"name":"irsa","projected":{"sources":[
           {"serviceAccountToken":{"audience":"sts.amazonaws.com","path":"a"}},
           {"serviceAccountToken":{"audience":"vault","path":"b"}}]}})");
       },
       "spec.volumes[1].projected.sources: Too many: 2: must have at most 1 item (one virtiofs "
       "tag serves one token)"},
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
    EXPECT_EQ(v.message.find("annotation"), std::string::npos) << "the user's causes come first";
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

// Tests that a VEP 94 VMI the mutating webhook did not annotate, or whose annotation says
// something else, is refused with the reason.
TEST(VmiTokenVolumesTest, NeedsTheMutatingWebhooksAnnotation) {
  Verdict missing = EvaluateVmiTokenVolumes(Vmi(S3Vmi()), IrsaPolicy());
  EXPECT_FALSE(missing.allowed);
  EXPECT_EQ(missing.message,
            "spec.volumes[1].serviceAccount.serviceAccountToken: annotation wisp.dev/token.irsa "
            "is missing: wisp's mutating webhook for VirtualMachineInstances did not run, and "
            "without it the launcher pod never gets this token (install the chart's "
            "virtualmachineinstances mutating webhook)");
  Json other = S3Vmi();
  other["metadata"]["annotations"]["wisp.dev/token.irsa"] =
      R"({"audience":"vault","expirationSeconds":3600,"path":"token"})";
  EXPECT_EQ(Mutated(other, IrsaPolicy())["metadata"]["annotations"]["wisp.dev/token.irsa"],
            other["metadata"]["annotations"]["wisp.dev/token.irsa"])
      << "a user's annotation is not overwritten";
  Verdict differs = EvaluateVmiTokenVolumes(Vmi(other), IrsaPolicy());
  EXPECT_FALSE(differs.allowed);
  EXPECT_EQ(differs.message,
            "metadata.annotations[wisp.dev/token.irsa]: Invalid value: must be " + kIrsaRequest +
                ", what spec.volumes[1].serviceAccount.serviceAccountToken asks for (wisp writes "
                "it from there)");
}

// Tests that DELETE and status updates (VMIs have no status subresource) cost nothing, that a
// token annotation cannot change after CREATE, and that a spec change is checked again.
TEST(VmiTokenVolumesTest, UpdatesAndDeletesWriteNothing) {
  const Json created = Mutated(AnnotatedVmi());
  auto del =
      Input("kubevirt.io", "VirtualMachineInstance", "DELETE", "", "vms", "1.30", created.dump());
  Verdict d = EvaluateVmiTokenVolumes(del, GatedPolicy());
  EXPECT_TRUE(d.allowed);
  EXPECT_TRUE(d.writes.empty());
  EXPECT_EQ(d.rule_outcomes.at("vmi_token_volumes"), "skipped");

  Json status = created;
  status["status"] = {{"phase", "Running"}};
  status["metadata"]["finalizers"] = Json::array({"kubevirt.io/virtualMachineControllerFinalize"});
  Verdict s = EvaluateVmiTokenVolumes(Vmi(status, "UPDATE", created.dump()), GatedPolicy());
  EXPECT_TRUE(s.allowed);
  EXPECT_TRUE(s.writes.empty());
  EXPECT_EQ(s.rule_outcomes.at("vmi_token_volumes"), "skipped");

  Json changed = created;
  changed["metadata"]["annotations"]["wisp.dev/token.aws-token"] =
      R"({"audience":"vault","expirationSeconds":3600,"path":"token"})";
  Verdict c = EvaluateVmiTokenVolumes(Vmi(changed, "UPDATE", created.dump()), GatedPolicy());
  EXPECT_FALSE(c.allowed);
  EXPECT_EQ(c.message,
            "metadata.annotations[wisp.dev/token.aws-token]: Forbidden: may not be added, changed "
            "or removed after the VirtualMachineInstance is created (virt-controller copies it "
            "onto every launcher pod it renders, a migration target's too)");
  Json removed = created;
  removed["metadata"]["annotations"].erase("wisp.dev/token-mount.aws-token");
  EXPECT_FALSE(
      EvaluateVmiTokenVolumes(Vmi(removed, "UPDATE", created.dump()), GatedPolicy()).allowed);

  Json hotplug = created;
  hotplug["spec"]["volumes"].push_back(
      {{"name", "data"}, {"persistentVolumeClaim", {{"claimName", "d"}}}});
  Verdict h = EvaluateVmiTokenVolumes(Vmi(hotplug, "UPDATE", created.dump()), GatedPolicy());
  EXPECT_FALSE(h.allowed);
  EXPECT_EQ(h.message, "spec.volumes[2].name 'data' not found.");
  EXPECT_TRUE(EvaluateVmiTokenAnnotations(Vmi(hotplug, "UPDATE", created.dump()), GatedPolicy())
                  .patch.empty());
}

// Tests the stock-KubeVirt shape: the mutating webhook adds only the containerPath's mount
// annotation (the user's annotation stays as written), and the VMI is allowed with no writes.
TEST(VmiTokenAnnotationTest, AllowsAnnotatedContainerPath) {
  AdmissionInput in = Vmi(AnnotatedVmi());
  Verdict m = EvaluateVmiTokenAnnotations(in, GatedPolicy());
  Json out = Apply(in, m);
  EXPECT_EQ(out["metadata"]["annotations"], Json({{"wisp.dev/token.aws-token", kIrsaRequest},
                                                  {"wisp.dev/token-mount.aws-token", kEksPath}}));
  EXPECT_EQ(m.audit_annotations.at("vmi-token-annotations"), "wisp.dev/token-mount.aws-token");
  EXPECT_TRUE(EvaluateVmiTokenAnnotations(Rerun(in, out), GatedPolicy()).patch.empty());
  Verdict v = EvaluateVmiTokenVolumes(Vmi(out), GatedPolicy());
  ASSERT_TRUE(v.allowed) << v.message;
  EXPECT_TRUE(v.warnings.empty());
  EXPECT_TRUE(v.writes.empty());
  EXPECT_EQ(v.audit_annotations.at("vmi-token-volumes"), "aws-token");
  // A VMI that asks wisp for nothing is left alone.
  Json plain = AnnotatedVmi();
  plain["metadata"].erase("annotations");
  Verdict p = EvaluateVmiTokenAnnotations(Vmi(plain), GatedPolicy());
  EXPECT_TRUE(p.patch.empty());
  EXPECT_EQ(p.rule_outcomes.at("vmi_token_annotations"), "allowed");
}

// Tests each check of a token annotation, with the field named as the user wrote it.
TEST(VmiTokenAnnotationTest, DeniesBadRequestsNamingTheField) {
  const std::string af = "metadata.annotations[wisp.dev/token.aws-token]";
  auto set = [](const std::string& value) {
    return [value](Json& v) { v["metadata"]["annotations"]["wisp.dev/token.aws-token"] = value; };
  };
  struct Case {
    std::string name;
    std::function<void(Json&)> edit;
    std::string message;
  } cases[] = {
      {"not JSON", set("audience=sts"),
       af + ": Invalid value: must be a JSON object such as " + kIrsaRequest},
      {"300 s", set(R"({"audience":"sts.amazonaws.com","expirationSeconds":300,"path":"token"})"),
       af + ".expirationSeconds: Invalid value: 300: must be at least 600 (10 minutes)"},
      {"over the policy's maximum",
       set(R"({"audience":"sts.amazonaws.com","expirationSeconds":100000,"path":"token"})"),
       af + ".expirationSeconds: Invalid value: 100000: must be at most 86400 (the policy's "
            "maxTokenLifetime)"},
      {"lifetime as a string",
       set(R"({"audience":"sts.amazonaws.com","expirationSeconds":"1h","path":"token"})"),
       af + ".expirationSeconds: Invalid value: \"1h\": must be a whole number of seconds"},
      {"absolute path", set(R"({"audience":"sts.amazonaws.com","path":"/etc/shadow"})"),
       af + ".path: Invalid value: \"/etc/shadow\": must be a relative path"},
      {"dotdot path", set(R"({"audience":"sts.amazonaws.com","path":"../etc/shadow"})"),
       af + ".path: Invalid value: \"../etc/shadow\": must not contain '..'"},
      {"no path", set(R"({"audience":"sts.amazonaws.com"})"),
       af + ".path: Required value: the token's file name in the shared directory, e.g. "
            "\"token\""},
      {"audience not allowed", set(R"({"audience":"gcp","path":"token"})"),
       af + ".audience: Forbidden: audience \"gcp\" is not allowed in namespace \"vms\" "
            "(allowed: \"sts.amazonaws.com\", \"vault\")"},
      {"unknown field", set(R"({"audience":"sts.amazonaws.com","path":"token","mode":"0644"})"),
       af + ".mode: Unsupported field: the fields are audience, expirationSeconds and path"},
      {"serviceAccountName (germag's question)",
       set(R"({"audience":"sts.amazonaws.com","path":"token","serviceAccountName":"other"})"),
       af + ".serviceAccountName: " + kOneServiceAccount},
      {"no such volume",
       [](Json& v) {
         v["metadata"]["annotations"].erase("wisp.dev/token.aws-token");
         v["metadata"]["annotations"]["wisp.dev/token.aws"] = kIrsaRequest;
       },
       "metadata.annotations[wisp.dev/token.aws]: Not found: spec.volumes has no volume \"aws\""},
      {"not a containerPath volume",
       [](Json& v) {
         v["metadata"]["annotations"].erase("wisp.dev/token.aws-token");
         v["metadata"]["annotations"]["wisp.dev/token.root"] = kIrsaRequest;
       },
       "metadata.annotations[wisp.dev/token.root]: Invalid value: spec.volumes[0] (\"root\") is "
       "not a containerPath volume: the token is served to the guest from the path a "
       "containerPath volume names"},
      {"readOnly not set",
       [](Json& v) { v["spec"]["volumes"][1]["containerPath"].erase("readOnly"); },
       "spec.volumes[1].containerPath.readOnly: Required value: must be true for "
       "wisp.dev/token.aws-token (KubeVirt serves only read-only containerPath volumes)"},
      {"readOnly false",
       [](Json& v) { v["spec"]["volumes"][1]["containerPath"]["readOnly"] = false; },
       "spec.volumes[1].containerPath.readOnly: Invalid value: \"boolean\": readOnly must be "
       "true, write access is not supported"},
      {"mapped to a disk",
       [](Json& v) {
         v["spec"]["domain"]["devices"]["filesystems"] = Json::array();
         v["spec"]["domain"]["devices"]["disks"].push_back({{"name", "aws-token"}});
       },
       "ContainerPath volume 'aws-token' must be mapped to a filesystem, not a disk"},
      {"a mount annotation of the user's own",
       [](Json& v) { v["metadata"]["annotations"]["wisp.dev/token-mount.root"] = "/etc"; },
       "metadata.annotations[wisp.dev/token-mount.root]: Forbidden: wisp writes it, for a "
       "containerPath volume that a wisp.dev/token.root annotation names; remove it"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Json vmi = AnnotatedVmi();
    c.edit(vmi);
    Verdict v = EvaluateValidate(Vmi(Mutated(vmi)), GatedPolicy(), testing::NoRecords());
    EXPECT_FALSE(v.allowed);
    EXPECT_EQ(v.message, c.message);
    EXPECT_EQ(v.code, 422);
    EXPECT_TRUE(v.writes.empty());
  }
}

// Tests that a containerPath token request the mutating webhook did not complete is refused.
TEST(VmiTokenAnnotationTest, NeedsTheMountAnnotation) {
  Verdict v = EvaluateVmiTokenVolumes(Vmi(AnnotatedVmi()), GatedPolicy());
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.message,
            "metadata.annotations[wisp.dev/token-mount.aws-token]: Required value: wisp's "
            "mutating webhook for VirtualMachineInstances writes the containerPath \"" +
                kEksPath +
                "\" there and did not run (install the chart's "
                "virtualmachineinstances mutating webhook)");
  Json wrong = Mutated(AnnotatedVmi());
  wrong["metadata"]["annotations"]["wisp.dev/token-mount.aws-token"] = "/etc";
  EXPECT_NE(
      EvaluateVmiTokenVolumes(Vmi(wrong), GatedPolicy()).message.find("Invalid value: \"/etc\""),
      std::string::npos);
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

// Tests that with the gate off a containerPath VMI is still admitted, with a warning, as
// KubeVirt's admitter does, and that nothing is recorded either way.
TEST(VmiContainerPathTest, WarnsWhenGateIsOff) {
  Verdict on = EvaluateVmiTokenVolumes(Vmi(ContainerPathVmi()), GatedPolicy());
  ASSERT_TRUE(on.allowed) << on.message;
  EXPECT_TRUE(on.warnings.empty());
  EXPECT_TRUE(on.writes.empty());
  Verdict off = EvaluateVmiTokenVolumes(Vmi(ContainerPathVmi()), IrsaPolicy());
  ASSERT_TRUE(off.allowed) << off.message;
  EXPECT_TRUE(off.writes.empty());
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
  EXPECT_TRUE(EvaluateVmiTokenVolumes(Vmi(Mutated(vmi, gated)), gated).allowed);
}

// The launcher pod virt-controller v1.9.0 renders for AnnotatedVmi (trimmed): the VMI's
// annotations copied, the compute container, the virtiofs socket directory; no virtiofs container
// (KubeVirt's launcher-pod mutator adds those for containerPath volumes).
Json AnnotatedLauncher() {
  Json pod = Json::parse(R"({"apiVersion":"v1","kind":"Pod",
    "metadata":{"name":"virt-launcher-irsa-annotated-abcde","namespace":"vms",
      "labels":{"kubevirt.io":"virt-launcher"},"annotations":{},
      "ownerReferences":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance",
                          "name":"irsa-annotated","uid":"vmi-uid","controller":true}]},
    "spec":{"serviceAccountName":"s3-reader",
      "containers":[{"name":"compute","image":"quay.io/kubevirt/virt-launcher:v1.9.0",
        "volumeMounts":[{"name":"private","mountPath":"/var/run/kubevirt-private"},
                        {"name":"virtiofs-containers","mountPath":"/var/run/kubevirt/virtiofs-containers"}]}],
      "volumes":[{"name":"private","emptyDir":{}},{"name":"virtiofs-containers","emptyDir":{}}]}})");
  pod["metadata"]["annotations"] = Mutated(AnnotatedVmi())["metadata"]["annotations"];
  return pod;
}

std::string VirtiofsContainerJson(const std::string& vol, const std::string& mount,
                                  const std::string& extra_arg, const std::string& resources) {
  return R"({"name":"virtiofs-)" + vol + R"(","image":"quay.io/kubevirt/virt-launcher:v1.9.0",
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

const char kTokenVolume[] = R"({"name":"wisp-token-aws-token","projected":{"sources":[
  {"serviceAccountToken":{"audience":"sts.amazonaws.com","expirationSeconds":3600,"path":"token"}}]}})";
const char kTokenDataMount[] =
    R"({"name":"wisp-token-aws-token","mountPath":"/virtiofs-data/aws-token","readOnly":true})";

// Tests the launcher pod from its annotations alone: the projected token, its compute mount at the
// containerPath, and the container KubeVirt's mutator would render on it; a second pass adds
// nothing, also after the API server defaulted the volume's mode.
TEST(VirtLauncherTest, ServesTheAnnotatedToken) {
  auto in = testing::Pod(AnnotatedLauncher().dump(), "vms");
  Verdict v = EvaluateVirtLauncher(in, GatedPolicy());
  ASSERT_TRUE(v.allowed) << v.message;
  EXPECT_TRUE(v.warnings.empty());
  EXPECT_EQ(v.rule_outcomes.at("virt_launcher"), "mutated");
  Json out = Apply(in, v);
  EXPECT_EQ(out["spec"]["volumes"].back(), Json::parse(kTokenVolume));
  EXPECT_EQ(out["spec"]["volumes"].size(), 3u);
  EXPECT_EQ(out["spec"]["containers"][0]["volumeMounts"].back(),
            Json({{"name", "wisp-token-aws-token"}, {"mountPath", kEksPath}, {"readOnly", true}}));
  ASSERT_EQ(out["spec"]["containers"].size(), 2u);
  EXPECT_EQ(
      out["spec"]["containers"][1],
      Json::parse(VirtiofsContainerJson("aws-token", kTokenDataMount,
                                        R"(,"--translate-uid=host:107:0:1")", kDefaultResources)));
  EXPECT_EQ(v.audit_annotations.at("virtiofs-containers"), "virtiofs-aws-token");

  Verdict again = EvaluateVirtLauncher(Rerun(in, out), GatedPolicy());
  EXPECT_TRUE(again.allowed) << again.message;
  EXPECT_TRUE(again.patch.empty()) << again.patch;
  Json defaulted = out;
  defaulted["spec"]["volumes"].back()["projected"]["defaultMode"] = 420;
  Verdict after_defaults = EvaluateVirtLauncher(Rerun(in, defaulted), GatedPolicy());
  EXPECT_TRUE(after_defaults.allowed) << after_defaults.message;
  EXPECT_TRUE(after_defaults.patch.empty()) << after_defaults.patch;
}

// Tests that launcher pods that ask for no token, and other pods, are left alone.
TEST(VirtLauncherTest, LeavesOtherPodsAlone) {
  Json plain = AnnotatedLauncher();
  plain["metadata"].erase("annotations");
  Verdict p = EvaluateVirtLauncher(testing::Pod(plain.dump(), "vms"), GatedPolicy());
  EXPECT_TRUE(p.allowed);
  EXPECT_TRUE(p.patch.empty());
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_EQ(p.rule_outcomes.at("virt_launcher"), "allowed");
  Json other = AnnotatedLauncher();
  other["metadata"].erase("labels");
  EXPECT_EQ(EvaluateVirtLauncher(testing::Pod(other.dump(), "vms"), GatedPolicy())
                .rule_outcomes.at("virt_launcher"),
            "skipped");
}

// The launcher pod virt-controller renders for S3Vmi on a KubeVirt with VEP 94: its own
// virtiofs-irsa container shares the pod's API-audience token (virtiofs.go).
Json Vep94Launcher() {
  Json pod = Json::parse(R"({"apiVersion":"v1","kind":"Pod",
    "metadata":{"name":"virt-launcher-s3-vm-abcde","namespace":"vms",
      "labels":{"kubevirt.io":"virt-launcher"},
      "ownerReferences":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance",
                          "name":"s3-vm","uid":"vmi-uid","controller":true}]},
    "spec":{"serviceAccountName":"s3-reader",
      "containers":[{"name":"compute","image":"quay.io/kubevirt/virt-launcher:v1.9.0",
        "volumeMounts":[{"name":"virtiofs-containers","mountPath":"/var/run/kubevirt/virtiofs-containers"}]},
       {"name":"virtiofs-irsa","image":"quay.io/kubevirt/virt-launcher:v1.9.0",
        "command":["/usr/libexec/virtiofsd"],
        "args":["--socket-path=/var/run/kubevirt/virtiofs-containers/irsa.sock",
                "--shared-dir=/var/run/secrets/kubernetes.io/serviceaccount/","--sandbox=none",
                "--cache=auto","--migration-on-error=guest-error","--migration-mode=find-paths",
                "--translate-uid=host:107:0:1"],
        "volumeMounts":[{"name":"virtiofs-containers","mountPath":"/var/run/kubevirt/virtiofs-containers"},
                        {"name":"kube-api-access-x","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","readOnly":true}]}],
      "volumes":[{"name":"virtiofs-containers","emptyDir":{}},
                 {"name":"kube-api-access-x","projected":{"sources":[{"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}}]}}]}})");
  pod["metadata"]["annotations"] = Mutated(S3Vmi(), IrsaPolicy())["metadata"]["annotations"];
  return pod;
}

// Tests that virt-controller's VEP 94 container, which would serve the API-audience token, is
// rewritten to serve the requested one (never skipped as "already there").
TEST(VirtLauncherTest, RewritesVirtControllersVep94Container) {
  auto in = testing::Pod(Vep94Launcher().dump(), "vms");
  Verdict v = EvaluateVirtLauncher(in, IrsaPolicy());
  ASSERT_TRUE(v.allowed) << v.message;
  Json out = Apply(in, v);
  const Json& c = out["spec"]["containers"][1];
  EXPECT_EQ(c["args"][1], "--shared-dir=/virtiofs-data/irsa");
  EXPECT_EQ(c["args"].size(), 7u);
  EXPECT_EQ(c["volumeMounts"].back(),
            Json::parse(R"({"name":"wisp-token-irsa","mountPath":"/virtiofs-data/irsa",
                            "readOnly":true})"));
  EXPECT_EQ(out["spec"]["volumes"].back()["projected"]["sources"][0]["serviceAccountToken"],
            Json::parse(kIrsaRequest));
  EXPECT_EQ(out["spec"]["containers"].size(), 2u);
  EXPECT_EQ(out["spec"]["containers"][0], in.object["spec"]["containers"][0]) << "no compute mount";
  EXPECT_EQ(v.audit_annotations.at("virtiofs-containers-rewritten"), "virtiofs-irsa");
  Verdict again = EvaluateVirtLauncher(Rerun(in, out), IrsaPolicy());
  EXPECT_TRUE(again.allowed) << again.message;
  EXPECT_TRUE(again.patch.empty()) << again.patch;
}

// Tests the launcher pods wisp cannot serve as asked: each refused with the reason.
TEST(VirtLauncherTest, RefusesWhatItCannotServe) {
  struct Case {
    std::string name;
    std::function<void(Json& pod)> edit;
    std::string message;
  } cases[] = {
      {"another webhook's mount at the path (EKS pod identity)",
       [](Json& pod) {
         pod["spec"]["volumes"].push_back(Json::parse(R"({"name":"aws-iam-token","projected":
           {"sources":[{"serviceAccountToken":{"audience":"sts.amazonaws.com",
                                                "expirationSeconds":86400,"path":"token"}}]}})"));
         pod["spec"]["containers"][0]["volumeMounts"].push_back(
             {{"name", "aws-iam-token"}, {"mountPath", kEksPath}, {"readOnly", true}});
       },
       "the compute container already mounts volume \"aws-iam-token\" at \"" + kEksPath +
           "\", which is the containerPath \"" + kEksPath +
           "\" of wisp.dev/token.aws-token (another webhook, e.g. the EKS pod identity webhook, "
           "injected it): wisp does not put a second token at that path; use another "
           "containerPath path or drop one of the two"},
      {"a mount above the path",
       [](Json& pod) {
         pod["spec"]["volumes"].push_back({{"name", "secrets"}, {"emptyDir", Json::object()}});
         pod["spec"]["containers"][0]["volumeMounts"].push_back(
             {{"name", "secrets"}, {"mountPath", "/var/run/secrets"}});
       },
       "the compute container already mounts volume \"secrets\" at \"/var/run/secrets\", which "
       "covers the containerPath \"" +
           kEksPath +
           "\" of wisp.dev/token.aws-token (another webhook, e.g. the EKS pod identity webhook, "
           "injected it): wisp does not put a second token at that path; use another "
           "containerPath path or drop one of the two"},
      {"KubeVirt's mutator already served another volume there",
       [](Json& pod) {
         pod["spec"]["containers"].push_back(Json::parse(VirtiofsContainerJson(
             "aws-token",
             R"({"name":"aws-iam-token","mountPath":"/virtiofs-data/aws-token","readOnly":true})",
             R"(,"--translate-uid=host:107:0:1")", kDefaultResources)));
       },
       "container virtiofs-aws-token already exists and shares volume \"aws-iam-token\", not "
       "\"wisp-token-aws-token\" that wisp.dev/token.aws-token asks for (KubeVirt's launcher-pod "
       "mutator renders it for a mount another webhook made at the containerPath): wisp does not "
       "serve a second token under one tag; use another containerPath path or drop one of the "
       "two"},
      {"a different token volume of wisp's name",
       [](Json& pod) {
         pod["spec"]["volumes"].push_back(Json::parse(R"({"name":"wisp-token-aws-token",
           "projected":{"sources":[{"serviceAccountToken":{"audience":"vault","path":"token"}}]}})"));
       },
       "spec.volumes: volume \"wisp-token-aws-token\" exists and is not the token "
       "wisp.dev/token.aws-token asks for"},
      {"an annotation that is no longer valid",
       [](Json& pod) {
         pod["metadata"]["annotations"]["wisp.dev/token.aws-token"] =
             R"({"audience":"sts.amazonaws.com","expirationSeconds":300,"path":"token"})";
       },
       "metadata.annotations[wisp.dev/token.aws-token].expirationSeconds: Invalid value: 300: "
       "must be at least 600 (10 minutes)"},
      {"no compute container", [](Json& pod) { pod["spec"]["containers"][0]["name"] = "other"; },
       "virt-launcher pod has no compute container with an image: the tokens its "
       "wisp.dev/token.* annotations ask for cannot be served"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Json pod = AnnotatedLauncher();
    c.edit(pod);
    Verdict v = EvaluateVirtLauncher(testing::Pod(pod.dump(), "vms"), GatedPolicy());
    EXPECT_FALSE(v.allowed);
    EXPECT_EQ(v.message, c.message);
    EXPECT_EQ(v.code, 403);
    EXPECT_TRUE(v.patch.empty());
  }
  Verdict off = EvaluateVirtLauncher(testing::Pod(AnnotatedLauncher().dump(), "vms"), IrsaPolicy());
  EXPECT_FALSE(off.allowed);
  EXPECT_EQ(off.message,
            "VMI has ContainerPath volumes but the ContainerPathVolumes feature gate is disabled");
  EXPECT_EQ(off.code, 403);
}

// Tests KubeVirt's virtiofs resources, read from the compute container: guaranteed QoS (equal
// non-zero requests and limits, which dedicated CPUs imply) pins both requests to the limits.
TEST(VirtLauncherTest, GuaranteedQosPinsTheResources) {
  const std::string kPinned =
      R"({"requests":{"cpu":"100m","memory":"80M"},"limits":{"cpu":"100m","memory":"80M"}})";
  struct Case {
    std::string name;
    Json resources;
    std::string want;
  } cases[] = {
      {"none", Json(), kDefaultResources},
      {"guaranteed",
       {{"requests", {{"cpu", "2"}, {"memory", "2Gi"}}},
        {"limits", {{"cpu", "2000m"}, {"memory", "2Gi"}}}},
       kPinned},
      {"requests below limits",
       {{"requests", {{"cpu", "1"}, {"memory", "2Gi"}}},
        {"limits", {{"cpu", "2"}, {"memory", "2Gi"}}}},
       kDefaultResources},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Json pod = AnnotatedLauncher();
    if (!c.resources.is_null()) pod["spec"]["containers"][0]["resources"] = c.resources;
    auto in = testing::Pod(pod.dump(), "vms");
    Json out = Apply(in, EvaluateVirtLauncher(in, GatedPolicy()));
    EXPECT_EQ(out["spec"]["containers"][1]["resources"], Json::parse(c.want));
  }
}

}  // namespace
}  // namespace wisp::policy
