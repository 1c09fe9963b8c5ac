#include "qcow2_stream.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "wisp/populator/testing/test_http_server.hpp"

namespace wisp::populator {
namespace {

using testing::ReadFileOrDie;
using testing::Sh;

// The raw disk the converter produced, or its error. Writes are checked to stay inside the
// virtual size and to never be all zeros.
absl::StatusOr<std::string> Convert(const std::string& image, size_t chunk,
                                    Qcow2StreamOptions options = {},
                                    uint64_t* stash_peak = nullptr) {
  std::string out;
  bool bad_write = false;
  auto write = [&](uint64_t at, const uint8_t* p, size_t n) {
    if (at + n > out.size() || std::all_of(p, p + n, [](uint8_t b) { return b == 0; })) {
      bad_write = true;
    } else {
      std::copy(p, p + n, out.begin() + static_cast<std::ptrdiff_t>(at));
    }
    return absl::OkStatus();
  };
  const auto* data = reinterpret_cast<const uint8_t*>(image.data());
  WISP_ASSIGN_OR_RETURN(
      auto conv, Qcow2StreamConverter::Create(data, std::min<size_t>(image.size(), 512), write,
                                              std::move(options)));
  out.assign(conv->virtual_size(), '\0');
  for (size_t at = 0; at < image.size(); at += chunk) {
    WISP_RETURN_IF_ERROR(conv->Feed(data + at, std::min(chunk, image.size() - at)));
  }
  WISP_RETURN_IF_ERROR(conv->Finish());
  if (bad_write) return absl::InternalError("a write was out of range or all zeros");
  if (stash_peak != nullptr) *stash_peak = conv->stash_peak();
  return out;
}

// A qcow2 image built by hand (version 3, 4 KiB clusters) for layouts qemu does not write.
class Crafted {
 public:
  static constexpr uint64_t kCluster = 4096;
  explicit Crafted(uint64_t clusters, uint64_t virtual_size = 4 * kCluster)
      : bytes_(clusters * kCluster, '\0') {
    Put(0, 0x514649fb, 4);  // "QFI\xfb"
    Put(4, 3, 4);
    Put(20, 12, 4);  // cluster_bits
    Put(24, virtual_size, 8);
    Put(36, 1, 4);                       // l1_size
    Put(40, 4 * kCluster, 8);            // l1_table_offset: cluster 4
    Put(48, 5 * kCluster, 8);            // refcount_table_offset: cluster 5 (left empty)
    Put(56, 1, 4);                       // refcount_table_clusters
    Put(96, 4, 4);                       // refcount_order
    Put(100, 104, 4);                    // header_length
    Put(4 * kCluster, 3 * kCluster, 8);  // L1[0] -> L2 table in cluster 3
  }
  void Put(uint64_t at, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i, v >>= 8) bytes_[at + i] = static_cast<char>(v & 0xff);
  }
  void L2(int index, uint64_t entry) { Put(3 * kCluster + index * 8, entry, 8); }
  void Fill(uint64_t cluster, char c) {
    std::fill_n(bytes_.begin() + static_cast<std::ptrdiff_t>(cluster * kCluster), kCluster, c);
  }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

constexpr uint64_t kCopied = 1ULL << 63;

class Qcow2StreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           ("wisp-qcow2-stream-" + std::to_string(::getpid())));
    std::filesystem::create_directories(*dir_);
    // 12 MiB + 7.5 KiB (no cluster size divides it): random stretches, a stretch of explicit
    // zeros, and holes.
    std::string cmd = "cd " + *dir_ + " && truncate -s 12590080 disk.raw";
    for (const char* dd : {"bs=64K count=3 seek=0", "bs=1M count=1 seek=3",
                           "bs=4K count=1 seek=1000", "bs=512 count=15 seek=24575"}) {
      cmd += std::string(" && dd if=/dev/urandom of=disk.raw conv=notrunc status=none ") + dd;
    }
    cmd += " && dd if=/dev/zero of=disk.raw bs=1M count=1 seek=6 conv=notrunc status=none";
    ASSERT_EQ(Sh(cmd), 0);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  // Converts `image` with qemu-img and with the converter in several chunk sizes; they must agree.
  void ExpectSameAsQemuImg(const std::string& image) {
    const std::string path = *dir_ + "/" + image;
    ASSERT_EQ(Sh("qemu-img convert -f qcow2 -O raw " + path + " " + path + ".raw"), 0);
    const std::string expected = ReadFileOrDie(path + ".raw");
    const std::string bytes = ReadFileOrDie(path);
    for (size_t chunk : {size_t{4097}, size_t{196609}, size_t{1} << 20}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk));
      auto raw = Convert(bytes, chunk);
      ASSERT_TRUE(raw.ok()) << raw.status();
      EXPECT_EQ(raw->size(), expected.size());
      EXPECT_TRUE(*raw == expected) << "content differs from qemu-img's";
    }
  }

  static std::string* dir_;
};
std::string* Qcow2StreamTest::dir_ = nullptr;

// Tests that images qemu-img writes (v2 and v3, 4 KiB / 64 KiB / 2 MiB clusters, compressed or
// not) convert to exactly what `qemu-img convert -O raw` gives.
TEST_F(Qcow2StreamTest, MatchesQemuImgConvert) {
  struct Case {
    const char* name;
    const char* options;
  };
  const Case cases[] = {
      {"v3-64k.qcow2", "-o compat=1.1"},
      {"v2-64k.qcow2", "-o compat=0.10"},
      {"v3-4k.qcow2", "-o cluster_size=4096"},
      {"v3-2m.qcow2", "-o cluster_size=2M"},
      {"v2-4k.qcow2", "-o compat=0.10,cluster_size=4096"},
      {"c-v3-64k.qcow2", "-c"},
      {"c-v3-4k.qcow2", "-c -o cluster_size=4096"},
      {"c-v2-64k.qcow2", "-c -o compat=0.10"},
      {"c-v3-2m.qcow2", "-c -o cluster_size=2M"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(Sh("cd " + *dir_ + " && qemu-img convert -f raw -O qcow2 " + c.options +
                 " disk.raw " + c.name),
              0);
    ExpectSameAsQemuImg(c.name);
  }
}

// Tests an image written by a guest (qemu-io): zero-flagged clusters, discards, data written
// high offsets first, and overwrites.
TEST_F(Qcow2StreamTest, MatchesQemuImgForGuestWrittenImage) {
  for (const char* compat : {"1.1", "0.10"}) {
    SCOPED_TRACE(compat);
    const std::string name = std::string("io-") + compat + ".qcow2";
    // 4 KiB clusters: an L2 table per 2 MiB, so the tables come in the order of the writes.
    ASSERT_EQ(Sh("cd " + *dir_ + " && qemu-img create -q -f qcow2 -o compat=" + compat +
                 ",cluster_size=4096 " + name + " 12M && qemu-io -f qcow2 " + name +
                 " -c 'write -P 0xcd 10M 1M' -c 'write -P 0xab 0 2M' -c 'write -z 512k 128k'"
                 " -c 'discard 1M 64k' -c 'write -P 0x11 6M 64k' -c 'write -P 0x22 1M 4k'"
                 " >/dev/null"),
              0);
    ExpectSameAsQemuImg(name);
  }
}

// Tests that data stored before the L2 table that maps it is stashed and lands at the right guest
// offset, in memory or spilled to the scratch file; and that without room for it the converter
// refuses the image instead of writing a wrong one.
TEST_F(Qcow2StreamTest, HandlesDataBeforeItsTable) {
  Crafted img(6);
  img.Fill(1, 'A');
  img.Fill(2, 'B');
  img.L2(0, kCopied | 2 * Crafted::kCluster);
  img.L2(1, kCopied | 1 * Crafted::kCluster);
  img.L2(3, 2 * Crafted::kCluster | 1);  // zero flag over an allocated cluster
  const std::string expected =
      std::string(4096, 'B') + std::string(4096, 'A') + std::string(8192, '\0');
  const std::string path = *dir_ + "/crafted.qcow2";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(img.bytes().data(), 1, img.bytes().size(), f);
    std::fclose(f);
  }
  ASSERT_EQ(Sh("qemu-img convert -f qcow2 -O raw " + path + " " + path + ".raw"), 0);
  EXPECT_TRUE(ReadFileOrDie(path + ".raw") == expected)
      << "the crafted image is not what qemu reads";

  for (size_t chunk : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
    SCOPED_TRACE(chunk);
    uint64_t peak = 0;
    auto raw = Convert(img.bytes(), chunk, {}, &peak);
    ASSERT_TRUE(raw.ok()) << raw.status();
    EXPECT_TRUE(*raw == expected);
    EXPECT_GE(peak, 2 * Crafted::kCluster);
  }
  const std::string spill = *dir_ + "/spill";
  auto spilled = Convert(img.bytes(), 777, {.stash_memory = 1000, .spill_path = spill});
  ASSERT_TRUE(spilled.ok()) << spilled.status();
  EXPECT_TRUE(*spilled == expected);
  EXPECT_FALSE(std::filesystem::exists(spill));

  auto refused = Convert(img.bytes(), 4096, {.stash_memory = 100});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("cannot be imported as a stream"), std::string::npos)
      << refused.status();
}

// Tests that hostile or broken images are refused with a message saying what is wrong, and that
// no write ever leaves the virtual size.
TEST_F(Qcow2StreamTest, RefusesBadImages) {
  struct Case {
    const char* name;
    std::function<void(Crafted&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {"data past the end", [](Crafted& c) { c.L2(0, 100 * Crafted::kCluster); },
       "ends past the end of the image"},
      {"compressed data in the header", [](Crafted& c) { c.L2(0, (1ULL << 62) | 512); },
       "lies in the header cluster"},
      {"L2 table in the L1 table", [](Crafted& c) { c.Put(4 * Crafted::kCluster, 4 * 4096, 8); },
       "overlaps the L1 table"},
      {"data in the L2 table", [](Crafted& c) { c.L2(1, 3 * Crafted::kCluster); },
       "overlaps an L2 table"},
      {"unaligned data", [](Crafted& c) { c.L2(0, 2 * Crafted::kCluster + 512); }, "unaligned"},
      {"L1 past the end", [](Crafted& c) { c.Put(40, 50 * Crafted::kCluster, 8); },
       "its L1 table at host offset 0x32000 ends past the end"},
      {"L1 in the header", [](Crafted& c) { c.Put(40, 0, 8); }, "lies in the header cluster"},
      {"L1 too small", [](Crafted& c) { c.Put(24, 1ULL << 40, 8); }, "L1 table has 1 entries"},
      {"encrypted", [](Crafted& c) { c.Put(32, 2, 4); }, "encrypted"},
      {"bad compressed data", [](Crafted& c) { c.L2(0, (1ULL << 62) | 2 * Crafted::kCluster); },
       "does not decompress to a whole cluster"},
      {"backing file", [](Crafted& c) { c.Put(8, 4096, 8); }, "backing file"},
      {"external data file", [](Crafted& c) { c.Put(72, 4, 8); }, "external data file"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Crafted img(6);
    img.Fill(2, 'B');
    img.L2(0, 2 * Crafted::kCluster);
    c.edit(img);
    auto raw = Convert(img.bytes(), 1000);
    ASSERT_FALSE(raw.ok());
    EXPECT_EQ(raw.status().code(), absl::StatusCode::kInvalidArgument) << raw.status();
    EXPECT_NE(raw.status().message().find(c.message), std::string::npos) << raw.status();
  }
}

// Tests that a cut-off image is an error however it is cut, never a short disk.
TEST_F(Qcow2StreamTest, RefusesTruncatedStream) {
  ASSERT_EQ(Sh("cd " + *dir_ + " && qemu-img convert -f raw -O qcow2 disk.raw trunc.qcow2"), 0);
  const std::string full = ReadFileOrDie(*dir_ + "/trunc.qcow2");
  for (size_t keep : {full.size() / 2, full.size() - 4096, size_t{200000}, size_t{70000}}) {
    SCOPED_TRACE(keep);
    auto raw = Convert(full.substr(0, keep), 65536);
    ASSERT_FALSE(raw.ok());
    EXPECT_NE(raw.status().message().find("truncated"), std::string::npos) << raw.status();
  }
}

// Tests that images the converter leaves to qemu-img say so with Unimplemented (the importer's cue
// to fall back), and that a header it can stream is recognised as such.
TEST_F(Qcow2StreamTest, LeavesExtendedL2ToQemuImg) {
  ASSERT_EQ(Sh("cd " + *dir_ + " && qemu-img create -q -f qcow2 -o extended_l2=on x.qcow2 1M"), 0);
  const std::string bytes = ReadFileOrDie(*dir_ + "/x.qcow2");
  auto raw = Convert(bytes, 4096);
  EXPECT_EQ(raw.status().code(), absl::StatusCode::kUnimplemented) << raw.status();
  auto h = ParseQcow2Header(reinterpret_cast<const uint8_t*>(bytes.data()), 512);
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(Qcow2Streamable(*h));
  Crafted plain(6);
  h = ParseQcow2Header(reinterpret_cast<const uint8_t*>(plain.bytes().data()), 512);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(Qcow2Streamable(*h));
}

}  // namespace
}  // namespace wisp::populator
