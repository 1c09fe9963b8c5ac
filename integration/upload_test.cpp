// Uploads end to end (issue 6): the whole stack with per-service NATS users (nats-auth's
// permissions), wispctl getting an upload token over the bus and PUTting images over real HTTPS
// (test CA) to the gateway, which streams them to wisp-populator. Results are compared byte for
// byte with `qemu-img convert -O raw`; the refusals (no token, another volume's token, unknown
// volume, a volume that is no upload target) and a client killed mid-upload are checked too.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "wisp/bus/nats_bus.hpp"
#include "wisp/bus/proto.hpp"
#include "wisp/bus/subjects.hpp"
#include "wisp/integration/nats_test.hpp"
#include "wisp/integration/stack.hpp"
#include "wisp/v1/token.pb.h"
#include "wisp/v1/volume.pb.h"

namespace wisp::integration {
namespace {

using namespace std::chrono_literals;
namespace subjects = bus::subjects;

uint64_t Allocated(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

class UploadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto stack = Stack::Start({.policy = false, .auth = true});
    ASSERT_TRUE(stack.ok()) << stack.status();
    stack_ = stack->release();
    images_ = stack_->dir() + "/images";
    std::filesystem::create_directories(images_);
    // A 64 MiB raw image with holes, its qcow2, what qemu-img makes of that qcow2, and a gz.
    auto made = RunCommand(
        "cd " + images_ +
        " && truncate -s 64M disk.raw"
        " && for m in 0 9 31 50 63; do dd if=/dev/urandom of=disk.raw bs=1M count=1 seek=$m"
        " conv=notrunc status=none; done"
        " && qemu-img convert -f raw -O qcow2 disk.raw disk.qcow2"
        " && qemu-img convert -f qcow2 -O raw disk.qcow2 disk.qcow2.expected"
        " && gzip -1 -c disk.raw > disk.raw.gz && sync");
    ASSERT_EQ(made.exit_code, 0) << made.output;
    bus::NatsBusOptions o = TestBusOptions({stack_->nats().url()}, "upload-test");
    o.user = "wispctl";
    o.password = stack_->NatsPassword("wispctl");
    o.inbox_prefix = "_INBOX.wispctl";
    auto bus = bus::NatsBus::Connect(o);
    ASSERT_TRUE(bus.ok()) << bus.status();
    bus_ = bus->release();
  }
  static void TearDownTestSuite() {
    delete bus_;
    delete stack_;
  }

  struct Run {
    int code = -1;
    std::string log;
  };
  static Run Wispctl(std::vector<std::string> args, std::chrono::seconds timeout = 120s) {
    for (auto& a : stack_->WispctlArgs()) args.push_back(a);
    auto p = Process::Start({.path = BinaryPath("wispctl"),
                             .args = args,
                             .env = {{"WISP_GATEWAY_URL", stack_->gateway_url()},
                                     {"WISP_CA_FILE", stack_->ca_file()}}});
    if (!p.ok()) return {-1, std::string(p.status().message())};
    auto code = (*p)->Wait(timeout);
    return {code.value_or(-1), (*p)->Log()};
  }
  static v1::VolumeStatus Get(const std::string& name) {
    v1::GetVolumeRequest req;
    req.set_name(name);
    auto resp = bus::Call<v1::GetVolumeResponse>(*bus_, subjects::kVolumeGet, req, 5s);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->volume() : v1::VolumeStatus();
  }
  static std::string Token(const std::string& volume_id) {
    v1::UploadTokenRequest req;
    req.set_volume_id(volume_id);
    auto resp = bus::Call<v1::UploadTokenResponse>(*bus_, subjects::kTokenUpload, req, 5s);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->token() : "";
  }
  static std::string Disk(const std::string& id) {
    return stack_->volume_root() + "/" + id + "/disk.img";
  }
  void CreateUploadVolume(const std::string& name) {
    auto created = Wispctl({"volume", "create", name, "--capacity", "64Mi", "--upload"});
    ASSERT_EQ(created.code, 0) << created.log;
    EXPECT_NE(created.log.find("Phase:     UploadReady"), std::string::npos) << created.log;
  }

  static Stack* stack_;
  static bus::Bus* bus_;
  static std::string images_;
};
Stack* UploadTest::stack_ = nullptr;
bus::Bus* UploadTest::bus_ = nullptr;
std::string UploadTest::images_;

// Tests that wispctl uploads a qcow2 and a gz of a raw image with holes over HTTPS, and each volume
// ends Succeeded with exactly the bytes qemu-img converts the image to, no less sparse.
TEST_F(UploadTest, WispctlUploadsQcow2AndGzip) {
  struct Case {
    std::string name, file, expected, format;
  } cases[] = {{"up-qcow2", "disk.qcow2", "disk.qcow2.expected", "qcow2"},
               {"up-gz", "disk.raw.gz", "disk.raw", "raw.gz"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    CreateUploadVolume(c.name);
    auto up = Wispctl({"volume", "upload", c.name, images_ + "/" + c.file});
    ASSERT_EQ(up.code, 0) << up.log << stack_->process("wisp-gateway").Log()
                          << stack_->process("wisp-populator").Log();
    EXPECT_NE(up.log.find("Phase:     Succeeded"), std::string::npos) << up.log;
    EXPECT_NE(up.log.find("Format:    " + c.format), std::string::npos) << up.log;
    auto v = Get(c.name);
    EXPECT_EQ(v.phase(), v1::SUCCEEDED);
    EXPECT_EQ(v.progress(), "100.0%");
    auto cmp = RunCommand("cmp " + images_ + "/" + c.expected + " " + Disk(v.volume_id()));
    EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
    EXPECT_LE(Allocated(Disk(v.volume_id())), Allocated(images_ + "/" + c.expected));
    // Populated: a second upload is refused.
    auto again = Wispctl({"volume", "upload", c.name, images_ + "/" + c.file});
    EXPECT_EQ(again.code, 1) << again.log;
    EXPECT_NE(again.log.find("HTTP 409"), std::string::npos) << again.log;
  }
}

// Tests the refusals: no token (401), another volume's token (403), an unknown volume (404), a
// volume that is no upload target (409); each a JSON error, and the volume untouched.
TEST_F(UploadTest, RefusesWithoutTheRightToken) {
  CreateUploadVolume("up-neg");
  auto blank = Wispctl({"volume", "create", "plain", "--capacity", "1Mi", "--watch"});
  ASSERT_EQ(blank.code, 0) << blank.log;
  const std::string up_id = Get("up-neg").volume_id(), blank_id = Get("plain").volume_id();
  // Small bodies: a client that sends a large body without "Expect: 100-continue" and without
  // reading can see its connection reset before it reads the refusal over TLS (wispctl and curl
  // wait for 100-continue, so they read the refusal before sending anything).
  const std::string body(1000, 'x');
  struct Case {
    std::string target, token;
    int status;
    std::string message;
  } cases[] = {
      {"/v1/upload/" + up_id, "", 401, "missing upload token"},
      {"/v1/upload/" + up_id, "not.a.jwt", 401, "invalid upload token"},
      {"/v1/upload/" + up_id, Token(blank_id), 403, "the upload token is for volume " + blank_id},
      {"/v1/upload/v-ffffffffffffffffffffffff", Token("v-ffffffffffffffffffffffff"), 404,
       "not found"},
      {"/v1/upload/" + blank_id, Token(blank_id), 409, "not an upload target"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.target + " " + std::to_string(c.status));
    std::map<std::string, std::string> headers;
    if (!c.token.empty()) headers["Authorization"] = "Bearer " + c.token;
    auto r = stack_->Https("PUT", c.target, body, headers);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, c.status) << r->body;
    EXPECT_NE(r->body.find("\"error\":"), std::string::npos) << r->body;
    EXPECT_NE(r->body.find(c.message), std::string::npos) << r->body;
  }
  EXPECT_EQ(Get("up-neg").phase(), v1::UPLOAD_READY);
  // wispctl says the same before sending a byte.
  auto plain = Wispctl({"volume", "upload", "plain", images_ + "/disk.raw"});
  EXPECT_NE(plain.code, 0);
  EXPECT_NE(plain.log.find("not an upload target"), std::string::npos) << plain.log;
}

// Tests that a client killed mid-upload leaves the volume UploadReady with a message and no
// disk.img (never Succeeded with partial data), and that the next upload succeeds.
TEST_F(UploadTest, ClientKilledMidUploadLeavesVolumeNotReady) {
  CreateUploadVolume("up-cut");
  const std::string id = Get("up-cut").volume_id();
  const std::string token = Token(id);
  auto cut = RunCommand("timeout -s KILL 3 curl -sS --cacert " + stack_->ca_file() +
                        " -H 'Authorization: Bearer " + token + "' --limit-rate 4M -T " + images_ +
                        "/disk.raw " + stack_->gateway_url() + "/v1/upload/" + id);
  EXPECT_NE(cut.exit_code, 0) << cut.output;
  v1::VolumeStatus v;
  for (int i = 0; i < 150; ++i) {
    v = Get("up-cut");
    if (v.phase() == v1::UPLOAD_READY && !v.message().empty() &&
        v.message().find("upload failed") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(v.phase(), v1::UPLOAD_READY) << v.message();
  EXPECT_NE(v.message().find("upload failed"), std::string::npos) << v.message();
  EXPECT_FALSE(std::filesystem::exists(Disk(id)));
  auto up = Wispctl({"volume", "upload", "up-cut", images_ + "/disk.raw"});
  ASSERT_EQ(up.code, 0) << up.log;
  EXPECT_EQ(RunCommand("cmp " + images_ + "/disk.raw " + Disk(id)).exit_code, 0);
}

}  // namespace
}  // namespace wisp::integration
