#include "wisp/policy/policy_service.hpp"

#include <gtest/gtest.h>

#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/k8s/json_patch.hpp"
#include "wisp/status/fake_clock.hpp"
#include "service_fixture.hpp"

namespace wisp::policy {
namespace {

using namespace std::chrono_literals;
using k8s::Json;

constexpr const char* kVmi = R"({"metadata":{"name":"s3-vm","namespace":"vms"},
  "spec":{"domain":{"devices":{"filesystems":[{"name":"irsa","virtiofs":{}}]}},
    "volumes":[{"name":"irsa","serviceAccount":{"serviceAccountName":"s3-reader",
      "serviceAccountToken":{"audience":"sts.amazonaws.com","path":"token"}}}]}})";
// A PVC rule e allows (and would record once committed).
constexpr const char* kPvc = R"({"metadata":{"name":"s3-vm","namespace":"vms"},
  "spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}})";

using PolicyServiceTest = testing::PolicyServiceFixture;

// Tests that a validate call over the bus, dry run or not, records nothing: the apiserver may
// still refuse what wisp allowed (records follow committed objects, committed_test.cpp).
TEST_F(PolicyServiceTest, ValidateRecordsNothing) {
  for (bool dry_run : {true, false}) {
    auto verdict = bus::Call<v1::AdmissionVerdict>(
        bus_, bus::subjects::kPolicyValidate, Call("", "PersistentVolumeClaim", kPvc, dry_run), 1s);
    ASSERT_TRUE(verdict.ok()) << verdict.status();
    EXPECT_TRUE(verdict->allowed());
  }
  EXPECT_TRUE(absl::IsNotFound(sources_->Get("vms.PersistentVolumeClaim.s3-vm").status()));
  EXPECT_EQ(Decisions("pvc_sources", "allowed"), 2);
}

// Tests that a VMI's token request travels on the VMI (mutate adds the annotation, validate
// allows it) and nothing is written to KV.
TEST_F(PolicyServiceTest, VmiTokenWritesNothing) {
  auto mutated = bus::Call<v1::AdmissionVerdict>(
      bus_, bus::subjects::kPolicyMutate, Call("kubevirt.io", "VirtualMachineInstance", kVmi), 1s);
  ASSERT_TRUE(mutated.ok()) << mutated.status();
  ASSERT_TRUE(mutated->allowed());
  auto vmi = k8s::ApplyPatch(Json::parse(kVmi), std::string_view(mutated->patch()));
  ASSERT_TRUE(vmi.ok()) << vmi.status();
  EXPECT_EQ((*vmi)["metadata"]["annotations"]["wisp.dev/token.irsa"],
            R"({"audience":"sts.amazonaws.com","expirationSeconds":3600,"path":"token"})");
  const std::string vmi_json = vmi->dump();
  auto validated = bus::Call<v1::AdmissionVerdict>(
      bus_, bus::subjects::kPolicyValidate,
      Call("kubevirt.io", "VirtualMachineInstance", vmi_json.c_str()), 1s);
  ASSERT_TRUE(validated.ok()) << validated.status();
  EXPECT_TRUE(validated->allowed()) << validated->message();
  EXPECT_EQ(Decisions("vmi_token_volumes", "allowed"), 1);
  EXPECT_EQ(Decisions("vmi_token_annotations", "mutated"), 1);
  auto keys = sources_->Keys();
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_TRUE(keys->empty());
}

// Tests that the launcher pod's copied annotation drives its mutation through the bus.
TEST_F(PolicyServiceTest, MutatesLauncherFromAnnotation) {
  const char* pod =
      R"({"metadata":{"name":"virt-launcher-s3-vm-x","labels":{"kubevirt.io":"virt-launcher"},
    "annotations":{"wisp.dev/token.irsa":
      "{\"audience\":\"sts.amazonaws.com\",\"expirationSeconds\":3600,\"path\":\"token\"}"},
    "ownerReferences":[{"kind":"VirtualMachineInstance","name":"s3-vm"}]},
    "spec":{"containers":[{"name":"compute","image":"launcher:1"}]}})";
  auto verdict =
      bus::Call<v1::AdmissionVerdict>(bus_, bus::subjects::kPolicyMutate, Call("", "Pod", pod), 1s);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_TRUE(verdict->allowed());
  EXPECT_NE(verdict->patch().find("virtiofs-irsa"), std::string::npos);
  EXPECT_EQ(verdict->rule_outcomes().at("virt_launcher"), "mutated");
  EXPECT_EQ(Decisions("virt_launcher", "mutated"), 1);
}

// Tests the error replies: a garbage body, bad object JSON, a failing bucket.
TEST_F(PolicyServiceTest, ErrorReplies) {
  auto garbage = bus_.Request(bus::subjects::kPolicyMutate, "\xff\xff\xff", 1s);
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_json = bus::Call<v1::AdmissionVerdict>(bus_, bus::subjects::kPolicyMutate,
                                                  Call("", "Pod", "{nope"), 1s);
  EXPECT_EQ(bad_json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad_json.status().message()).find("object_json is not valid JSON"),
            std::string::npos);
  // A lookup that fails (CDI's destination-PVC check of a DataVolume) is Unavailable, for the
  // gateway's failure mode; so is a record the store cannot write.
  bus_.FailBucket(bus::buckets::kSources, absl::UnavailableError("kv down"));
  constexpr const char* kDv = R"({"metadata":{"name":"s3-vm","namespace":"vms"},
    "spec":{"source":{"blank":{}},"pvc":{"accessModes":["ReadWriteOnce"]}}})";
  auto failed = bus::Call<v1::AdmissionVerdict>(bus_, bus::subjects::kPolicyValidate,
                                                Call("cdi.kubevirt.io", "DataVolume", kDv), 1s);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  v1::CommittedObject stored;
  stored.set_event("ADDED");
  stored.mutable_kind()->set_version("v1");
  stored.mutable_kind()->set_kind("PersistentVolumeClaim");
  stored.set_namespace_("vms");
  stored.set_name("s3-vm");
  stored.set_object_json(kPvc);
  auto unrecorded = bus::Call<v1::CommitResult>(bus_, bus::subjects::kPolicyRecord, stored, 1s);
  EXPECT_EQ(unrecorded.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace wisp::policy
