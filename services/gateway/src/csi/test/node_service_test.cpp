#include "csi/node_service.hpp"

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <spdlog/sinks/ostream_sink.h>

#include "csi/bind_volumes.hpp"
#include "csi/csi_metrics.hpp"
#include "csi/projection_store.hpp"
#include "csi/strip_secrets.hpp"
#include "csi/target_dir.hpp"
#include "csi/test/csi_test_fixtures.hpp"
#include "csi/token_volumes.hpp"
#include "csi/volume_locks.hpp"
#include "wisp/fsutil/testing/fake_mounter.hpp"
#include "wisp/log/log.hpp"

namespace wisp::gateway::csi {
namespace {
namespace fs = std::filesystem;
using testing::FakePopulator;
using testing::FakeTokenService;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadFile;
using testing::TokenPublish;

class NodeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::MakeTempDir("wisp-csi-node");
    fs::create_directories(root_ + "/pods");
    fs::create_directories(root_ + "/volumes");
    bus::BucketConfig bucket;
    bucket.name = std::string(bus::buckets::kProjections);
    store_ = std::make_unique<KvProjectionStore>(*bus_.OpenBucket(bucket), "node-a");
    node_ = MakeNode();
  }
  void TearDown() override {
    node_.reset();
    fs::remove_all(root_);
  }

  NodeOptions Options() {
    NodeOptions options;
    options.node_id = "node-a";
    options.volume_root = root_ + "/volumes";
    options.target_roots = {root_ + "/pods"};
    return options;
  }
  std::unique_ptr<NodeService> MakeNode() {
    return std::make_unique<NodeService>(Options(), bus_, issuer_, *store_, mounter_, clock_,
                                         metrics_);
  }
  // The token-volume part alone, as NodeService builds it.
  std::unique_ptr<TokenVolumes> MakeTokens(VolumeLocks& locks) {
    return std::make_unique<TokenVolumes>(Options(), issuer_, *store_, mounter_, clock_, metrics_,
                                          locks);
  }
  std::string Target(const std::string& name) { return root_ + "/pods/" + name; }

  FakeClock clock_;
  bus::testing::InMemoryBus bus_{clock_};
  FakeTokenService token_service_{bus_, clock_};
  BusTokenIssuer issuer_{bus_, std::chrono::seconds(2)};
  fsutil::testing::FakeMounter mounter_;
  prometheus::Registry registry_;
  CsiMetrics metrics_{registry_};
  std::unique_ptr<KvProjectionStore> store_;
  std::unique_ptr<NodeService> node_;
  std::string root_;
};

// Tests that a wisp token volume gets a tmpfs, an atomically written token, a record and a timer.
TEST_F(NodeServiceTest, PublishesWispTokenVolume) {
  const std::string target = Target("t1");
  ASSERT_TRUE(node_->Publish(TokenPublish("csi-1", target)).ok());
  EXPECT_EQ(mounter_.Get(target).kind, "tmpfs");
  EXPECT_EQ(ReadFile(target + "/token"), "tok-1");
  EXPECT_EQ(fs::read_symlink(target + "/token").string(), "..data/token");
  EXPECT_EQ(fs::status(target + "/token").permissions(), fs::perms(0644));
  const v1::IssueRequest issued = token_service_.last();
  EXPECT_EQ(issued.audiences(0), "vault");
  EXPECT_EQ(issued.expiration_seconds(), 900);
  EXPECT_EQ(issued.subject().pod_uid(), "uid-1");
  EXPECT_EQ(issued.subject().node_name(), "node-a");
  auto stored = store_->Get("csi-1");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->target_path(), target);
  EXPECT_EQ(stored->token_source(), "wisp");
  const int64_t now = clock_.NowUnixSeconds();
  // 80% of 900 s, minus at most 10 s of jitter.
  EXPECT_LE(*node_->scheduler().DueUnix("csi-1"), now + 720);
  EXPECT_GE(*node_->scheduler().DueUnix("csi-1"), now + 710);
  EXPECT_EQ(metrics_.token_volumes.Value(), 1);
}

// Tests that the scheduler rotates the token at 80% of its lifetime, replacing the file.
TEST_F(NodeServiceTest, RotatesAtEightyPercentOfLifetime) {
  const std::string target = Target("t1");
  ASSERT_TRUE(node_->Publish(TokenPublish("csi-1", target)).ok());
  clock_.Advance(std::chrono::seconds(700));
  EXPECT_EQ(node_->scheduler().RunDue(), 0);
  clock_.Advance(std::chrono::seconds(21));
  EXPECT_EQ(node_->scheduler().RunDue(), 1);
  EXPECT_EQ(ReadFile(target + "/token"), "tok-2");
  EXPECT_EQ(store_->Get("csi-1")->rotations(), 1);
  EXPECT_EQ(metrics_.rotations_ok.Value(), 1);
  EXPECT_GT(*node_->scheduler().DueUnix("csi-1"), clock_.NowUnixSeconds() + 700);
}

// Tests the identity presets' attributes: the token (and the gcp credential file beside it) owned
// by the containers' user with 0600, kept so through a rotation and a restart's record.
TEST_F(NodeServiceTest, WritesTheOwnerAndTheGcpCredentialFile) {
  const std::string target = Target("t1");
  auto req = TokenPublish("csi-1", target);
  auto& c = *req.mutable_volume_context();
  c["fileOwner"] = "1000";
  c["fileGroup"] = "3000";
  c["fileMode"] = "0600";
  c["gcpCredentialFile"] = "credential-configuration.json";
  c["gcpAudience"] =
      "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k";
  c["gcpTokenUrl"] = "https://sts.googleapis.com/v1/token";
  c["gcpTokenPath"] = "/var/run/secrets/wisp/gcp/token";
  ASSERT_TRUE(node_->Publish(req).ok());
  auto owned = [&](const std::string& file) {
    struct stat st {};
    EXPECT_EQ(::stat((target + "/" + file).c_str(), &st), 0) << file;
    EXPECT_EQ(st.st_uid, 1000u) << file;
    EXPECT_EQ(st.st_gid, 3000u) << file;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << file;
  };
  owned("token");
  owned("credential-configuration.json");
  EXPECT_THAT(ReadFile(target + "/credential-configuration.json"),
              HasSubstr(R"("file": "/var/run/secrets/wisp/gcp/token")"));
  EXPECT_EQ(store_->Get("csi-1")->file_uid(), 1000u);
  clock_.Advance(std::chrono::seconds(721));
  EXPECT_EQ(node_->scheduler().RunDue(), 1);
  EXPECT_EQ(ReadFile(target + "/token"), "tok-2");
  owned("token");
  owned("credential-configuration.json");
}

// Tests that the kubelet's token for the proof audience goes with the issue on publish and on
// rotation (G3), a republish's fresh one replaces it, and tokens for other audiences do not.
TEST_F(NodeServiceTest, ForwardsTheKubeletTokenAsPodProof) {
  const std::string target = Target("t1");
  auto req = TokenPublish("csi-1", target);
  auto& c = *req.mutable_volume_context();
  c[kServiceAccountTokensKey] =
      R"({"wisp":{"token":"proof-1","expirationTimestamp":"2030-01-01T00:00:00Z"},)"
      R"("vault":{"token":"not-a-proof","expirationTimestamp":"2030-01-01T00:00:00Z"}})";
  ASSERT_TRUE(node_->Publish(req).ok());
  EXPECT_EQ(token_service_.last().pod_proof(), "proof-1");
  clock_.Advance(std::chrono::seconds(721));
  EXPECT_EQ(node_->scheduler().RunDue(), 1);
  EXPECT_EQ(token_service_.last().pod_proof(), "proof-1") << "rotation";
  c[kServiceAccountTokensKey] =
      R"({"wisp":{"token":"proof-2","expirationTimestamp":"2030-01-01T00:00:00Z"}})";
  ASSERT_TRUE(node_->Publish(req).ok());  // republish: no issue, the proof is kept for later
  clock_.Advance(std::chrono::seconds(721));
  EXPECT_EQ(node_->scheduler().RunDue(), 1);
  EXPECT_EQ(token_service_.last().pod_proof(), "proof-2");
  // No tokens map, or none for the audience: no proof (wisp-token decides whether it needs one).
  ASSERT_TRUE(node_->Publish(TokenPublish("csi-2", Target("t2"))).ok());
  EXPECT_EQ(token_service_.last().pod_proof(), "");
}

// Tests that a failed rotation keeps the current token and retries soon.
TEST_F(NodeServiceTest, FailedRotationKeepsTokenAndRetries) {
  const std::string target = Target("t1");
  ASSERT_TRUE(node_->Publish(TokenPublish("csi-1", target)).ok());
  bus_.FailSubject(bus::subjects::kTokenIssue, absl::UnavailableError("wisp-token down"));
  clock_.Advance(std::chrono::seconds(721));
  EXPECT_EQ(node_->scheduler().RunDue(), 1);
  EXPECT_EQ(ReadFile(target + "/token"), "tok-1");
  EXPECT_EQ(metrics_.rotations_error.Value(), 1);
  EXPECT_LE(*node_->scheduler().DueUnix("csi-1"), clock_.NowUnixSeconds() + 30);
  bus_.ClearFaults();
  clock_.Advance(std::chrono::seconds(30));
  EXPECT_EQ(node_->scheduler().RunDue(), 1);
  EXPECT_EQ(ReadFile(target + "/token"), "tok-2");
}

// Tests that volumes due together are rotated with one issue_batch request; an entry wisp-token
// refuses keeps its token and retries alone, and a batch the bus cannot deliver fails every entry
// the same way, keeping every token.
TEST_F(NodeServiceTest, RotatesDueVolumesInOneBatch) {
  for (int i = 1; i <= 3; ++i) {
    auto req = TokenPublish("csi-" + std::to_string(i), Target("t" + std::to_string(i)));
    (*req.mutable_volume_context())[kServiceAccountNameKey] = "app-" + std::to_string(i);
    ASSERT_TRUE(node_->Publish(req).ok());
  }
  ASSERT_EQ(token_service_.issued(), 3);
  // Due at the same time, whatever their jitter.
  for (int i = 1; i <= 3; ++i) {
    node_->scheduler().Schedule("csi-" + std::to_string(i), clock_.NowUnixSeconds() + 700);
  }
  clock_.Advance(std::chrono::seconds(700));
  EXPECT_EQ(node_->scheduler().RunDue(), 3);
  EXPECT_EQ(token_service_.batch_sizes(), (std::vector<int>{3}));
  for (int i = 1; i <= 3; ++i) {
    const std::string id = "csi-" + std::to_string(i);
    EXPECT_EQ(ReadFile(Target("t" + std::to_string(i)) + "/token").rfind("tok-", 0), 0u);
    EXPECT_NE(ReadFile(Target("t" + std::to_string(i)) + "/token"), "tok-" + std::to_string(i));
    EXPECT_EQ(store_->Get(id)->rotations(), 1);
    EXPECT_GT(*node_->scheduler().DueUnix(id), clock_.NowUnixSeconds() + 700);
  }
  EXPECT_EQ(metrics_.rotations_ok.Value(), 3);

  // The bus fails the batch: every volume keeps its token and retries soon.
  const std::string before = ReadFile(Target("t2") + "/token");
  for (int i = 1; i <= 3; ++i) {
    node_->scheduler().Schedule("csi-" + std::to_string(i), clock_.NowUnixSeconds() + 10);
  }
  bus_.FailSubject(bus::subjects::kTokenIssueBatch, absl::UnavailableError("wisp-token down"));
  clock_.Advance(std::chrono::seconds(10));
  EXPECT_EQ(node_->scheduler().RunDue(), 3);
  EXPECT_EQ(ReadFile(Target("t2") + "/token"), before);
  EXPECT_EQ(metrics_.rotations_error.Value(), 3);
  for (int i = 1; i <= 3; ++i) {
    EXPECT_LE(*node_->scheduler().DueUnix("csi-" + std::to_string(i)),
              clock_.NowUnixSeconds() + 30);
  }
  bus_.ClearFaults();

  // wisp-token refuses one entry: the others rotate, that one keeps its token.
  token_service_.RefuseInBatches("app-2");
  for (int i = 1; i <= 3; ++i) {
    node_->scheduler().Schedule("csi-" + std::to_string(i), clock_.NowUnixSeconds());
  }
  EXPECT_EQ(node_->scheduler().RunDue(), 3);
  EXPECT_EQ(token_service_.batch_sizes(), (std::vector<int>{3, 3}));
  EXPECT_EQ(store_->Get("csi-1")->rotations(), 2);
  EXPECT_EQ(store_->Get("csi-2")->rotations(), 1);
  EXPECT_EQ(store_->Get("csi-3")->rotations(), 2);
  EXPECT_EQ(ReadFile(Target("t2") + "/token"), before);
  EXPECT_EQ(metrics_.rotations_error.Value(), 4);
}

// Tests that a volume unpublished while its batched rotation is on the bus gets nothing: no
// token written, no target recreated, no record, no new schedule; the others rotate.
TEST_F(NodeServiceTest, BatchedRotationDropsAVolumeUnpublishedMeanwhile) {
  for (int i = 1; i <= 2; ++i) {
    auto req = TokenPublish("csi-" + std::to_string(i), Target("t" + std::to_string(i)));
    (*req.mutable_volume_context())[kServiceAccountNameKey] = "app-" + std::to_string(i);
    ASSERT_TRUE(node_->Publish(req).ok());
    node_->scheduler().Schedule("csi-" + std::to_string(i), clock_.NowUnixSeconds() + 700);
  }
  token_service_.OnNextBatch([&] {
    ::csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id("csi-2");
    req.set_target_path(Target("t2"));
    ASSERT_TRUE(node_->Unpublish(req).ok()) << "no volume lock is held over the bus call";
  });
  clock_.Advance(std::chrono::seconds(700));
  EXPECT_EQ(node_->scheduler().RunDue(), 2);
  EXPECT_EQ(token_service_.batch_sizes(), (std::vector<int>{2}));
  EXPECT_EQ(store_->Get("csi-1")->rotations(), 1);
  EXPECT_FALSE(fs::exists(Target("t2")));
  EXPECT_EQ(store_->Get("csi-2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(node_->scheduler().DueUnix("csi-2").has_value());
  EXPECT_EQ(metrics_.rotations_ok.Value(), 1);
  EXPECT_EQ(metrics_.rotations_error.Value(), 0);
}

// Tests that a republish refreshes contents only: no new mount, no new token before it is due.
TEST_F(NodeServiceTest, RepublishIsIdempotent) {
  const std::string target = Target("t1");
  ASSERT_TRUE(node_->Publish(TokenPublish("csi-1", target)).ok());
  ASSERT_TRUE(node_->Publish(TokenPublish("csi-1", target)).ok());
  EXPECT_EQ(mounter_.mount_calls(), 1);
  EXPECT_EQ(token_service_.issued(), 1);
  EXPECT_EQ(ReadFile(target + "/token"), "tok-1");
  // The same volume at another target is a conflict.
  auto other = node_->Publish(TokenPublish("csi-1", Target("t2")));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
}

// Tests kubelet-token mode: the token comes from the volume context and republish refreshes it.
TEST_F(NodeServiceTest, KubeletTokenModeRefreshesOnRepublish) {
  const std::string target = Target("k1");
  auto req = TokenPublish("csi-k", target);
  (*req.mutable_volume_context())["tokenSource"] = "kubelet";
  (*req.mutable_volume_context())[kServiceAccountTokensKey] =
      R"({"vault":{"token":"kubelet-1","expirationTimestamp":"2027-01-15T08:00:00Z"}})";
  ASSERT_TRUE(node_->Publish(req).ok());
  EXPECT_EQ(ReadFile(target + "/token"), "kubelet-1");
  EXPECT_FALSE(node_->scheduler().DueUnix("csi-k").has_value());
  (*req.mutable_volume_context())[kServiceAccountTokensKey] =
      R"({"vault":{"token":"kubelet-2","expirationTimestamp":"2027-01-15T08:10:00Z"}})";
  ASSERT_TRUE(node_->Publish(req).ok());
  EXPECT_EQ(ReadFile(target + "/token"), "kubelet-2");
  EXPECT_EQ(mounter_.mount_calls(), 1);
  EXPECT_EQ(token_service_.issued(), 0);
  EXPECT_EQ(store_->Get("csi-k")->token_source(), "kubelet");

  // A republish writes the file as it asks for it: another mode is applied and recorded.
  (*req.mutable_volume_context())["fileMode"] = "0600";
  (*req.mutable_volume_context())[kServiceAccountTokensKey] =
      R"({"vault":{"token":"kubelet-3","expirationTimestamp":"2027-01-15T08:10:00Z"}})";
  ASSERT_TRUE(node_->Publish(req).ok());
  EXPECT_EQ(ReadFile(target + "/token"), "kubelet-3");
  struct stat st {};
  ASSERT_EQ(::stat((target + "/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(store_->Get("csi-k")->file_mode(), 0600u);
}

// Tests that a restarted node service picks the record up and carries on rotating.
TEST_F(NodeServiceTest, RecoverResumesRotationAfterRestart) {
  const std::string target = Target("t1");
  ASSERT_TRUE(node_->Publish(TokenPublish("csi-1", target)).ok());
  const int64_t due = *node_->scheduler().DueUnix("csi-1");
  node_.reset();  // the gateway goes away; the tmpfs (fake) stays mounted
  clock_.Advance(std::chrono::seconds(800));
  node_ = MakeNode();
  ASSERT_TRUE(node_->Recover().ok());
  EXPECT_EQ(*node_->scheduler().DueUnix("csi-1"), due);
  EXPECT_EQ(node_->scheduler().RunDue(), 1);
  EXPECT_EQ(ReadFile(target + "/token"), "tok-2");
  EXPECT_EQ(metrics_.token_volumes.Value(), 1);
}

// Tests that Recover drops records whose target went away while the gateway was down.
TEST_F(NodeServiceTest, RecoverDropsVanishedTargets) {
  const std::string target = Target("t1");
  ASSERT_TRUE(node_->Publish(TokenPublish("csi-1", target)).ok());
  node_.reset();
  ASSERT_TRUE(mounter_.Unmount(target).ok());
  node_ = MakeNode();
  ASSERT_TRUE(node_->Recover().ok());
  EXPECT_EQ(node_->scheduler().size(), 0u);
  EXPECT_EQ(store_->Get("csi-1").status().code(), absl::StatusCode::kNotFound);
}

// Tests that unpublish unmounts, removes the target, drops the record and stops rotation.
TEST_F(NodeServiceTest, UnpublishRemovesEverything) {
  const std::string target = Target("t1");
  ASSERT_TRUE(node_->Publish(TokenPublish("csi-1", target)).ok());
  ::csi::v1::NodeUnpublishVolumeRequest req;
  req.set_volume_id("csi-1");
  req.set_target_path(target);
  ASSERT_TRUE(node_->Unpublish(req).ok());
  EXPECT_FALSE(mounter_.IsMounted(target));
  EXPECT_FALSE(fs::exists(target));
  EXPECT_EQ(node_->scheduler().size(), 0u);
  EXPECT_EQ(store_->Get("csi-1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(metrics_.token_volumes.Value(), 0);
  // Again: nothing there, still OK.
  EXPECT_TRUE(node_->Unpublish(req).ok());
}

// Tests that bad requests are refused with the field named, and nothing is mounted or issued.
TEST_F(NodeServiceTest, RejectsBadRequests) {
  struct Case {
    std::string name;
    std::function<void(::csi::v1::NodePublishVolumeRequest&)> mutate;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"no volume id", [](auto& r) { r.clear_volume_id(); }, "volume_id is required"},
      {"no target", [](auto& r) { r.clear_target_path(); }, "target_path is required"},
      {"no capability", [](auto& r) { r.clear_volume_capability(); },
       "volume_capability is required"},
      {"block", [](auto& r) { r.mutable_volume_capability()->mutable_block(); },
       "volume_capability: block access is not supported"},
      {"relative target", [](auto& r) { r.set_target_path("pods/x"); },
       "target_path must be an absolute path"},
      {"dotdot target", [this](auto& r) { r.set_target_path(Target("../../etc")); },
       "target_path must not contain '..'"},
      {"outside roots", [](auto& r) { r.set_target_path("/etc/x"); },
       "is not under an allowed root"},
      {"short lifetime", [](auto& r) { (*r.mutable_volume_context())["expirationSeconds"] = "60"; },
       "may not specify a duration less than 10 minutes"},
      {"bad path", [](auto& r) { (*r.mutable_volume_context())["path"] = "../x"; },
       "volume_context[path]"},
      {"bad mode", [](auto& r) { (*r.mutable_volume_context())["fileMode"] = "8"; },
       "volume_context[fileMode]"},
      {"no pod", [](auto& r) { r.mutable_volume_context()->erase(kPodUidKey); },
       "csi.storage.k8s.io/pod.uid"},
      {"kubelet without tokens",
       [](auto& r) { (*r.mutable_volume_context())["tokenSource"] = "kubelet"; },
       "csi.storage.k8s.io/serviceAccount.tokens]: is required"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto req = TokenPublish("csi-bad", Target("bad"));
    c.mutate(req);
    auto result = node_->Publish(req);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(c.message));
  }
  EXPECT_EQ(mounter_.mount_calls(), 0);
  EXPECT_EQ(token_service_.issued(), 0);
  EXPECT_FALSE(fs::exists(Target("bad")));
}

// Tests that wisp-token being down fails the publish cleanly, leaving nothing behind.
TEST_F(NodeServiceTest, IssuerDownLeavesNothingBehind) {
  bus_.FailSubject(bus::subjects::kTokenIssue, absl::UnavailableError("down"));
  auto result = node_->Publish(TokenPublish("csi-1", Target("t1")));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(mounter_.Count(), 0u);
  EXPECT_FALSE(fs::exists(Target("t1")));
  EXPECT_EQ(store_->Get("csi-1").status().code(), absl::StatusCode::kNotFound);
}

// Tests that a persistent volume is bind-mounted read-only and republish is idempotent.
TEST_F(NodeServiceTest, BindMountsPersistentVolume) {
  FakePopulator populator(bus_, root_ + "/volumes");
  const v1::VolumeStatus vol = populator.AddReady("vol-1", "node-a");
  ::csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id("vol-1");
  req.set_target_path(Target("p1"));
  *req.mutable_volume_capability() = testing::MountCapability();
  req.set_readonly(true);
  ASSERT_TRUE(node_->Publish(req).ok());
  EXPECT_EQ(mounter_.Get(Target("p1")).kind, "bind");
  EXPECT_EQ(mounter_.Get(Target("p1")).source, vol.path());
  EXPECT_TRUE(mounter_.Get(Target("p1")).read_only);
  ASSERT_TRUE(node_->Publish(req).ok());
  EXPECT_EQ(mounter_.mount_calls(), 1);
  req.set_readonly(false);
  EXPECT_EQ(node_->Publish(req).status().code(), absl::StatusCode::kAlreadyExists);

  ::csi::v1::NodeGetVolumeStatsRequest stats;
  stats.set_volume_id("vol-1");
  stats.set_volume_path(Target("p1"));
  auto usage = node_->VolumeStats(stats);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->usage_size(), 2);
  stats.set_volume_path("some/path");
  EXPECT_EQ(node_->VolumeStats(stats).status().code(), absl::StatusCode::kNotFound);

  ::csi::v1::NodeUnpublishVolumeRequest un;
  un.set_volume_id("vol-1");
  un.set_target_path(Target("p1"));
  ASSERT_TRUE(node_->Unpublish(un).ok());
  EXPECT_FALSE(fs::exists(Target("p1")));
  EXPECT_TRUE(fs::exists(vol.path()));
}

// Tests a block publication (volumeMode: Block): the volume's disk.img on a loop device, the
// device bind-mounted on a file made at the target; idempotent; unpublish unmounts, detaches and
// removes the file; a volume without disk.img, or a directory at the target, is refused.
TEST_F(NodeServiceTest, PublishesABlockVolumeThroughALoopDevice) {
  FakePopulator populator(bus_, root_ + "/volumes");
  const v1::VolumeStatus vol = populator.AddReady("vol-1", "node-a");
  ::csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id("vol-1");
  req.set_target_path(Target("b1"));
  req.mutable_volume_capability()->mutable_block();
  req.mutable_volume_capability()->mutable_access_mode()->set_mode(
      ::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  auto st = node_->Publish(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("has no disk.img"));

  std::ofstream(vol.path() + "/disk.img") << std::string(4096, 'x');
  ASSERT_TRUE(node_->Publish(req).ok());
  const auto loops = mounter_.Loops();
  ASSERT_EQ(loops.size(), 1u);
  const std::string device = loops.begin()->first;
  EXPECT_EQ(loops.begin()->second.first, vol.path() + "/disk.img");
  EXPECT_FALSE(loops.begin()->second.second) << "attached read-write";
  EXPECT_EQ(mounter_.Get(Target("b1")).source, device);
  EXPECT_TRUE(fs::is_regular_file(Target("b1"))) << "the device is mounted on a file";
  ASSERT_TRUE(node_->Publish(req).ok());
  EXPECT_EQ(mounter_.Loops().size(), 1u) << "republish attaches nothing more";
  EXPECT_EQ(mounter_.mount_calls(), 1);

  ::csi::v1::NodeUnpublishVolumeRequest un;
  un.set_volume_id("vol-1");
  un.set_target_path(Target("b1"));
  ASSERT_TRUE(node_->Unpublish(un).ok());
  EXPECT_TRUE(mounter_.Loops().empty());
  EXPECT_FALSE(mounter_.IsMounted(Target("b1")));
  EXPECT_FALSE(fs::exists(Target("b1")));
  EXPECT_TRUE(fs::exists(vol.path() + "/disk.img"));

  fs::create_directories(Target("b2"));
  req.set_target_path(Target("b2"));
  st = node_->Publish(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_TRUE(mounter_.Loops().empty());
  // A failed mount leaves no loop device attached.
  req.set_target_path(Target("b3"));
  mounter_.FailNextMount(absl::InternalError("injected"));
  EXPECT_FALSE(node_->Publish(req).ok());
  EXPECT_TRUE(mounter_.Loops().empty());
}

// Tests that a restarted node service knows a bind mount made before the restart only when the
// mount shows that volume's directory: NodeGetVolumeStats finds it (it answered NOT_FOUND for every
// persistent volume after a restart), a republish accepts it as mounted and refuses the other
// access mode, and a mount holding something else is never taken for the volume (it was).
TEST_F(NodeServiceTest, AdoptsOnlyItsOwnBindMountsAfterRestart) {
  FakePopulator populator(bus_, root_ + "/volumes");
  const v1::VolumeStatus vol = populator.AddReady("vol-1", "node-a");
  populator.AddReady("vol-2", "node-a");
  // Before the restart: vol-1 bound at p1 (a symlink shows the source at the target, as a real
  // bind mount does) and something else mounted at p2.
  fs::create_directory_symlink(vol.path(), Target("p1"));
  ASSERT_TRUE(mounter_.BindMount(vol.path(), Target("p1"), false).ok());
  fs::create_directories(Target("p2"));
  ASSERT_TRUE(mounter_.BindMount(root_ + "/elsewhere", Target("p2"), false).ok());
  node_ = MakeNode();  // a new process remembers neither

  ::csi::v1::NodeGetVolumeStatsRequest stats;
  stats.set_volume_id("vol-1");
  stats.set_volume_path(Target("p1"));
  auto usage = node_->VolumeStats(stats);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->usage_size(), 2);
  stats.set_volume_id("vol-2");
  EXPECT_EQ(node_->VolumeStats(stats).status().code(), absl::StatusCode::kNotFound);
  stats.set_volume_id("vol-1");
  stats.set_volume_path(Target("p2"));
  EXPECT_EQ(node_->VolumeStats(stats).status().code(), absl::StatusCode::kNotFound);
  stats.set_volume_id("../volumes/vol-1");
  stats.set_volume_path(Target("p1"));
  EXPECT_EQ(node_->VolumeStats(stats).status().code(), absl::StatusCode::kNotFound);

  node_ = MakeNode();
  ::csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id("vol-1");
  req.set_target_path(Target("p1"));
  *req.mutable_volume_capability() = testing::MountCapability();
  req.set_readonly(true);
  auto st = node_->Publish(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("read-write"));
  req.set_readonly(false);
  EXPECT_TRUE(node_->Publish(req).ok());
  req.set_volume_id("vol-2");
  req.set_target_path(Target("p2"));
  st = node_->Publish(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("does not hold volume vol-2"));
  EXPECT_EQ(mounter_.mount_calls(), 2) << "no new mounts";
}

// Tests persistent-volume refusals: unknown volume, a path outside the volume root, another node.
TEST_F(NodeServiceTest, RefusesUnsafeOrForeignPersistentVolumes) {
  FakePopulator populator(bus_, root_ + "/volumes");
  ::csi::v1::NodePublishVolumeRequest req;
  req.set_target_path(Target("p1"));
  *req.mutable_volume_capability() = testing::MountCapability();
  req.set_volume_id("missing");
  EXPECT_EQ(node_->Publish(req).status().code(), absl::StatusCode::kNotFound);

  v1::VolumeStatus escape = populator.AddReady("vol-x", "node-a");
  escape.set_path("/etc");
  populator.Put(escape);
  req.set_volume_id("vol-x");
  auto st = node_->Publish(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("is not under an allowed root"));

  populator.AddReady("vol-b", "node-b");
  req.set_volume_id("vol-b");
  EXPECT_EQ(node_->Publish(req).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(mounter_.mount_calls(), 0);
}

// Tests NodeGetInfo's node id and topology, and the capabilities.
TEST_F(NodeServiceTest, InfoAndCapabilities) {
  auto info = node_->Info();
  EXPECT_EQ(info.node_id(), "node-a");
  EXPECT_EQ(info.accessible_topology().segments().at(kTopologyKey), "node-a");
  auto caps = node_->Capabilities();
  ASSERT_EQ(caps.capabilities_size(), 1);
  EXPECT_EQ(caps.capabilities(0).rpc().type(),
            ::csi::v1::NodeServiceCapability::RPC::GET_VOLUME_STATS);
}

// Tests that neither a kubelet token nor an issued one reaches the log, even at debug level.
TEST_F(NodeServiceTest, NeverLogsTokens) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto logger = log::Get("csi-node");
  logger->sinks().push_back(sink);
  const auto level = logger->level();
  logger->set_level(spdlog::level::debug);

  auto req = TokenPublish("csi-k", Target("k1"));
  (*req.mutable_volume_context())["tokenSource"] = "kubelet";
  (*req.mutable_volume_context())[kServiceAccountTokensKey] =
      R"({"vault":{"token":"SECRET-kubelet","expirationTimestamp":"2027-01-15T08:00:00Z"}})";
  ::csi::v1::NodePublishVolumeResponse resp;
  grpc::ServerContext ctx;
  EXPECT_TRUE(node_->NodePublishVolume(&ctx, &req, &resp).ok());
  auto wisp_req = TokenPublish("csi-w", Target("w1"));
  EXPECT_TRUE(node_->NodePublishVolume(&ctx, &wisp_req, &resp).ok());

  logger->set_level(level);
  logger->sinks().pop_back();
  EXPECT_THAT(out.str(), HasSubstr("NodePublishVolume request"));
  EXPECT_THAT(out.str(), Not(HasSubstr("SECRET-kubelet")));
  EXPECT_THAT(out.str(), Not(HasSubstr("tok-1")));
}

// ---- The parts below NodeService (csi/token_volumes.hpp, bind_volumes.hpp, target_dir.hpp) ----

// Tests that a token volume is held at its target only, that a restarted process (which has not
// recovered yet) still holds it by the ProjectionStore's record so unpublish cleans it up, and
// that only a volume it published itself counts for NodeGetVolumeStats.
TEST_F(NodeServiceTest, TokenVolumesHoldTheirRecordedTargets) {
  VolumeLocks locks;
  auto tokens = MakeTokens(locks);
  {
    std::lock_guard lock(locks.For("csi-1"));
    ASSERT_TRUE(tokens->Publish(TokenPublish("csi-1", Target("t1"))).ok());
  }
  EXPECT_TRUE(tokens->Holds("csi-1", Target("t1")));
  EXPECT_TRUE(tokens->PublishedAt("csi-1", Target("t1")));
  EXPECT_FALSE(tokens->Holds("csi-1", Target("t2")));
  EXPECT_FALSE(tokens->Holds("csi-2", Target("t1")));
  EXPECT_EQ(tokens->count(), 1u);

  tokens = MakeTokens(locks);  // a restart, before Recover()
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
TEST_F(NodeServiceTest, BindVolumesHoldWhatTheyMounted) {
  FakePopulator populator(bus_, root_ + "/volumes");
  const v1::VolumeStatus vol = populator.AddReady("vol-1", "node-a");
  BindVolumes binds(Options(), bus_, mounter_);
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
TEST_F(NodeServiceTest, TargetDirectoryLifecycle) {
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
