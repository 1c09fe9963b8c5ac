// End-to-end population: a real nats-server, the real wisp-populator binary, HTTP and HTTPS image
// servers run by the test, a second NATS client following the volume events, kill -9 mid-import,
// and every error case leaving a FAILED volume with the right message.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "wisp/populator/testing/test_http_server.hpp"
#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/integration/harness.hpp"
#include "wisp/integration/nats_test.hpp"
#include "wisp/v1/volume.pb.h"

namespace wisp {
namespace {

using namespace std::chrono_literals;
using integration::Process;
using populator::testing::ReadFileOrDie;
using populator::testing::Sh;
using populator::testing::TestHttpServer;
namespace subjects = bus::subjects;

constexpr int64_t kImageBytes = 64ll << 20;

uint64_t Allocated(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

std::string Sha256File(const std::string& path) {
  std::string out = path + ".sha";
  if (Sh("sha256sum " + path + " | cut -c1-64 > " + out) != 0) return "";
  return ReadFileOrDie(out).substr(0, 64);
}

class PopulateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto nats = integration::NatsServer::Start();
    ASSERT_TRUE(nats.ok()) << nats.status();
    nats_ = std::move(*nats);
    images_ = dir_.path() + "/images";
    volumes_ = dir_.path() + "/volumes";
    std::filesystem::create_directories(images_);
    ASSERT_EQ(
        Sh("cd " + images_ +
           " && truncate -s 64M disk.raw"
           " && for m in 0 9 31 50 63; do dd if=/dev/urandom of=disk.raw bs=1M count=1 seek=$m"
           " conv=notrunc status=none; done"
           " && qemu-img convert -f raw -O qcow2 disk.raw disk.qcow2"
           " && qemu-img convert -f qcow2 -O raw disk.qcow2 disk.qcow2.expected"
           " && xz -0 -T1 -c disk.qcow2 > disk.qcow2.xz && gzip -1 -c disk.raw > disk.raw.gz"
           " && zstd -q -1 -c disk.raw > disk.raw.zst"
           " && (printf '\\3757zXZ\\000'; head -c 50000 /dev/urandom) > garbage.xz"
           " && truncate -s 128M big.raw && sync"),
        0);
    for (const char* f :
         {"disk.raw", "disk.qcow2.xz", "disk.raw.gz", "disk.raw.zst", "garbage.xz", "big.raw"}) {
      http_.Serve(std::string("/") + f, images_ + "/" + f);
    }
    populator::testing::ServeOptions cut;
    cut.truncate_after = 10 << 20;
    http_.Serve("/truncated.raw", images_ + "/disk.raw", cut);
    ASSERT_TRUE(http_.Start().ok());
    auto tls = populator::testing::MakeSelfSignedCert(dir_.path());
    ASSERT_TRUE(tls.ok());
    ca_pem_ = ReadFileOrDie(tls->cert_pem_path);
    https_ = std::make_unique<TestHttpServer>(*tls);
    https_->Serve("/disk.qcow2.xz", images_ + "/disk.qcow2.xz");
    ASSERT_TRUE(https_->Start().ok());

    StartPopulator();
    client_ =
        integration::ConnectTestBus(integration::TestBusOptions({nats_->url()}, "populate-test"));
    ASSERT_NE(client_, nullptr);
  }

  void StartPopulator() {
    metrics_port_ = integration::FreePort();
    auto p = Process::Start({.path = integration::BinaryPath("wisp-populator"),
                             .args = {"--nats-url",
                                      nats_->url(),
                                      "--metrics-address",
                                      "127.0.0.1:" + std::to_string(metrics_port_),
                                      "--volume-root",
                                      volumes_,
                                      "--node-name",
                                      "it-node",
                                      "--workers",
                                      "2",
                                      "--job-ack-wait",
                                      "2s",
                                      "--retry-backoff",
                                      "200ms",
                                      "--max-attempts",
                                      "2",
                                      "--checkpoint-interval",
                                      std::to_string(4 << 20),
                                      "--checkpoint-min-interval",
                                      "0s"}});
    ASSERT_TRUE(p.ok()) << p.status();
    populator_ = std::move(*p);
    ASSERT_TRUE(populator_->WaitForLog("serving volumes of node it-node", 20s).ok())
        << populator_->Log();
  }

  absl::StatusOr<v1::VolumeStatus> Create(const std::string& name, v1::PopulationSource source,
                                          int64_t capacity = kImageBytes) {
    v1::CreateVolumeRequest req;
    req.mutable_spec()->set_name(name);
    req.mutable_spec()->set_capacity_bytes(capacity);
    *req.mutable_spec()->mutable_source() = std::move(source);
    auto resp = bus::Call<v1::CreateVolumeResponse>(*client_, subjects::kVolumeCreate, req, 5s);
    if (!resp.ok()) return resp.status();
    return resp->volume();
  }
  v1::PopulationSource Http(const std::string& url, const std::string& sha = "") {
    v1::PopulationSource s;
    s.mutable_http()->set_url(url);
    s.set_sha256(sha);
    return s;
  }
  absl::StatusOr<v1::VolumeStatus> Get(const std::string& id) {
    v1::GetVolumeRequest req;
    req.set_volume_id(id);
    auto resp = bus::Call<v1::GetVolumeResponse>(*client_, subjects::kVolumeGet, req, 5s);
    if (!resp.ok()) return resp.status();
    return resp->volume();
  }
  // Polls until the phase is terminal.
  v1::VolumeStatus WaitDone(const std::string& id, std::chrono::seconds timeout = 60s) {
    auto until = std::chrono::steady_clock::now() + timeout;
    v1::VolumeStatus last;
    while (std::chrono::steady_clock::now() < until) {
      auto s = Get(id);
      if (s.ok()) {
        last = *s;
        if (s->phase() == v1::SUCCEEDED || s->phase() == v1::FAILED) return last;
      }
      std::this_thread::sleep_for(100ms);
    }
    ADD_FAILURE() << "volume " << id << " still " << v1::VolumePhase_Name(last.phase()) << " "
                  << last.message() << "\n"
                  << populator_->Log();
    return last;
  }
  std::string Disk(const std::string& id) { return volumes_ + "/" + id + "/disk.img"; }

  integration::TempDir dir_{"wisp-populate"};
  std::unique_ptr<integration::NatsServer> nats_;
  std::unique_ptr<Process> populator_;
  std::unique_ptr<bus::Bus> client_;
  TestHttpServer http_;
  std::unique_ptr<TestHttpServer> https_;
  std::string images_, volumes_, ca_pem_;
  int metrics_port_ = 0;
};

// Tests that HTTPS qcow2.xz (custom CA, sha256) and HTTP raw.gz/zst import byte for byte as
// qemu-img would convert them, sparse, while a second NATS client follows the progress events.
TEST_F(PopulateTest, ImportsOverHttpAndHttpsWithEvents) {
  std::mutex mu;
  std::vector<v1::VolumeEvent> events;
  auto sub = client_->Subscribe(std::string(subjects::kVolumeEventsPrefix) + ".>", "",
                                [&](const bus::Message& m) {
                                  v1::VolumeEvent e;
                                  if (!e.ParseFromString(m.data)) return;
                                  std::lock_guard lock(mu);
                                  events.push_back(e);
                                });
  ASSERT_TRUE(sub.ok());
  auto tls_source = Http(https_->Url("/disk.qcow2.xz"), Sha256File(images_ + "/disk.qcow2.xz"));
  tls_source.mutable_http()->set_ca_pem(ca_pem_);
  auto golden = Create("golden", tls_source, 2 * kImageBytes);
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto gz = Create("from-gz", Http(http_.Url("/disk.raw.gz")));
  ASSERT_TRUE(gz.ok()) << gz.status();
  auto zst = Create("from-zst", Http(http_.Url("/disk.raw.zst")));
  ASSERT_TRUE(zst.ok()) << zst.status();

  auto g = WaitDone(golden->volume_id());
  ASSERT_EQ(g.phase(), v1::SUCCEEDED) << g.message();
  EXPECT_EQ(g.progress(), "100.0%");
  EXPECT_EQ(g.format(), "qcow2.xz");
  std::string disk = ReadFileOrDie(Disk(golden->volume_id()));
  ASSERT_EQ(disk.size(), static_cast<size_t>(2 * kImageBytes));
  EXPECT_TRUE(disk.substr(0, kImageBytes) == ReadFileOrDie(images_ + "/disk.qcow2.expected"));
  EXPECT_EQ(disk.find_first_not_of('\0', kImageBytes), std::string::npos);
  EXPECT_LE(Allocated(Disk(golden->volume_id())), Allocated(images_ + "/disk.qcow2.expected"));
  for (const auto* v : {&*gz, &*zst}) {
    auto s = WaitDone(v->volume_id());
    ASSERT_EQ(s.phase(), v1::SUCCEEDED) << s.message();
    EXPECT_TRUE(ReadFileOrDie(Disk(v->volume_id())) == ReadFileOrDie(images_ + "/disk.raw"));
    EXPECT_LE(Allocated(Disk(v->volume_id())), Allocated(images_ + "/disk.raw"));
  }
  std::this_thread::sleep_for(200ms);
  std::lock_guard lock(mu);
  bool saw_done = false;
  for (const auto& e : events) {
    if (e.volume_id() == golden->volume_id() && e.phase() == v1::SUCCEEDED) saw_done = true;
  }
  EXPECT_TRUE(saw_done) << events.size() << " events";

  auto metrics = integration::HttpGet("127.0.0.1", metrics_port_, "/metrics", 2s);
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->body.find("wisp_populator_jobs_total{result=\"succeeded\"} 3"),
            std::string::npos)
      << metrics->body.substr(0, 3000);
  EXPECT_NE(metrics->body.find("wisp_populator_bytes_read_total"), std::string::npos);
}

// Tests that each bad source leaves a FAILED volume whose message says exactly what went wrong.
TEST_F(PopulateTest, ErrorCasesFailWithTheRightMessage) {
  struct Case {
    std::string name;
    v1::PopulationSource source;
    std::string message;
  };
  v1::PopulationSource untrusted = Http(https_->Url("/disk.qcow2.xz"));
  std::vector<Case> cases = {
      {"e-404", Http(http_.Url("/missing.qcow2")),
       "HTTP 404 Not Found from " + http_.Url("/missing.qcow2")},
      {"e-trunc", Http(http_.Url("/truncated.raw")),
       " of 67108864 bytes from " + http_.Url("/truncated.raw") + " (gave up after 2 attempts)"},
      {"e-sha", Http(http_.Url("/disk.raw.gz"), std::string(64, 'f')), "sha256 mismatch"},
      {"e-big", Http(http_.Url("/big.raw")),
       "image is 134217728 bytes, larger than the volume capacity of 67108864 bytes"},
      {"e-garbage", Http(http_.Url("/garbage.xz")), "xz: invalid compressed data"},
      {"e-tls", untrusted, "certificate verify failed"},
  };
  std::vector<std::string> ids;
  for (auto& c : cases) {
    auto v = Create(c.name, c.source);
    ASSERT_TRUE(v.ok()) << c.name << ": " << v.status();
    ids.push_back(v->volume_id());
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    auto s = WaitDone(ids[i]);
    EXPECT_EQ(s.phase(), v1::FAILED);
    EXPECT_NE(s.message().find(cases[i].message), std::string::npos) << s.message();
    EXPECT_FALSE(std::filesystem::exists(Disk(ids[i])));
  }
}

// Tests that a populator killed with SIGKILL mid-import is replaced by its restart, which resumes
// the raw download with a Range request; the volume is never Succeeded with partial data. The
// server answers only requests with the source's extra header: the Range request carries it too.
TEST_F(PopulateTest, ResumesAfterKillDashNine) {
  populator::testing::ServeOptions slow;
  slow.bytes_per_second = 16 << 20;  // 64 MiB in about 4 s
  slow.required_headers = {{"X-Mirror-Tenant", "vms"}};
  http_.Serve("/slow.raw", images_ + "/disk.raw", slow);
  v1::PopulationSource source = Http(http_.Url("/slow.raw"), Sha256File(images_ + "/disk.raw"));
  (*source.mutable_http()->mutable_headers())["X-Mirror-Tenant"] = "vms";
  auto v = Create("killed", source);
  ASSERT_TRUE(v.ok()) << v.status();
  // Wait until a good part is written, then kill -9.
  auto until = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    auto s = Get(v->volume_id());
    ASSERT_TRUE(s.ok());
    ASSERT_NE(s->phase(), v1::SUCCEEDED) << "finished before the kill";
    if (s->bytes_read() > (24 << 20)) break;
    ASSERT_LT(std::chrono::steady_clock::now(), until) << populator_->Log();
    std::this_thread::sleep_for(50ms);
  }
  populator_->Kill();
  // No populator answers now: read the record itself.
  auto kv = client_->OpenBucket({.name = std::string(bus::buckets::kVolumes)});
  ASSERT_TRUE(kv.ok());
  auto entry = (*kv)->Get(v->volume_id());
  ASSERT_TRUE(entry.ok());
  v1::VolumeStatus after_kill;
  ASSERT_TRUE(after_kill.ParseFromString(entry->value));
  EXPECT_EQ(after_kill.phase(), v1::IMPORT_IN_PROGRESS);
  EXPECT_FALSE(std::filesystem::exists(Disk(v->volume_id())));
  StartPopulator();
  auto s = WaitDone(v->volume_id());
  ASSERT_EQ(s.phase(), v1::SUCCEEDED) << s.message();
  EXPECT_GE(s.attempts(), 2);
  EXPECT_TRUE(ReadFileOrDie(Disk(v->volume_id())) == ReadFileOrDie(images_ + "/disk.raw"));
  bool resumed = false;
  for (const auto& r : http_.RangeRequests()) {
    if (r.rfind("bytes=", 0) == 0 && r != "bytes=0-") resumed = true;
  }
  EXPECT_TRUE(resumed) << "no Range request after the restart\n" << populator_->Log();
}

// Tests that wispctl volume get and list show a populated volume.
TEST_F(PopulateTest, WispctlShowsVolumes) {
  v1::PopulationSource blank;
  blank.mutable_blank();
  auto v = Create("blank-one", blank, 1ll << 30);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(WaitDone(v->volume_id()).phase(), v1::SUCCEEDED);
  auto get = Process::Start({.path = integration::BinaryPath("wispctl"),
                             .args = {"volume", "get", "blank-one", "--nats-url", nats_->url()}});
  ASSERT_TRUE(get.ok());
  EXPECT_EQ((*get)->Wait(10s), 0) << (*get)->Log();
  EXPECT_NE((*get)->Log().find("Phase:     Succeeded"), std::string::npos) << (*get)->Log();
  auto watch =
      Process::Start({.path = integration::BinaryPath("wispctl"),
                      .args = {"volume", "watch", v->volume_id(), "--nats-url", nats_->url()}});
  ASSERT_TRUE(watch.ok());
  EXPECT_EQ((*watch)->Wait(10s), 0) << (*watch)->Log();
  EXPECT_NE((*watch)->Log().find("Succeeded"), std::string::npos);
}

// Tests what becomes of a volume whose node is lost mid-import (issue 24, item 5). Its bytes are
// node-local, so no other node takes the job over; a populator on another node fails it with
// node_lost once no populator has answered on its node for --node-lost-after; the node's
// populator, started again, acks the stale job and removes the partial bytes, and delete works.
TEST_F(PopulateTest, ANodeLostMidImportFailsItsVolume) {
  populator::testing::ServeOptions slow;
  slow.bytes_per_second = 8 << 20;  // 64 MiB in about 8 s
  http_.Serve("/slow-lost.raw", images_ + "/disk.raw", slow);
  const std::string volumes_b = dir_.path() + "/volumes-b";
  const std::string volumes_c = dir_.path() + "/volumes-c";
  auto start = [&](const std::string& node, const std::string& root,
                   std::vector<std::string> extra) -> std::unique_ptr<Process> {
    std::vector<std::string> args = {
        "--nats-url",        nats_->url(),
        "--metrics-address", "127.0.0.1:" + std::to_string(integration::FreePort()),
        "--volume-root",     root,
        "--node-name",       node};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = Process::Start({.path = integration::BinaryPath("wisp-populator"), .args = args});
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    EXPECT_TRUE((*p)->WaitForLog("serving volumes of node " + node, 20s).ok()) << (*p)->Log();
    return *std::move(p);
  };
  auto node_b = start("it-b", volumes_b, {"--job-ack-wait", "2s"});
  // The populator of another node, which notices node it-b going silent.
  auto node_c =
      start("it-c", volumes_c, {"--node-lost-after", "3s", "--node-check-interval", "250ms"});
  ASSERT_TRUE(node_b && node_c);

  v1::CreateVolumeRequest req;
  req.mutable_spec()->set_name("lost-mid-import");
  req.mutable_spec()->set_capacity_bytes(kImageBytes);
  req.mutable_spec()->set_node("it-b");
  *req.mutable_spec()->mutable_source() = Http(http_.Url("/slow-lost.raw"));
  auto created = bus::Call<v1::CreateVolumeResponse>(*client_, subjects::kVolumeCreate, req, 5s);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string id = created->volume().volume_id();
  auto until = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    auto s = Get(id);
    ASSERT_TRUE(s.ok()) << s.status();
    if (s->bytes_read() > (8 << 20)) break;
    ASSERT_LT(std::chrono::steady_clock::now(), until) << node_b->Log();
    std::this_thread::sleep_for(50ms);
  }
  node_b->Kill();
  const auto killed = std::chrono::steady_clock::now();
  const std::string part = volumes_b + "/" + id + "/disk.img.part";
  EXPECT_TRUE(std::filesystem::exists(part));

  v1::VolumeStatus failed;
  ASSERT_TRUE(integration::Eventually(
      [&] {
        auto s = Get(id);
        if (s.ok()) failed = *s;
        return s.ok() && s->phase() == v1::FAILED;
      },
      30s, 50ms))
      << v1::VolumePhase_Name(failed.phase()) << " " << failed.message() << "\n"
      << node_c->Log();
  const double after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::printf("node lost mid-import: volume FAILED %.1f s after the SIGKILL (node-lost-after 3s)\n",
              after);
  RecordProperty("node_lost_seconds", std::to_string(after));
  EXPECT_GE(after, 3.0);
  EXPECT_TRUE(failed.node_lost());
  EXPECT_NE(failed.message().find("node it-b lost"), std::string::npos) << failed.message();
  EXPECT_NE(node_c->Log().find("volume " + id + " failed: node it-b lost"), std::string::npos)
      << node_c->Log();
  // No other node ran the job.
  EXPECT_FALSE(std::filesystem::exists(volumes_c + "/" + id));
  EXPECT_FALSE(std::filesystem::exists(volumes_ + "/" + id));

  // The node comes back: its stale job ends there, and its partial bytes go.
  node_b = start("it-b", volumes_b, {"--job-ack-wait", "2s"});
  ASSERT_TRUE(node_b);
  EXPECT_TRUE(integration::Eventually([&] { return !std::filesystem::exists(part); }, 20s))
      << node_b->Log();
  auto still = Get(id);
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still->phase(), v1::FAILED);
  v1::DeleteVolumeRequest del;
  del.set_volume_id(id);
  auto deleted = bus::Call<v1::DeleteVolumeResponse>(*client_, subjects::kVolumeDelete, del, 10s);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_FALSE(std::filesystem::exists(volumes_b + "/" + id));
  EXPECT_EQ(Get(id).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace wisp
