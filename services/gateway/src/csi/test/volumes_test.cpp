// TokenVolumes and BindVolumes on their own, below NodeService (node_service_test.cpp covers them
// through the CSI Node calls): what each part answers NodeService when it dispatches.
#include <filesystem>
#include <fstream>
#include <mutex>

#include <gtest/gtest.h>

#include "csi/bind_volumes.hpp"
#include "csi/csi_metrics.hpp"
#include "csi/projection_store.hpp"
#include "csi/target_dir.hpp"
#include "csi/test/csi_test_fixtures.hpp"
#include "csi/token_volumes.hpp"
#include "csi/volume_locks.hpp"
#include "wisp/fsutil/testing/fake_mounter.hpp"

namespace wisp::gateway::csi {
namespace {
namespace fs = std::filesystem;
using testing::FakePopulator;
using testing::FakeTokenService;
using testing::TokenPublish;

class VolumesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::MakeTempDir("wisp-csi-volumes");
    fs::create_directories(root_ + "/pods");
    fs::create_directories(root_ + "/volumes");
    bus::BucketConfig bucket;
    bucket.name = std::string(bus::buckets::kProjections);
    store_ = std::make_unique<KvProjectionStore>(*bus_.OpenBucket(bucket), "node-a");
    options_.node_id = "node-a";
    options_.volume_root = root_ + "/volumes";
    options_.target_roots = {root_ + "/pods"};
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<TokenVolumes> MakeTokens() {
    return std::make_unique<TokenVolumes>(options_, issuer_, *store_, mounter_, clock_, metrics_,
                                          locks_);
  }
  std::string Target(const std::string& name) { return root_ + "/pods/" + name; }

  FakeClock clock_;
  bus::testing::InMemoryBus bus_{clock_};
  FakeTokenService token_service_{bus_, clock_};
  BusTokenIssuer issuer_{bus_, std::chrono::seconds(2)};
  fsutil::testing::FakeMounter mounter_;
  prometheus::Registry registry_;
  CsiMetrics metrics_{registry_};
  VolumeLocks locks_;
  NodeOptions options_;
  std::unique_ptr<KvProjectionStore> store_;
  std::string root_;
};

// Tests that a token volume is held at its target only, that a restarted process (which has not
// recovered yet) still holds it by the ProjectionStore's record so unpublish cleans it up, and
// that only a volume it published itself counts for NodeGetVolumeStats.
TEST_F(VolumesTest, TokenVolumesHoldTheirRecordedTargets) {
  auto tokens = MakeTokens();
  {
    std::lock_guard lock(locks_.For("csi-1"));
    ASSERT_TRUE(tokens->Publish(TokenPublish("csi-1", Target("t1"))).ok());
  }
  EXPECT_TRUE(tokens->Holds("csi-1", Target("t1")));
  EXPECT_TRUE(tokens->PublishedAt("csi-1", Target("t1")));
  EXPECT_FALSE(tokens->Holds("csi-1", Target("t2")));
  EXPECT_FALSE(tokens->Holds("csi-2", Target("t1")));
  EXPECT_EQ(tokens->count(), 1u);

  tokens = MakeTokens();  // a restart, before Recover()
  EXPECT_FALSE(tokens->PublishedAt("csi-1", Target("t1")));
  EXPECT_TRUE(tokens->Holds("csi-1", Target("t1")));
  ASSERT_TRUE(tokens->Unpublish("csi-1", Target("t1")).ok());
  EXPECT_FALSE(tokens->Holds("csi-1", Target("t1")));
  EXPECT_FALSE(mounter_.IsMounted(Target("t1")));
  EXPECT_FALSE(fs::exists(Target("t1")));
  EXPECT_EQ(store_->Get("csi-1").status().code(), absl::StatusCode::kNotFound);
}

// Tests that a bind volume is held only at its target and by its own id, and that unpublish
// unmounts, removes the target and forgets it, twice without error.
TEST_F(VolumesTest, BindVolumesHoldWhatTheyMounted) {
  FakePopulator populator(bus_, root_ + "/volumes");
  const v1::VolumeStatus vol = populator.AddReady("vol-1", "node-a");
  BindVolumes binds(options_, bus_, mounter_);
  ::csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id("vol-1");
  req.set_target_path(Target("p1"));
  ASSERT_TRUE(binds.Publish(req, /*read_only=*/true, std::chrono::seconds(2)).ok());
  EXPECT_EQ(mounter_.Get(Target("p1")).source, vol.path());
  EXPECT_TRUE(binds.Holds("vol-1", Target("p1")));
  EXPECT_FALSE(binds.Holds("vol-2", Target("p1")));
  EXPECT_FALSE(binds.Holds("vol-1", Target("p2")));

  ASSERT_TRUE(binds.Unpublish(Target("p1")).ok());
  EXPECT_FALSE(mounter_.IsMounted(Target("p1")));
  EXPECT_FALSE(fs::exists(Target("p1")));
  EXPECT_FALSE(binds.Holds("vol-1", Target("p1")));
  EXPECT_TRUE(binds.Unpublish(Target("p1")).ok());
}

// Tests the target directory helpers: made once, a file in the way refused, a token target
// removed with its files but never through a mount.
TEST_F(VolumesTest, TargetDirectoryLifecycle) {
  const std::string target = Target("d1");
  EXPECT_FALSE(PathExists(target));
  ASSERT_TRUE(PrepareTarget(target).ok());
  ASSERT_TRUE(PrepareTarget(target).ok());
  EXPECT_TRUE(fs::is_directory(target));
  std::ofstream(target + "/token") << "t";
  ASSERT_TRUE(mounter_.MountTmpfs(target, 1 << 20, 0755).ok());
  EXPECT_EQ(RemoveTarget(mounter_, target, /*token_volume=*/true).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(ClearTarget(mounter_, target, /*token_volume=*/true).ok());
  EXPECT_FALSE(PathExists(target));
  EXPECT_TRUE(ClearTarget(mounter_, target, /*token_volume=*/true).ok());

  std::ofstream(Target("file")) << "x";
  EXPECT_EQ(PrepareTarget(Target("file")).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace wisp::gateway::csi
