#include "lost_nodes.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "job_runner.hpp"
#include "test_fixtures.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"

namespace wisp::populator {
namespace {

using namespace std::chrono_literals;
namespace subjects = bus::subjects;

class LostNodeTest : public PopulatorServiceTest {
 protected:
  void SetUp() override {
    SetUpService("wisp-lost", "true");
    if (HasFatalFailure()) return;
    ASSERT_TRUE(bus_.Js().EnsureStream(JobRunner::StreamConfig()).ok());
    sweeper_ = NewSweeper(10min);
  }
  std::unique_ptr<LostNodeSweeper> NewSweeper(std::chrono::milliseconds lost_after) {
    return std::make_unique<LostNodeSweeper>(
        service_->store(), bus_, clock_, metrics_,
        LostNodeConfig{.node_name = "node-a", .lost_after = lost_after, .interval = 1s});
  }
  // A volume created for `node` (its job queued on that node's subject).
  std::string CreateOn(const std::string& node, const std::string& name) {
    v1::CreateVolumeRequest req;
    req.mutable_spec()->set_name(name);
    req.mutable_spec()->set_capacity_bytes(kCap);
    req.mutable_spec()->set_node(node);
    auto resp = bus::Call<v1::CreateVolumeResponse>(bus_, subjects::kVolumeCreate, req, 2s);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return "";
    EXPECT_EQ(resp->volume().phase(), v1::IMPORT_SCHEDULED);
    return resp->volume().volume_id();
  }
  v1::VolumeStatus Record(const std::string& id) {
    auto got = service_->store().Get(id);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? got->first : v1::VolumeStatus();
  }
  std::vector<std::string> Sweep() {
    auto swept = sweeper_->SweepOnce();
    EXPECT_TRUE(swept.ok()) << swept.status();
    return swept.ok() ? *swept : std::vector<std::string>{};
  }
  // Serves node's volume.list as a populator of that node would.
  bus::SubscriptionPtr Answer(const std::string& node) {
    auto sub = bus_.Serve(subjects::Node(node, "volume.list"), bus::queues::kPopulator,
                          [](const bus::Request&) { return bus::Reply::Ok(""); });
    EXPECT_TRUE(sub.ok());
    return sub.ok() ? *std::move(sub) : nullptr;
  }

  std::unique_ptr<LostNodeSweeper> sweeper_;
};

// Tests that a volume waiting for a node where no populator answers fails, with node_lost and a
// message naming the node and what to do, once the node has been silent for node-lost-after.
TEST_F(LostNodeTest, FailsTheWaitingVolumesOfASilentNode) {
  const std::string id = CreateOn("node-b", "pvc-b");
  const double failed_before = metrics_.jobs_failed.Value();
  EXPECT_TRUE(Sweep().empty());  // silence starts now
  clock_.Advance(10min - 1s);
  EXPECT_TRUE(Sweep().empty());
  EXPECT_EQ(Record(id).phase(), v1::IMPORT_SCHEDULED);
  clock_.Advance(1s);
  EXPECT_EQ(Sweep(), std::vector<std::string>{id});
  const v1::VolumeStatus failed = Record(id);
  EXPECT_EQ(failed.phase(), v1::FAILED);
  EXPECT_TRUE(failed.node_lost());
  EXPECT_EQ(
      failed.message().rfind("node node-b lost: no wisp-populator has answered there for 10m", 0),
      0u)
      << failed.message();
  EXPECT_NE(failed.message().find("Delete the PVC"), std::string::npos) << failed.message();
  EXPECT_EQ(metrics_.jobs_failed.Value(), failed_before + 1);
  // Failed once: later passes leave it alone.
  clock_.Advance(1h);
  EXPECT_TRUE(Sweep().empty());
}

// Tests that a node whose populator answers is never lost, however long its volumes wait.
TEST_F(LostNodeTest, ANodeThatAnswersIsNeverLost) {
  const std::string id = CreateOn("node-c", "pvc-c");
  auto node_c = Answer("node-c");
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(Sweep().empty());
    clock_.Advance(1h);
  }
  EXPECT_EQ(Record(id).phase(), v1::IMPORT_SCHEDULED);
}

// Tests that an answer ends the silence, so a node must be silent for node-lost-after in one go.
TEST_F(LostNodeTest, AnAnswerStartsTheCountAgain) {
  const std::string id = CreateOn("node-b", "pvc-b");
  EXPECT_TRUE(Sweep().empty());
  clock_.Advance(6min);
  {
    auto back = Answer("node-b");
    EXPECT_TRUE(Sweep().empty());
  }
  EXPECT_TRUE(Sweep().empty());  // silent again from here
  clock_.Advance(6min);
  EXPECT_TRUE(Sweep().empty());
  EXPECT_EQ(Record(id).phase(), v1::IMPORT_SCHEDULED);
  clock_.Advance(4min);
  EXPECT_EQ(Sweep(), std::vector<std::string>{id});
}

// Tests that a probe that cannot tell (a timeout, a bus fault) fails nothing: a node is lost only
// when its latest probe found no responders.
TEST_F(LostNodeTest, AProbeThatCannotTellDecidesNothing) {
  const std::string id = CreateOn("node-b", "pvc-b");
  EXPECT_TRUE(Sweep().empty());
  bus_.FailSubject(subjects::Node("node-b", "volume.list"), absl::UnavailableError("bus down"));
  clock_.Advance(11min);
  EXPECT_TRUE(Sweep().empty());
  EXPECT_EQ(Record(id).phase(), v1::IMPORT_SCHEDULED);
  bus_.ClearFaults();
  EXPECT_EQ(Sweep(), std::vector<std::string>{id});
}

// Tests that only volumes waiting for another node are judged (this node's own and finished ones
// are left alone), and that node-lost-after 0 turns the sweep off.
TEST_F(LostNodeTest, OnlyVolumesWaitingForAnotherNode) {
  const std::string mine = CreateOn("node-a", "pvc-mine");
  const std::string done = CreateOn("node-b", "pvc-done");
  ASSERT_TRUE(service_->store()
                  .Mutate(done,
                          [](v1::VolumeStatus& s) {
                            s.set_phase(v1::SUCCEEDED);
                            return true;
                          })
                  .ok());
  auto never = NewSweeper(0ms);
  const std::string waiting = CreateOn("node-b", "pvc-waiting");
  EXPECT_TRUE(Sweep().empty());
  ASSERT_TRUE(never->SweepOnce().ok());
  clock_.Advance(1h);
  auto swept = never->SweepOnce();
  ASSERT_TRUE(swept.ok());
  EXPECT_TRUE(swept->empty());
  EXPECT_EQ(Record(waiting).phase(), v1::IMPORT_SCHEDULED);
  EXPECT_EQ(Sweep(), std::vector<std::string>{waiting});
  EXPECT_EQ(Record(mine).phase(), v1::IMPORT_SCHEDULED);
  EXPECT_EQ(Record(done).phase(), v1::SUCCEEDED);
}

// Tests that a volume failed for its lost node is deleted without that node (whose populator
// cannot answer), while a volume merely waiting for a silent node still asks it (Unavailable).
TEST_F(LostNodeTest, DeletesANodeLostVolumeWithoutItsNode) {
  const std::string lost = CreateOn("node-b", "pvc-lost");
  EXPECT_TRUE(Sweep().empty());
  clock_.Advance(10min);
  ASSERT_EQ(Sweep(), std::vector<std::string>{lost});
  const std::string waiting = CreateOn("node-b", "pvc-waiting");

  v1::DeleteVolumeRequest del;
  del.set_volume_id(lost);
  auto deleted = bus::Call<v1::DeleteVolumeResponse>(bus_, subjects::kVolumeDelete, del, 2s);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(service_->store().Get(lost).status().code(), absl::StatusCode::kNotFound);

  del.set_volume_id(waiting);
  auto refused = bus::Call<v1::DeleteVolumeResponse>(bus_, subjects::kVolumeDelete, del, 2s);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_TRUE(service_->store().Get(waiting).ok());
}

// Tests what the node's populator does with its queued jobs when it comes back: a job whose volume
// was failed as lost is acked without running and its partial bytes removed, and one whose volume
// was deleted meanwhile is acked after its directory is removed.
TEST_F(LostNodeTest, AReturningNodeEndsItsStaleJobs) {
  // The jobs were queued for node-a, and node-a's volumes were judged from elsewhere.
  const std::string failed = CreateOn("node-a", "pvc-failed");
  const std::string gone = CreateOn("node-a", "pvc-gone");
  ASSERT_TRUE(service_->store()
                  .Mutate(failed,
                          [](v1::VolumeStatus& s) {
                            s.set_phase(v1::FAILED);
                            s.set_node_lost(true);
                            s.set_message(NodeLostMessage("node-a", 10min));
                            return true;
                          })
                  .ok());
  const std::string partial = root_ + "/vols/" + gone;
  std::filesystem::create_directories(partial);
  std::ofstream(partial + "/" + kDiskPart) << "half";
  const std::string failed_part = root_ + "/vols/" + failed + "/" + kDiskPart;
  std::filesystem::create_directories(root_ + "/vols/" + failed);
  std::ofstream(failed_part) << "half";
  ASSERT_TRUE(service_->store().Delete(gone).ok());
  ASSERT_EQ(bus_.StreamSize(bus::streams::kPopulateJobs), 2u);

  JobRunnerConfig jc;
  jc.node_name = "node-a";
  jc.volume_root = root_ + "/vols";
  JobRunner runner(bus_.Js(), service_->store(), importer_, metrics_, clock_, jc);
  auto consumer = runner.Subscribe();
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  for (int i = 0; i < 2; ++i) {
    auto ran = runner.RunOnce(**consumer, 0ms);
    ASSERT_TRUE(ran.ok()) << ran.status();
    EXPECT_TRUE(*ran);
  }
  EXPECT_EQ(bus_.StreamSize(bus::streams::kPopulateJobs), 0u);
  EXPECT_EQ(Record(failed).phase(), v1::FAILED);
  EXPECT_TRUE(Record(failed).node_lost());
  EXPECT_FALSE(std::filesystem::exists(failed_part));
  EXPECT_FALSE(std::filesystem::exists(partial));
}

}  // namespace
}  // namespace wisp::populator
