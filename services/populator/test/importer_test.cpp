#include "importer.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "checksum.hpp"
#include "progress.hpp"
#include "wisp/populator/testing/test_http_server.hpp"

namespace wisp::populator {
namespace {

using testing::ReadFileOrDie;
using testing::Sh;
using testing::TestHttpServer;

constexpr uint64_t kImageSize = 48ull << 20;

uint64_t Allocated(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

std::string Sha256Of(const std::string& path) {
  auto f = FileSource::Open(path);
  Sha256 sha;
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    auto got = (*f)->Read(buf.data(), buf.size());
    if (!got.ok() || *got == 0) break;
    sha.Update(buf.data(), *got);
  }
  return sha.HexDigest();
}

// Images are built once for the suite: a raw image with holes and random data, its qcow2, and
// every compression of both.
class ImporterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    images_ = new std::string(std::filesystem::temp_directory_path() /
                              ("wisp-images-" + std::to_string(::getpid())));
    const std::string& d = *images_;
    std::filesystem::create_directories(d);
    std::string raw = d + "/disk.raw";
    ASSERT_EQ(Sh("truncate -s 48M " + raw), 0);
    for (int mib : {0, 3, 17, 30, 47}) {
      ASSERT_EQ(Sh("dd if=/dev/urandom of=" + raw + " bs=1M count=1 seek=" + std::to_string(mib) +
                   " conv=notrunc status=none"),
                0);
    }
    ASSERT_EQ(
        Sh("cd " + d +
           " && qemu-img convert -f raw -O qcow2 disk.raw disk.qcow2"
           " && qemu-img convert -f qcow2 -O raw disk.qcow2 disk.qcow2.expected"
           " && qemu-img convert -c -f raw -O qcow2 disk.raw disk.c.qcow2"
           " && qemu-img convert -f raw -O qcow2 -o extended_l2=on disk.raw disk.l2x.qcow2"
           " && gzip -1 -c disk.raw > disk.raw.gz && xz -0 -T1 -c disk.raw > disk.raw.xz"
           " && zstd -q -1 -c disk.raw > disk.raw.zst"
           " && gzip -1 -c disk.qcow2 > disk.qcow2.gz && xz -0 -T1 -c disk.qcow2 > disk.qcow2.xz"
           " && zstd -q -1 -c disk.qcow2 > disk.qcow2.zst"
           " && head -c 1000 disk.raw.gz > trunc.gz && printf 'KDMV\\001\\000\\000\\000' > "
           "disk.vmdk"
           " && (printf '\\037\\213\\010\\000'; head -c 100000 /dev/urandom) > garbage.gz"
           " && printf '<!DOCTYPE html><html>login</html>' > page.html"
           " && truncate -s 96M big.raw && qemu-img create -q -f qcow2 big.qcow2 96M"
           " && sync"),
        0);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*images_);
    delete images_;
  }

  void SetUp() override {
    vol_ = *images_ + "/vol-" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(vol_);
    for (const char* f :
         {"disk.raw", "disk.qcow2", "disk.raw.gz", "disk.raw.xz", "disk.raw.zst", "disk.qcow2.gz",
          "disk.qcow2.xz", "disk.qcow2.zst", "trunc.gz", "disk.vmdk", "garbage.gz", "page.html",
          "big.raw", "big.qcow2", "disk.c.qcow2", "disk.l2x.qcow2"}) {
      server_.Serve(std::string("/") + f, *images_ + "/" + f);
    }
    ASSERT_TRUE(server_.Start().ok());
  }
  void TearDown() override {
    server_.Stop();
    std::filesystem::remove_all(vol_);
  }

  ImportSpec Http(const std::string& path, uint64_t capacity = kImageSize) {
    ImportSpec spec;
    spec.kind = SourceKind::kHttp;
    spec.url = server_.Url(path);
    spec.capacity = capacity;
    spec.dir = vol_;
    return spec;
  }
  absl::StatusOr<ImportResult> Run(const ImportSpec& spec, Importer::Options opts = {}) {
    Importer importer(opts);
    return importer.Run(spec, [this](const ImportProgress& p) {
      reports_.push_back(p);
      return absl::OkStatus();
    });
  }
  std::string Disk() const { return vol_ + "/disk.img"; }
  void ExpectNothingLeft() {
    EXPECT_FALSE(std::filesystem::exists(Disk()));
    EXPECT_FALSE(std::filesystem::exists(vol_ + "/" + kDiskPart));
    EXPECT_FALSE(std::filesystem::exists(vol_ + "/" + kScratchQcow2));
  }

  static std::string* images_;
  std::string vol_;
  TestHttpServer server_;
  std::vector<ImportProgress> reports_;
};
std::string* ImporterTest::images_ = nullptr;

// Tests that every format and compression over HTTP yields qemu-img's raw, byte for byte, sparse,
// qcow2 (also -c compressed) by the streaming converter: no qemu-img to fall back on.
TEST_F(ImporterTest, ImportsEveryFormatByteForByte) {
  struct Case {
    std::string path, format, expected;
  };
  Importer::Options no_qemu_img;
  no_qemu_img.qemu_img = "/nonexistent/qemu-img";
  const Case cases[] = {
      {"/disk.raw", "raw", "disk.raw"},
      {"/disk.raw.gz", "raw.gz", "disk.raw"},
      {"/disk.raw.xz", "raw.xz", "disk.raw"},
      {"/disk.raw.zst", "raw.zst", "disk.raw"},
      {"/disk.qcow2", "qcow2", "disk.qcow2.expected"},
      {"/disk.qcow2.gz", "qcow2.gz", "disk.qcow2.expected"},
      {"/disk.qcow2.xz", "qcow2.xz", "disk.qcow2.expected"},
      {"/disk.qcow2.zst", "qcow2.zst", "disk.qcow2.expected"},
      {"/disk.c.qcow2", "qcow2", "disk.qcow2.expected"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    std::filesystem::remove_all(vol_);
    auto spec = Http(c.path);
    spec.sha256 = Sha256Of(*images_ + c.path);
    auto result = Run(spec, no_qemu_img);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->format, c.format);
    EXPECT_EQ(result->sha256, spec.sha256);
    std::string expected = *images_ + "/" + c.expected;
    EXPECT_TRUE(ReadFileOrDie(Disk()) == ReadFileOrDie(expected)) << "content differs";
    EXPECT_LE(Allocated(Disk()), Allocated(expected));
    EXPECT_FALSE(std::filesystem::exists(vol_ + "/" + kDiskPart));
    EXPECT_FALSE(std::filesystem::exists(vol_ + "/" + kScratchQcow2));
  }
}

// Tests that a qcow2 image the streaming converter leaves alone (extended L2 entries) still
// imports, through the scratch file and qemu-img, and that qemu-img is really what ran.
TEST_F(ImporterTest, FallsBackToQemuImgForExtendedL2) {
  auto result = Run(Http("/disk.l2x.qcow2"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->format, "qcow2");
  EXPECT_TRUE(ReadFileOrDie(Disk()) == ReadFileOrDie(*images_ + "/disk.qcow2.expected"));
  EXPECT_FALSE(std::filesystem::exists(vol_ + "/" + kScratchQcow2));
  std::filesystem::remove_all(vol_);
  Importer::Options no_qemu_img;
  no_qemu_img.qemu_img = "/nonexistent/qemu-img";
  result = Run(Http("/disk.l2x.qcow2"), no_qemu_img);
  EXPECT_FALSE(result.ok());
}

// Tests that the raw path hashes only when a checksum is asked for (no digest to report otherwise)
// and comes out byte for byte either way, with small chunks so the pipelined hasher and the
// prefetch pool cycle many times.
TEST_F(ImporterTest, HashesOnlyWhenAsked) {
  Importer::Options opts;
  opts.buffer_size = 64 << 10;
  for (bool ask : {false, true}) {
    SCOPED_TRACE(ask ? "sha256 asked" : "no sha256");
    std::filesystem::remove_all(vol_);
    auto spec = Http("/disk.raw");
    if (ask) spec.sha256 = Sha256Of(*images_ + "/disk.raw");
    auto result = Run(spec, opts);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->sha256, spec.sha256);
    EXPECT_EQ(result->bytes_read, kImageSize);
    EXPECT_TRUE(ReadFileOrDie(Disk()) == ReadFileOrDie(*images_ + "/disk.raw"));
  }
}

// Tests that disk.img is extended to the capacity, the tail reading as zeros, and stays sparse.
TEST_F(ImporterTest, ExtendsToCapacity) {
  auto result = Run(Http("/disk.qcow2.xz", 2 * kImageSize));
  ASSERT_TRUE(result.ok()) << result.status();
  std::string disk = ReadFileOrDie(Disk());
  ASSERT_EQ(disk.size(), 2 * kImageSize);
  EXPECT_TRUE(disk.substr(0, kImageSize) == ReadFileOrDie(*images_ + "/disk.qcow2.expected"));
  EXPECT_EQ(disk.find_first_not_of('\0', kImageSize), std::string::npos);
  EXPECT_LE(Allocated(Disk()), Allocated(*images_ + "/disk.raw"));
}

// Tests that progress is reported with a total, rising, and never prints 100% before the end.
TEST_F(ImporterTest, ReportsProgress) {
  Importer::Options opts;
  opts.progress_interval = std::chrono::milliseconds(0);
  opts.buffer_size = 1 << 20;
  ASSERT_TRUE(Run(Http("/disk.raw"), opts).ok());
  ASSERT_GE(reports_.size(), 10u);
  double last = -1;
  for (const auto& p : reports_) {
    ASSERT_TRUE(p.Ratio().has_value());
    EXPECT_GE(*p.Ratio(), last);
    last = *p.Ratio();
    EXPECT_NE(FormatProgress(p.Ratio()), "100.00%");
  }
  EXPECT_DOUBLE_EQ(last, 1.0);
}

// Tests that HTTPS works with a custom CA and fails permanently, saying why, without it.
TEST_F(ImporterTest, HttpsNeedsTheCustomCa) {
  auto tls = testing::MakeSelfSignedCert(*images_);
  ASSERT_TRUE(tls.ok());
  TestHttpServer https(*tls);
  https.Serve("/disk.qcow2.gz", *images_ + "/disk.qcow2.gz");
  ASSERT_TRUE(https.Start().ok());
  ImportSpec spec = Http("/disk.qcow2.gz");
  spec.url = https.Url("/disk.qcow2.gz");
  auto refused = Run(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(IsPermanent(refused.status()));
  EXPECT_NE(std::string(refused.status().message()).find("certificate verify failed"),
            std::string::npos)
      << refused.status();
  ExpectNothingLeft();
  spec.http.ca_pem = ReadFileOrDie(tls->cert_pem_path);
  auto result = Run(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(ReadFileOrDie(Disk()) == ReadFileOrDie(*images_ + "/disk.qcow2.expected"));
}

// Tests that each bad source fails with the right code and message and leaves no disk.img.
TEST_F(ImporterTest, FailsBadSourcesWithClearMessages) {
  struct Case {
    std::string path;
    uint64_t capacity;
    std::string sha256;
    absl::StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {"/missing.img", kImageSize, "", absl::StatusCode::kNotFound,
       "HTTP 404 Not Found from http://"},
      {"/disk.raw", kImageSize, std::string(64, '0'), absl::StatusCode::kDataLoss,
       "sha256 mismatch"},
      {"/big.raw", kImageSize, "", absl::StatusCode::kOutOfRange,
       "image is 100663296 bytes, larger than the volume capacity of 50331648 bytes"},
      {"/big.qcow2", kImageSize, "", absl::StatusCode::kOutOfRange,
       "image virtual size is 100663296 bytes, larger than the volume capacity"},
      {"/disk.raw.zst", 16 << 20, "", absl::StatusCode::kOutOfRange,
       "larger than the volume capacity of 16777216 bytes"},
      {"/trunc.gz", kImageSize, "", absl::StatusCode::kDataLoss,
       "gz: compressed stream is truncated"},
      {"/garbage.gz", kImageSize, "", absl::StatusCode::kDataLoss, "gz: invalid compressed data"},
      {"/disk.vmdk", kImageSize, "", absl::StatusCode::kInvalidArgument,
       "unsupported image format: vmdk"},
      {"/page.html", kImageSize, "", absl::StatusCode::kInvalidArgument,
       "unsupported image format: html"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    auto spec = Http(c.path, c.capacity);
    spec.sha256 = c.sha256;
    auto result = Run(spec);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), c.code) << result.status();
    EXPECT_NE(std::string(result.status().message()).find(c.message), std::string::npos)
        << result.status();
    EXPECT_TRUE(IsPermanent(result.status()));
    ExpectNothingLeft();
  }
}

// Tests that a declared format must match the content.
TEST_F(ImporterTest, RejectsDeclaredFormatMismatch) {
  auto spec = Http("/disk.raw.gz");
  spec.format = "qcow2";
  auto result = Run(spec);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(std::string(result.status().message()),
            "source format is declared qcow2 but the content is raw");
}

// Tests that a body cut short is a transient error and the next run resumes with a Range request.
TEST_F(ImporterTest, ResumesRawImageWithRange) {
  testing::ServeOptions cut;
  cut.truncate_after = 20ull << 20;
  server_.Serve("/disk.raw", *images_ + "/disk.raw", cut);
  Importer::Options opts;
  opts.checkpoint_bytes = 4ull << 20;
  auto spec = Http("/disk.raw");
  spec.sha256 = Sha256Of(*images_ + "/disk.raw");
  auto first = Run(spec, opts);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(first.status().message())
                .find("HTTP body truncated: received 20971520 of "
                      "50331648 bytes"),
            std::string::npos)
      << first.status();
  EXPECT_FALSE(IsPermanent(first.status()));
  EXPECT_FALSE(std::filesystem::exists(Disk()));

  server_.Serve("/disk.raw", *images_ + "/disk.raw");
  auto second = Run(spec, opts);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GE(second->resumed_from, 16ull << 20);
  EXPECT_LT(second->bytes_read, kImageSize);
  auto ranges = server_.RangeRequests();
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[1], "bytes=" + std::to_string(second->resumed_from) + "-");
  EXPECT_TRUE(ReadFileOrDie(Disk()) == ReadFileOrDie(*images_ + "/disk.raw"));
  EXPECT_FALSE(std::filesystem::exists(vol_ + "/" + kResumeFile));
}

// Tests that a server ignoring Range makes the import start over and still come out right.
TEST_F(ImporterTest, RestartsWhenServerIgnoresRange) {
  testing::ServeOptions cut;
  cut.truncate_after = 20ull << 20;
  server_.Serve("/disk.raw", *images_ + "/disk.raw", cut);
  Importer::Options opts;
  opts.checkpoint_bytes = 4ull << 20;
  ASSERT_FALSE(Run(Http("/disk.raw"), opts).ok());
  testing::ServeOptions no_range;
  no_range.ignore_range = true;
  server_.Serve("/disk.raw", *images_ + "/disk.raw", no_range);
  auto second = Run(Http("/disk.raw"), opts);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->resumed_from, 0u);
  EXPECT_TRUE(ReadFileOrDie(Disk()) == ReadFileOrDie(*images_ + "/disk.raw"));
}

// Tests that blank volumes are holes of the capacity and clones copy sparsely.
TEST_F(ImporterTest, BlankAndClone) {
  ImportSpec blank;
  blank.kind = SourceKind::kBlank;
  blank.capacity = 1ull << 30;
  blank.dir = vol_ + "/blank";
  ASSERT_TRUE(Run(blank).ok());
  struct stat st {};
  ASSERT_EQ(::stat((blank.dir + "/disk.img").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 1ull << 30);
  EXPECT_EQ(st.st_blocks, 0);

  ImportSpec clone;
  clone.kind = SourceKind::kClone;
  clone.clone_from = *images_ + "/disk.raw";
  clone.capacity = kImageSize;
  clone.dir = vol_ + "/clone";
  ASSERT_TRUE(Run(clone).ok());
  EXPECT_TRUE(ReadFileOrDie(clone.dir + "/disk.img") == ReadFileOrDie(*images_ + "/disk.raw"));
  EXPECT_LE(Allocated(clone.dir + "/disk.img"), Allocated(*images_ + "/disk.raw"));
  clone.capacity = 1 << 20;
  clone.dir = vol_ + "/small";
  auto small = Run(clone);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kOutOfRange);
}

// Tests that an upload stream goes through the same detection and conversion.
TEST_F(ImporterTest, ImportsAStream) {
  auto file = FileSource::Open(*images_ + "/disk.qcow2.zst");
  ASSERT_TRUE(file.ok());
  ImportSpec spec;
  spec.kind = SourceKind::kStream;
  spec.stream = file->get();
  spec.capacity = kImageSize;
  spec.dir = vol_;
  auto result = Run(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->format, "qcow2.zst");
  EXPECT_TRUE(ReadFileOrDie(Disk()) == ReadFileOrDie(*images_ + "/disk.qcow2.expected"));
}

// Tests that URL parsing names the field and never echoes credentials in the redacted form.
TEST(UrlTest, ParsesAndRedacts) {
  auto u = ParseUrl("https://user:pw@mirror.example:8443/img/cirros.qcow2?token=abc",
                    "wisp.dev/source-url");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "mirror.example");
  EXPECT_EQ(u->port, "8443");
  EXPECT_EQ(u->target, "/img/cirros.qcow2?token=abc");
  EXPECT_EQ(u->Redacted(), "https://mirror.example:8443/img/cirros.qcow2");
  auto bad = ParseUrl("ftp://x/y", "wisp.dev/source-url");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(std::string(bad.status().message()),
            "wisp.dev/source-url: scheme \"ftp\" is not supported (want http or https)");
}

}  // namespace
}  // namespace wisp::populator
