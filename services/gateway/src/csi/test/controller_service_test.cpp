#include "csi/controller_service.hpp"

#include <filesystem>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "csi/csi_metrics.hpp"
#include "csi/plugin.hpp"
#include "csi/test/csi_test_fixtures.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/v1/node.pb.h"
#include "wisp/v1/volume.pb.h"

namespace wisp::gateway::csi {
namespace {
using ::testing::HasSubstr;
using Mode = ::csi::v1::VolumeCapability::AccessMode;
constexpr std::chrono::milliseconds kBudget{2000};

class ControllerServiceTest : public ::testing::Test {
 protected:
  ControllerServiceTest() {
    ControllerOptions options;
    options.default_node = "node-a";
    options.poll_interval = std::chrono::milliseconds(1);
    controller_ = std::make_unique<ControllerService>(options, bus_, clock_, metrics_);
  }
  ~ControllerServiceTest() override { std::filesystem::remove_all(root_); }

  ::csi::v1::CreateVolumeRequest Create(const std::string& name, int64_t bytes) {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(bytes);
    *req.add_volume_capabilities() = testing::MountCapability();
    return req;
  }

  FakeClock clock_;
  bus::testing::InMemoryBus bus_{clock_};
  std::string root_ = testing::MakeTempDir("wisp-csi-ctrl");
  testing::FakePopulator populator_{bus_, root_};
  prometheus::Registry registry_;
  CsiMetrics metrics_{registry_};
  std::unique_ptr<ControllerService> controller_;
};

// Tests that CreateVolume asks the populator for the preferred node and reports its topology.
TEST_F(ControllerServiceTest, CreatesOnPreferredNode) {
  auto req = Create("pvc-1", 1 << 30);
  auto* ar = req.mutable_accessibility_requirements();
  (*ar->add_requisite()->mutable_segments())[kTopologyKey] = "node-b";
  (*ar->add_preferred()->mutable_segments())[kTopologyKey] = "node-c";
  (*req.mutable_parameters())["csi.storage.k8s.io/pvc/name"] = "disk";
  (*req.mutable_parameters())["csi.storage.k8s.io/pvc/namespace"] = "vms";
  auto resp = controller_->Create(req, kBudget);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->volume().capacity_bytes(), 1 << 30);
  EXPECT_EQ(resp->volume().accessible_topology(0).segments().at(kTopologyKey), "node-c");
  const v1::CreateVolumeRequest sent = populator_.last_create();
  EXPECT_EQ(sent.spec().node(), "node-c");
  EXPECT_EQ(sent.spec().name(), "pvc-1");
  EXPECT_EQ(sent.spec().pvc_name(), "disk");
  EXPECT_EQ(sent.spec().pvc_namespace(), "vms");
  EXPECT_FALSE(sent.wait());  // the gateway polls; no populator serve thread is held
}

// Tests that a PVC's volume carries the CA bundle its source names, read by the gateway; a
// ConfigMap not there yet fails CreateVolume (Unavailable, retried) before anything is created.
TEST_F(ControllerServiceTest, CarriesTheCaBundleOfThePvcsSource) {
  ControllerOptions options;
  options.default_node = "node-a";
  options.poll_interval = std::chrono::milliseconds(1);
  std::vector<std::string> asked;
  absl::Status fail;
  options.read_source_ca =
      [&](const std::string& ns,
          const std::string& pvc) -> absl::StatusOr<std::optional<v1::SourceCa>> {
    asked.push_back(ns + "/" + pvc);
    if (!fail.ok()) return fail;
    v1::SourceCa ca;
    ca.set_config_map("mirror-ca");
    ca.set_ca_pem("PEM");
    return ca;
  };
  ControllerService controller(options, bus_, clock_, metrics_);
  auto req = Create("pvc-ca", 1 << 20);
  (*req.mutable_parameters())["csi.storage.k8s.io/pvc/name"] = "wisp-prime-u1";
  (*req.mutable_parameters())["csi.storage.k8s.io/pvc/namespace"] = "vms";

  fail = absl::UnavailableError("ConfigMap vms/mirror-ca ... does not exist yet; retry");
  auto failed = controller.Create(req, kBudget);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(populator_.size(), 0u);

  fail = absl::OkStatus();
  auto resp = controller.Create(req, kBudget);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(asked, (std::vector<std::string>{"vms/wisp-prime-u1", "vms/wisp-prime-u1"}));
  const v1::CreateVolumeRequest sent = populator_.last_create();
  EXPECT_EQ(sent.spec().source_ca().config_map(), "mirror-ca");
  EXPECT_EQ(sent.spec().source_ca().ca_pem(), "PEM");

  // No PVC named (a volume created without external-provisioner's metadata): nothing asked.
  ASSERT_TRUE(controller.Create(Create("plain", 1 << 20), kBudget).ok());
  EXPECT_EQ(asked.size(), 2u);
}

// Tests that CreateVolume answers when wisp-populator reports the volume done
// (wisp.v1.events.volume.<id>), without waiting for its next read: here reads alone would never
// see it ready (an hour between reads, and the fake answers IMPORT_IN_PROGRESS to every read).
TEST_F(ControllerServiceTest, VolumeDoneEventAnswersTheWaitingCreate) {
  ControllerOptions options;
  options.default_node = "node-a";
  options.poll_interval = std::chrono::hours(1);
  ControllerService controller(options, bus_, clock_, metrics_, &bus_);
  populator_.SetPendingGets(1'000'000);
  std::thread populator([&] {
    // Once the create waits (a read by name before the create, one by id once registered): the
    // volume is done, and the populator says so.
    while (bus_.RequestCount(bus::subjects::kVolumeGet) < 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    v1::VolumeStatus done;
    done.set_volume_id("vol-1");
    done.mutable_spec()->set_name("pvc-ev");
    done.mutable_spec()->set_node("node-a");
    done.mutable_spec()->set_capacity_bytes(1 << 20);
    done.set_phase(v1::SUCCEEDED);
    populator_.Put(done);
    v1::VolumeEvent progress;  // not terminal: does not wake the wait
    progress.set_volume_id("vol-1");
    progress.set_phase(v1::IMPORT_IN_PROGRESS);
    ASSERT_TRUE(
        bus_.Publish(bus::subjects::VolumeEvents("vol-1"), progress.SerializeAsString()).ok());
    v1::VolumeEvent event;
    event.set_volume_id("vol-1");
    event.set_phase(v1::SUCCEEDED);
    ASSERT_TRUE(bus_.Publish(bus::subjects::VolumeEvents("vol-1"), event.SerializeAsString()).ok());
  });
  auto resp = controller.Create(Create("pvc-ev", 1 << 20), std::chrono::seconds(60));
  populator.join();
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->volume().volume_id(), "vol-1");
}

// Tests idempotency by name, and AlreadyExists when the capacity does not fit.
TEST_F(ControllerServiceTest, CreateIsIdempotentByName) {
  auto first = controller_->Create(Create("pvc-1", 1 << 20), kBudget);
  ASSERT_TRUE(first.ok());
  auto again = controller_->Create(Create("pvc-1", 1 << 20), kBudget);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->volume().volume_id(), first->volume().volume_id());
  EXPECT_EQ(populator_.size(), 1u);
  auto bigger = controller_->Create(Create("pvc-1", 1 << 21), kBudget);
  EXPECT_EQ(bigger.status().code(), absl::StatusCode::kAlreadyExists);
}

// Tests that CreateVolume answers only once the populator reports the volume ready.
TEST_F(ControllerServiceTest, CreateWaitsUntilReady) {
  populator_.SetPendingGets(3);
  auto resp = controller_->Create(Create("pvc-slow", 1 << 20), kBudget);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(bus_.RequestCount(bus::subjects::kVolumeGet), 1 + 3);
}

// Tests that malformed CreateVolume requests are refused naming the field.
TEST_F(ControllerServiceTest, RejectsBadCreateRequests) {
  struct Case {
    std::string name;
    std::function<void(::csi::v1::CreateVolumeRequest&)> mutate;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"no name", [](auto& r) { r.clear_name(); }, "name is required"},
      {"no caps", [](auto& r) { r.clear_volume_capabilities(); },
       "volume_capabilities is required"},
      {"no access type", [](auto& r) { r.mutable_volume_capabilities(0)->clear_mount(); },
       "volume_capabilities[0]: access_type is required"},
      {"multi node",
       [](auto& r) {
         r.mutable_volume_capabilities(0)->mutable_access_mode()->set_mode(
             Mode::MULTI_NODE_MULTI_WRITER);
       },
       "MULTI_NODE_MULTI_WRITER is not supported"},
      {"limit below required", [](auto& r) { r.mutable_capacity_range()->set_limit_bytes(1); },
       "capacity_range: limit_bytes must not be less than required_bytes"},
      {"topology without node",
       [](auto& r) {
         (*r.mutable_accessibility_requirements()->add_requisite()->mutable_segments())["zone"] =
             "z";
       },
       "accessibility_requirements"},
      {"snapshot", [](auto& r) { r.mutable_volume_content_source()->mutable_snapshot(); },
       "volume_content_source: snapshots are not supported"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto req = Create("pvc-bad", 1 << 20);
    c.mutate(req);
    auto resp = controller_->Create(req, kBudget);
    ASSERT_FALSE(resp.ok());
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(resp.status().message()), HasSubstr(c.message));
  }
  EXPECT_EQ(populator_.size(), 0u);
}

// Tests that DeleteVolume is idempotent and needs a volume id.
TEST_F(ControllerServiceTest, DeleteIsIdempotent) {
  auto created = controller_->Create(Create("pvc-1", 1 << 20), kBudget);
  ::csi::v1::DeleteVolumeRequest del;
  del.set_volume_id(created->volume().volume_id());
  EXPECT_TRUE(controller_->Delete(del, kBudget).ok());
  EXPECT_TRUE(controller_->Delete(del, kBudget).ok());
  EXPECT_EQ(populator_.size(), 0u);
  del.clear_volume_id();
  EXPECT_EQ(controller_->Delete(del, kBudget).status().code(), absl::StatusCode::kInvalidArgument);
}

// Tests ValidateVolumeCapabilities: unknown volume, confirmed mount and block (the node shows
// disk.img through a loop device), unconfirmed multi-node access.
TEST_F(ControllerServiceTest, ValidatesCapabilities) {
  auto created = controller_->Create(Create("pvc-1", 1 << 20), kBudget);
  ::csi::v1::ValidateVolumeCapabilitiesRequest req;
  req.set_volume_id("nope");
  *req.add_volume_capabilities() = testing::MountCapability();
  EXPECT_EQ(controller_->Validate(req, kBudget).status().code(), absl::StatusCode::kNotFound);
  req.set_volume_id(created->volume().volume_id());
  auto ok = controller_->Validate(req, kBudget);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->has_confirmed());
  req.mutable_volume_capabilities(0)->mutable_block();
  auto block = controller_->Validate(req, kBudget);
  ASSERT_TRUE(block.ok());
  EXPECT_TRUE(block->has_confirmed());
  req.mutable_volume_capabilities(0)->mutable_access_mode()->set_mode(
      Mode::MULTI_NODE_MULTI_WRITER);
  auto no = controller_->Validate(req, kBudget);
  ASSERT_TRUE(no.ok());
  EXPECT_FALSE(no->has_confirmed());
  EXPECT_THAT(no->message(), HasSubstr("MULTI_NODE_MULTI_WRITER"));
}

// Tests ListVolumes paging and an invalid starting token (Aborted).
TEST_F(ControllerServiceTest, ListsWithPaging) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(controller_->Create(Create("pvc-" + std::to_string(i), 1 << 20), kBudget).ok());
  }
  ::csi::v1::ListVolumesRequest req;
  req.set_max_entries(2);
  auto page1 = controller_->List(req, kBudget);
  ASSERT_TRUE(page1.ok());
  EXPECT_EQ(page1->entries_size(), 2);
  ASSERT_FALSE(page1->next_token().empty());
  req.set_starting_token(page1->next_token());
  auto page2 = controller_->List(req, kBudget);
  ASSERT_TRUE(page2.ok());
  EXPECT_EQ(page2->entries_size(), 1);
  EXPECT_TRUE(page2->next_token().empty());
  req.set_starting_token("bogus");
  EXPECT_EQ(controller_->List(req, kBudget).status().code(), absl::StatusCode::kAborted);
}

// Tests that GetCapacity asks the node named by the topology over the bus.
TEST_F(ControllerServiceTest, GetCapacityAsksTheNode) {
  auto sub =
      *bus_.Serve(bus::subjects::Node("node-b", "csi.capacity"), "", [](const bus::Request&) {
        v1::NodeCapacityResponse resp;
        resp.set_available_bytes(12345);
        return bus::ProtoReply(resp);
      });
  ::csi::v1::GetCapacityRequest req;
  (*req.mutable_accessible_topology()->mutable_segments())[kTopologyKey] = "node-b";
  auto resp = controller_->Capacity(req, kBudget);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->available_capacity(), 12345);
  // A node nobody serves: the bus error comes back.
  (*req.mutable_accessible_topology()->mutable_segments())[kTopologyKey] = "node-z";
  EXPECT_FALSE(controller_->Capacity(req, kBudget).ok());
}

}  // namespace
}  // namespace wisp::gateway::csi
