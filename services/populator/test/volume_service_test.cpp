#include "volume_service.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "job_runner.hpp"
#include "test_fixtures.hpp"
#include "wisp/populator/testing/test_http_server.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/status/fake_clock.hpp"
#include "wisp/v1/admission.pb.h"

namespace wisp::populator {
namespace {

using namespace std::chrono_literals;
namespace subjects = bus::subjects;
using testing::ReadFileOrDie;
using testing::Sh;

class VolumeServiceTest : public PopulatorServiceTest {
 protected:
  void SetUp() override {
    SetUpService("wisp-vs", "xz -0 -c disk.qcow2 > disk.qcow2.xz");
    if (HasFatalFailure()) return;
    server_.Serve("/disk.raw", images_ + "/disk.raw");
    server_.Serve("/disk.qcow2.xz", images_ + "/disk.qcow2.xz");
    ASSERT_TRUE(server_.Start().ok());
    JobRunnerConfig jc;
    jc.node_name = "node-a";
    jc.volume_root = root_ + "/vols";
    jc.max_attempts = 2;
    runner_ =
        std::make_unique<JobRunner>(bus_.Js(), service_->store(), importer_, metrics_, clock_, jc);
    ASSERT_TRUE(bus_.Js().EnsureStream(JobRunner::StreamConfig()).ok());
    consumer_ = *runner_->Subscribe();
  }
  void TearDown() override {
    server_.Stop();
    PopulatorServiceTest::TearDown();
  }

  absl::StatusOr<v1::VolumeStatus> Create(v1::VolumeSpec spec,
                                          std::string_view subject = subjects::kVolumeCreate) {
    v1::CreateVolumeRequest req;
    *req.mutable_spec() = std::move(spec);
    auto resp = bus::Call<v1::CreateVolumeResponse>(bus_, subject, req, 2s);
    if (!resp.ok()) return resp.status();
    return resp->volume();
  }
  v1::VolumeSpec Spec(const std::string& name, std::map<std::string, std::string> params = {}) {
    v1::VolumeSpec spec;
    spec.set_name(name);
    spec.set_capacity_bytes(kCap);
    for (auto& [k, v] : params) (*spec.mutable_parameters())[k] = v;
    return spec;
  }
  v1::VolumeStatus Get(const std::string& id) {
    v1::GetVolumeRequest req;
    req.set_volume_id(id);
    auto resp = bus::Call<v1::GetVolumeResponse>(bus_, subjects::kVolumeGet, req, 2s);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->volume() : v1::VolumeStatus();
  }
  bool RunJob() {
    auto ran = runner_->RunOnce(*consumer_, 0ms);
    EXPECT_TRUE(ran.ok()) << ran.status();
    return ran.ok() && *ran;
  }

  std::unique_ptr<JobRunner> runner_;
  bus::PullConsumerPtr consumer_;
  testing::TestHttpServer server_;
};

// Tests that a blank volume is queued, populated as a sparse disk.img of its capacity, and evented.
TEST_F(VolumeServiceTest, CreatesBlankVolume) {
  auto created = Create(Spec("pvc-blank"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->phase(), v1::IMPORT_SCHEDULED);
  EXPECT_EQ(created->progress(), "N/A");
  EXPECT_EQ(created->spec().node(), "node-a");
  EXPECT_EQ(bus_.StreamSize(bus::streams::kPopulateJobs), 1u);
  ASSERT_TRUE(RunJob());
  auto status = Get(created->volume_id());
  EXPECT_EQ(status.phase(), v1::SUCCEEDED);
  EXPECT_EQ(status.progress(), "100.0%");
  struct stat st {};
  ASSERT_EQ(::stat(Disk(created->volume_id()).c_str(), &st), 0);
  EXPECT_EQ(st.st_size, kCap);
  EXPECT_EQ(st.st_blocks, 0);
  EXPECT_EQ(bus_.StreamSize(bus::streams::kPopulateJobs), 0u);
  auto events = bus_.Published(subjects::VolumeEvents(created->volume_id()));
  ASSERT_GE(events.size(), 3u);
  v1::VolumeEvent last;
  ASSERT_TRUE(last.ParseFromString(events.back().data));
  EXPECT_EQ(last.phase(), v1::SUCCEEDED);
  EXPECT_DOUBLE_EQ(last.progress_ratio(), 1.0);
}

// Tests that create is idempotent by name and refuses a different capacity or source.
TEST_F(VolumeServiceTest, CreateIsIdempotentByName) {
  auto first = Create(Spec("pvc-x"));
  ASSERT_TRUE(first.ok());
  auto again = Create(Spec("pvc-x"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->volume_id(), first->volume_id());
  EXPECT_EQ(bus_.StreamSize(bus::streams::kPopulateJobs), 1u);
  auto bigger = Spec("pvc-x");
  bigger.set_capacity_bytes(2 * kCap);
  EXPECT_EQ(Create(bigger).status().code(), absl::StatusCode::kAlreadyExists);
  auto other = Spec("pvc-x", {{kParamSourceUrl, server_.Url("/disk.raw")}});
  auto st = Create(other).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(std::string(st.message()).find("different source"), std::string::npos);
}

// Tests the StorageClass path: url, format and sha256 parameters; qcow2.xz converted; status says
// so.
TEST_F(VolumeServiceTest, ImportsFromStorageClassParameters) {
  std::string sha = ReadFileOrDie(images_ + "/disk.qcow2.xz").empty() ? "" : "";
  ASSERT_EQ(Sh("sha256sum " + images_ + "/disk.qcow2.xz | cut -c1-64 > " + images_ + "/sum"), 0);
  sha = ReadFileOrDie(images_ + "/sum").substr(0, 64);
  auto created = Create(Spec("pvc-img", {{kParamSourceUrl, server_.Url("/disk.qcow2.xz")},
                                         {kParamSourceFormat, "qcow2"},
                                         {kParamSha256, "sha256:" + sha}}));
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(RunJob());
  auto status = Get(created->volume_id());
  EXPECT_EQ(status.phase(), v1::SUCCEEDED) << status.message();
  EXPECT_EQ(status.format(), "qcow2.xz");
  EXPECT_EQ(status.sha256(), sha);
  std::string disk = ReadFileOrDie(Disk(created->volume_id()));
  EXPECT_TRUE(disk.substr(0, 8 << 20) == ReadFileOrDie(images_ + "/disk.raw"));
  EXPECT_EQ(disk.size(), static_cast<size_t>(kCap));
}

// Tests that bad parameters are refused up front, naming the parameter.
TEST_F(VolumeServiceTest, RejectsBadParameters) {
  auto st = Create(Spec("pvc-bad", {{kParamSourceUrl, "ftp://x/y"}})).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find(kParamSourceUrl), std::string::npos) << st;
  st = Create(Spec("pvc-bad2", {{kParamSourceUrl, server_.Url("/disk.raw")}, {kParamSha256, "12"}}))
           .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  st = Create(Spec("pvc-bad3",
                   {{kParamSourceUrl, server_.Url("/disk.raw")}, {kParamSourceFormat, "vmdk"}}))
           .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

// Tests that a PVC without a record is retryable and uses the record once it exists.
TEST_F(VolumeServiceTest, LooksUpRecords) {
  auto spec = Spec("pvc-rec", {{kParamPvcName, "disk"}, {kParamPvcNamespace, "vms"}});
  auto st = Create(spec).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_EQ(bus_.StreamSize(bus::streams::kPopulateJobs), 0u);
  v1::PopulationRecord record;
  record.set_namespace_("vms");
  record.set_kind("DataVolume");
  record.set_name("disk");
  record.mutable_source()->mutable_http()->set_url(server_.Url("/disk.raw"));
  ASSERT_TRUE(sources_->Put("vms.DataVolume.disk", record.SerializeAsString()).ok());
  auto created = Create(spec);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->spec().source().http().url(), server_.Url("/disk.raw"));
  EXPECT_EQ(created->spec().pvc_namespace(), "vms");
  ASSERT_TRUE(RunJob());
  EXPECT_EQ(Get(created->volume_id()).phase(), v1::SUCCEEDED);
}

// Tests a PVC stored before the VolumeImportSource it names (Kubernetes allows it): its record
// holds the reference alone; CreateVolume is retryable until the source's record exists, then
// imports from it.
TEST_F(VolumeServiceTest, WaitsForTheVolumeImportSourceAPvcNames) {
  v1::PopulationRecord pvc;
  pvc.set_namespace_("vms");
  pvc.set_kind("PersistentVolumeClaim");
  pvc.set_name("vm-disk");
  pvc.set_data_source_ref("wisp.dev/VolumeImportSource/golden");
  ASSERT_TRUE(sources_->Put("vms.PersistentVolumeClaim.vm-disk", pvc.SerializeAsString()).ok());
  auto spec = Spec("pvc-vis", {{kParamPvcName, "vm-disk"}, {kParamPvcNamespace, "vms"}});
  auto st = Create(spec).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("VolumeImportSource vms/golden"), std::string::npos) << st;
  EXPECT_NE(st.message().find("does not exist yet"), std::string::npos) << st;
  EXPECT_EQ(bus_.StreamSize(bus::streams::kPopulateJobs), 0u);
  v1::PopulationRecord vis;
  vis.set_namespace_("vms");
  vis.set_kind("VolumeImportSource");
  vis.set_name("golden");
  vis.mutable_source()->mutable_http()->set_url(server_.Url("/disk.raw"));
  ASSERT_TRUE(sources_->Put("vms.VolumeImportSource.golden", vis.SerializeAsString()).ok());
  auto created = Create(spec);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->spec().source().http().url(), server_.Url("/disk.raw"));
  EXPECT_FALSE(created->spec().external_population());
  ASSERT_TRUE(RunJob());
  EXPECT_EQ(Get(created->volume_id()).phase(), v1::SUCCEEDED);
}

// Tests that a record naming CDI's own VolumeImportSource reads that source's record, kept under
// its own key, and never the wisp.dev VolumeImportSource of the same name; a prime PVC's record
// (wisp.dev/prime-for) holding only the reference resolves the same way.
TEST_F(VolumeServiceTest, ResolvesCdiVolumeImportSource) {
  v1::PopulationRecord wisp_vis;
  wisp_vis.set_kind("VolumeImportSource");
  wisp_vis.mutable_source()->mutable_http()->set_url(server_.Url("/not-this.raw"));
  ASSERT_TRUE(sources_->Put("vms.VolumeImportSource.golden", wisp_vis.SerializeAsString()).ok());
  v1::PopulationRecord prime;
  prime.set_namespace_("vms");
  prime.set_kind("PersistentVolumeClaim");
  prime.set_name("wisp-prime-u1");
  prime.set_populated_for("vm-disk");
  prime.set_data_source_ref("cdi.kubevirt.io/VolumeImportSource/golden");
  ASSERT_TRUE(
      sources_->Put("vms.PersistentVolumeClaim.wisp-prime-u1", prime.SerializeAsString()).ok());
  auto spec = Spec("pvc-cdi", {{kParamPvcName, "wisp-prime-u1"}, {kParamPvcNamespace, "vms"}});
  auto st = Create(spec).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("cdi.kubevirt.io VolumeImportSource vms/golden, named by PVC "
                              "vms/wisp-prime-u1, does not exist yet; retry"),
            std::string::npos)
      << st;
  EXPECT_EQ(bus_.StreamSize(bus::streams::kPopulateJobs), 0u);
  v1::PopulationRecord cdi_vis;
  cdi_vis.set_namespace_("vms");
  cdi_vis.set_kind("cdi.kubevirt.io.VolumeImportSource");
  cdi_vis.set_name("golden");
  cdi_vis.mutable_source()->mutable_http()->set_url(server_.Url("/disk.raw"));
  ASSERT_TRUE(
      sources_->Put("vms.cdi.kubevirt.io.VolumeImportSource.golden", cdi_vis.SerializeAsString())
          .ok());
  auto created = Create(spec);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->spec().source().http().url(), server_.Url("/disk.raw"));
  EXPECT_FALSE(created->spec().external_population());
  ASSERT_TRUE(RunJob());
  EXPECT_EQ(Get(created->volume_id()).phase(), v1::SUCCEEDED);
}

// Tests that a record naming a Secret (written before wisp refused secretRef) fails CreateVolume
// naming the field, and queues no job: never an import without the credentials it asked for.
TEST_F(VolumeServiceTest, RefusesARecordWithASecretRef) {
  v1::PopulationRecord vis;
  vis.set_namespace_("vms");
  vis.set_kind("VolumeImportSource");
  vis.set_name("golden");
  vis.mutable_source()->mutable_http()->set_url(server_.Url("/disk.raw"));
  vis.mutable_source()->mutable_http()->set_secret_ref("mirror-auth");
  ASSERT_TRUE(sources_->Put("vms.VolumeImportSource.golden", vis.SerializeAsString()).ok());
  v1::PopulationRecord pvc;
  pvc.set_data_source_ref("wisp.dev/VolumeImportSource/golden");
  ASSERT_TRUE(sources_->Put("vms.PersistentVolumeClaim.vm-disk", pvc.SerializeAsString()).ok());
  auto st = Create(Spec("pvc-secret", {{kParamPvcName, "vm-disk"}, {kParamPvcNamespace, "vms"}}))
                .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("wisp_sources vms.VolumeImportSource.golden: "
                              "spec.source.http.secretRef: Unsupported value: \"mirror-auth\": "
                              "wisp-populator does not fetch with credentials from Secrets"),
            std::string::npos)
      << st;
  EXPECT_EQ(bus_.StreamSize(bus::streams::kPopulateJobs), 0u);
}

// Tests that a source's certConfigMap takes the CA bundle the create request brings (read by the
// gateway) into the import, and that its headers are sent: without the bundle CreateVolume fails
// naming the ConfigMap; with it the job fetches from a server that demands the header.
TEST_F(VolumeServiceTest, AppliesTheCaBundleAndHeadersOfTheSource) {
  testing::ServeOptions tenant;
  tenant.required_headers = {{"X-Tenant", "vms"}};
  server_.Serve("/tenant.raw", images_ + "/disk.raw", tenant);
  auto tls = testing::MakeSelfSignedCert(root_);
  ASSERT_TRUE(tls.ok()) << tls.status();
  const std::string ca = ReadFileOrDie(tls->cert_pem_path);
  v1::PopulationRecord vis;
  vis.set_kind("VolumeImportSource");
  auto* http = vis.mutable_source()->mutable_http();
  http->set_url(server_.Url("/tenant.raw"));
  http->set_cert_config_map("mirror-ca");
  (*http->mutable_headers())["X-Tenant"] = "vms";
  ASSERT_TRUE(sources_->Put("vms.VolumeImportSource.golden", vis.SerializeAsString()).ok());
  v1::PopulationRecord pvc;
  pvc.set_data_source_ref("wisp.dev/VolumeImportSource/golden");
  ASSERT_TRUE(sources_->Put("vms.PersistentVolumeClaim.vm-disk", pvc.SerializeAsString()).ok());
  auto spec = Spec("pvc-ca", {{kParamPvcName, "vm-disk"}, {kParamPvcNamespace, "vms"}});

  auto st = Create(spec).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("wisp_sources vms.VolumeImportSource.golden: "
                              "spec.source.http.certConfigMap: the CA bundle of ConfigMap "
                              "vms/mirror-ca did not come with the create request"),
            std::string::npos)
      << st;
  spec.mutable_source_ca()->set_config_map("other-ca");
  spec.mutable_source_ca()->set_ca_pem(ca);
  EXPECT_EQ(Create(spec).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(bus_.StreamSize(bus::streams::kPopulateJobs), 0u);

  spec.mutable_source_ca()->set_config_map("mirror-ca");
  auto created = Create(spec);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->spec().source().http().ca_pem(), ca);
  EXPECT_FALSE(created->spec().has_source_ca());
  EXPECT_EQ(created->spec().source().http().headers().at("X-Tenant"), "<redacted>");
  ASSERT_TRUE(RunJob());
  v1::VolumeStatus done = Get(created->volume_id());
  EXPECT_EQ(done.phase(), v1::SUCCEEDED) << done.message();
  const std::string image = ReadFileOrDie(images_ + "/disk.raw");
  EXPECT_TRUE(ReadFileOrDie(Disk(created->volume_id())).substr(0, image.size()) == image);
}

// Tests that a record naming an external populator leaves a blank volume in PENDING_POPULATION.
TEST_F(VolumeServiceTest, ExternalPopulationIsPendingPopulation) {
  v1::PopulationRecord record;
  record.set_data_source_ref("example.io/Populator/p1");
  ASSERT_TRUE(sources_->Put("vms.PersistentVolumeClaim.ext", record.SerializeAsString()).ok());
  auto created = Create(Spec("pvc-ext", {{kParamPvcName, "ext"}, {kParamPvcNamespace, "vms"}}));
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(RunJob());
  EXPECT_EQ(Get(created->volume_id()).phase(), v1::PENDING_POPULATION);
  EXPECT_TRUE(std::filesystem::exists(Disk(created->volume_id())));
}

// Tests that clones copy a ready volume in the same namespace and refuse other namespaces.
TEST_F(VolumeServiceTest, ClonesWithinNamespaceOnly) {
  auto src_spec = Spec("pvc-src", {{kParamSourceUrl, server_.Url("/disk.raw")}});
  src_spec.set_pvc_namespace("vms");
  auto src = Create(src_spec);
  ASSERT_TRUE(src.ok());
  auto clone = Spec("pvc-clone");
  clone.set_pvc_namespace("vms");
  clone.mutable_source()->mutable_clone()->set_volume_id(src->volume_id());
  EXPECT_EQ(Create(clone).status().code(), absl::StatusCode::kUnavailable);  // source not ready
  ASSERT_TRUE(RunJob());
  auto cloned = Create(clone);
  ASSERT_TRUE(cloned.ok()) << cloned.status();
  ASSERT_TRUE(RunJob());
  EXPECT_EQ(Get(cloned->volume_id()).phase(), v1::SUCCEEDED);
  EXPECT_TRUE(ReadFileOrDie(Disk(cloned->volume_id())) == ReadFileOrDie(Disk(src->volume_id())));

  auto cross = Spec("pvc-cross");
  cross.set_pvc_namespace("other");
  cross.mutable_source()->mutable_clone()->set_volume_id(src->volume_id());
  auto st = Create(cross).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("cross-namespace clone is not supported"),
            std::string::npos);
}

// Tests that a permanent error fails the volume with the message and terminates the job.
TEST_F(VolumeServiceTest, PermanentErrorFailsVolume) {
  auto created = Create(Spec("pvc-404", {{kParamSourceUrl, server_.Url("/nope.img")}}));
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(RunJob());
  auto status = Get(created->volume_id());
  EXPECT_EQ(status.phase(), v1::FAILED);
  EXPECT_EQ(status.message(), "HTTP 404 Not Found from " + server_.Url("/nope.img"));
  EXPECT_EQ(bus_.StreamSize(bus::streams::kPopulateJobs), 0u);
  EXPECT_FALSE(std::filesystem::exists(Disk(created->volume_id())));
  EXPECT_FALSE(RunJob());
}

// Tests that a transient error is retried with backoff and the retry resumes to success.
TEST_F(VolumeServiceTest, TransientErrorRetriesWithBackoff) {
  testing::ServeOptions cut;
  cut.truncate_after = 3 << 20;
  server_.Serve("/disk.raw", images_ + "/disk.raw", cut);
  auto created = Create(Spec("pvc-retry", {{kParamSourceUrl, server_.Url("/disk.raw")}}));
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(RunJob());
  auto status = Get(created->volume_id());
  EXPECT_EQ(status.phase(), v1::IMPORT_SCHEDULED);
  EXPECT_NE(status.message().find("attempt 1 of 2 failed, retrying in 2.00s: HTTP body truncated"),
            std::string::npos)
      << status.message();
  EXPECT_FALSE(RunJob());  // backoff not over yet
  clock_.Advance(2s);
  server_.Serve("/disk.raw", images_ + "/disk.raw");
  ASSERT_TRUE(RunJob());
  status = Get(created->volume_id());
  EXPECT_EQ(status.phase(), v1::SUCCEEDED) << status.message();
  EXPECT_EQ(status.attempts(), 2);
  EXPECT_TRUE(ReadFileOrDie(Disk(created->volume_id())).substr(0, 8 << 20) ==
              ReadFileOrDie(images_ + "/disk.raw"));
}

// Tests that the last failed attempt fails the volume, saying it gave up.
TEST_F(VolumeServiceTest, GivesUpAfterMaxAttempts) {
  testing::ServeOptions cut;
  cut.truncate_after = 1 << 20;
  server_.Serve("/disk.raw", images_ + "/disk.raw", cut);
  auto created = Create(Spec("pvc-giveup", {{kParamSourceUrl, server_.Url("/disk.raw")}}));
  ASSERT_TRUE(RunJob());
  clock_.Advance(2s);
  ASSERT_TRUE(RunJob());
  auto status = Get(created->volume_id());
  EXPECT_EQ(status.phase(), v1::FAILED);
  EXPECT_NE(status.message().find("(gave up after 2 attempts)"), std::string::npos)
      << status.message();
}

// Tests that a job whose runner died unacked is redelivered after ack_wait and completes.
TEST_F(VolumeServiceTest, RedeliversAfterCrash) {
  auto created = Create(Spec("pvc-crash", {{kParamSourceUrl, server_.Url("/disk.raw")}}));
  {
    auto msgs = consumer_->Fetch(1, 0ms);  // a runner takes the job and dies without an ack
    ASSERT_TRUE(msgs.ok());
    ASSERT_EQ(msgs->size(), 1u);
  }
  EXPECT_FALSE(RunJob());
  clock_.Advance(31s);
  ASSERT_TRUE(RunJob());
  EXPECT_EQ(Get(created->volume_id()).phase(), v1::SUCCEEDED);
}

// Tests that a job delivered again while an import of its volume runs on this node (its lock held
// by another worker or populator process) starts no second import in the same directory: it is
// handed back untouched and runs once the holder is gone.
TEST_F(VolumeServiceTest, SecondDeliveryWaitsForTheImportThatHoldsTheVolume) {
  auto created = Create(Spec("pvc-twice", {{kParamSourceUrl, server_.Url("/disk.raw")}}));
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string dir = root_ + "/vols/" + created->volume_id();
  ASSERT_TRUE(std::filesystem::create_directories(dir));
  const int held = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);  // the import already under way

  ASSERT_TRUE(RunJob());
  auto status = Get(created->volume_id());
  EXPECT_EQ(status.phase(), v1::IMPORT_SCHEDULED) << status.message();
  EXPECT_EQ(status.attempts(), 0);
  EXPECT_FALSE(std::filesystem::exists(Disk(created->volume_id())));
  EXPECT_FALSE(std::filesystem::exists(dir + "/disk.img.part"));
  EXPECT_EQ(bus_.StreamSize(bus::streams::kPopulateJobs), 1u);  // handed back, not acked
  clock_.Advance(10s);
  EXPECT_FALSE(RunJob());  // not before the holder's heartbeats would have lapsed

  ::close(held);  // the holder is gone (the kernel drops its lock when it dies)
  clock_.Advance(21s);
  ASSERT_TRUE(RunJob());
  status = Get(created->volume_id());
  EXPECT_EQ(status.phase(), v1::SUCCEEDED) << status.message();
  EXPECT_TRUE(ReadFileOrDie(Disk(created->volume_id())).substr(0, 8 << 20) ==
              ReadFileOrDie(images_ + "/disk.raw"));
}

// Tests get by name, list paging, and that header values never come back out.
TEST_F(VolumeServiceTest, GetListAndRedaction) {
  auto spec = Spec("pvc-secret");
  spec.mutable_source()->mutable_http()->set_url(server_.Url("/disk.raw"));
  (*spec.mutable_source()->mutable_http()->mutable_headers())["Authorization"] = "Bearer s3cr3t";
  auto created = Create(spec);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->spec().source().http().headers().at("Authorization"), "<redacted>");
  ASSERT_TRUE(Create(Spec("pvc-b")).ok());
  ASSERT_TRUE(Create(Spec("pvc-c")).ok());
  ASSERT_TRUE(RunJob());  // the job carries the real header to the node
  v1::GetVolumeRequest get;
  get.set_name("pvc-secret");
  auto got = bus::Call<v1::GetVolumeResponse>(bus_, subjects::kVolumeGet, get, 2s);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->volume().spec().source().http().headers().at("Authorization"), "<redacted>");
  EXPECT_EQ(got->volume().phase(), v1::SUCCEEDED);
  for (const auto& m : bus_.Published(">")) {
    if (m.subject.rfind(subjects::kJobsPopulatePrefix, 0) == 0) continue;
    EXPECT_EQ(m.data.find("s3cr3t"), std::string::npos) << m.subject;
  }
  v1::ListVolumesRequest list;
  list.set_max_entries(2);
  auto page = bus::Call<v1::ListVolumesResponse>(bus_, subjects::kVolumeList, list, 2s);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->volumes_size(), 2);
  list.set_starting_token(page->next_token());
  auto rest = bus::Call<v1::ListVolumesResponse>(bus_, subjects::kVolumeList, list, 2s);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->volumes_size(), 1);
  EXPECT_TRUE(rest->next_token().empty());
  // Only a token this service issued pages on: trailing bytes or a sign are refused (ABORTED, as
  // CSI's ListVolumes wants for a foreign token), not read as their numeric prefix.
  for (const char* foreign : {"1abc", "-1", " 1", "99999999999999999999999"}) {
    list.set_starting_token(foreign);
    auto refused = bus::Call<v1::ListVolumesResponse>(bus_, subjects::kVolumeList, list, 2s);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kAborted) << foreign;
  }
}

// Tests that delete removes bytes and record, is idempotent, and forwards to the owning node.
TEST_F(VolumeServiceTest, DeletesLocallyOrOnTheOwningNode) {
  auto created = Create(Spec("pvc-del"));
  ASSERT_TRUE(RunJob());
  v1::DeleteVolumeRequest del;
  del.set_volume_id(created->volume_id());
  ASSERT_TRUE(bus::Call<v1::DeleteVolumeResponse>(bus_, subjects::kVolumeDelete, del, 2s).ok());
  EXPECT_FALSE(std::filesystem::exists(root_ + "/vols/" + created->volume_id()));
  EXPECT_FALSE(volumes_->Get(created->volume_id()).ok());
  EXPECT_TRUE(bus::Call<v1::DeleteVolumeResponse>(bus_, subjects::kVolumeDelete, del, 2s).ok());

  auto remote = Spec("pvc-remote");
  remote.set_node("node-b");
  auto rc = Create(remote);
  ASSERT_TRUE(rc.ok());
  EXPECT_FALSE(RunJob());  // node-b's job is not ours
  del.set_volume_id(rc->volume_id());
  auto st = bus::Call<v1::DeleteVolumeResponse>(bus_, subjects::kVolumeDelete, del, 2s).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;  // node-b has no populator
  int forwarded = 0;
  auto node_b = bus_.Serve(subjects::Node("node-b", "volume.delete"), "", [&](const bus::Request&) {
    ++forwarded;
    return bus::Reply::Ok("");
  });
  EXPECT_TRUE(bus::Call<v1::DeleteVolumeResponse>(bus_, subjects::kVolumeDelete, del, 2s).ok());
  EXPECT_EQ(forwarded, 1);
}

// Tests that a volume deleted and created again (same name) gets a fresh job.
TEST_F(VolumeServiceTest, RecreateAfterDeleteQueuesANewJob) {
  auto first = Create(Spec("pvc-again"));
  ASSERT_TRUE(RunJob());
  v1::DeleteVolumeRequest del;
  del.set_volume_id(first->volume_id());
  ASSERT_TRUE(bus::Call<v1::DeleteVolumeResponse>(bus_, subjects::kVolumeDelete, del, 2s).ok());
  clock_.Advance(1s);
  auto second = Create(Spec("pvc-again"));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->volume_id(), first->volume_id());
  ASSERT_TRUE(RunJob());
  EXPECT_EQ(Get(second->volume_id()).phase(), v1::SUCCEEDED);
}

// Tests that the node-routed subject serves create too.
TEST_F(VolumeServiceTest, ServesNodeSubjects) {
  auto created = Create(Spec("pvc-node"), subjects::Node("node-a", "volume.create"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->spec().node(), "node-a");
}

// Tests that the backoff doubles and is capped.
TEST(BackoffTest, DoublesAndCaps) {
  JobRunnerConfig c;
  c.backoff_base = 2s;
  c.backoff_max = 10s;
  EXPECT_EQ(Backoff(c, 1), 2s);
  EXPECT_EQ(Backoff(c, 2), 4s);
  EXPECT_EQ(Backoff(c, 3), 8s);
  EXPECT_EQ(Backoff(c, 4), 10s);
}

}  // namespace
}  // namespace wisp::populator
