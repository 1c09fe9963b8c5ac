#include "upload_service.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "job_runner.hpp"
#include "test_fixtures.hpp"
#include "wisp/populator/testing/test_http_server.hpp"
#include "volume_service.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/bus/testing/in_memory_bus.hpp"
#include "wisp/status/fake_clock.hpp"

namespace wisp::populator {
namespace {

using namespace std::chrono_literals;
namespace subjects = bus::subjects;
using testing::ReadFileOrDie;
using testing::Sh;

class UploadServiceTest : public PopulatorServiceTest {
 protected:
  void SetUp() override {
    SetUpService("wisp-up", "gzip -1 -c disk.raw > disk.raw.gz && truncate -s 32M big.raw");
    if (HasFatalFailure()) return;
    // Non-upload volumes queue a job.
    ASSERT_TRUE(bus_.Js().EnsureStream(JobRunner::StreamConfig()).ok());
    uploads_ = std::make_unique<UploadService>(bus_, service_->store(), importer_, metrics_, clock_,
                                               UploadServiceConfig{.node_name = "node-a",
                                                                   .volume_root = root_ + "/vols",
                                                                   .instance_id = "test",
                                                                   .idle_timeout = 5s,
                                                                   .queue_chunks = 2,
                                                                   .max_chunk_bytes = 256 * 1024});
    ASSERT_TRUE(uploads_->Serve().ok());
  }
  void TearDown() override {
    if (uploads_) uploads_->Stop();
    PopulatorServiceTest::TearDown();
  }

  v1::VolumeStatus Create(const std::string& name, bool upload = true) {
    v1::CreateVolumeRequest req;
    req.mutable_spec()->set_name(name);
    req.mutable_spec()->set_capacity_bytes(kCap);
    if (upload) {
      req.mutable_spec()->mutable_source()->mutable_upload();
    } else {
      req.mutable_spec()->mutable_source()->mutable_blank();
    }
    auto resp = bus::Call<v1::CreateVolumeResponse>(bus_, subjects::kVolumeCreate, req, 2s);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->volume() : v1::VolumeStatus();
  }
  v1::VolumeStatus Get(const std::string& id) { return service_->store().Get(id).value().first; }
  absl::StatusOr<v1::UploadOpenResponse> Open(const std::string& id, int64_t total) {
    v1::UploadOpenRequest req;
    req.set_volume_id(id);
    req.set_total_bytes(total);
    req.set_remote("127.0.0.1");
    return bus::Call<v1::UploadOpenResponse>(
        bus_, subjects::Node("node-a", subjects::kNodeUploadOpen), req, 5s);
  }
  absl::StatusOr<v1::UploadChunkResponse> Chunk(const v1::UploadOpenResponse& open, int64_t seq,
                                                std::string data, bool last, bool abort = false) {
    v1::UploadChunk c;
    c.set_session_id(open.session_id());
    c.set_seq(seq);
    c.set_data(std::move(data));
    c.set_last(last);
    c.set_abort(abort);
    return bus::Call<v1::UploadChunkResponse>(bus_, open.chunk_subject(), c, 20s);
  }
  // Sends `bytes` in chunks; stops after `stop_after` bytes when set (without a last chunk).
  absl::StatusOr<v1::UploadChunkResponse> Upload(const std::string& id, const std::string& bytes,
                                                 std::optional<size_t> stop_after = {}) {
    WISP_ASSIGN_OR_RETURN(auto open, Open(id, static_cast<int64_t>(bytes.size())));
    EXPECT_EQ(open.chunk_subject(), subjects::UploadChunks("node-a", "test"));
    size_t off = 0;
    int64_t seq = 0;
    const size_t step = static_cast<size_t>(open.max_chunk_bytes());
    for (;;) {
      if (stop_after && off >= *stop_after) return v1::UploadChunkResponse();
      const size_t n = std::min(step, bytes.size() - off);
      const bool last = off + n == bytes.size();
      WISP_ASSIGN_OR_RETURN(auto resp, Chunk(open, seq++, bytes.substr(off, n), last));
      off += n;
      if (last) return resp;
    }
  }

  std::unique_ptr<UploadService> uploads_;
};

// Tests that an upload volume is created UPLOAD_READY, and that a qcow2 and a raw.gz uploaded in
// chunks land as disk.img equal to the raw image (then zeros to the capacity).
TEST_F(UploadServiceTest, UploadsQcow2AndGzip) {
  for (const char* file : {"disk.qcow2", "disk.raw.gz"}) {
    SCOPED_TRACE(file);
    auto v = Create(std::string("up-") + (file[5] == 'q' ? "q" : "g"));
    EXPECT_EQ(v.phase(), v1::UPLOAD_READY);
    EXPECT_NE(v.message().find("wispctl volume upload"), std::string::npos) << v.message();
    auto done = Upload(v.volume_id(), ReadFileOrDie(images_ + "/" + file));
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->volume().phase(), v1::SUCCEEDED);
    EXPECT_EQ(done->volume().progress(), "100.0%");
    EXPECT_EQ(done->volume().format(), file[5] == 'q' ? "qcow2" : "raw.gz");
    struct stat st {};
    ASSERT_EQ(::stat(Disk(v.volume_id()).c_str(), &st), 0);
    EXPECT_EQ(st.st_size, kCap);
    EXPECT_EQ(Sh("cmp -n 8388608 " + images_ + "/disk.raw " + Disk(v.volume_id())), 0);
    EXPECT_EQ(Get(v.volume_id()).phase(), v1::SUCCEEDED);
    // Populated: another upload is refused.
    EXPECT_EQ(Open(v.volume_id(), 10).status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

// Tests that an aborted upload leaves no disk.img, goes back to UPLOAD_READY with a message, and
// that the next upload succeeds; a second open while one runs is refused.
TEST_F(UploadServiceTest, AbortLeavesVolumeReadyForAnotherTry) {
  auto v = Create("up-abort");
  const std::string raw = ReadFileOrDie(images_ + "/disk.raw");
  auto open = Open(v.volume_id(), static_cast<int64_t>(raw.size()));
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(Get(v.volume_id()).phase(), v1::UPLOAD_IN_PROGRESS);
  EXPECT_EQ(Open(v.volume_id(), 1).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Chunk(*open, 0, raw.substr(0, 256 * 1024), false).ok());
  v1::UploadChunk abort;
  ASSERT_TRUE(Chunk(*open, 1, "", false, /*abort=*/true).ok());
  auto after = Get(v.volume_id());
  EXPECT_EQ(after.phase(), v1::UPLOAD_READY);
  EXPECT_NE(after.message().find("upload failed"), std::string::npos) << after.message();
  EXPECT_FALSE(std::filesystem::exists(Disk(v.volume_id())));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/vols/" + v.volume_id() + "/disk.img.part"));
  auto done = Upload(v.volume_id(), raw);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->volume().phase(), v1::SUCCEEDED);
}

// Tests that a body shorter than announced, an image larger than the volume and a chunk out of
// order each end the upload with the reason, leaving the volume UPLOAD_READY.
TEST_F(UploadServiceTest, BadUploadsEndWithTheReason) {
  auto v = Create("up-bad");
  const std::string raw = ReadFileOrDie(images_ + "/disk.raw");
  // Announce more than is sent: truncated.
  auto open = Open(v.volume_id(), static_cast<int64_t>(raw.size()) + 100);
  ASSERT_TRUE(open.ok());
  ASSERT_TRUE(Chunk(*open, 0, raw.substr(0, 1000), false).ok());
  auto cut = Chunk(*open, 1, "", true);
  EXPECT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status();
  EXPECT_EQ(Get(v.volume_id()).phase(), v1::UPLOAD_READY);
  EXPECT_NE(Get(v.volume_id()).message().find("truncated"), std::string::npos);

  auto big = Upload(v.volume_id(), ReadFileOrDie(images_ + "/big.raw"));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kOutOfRange) << big.status();
  EXPECT_NE(Get(v.volume_id()).message().find("larger than the volume capacity"),
            std::string::npos);

  auto again = Open(v.volume_id(), -1);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(Chunk(*again, 0, raw.substr(0, 100), false).ok());
  auto skipped = Chunk(*again, 5, raw.substr(100, 100), false);
  EXPECT_EQ(skipped.status().code(), absl::StatusCode::kFailedPrecondition);
  for (int i = 0; i < 100 && Get(v.volume_id()).phase() != v1::UPLOAD_READY; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(Get(v.volume_id()).phase(), v1::UPLOAD_READY);
  EXPECT_FALSE(std::filesystem::exists(Disk(v.volume_id())));
}

// Tests that unknown volumes, non-upload volumes, bad ids and unknown sessions are refused.
TEST_F(UploadServiceTest, RefusesWhatIsNoUploadTarget) {
  EXPECT_EQ(Open("v-000000000000000000000000", 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Open("../etc", 1).status().code(), absl::StatusCode::kInvalidArgument);
  auto blank = Create("not-upload", /*upload=*/false);
  auto refused = Open(blank.volume_id(), 1);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("not an upload target"), std::string::npos);
  v1::UploadOpenResponse fake;
  fake.set_session_id("nope");
  fake.set_chunk_subject(subjects::UploadChunks("node-a", "test"));
  EXPECT_EQ(Chunk(fake, 0, "x", false).status().code(), absl::StatusCode::kNotFound);
}

// Tests that a volume another writer on this node holds (an upload or import in another populator
// process sharing the volume root) is not opened for a second upload until that writer is gone,
// and that a session keeps the volume until its import ends.
TEST_F(UploadServiceTest, OneWriterOfAVolumeAtATime) {
  auto v = Create("up-held");
  const std::string dir = root_ + "/vols/" + v.volume_id();
  std::filesystem::create_directories(dir);
  const int held = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);
  auto refused = Open(v.volume_id(), 1 << 20);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("already in progress on this node"), std::string::npos)
      << refused.status();
  EXPECT_EQ(Get(v.volume_id()).phase(), v1::UPLOAD_READY);  // the record is left alone
  ::close(held);

  auto open = Open(v.volume_id(), 1 << 20);
  ASSERT_TRUE(open.ok()) << open.status();
  const int probe = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(probe, 0);
  EXPECT_NE(::flock(probe, LOCK_EX | LOCK_NB), 0) << "the session holds the volume";
  // The last chunk, short of the size announced: the import fails, and the session ends.
  EXPECT_FALSE(Chunk(*open, 0, std::string(1000, 'x'), true).ok());
  bool released = false;
  for (int i = 0; i < 200 && !released; ++i) {
    released = ::flock(probe, LOCK_EX | LOCK_NB) == 0;
    if (!released) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(released) << "the session's end drops the volume";
  ::close(probe);
}

// Tests that an upload that stops sending is discarded after the idle timeout.
TEST_F(UploadServiceTest, StalledUploadIsDiscarded) {
  auto v = Create("up-stall");
  auto open = Open(v.volume_id(), 1 << 20);
  ASSERT_TRUE(open.ok());
  ASSERT_TRUE(Chunk(*open, 0, std::string(1000, 'x'), false).ok());
  clock_.Advance(6s);
  for (int i = 0; i < 200 && Get(v.volume_id()).phase() != v1::UPLOAD_READY; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  auto after = Get(v.volume_id());
  EXPECT_EQ(after.phase(), v1::UPLOAD_READY);
  EXPECT_NE(after.message().find("no data for 5s"), std::string::npos) << after.message();
}

}  // namespace
}  // namespace wisp::populator
