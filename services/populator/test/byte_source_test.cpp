#include "byte_source.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <vector>

#include "checksum.hpp"
#include "sparse_writer.hpp"

namespace wisp::populator {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

std::string OneShot(const std::vector<uint8_t>& data) {
  Sha256 sha;
  sha.Update(data.data(), data.size());
  return sha.HexDigest();
}

// Serves `data` in reads of irregular sizes, then (optionally) an error instead of the end.
class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(const std::vector<uint8_t>& data, absl::Status end = absl::OkStatus())
      : data_(data), end_(std::move(end)) {}
  absl::StatusOr<size_t> Read(uint8_t* buf, size_t n) override {
    if (pos_ == data_.size()) {
      if (!end_.ok()) return end_;
      return 0;
    }
    size_t take = std::min({n, data_.size() - pos_, 1 + (reads_++ * 7919) % 50000});
    std::memcpy(buf, data_.data() + pos_, take);
    pos_ += take;
    return take;
  }

 private:
  const std::vector<uint8_t>& data_;
  absl::Status end_;
  size_t pos_ = 0;
  size_t reads_ = 0;
};

// Reads to the end, alternating Read (a copy) and ReadView (a view) when `views` is set.
std::vector<uint8_t> ReadAll(ByteSource& source, size_t buf_size, bool views = false) {
  std::vector<uint8_t> out, buf(buf_size);
  for (size_t i = 0;; ++i) {
    if (views && i % 2 == 1) {
      auto view = source.ReadView(buf.data(), buf.size());
      EXPECT_TRUE(view.ok()) << view.status();
      if (!view.ok() || view->empty()) return out;
      EXPECT_LE(view->size(), buf.size());
      out.insert(out.end(), view->begin(), view->end());
      continue;
    }
    auto got = source.Read(buf.data(), buf.size());
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok() || *got == 0) return out;
    out.insert(out.end(), buf.begin(), buf.begin() + static_cast<ptrdiff_t>(*got));
  }
}

// Tests that spans hashed on the hasher's thread give the one-shot digest, that each `done` runs
// once, in order, and that HexDigest waits for all of them; Update keeps its place in the order.
TEST(PipelinedSha256Test, HashesSubmittedSpansInOrder) {
  const auto data = RandomBytes(3 << 20, 1);
  PipelinedSha256 sha;
  std::vector<size_t> done_order;  // written only by the hasher thread until HexDigest returns
  size_t pos = 0, i = 0;
  std::mt19937 rng(2);
  while (pos < data.size()) {
    size_t n = std::min<size_t>(data.size() - pos, 1 + rng() % (300 << 10));
    if (i % 5 == 4) {
      sha.Update(data.data() + pos, n);
    } else {
      sha.Submit(data.data() + pos, n, [&done_order, i] { done_order.push_back(i); });
    }
    pos += n;
    ++i;
  }
  EXPECT_EQ(sha.HexDigest(), OneShot(data));
  std::vector<size_t> want;
  for (size_t k = 0; k < i; ++k) {
    if (k % 5 != 4) want.push_back(k);
  }
  EXPECT_EQ(done_order, want);
}

// Tests that destroying the hasher with work queued still hashes it and runs every `done`.
TEST(PipelinedSha256Test, DestructorFinishesQueuedWork) {
  const auto data = RandomBytes(8 << 20, 3);
  std::atomic<int> done{0};
  {
    PipelinedSha256 sha;
    for (size_t pos = 0; pos < data.size(); pos += 1 << 20) {
      sha.Submit(data.data() + pos, 1 << 20, [&done] { ++done; });
    }
  }
  EXPECT_EQ(done.load(), 8);
}

// Tests that the prefetcher delivers the bytes unchanged through its reused chunk pool, by copy
// and by view, and, with a hasher, hashes exactly the bytes served, for chunk sizes around the
// consumer's buffer size.
TEST(PrefetchSourceTest, DeliversAndHashesEveryByte) {
  const auto data = RandomBytes((5 << 20) + 12345, 4);
  for (size_t chunk : {size_t{4096}, size_t{65536}, size_t{1} << 20}) {
    for (size_t depth : {size_t{1}, size_t{3}, size_t{8}}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + " depth " + std::to_string(depth));
      MemorySource inner(data);
      PipelinedSha256 sha;
      std::vector<uint8_t> got;
      {
        PrefetchSource ahead(inner, chunk, depth, &sha);
        got = ReadAll(ahead, 100000, /*views=*/depth != 3);
      }
      EXPECT_TRUE(got == data);
      EXPECT_EQ(sha.HexDigest(), OneShot(data));
    }
  }
  MemorySource inner(data);
  PrefetchSource plain(inner, 1 << 16, 4);
  EXPECT_TRUE(ReadAll(plain, 1 << 20, /*views=*/true) == data);
  // A prefix replayed in front of the prefetcher, the way format detection does it.
  MemorySource rest(data);
  PrefetchSource ahead(rest, 1 << 16, 2);
  std::vector<uint8_t> head(1000, 7);
  PrefixedSource replay(head, ahead);
  auto all = ReadAll(replay, 300, /*views=*/true);
  ASSERT_EQ(all.size(), head.size() + data.size());
  EXPECT_TRUE(std::equal(head.begin(), head.end(), all.begin()));
  EXPECT_TRUE(std::equal(data.begin(), data.end(), all.begin() + 1000));
}

// Tests that an error from the inner source arrives after the bytes read before it.
TEST(PrefetchSourceTest, ErrorArrivesAfterTheData) {
  const auto data = RandomBytes(300000, 5);
  MemorySource inner(data, absl::UnavailableError("connection reset"));
  PipelinedSha256 sha;
  PrefetchSource ahead(inner, 65536, 2, &sha);
  std::vector<uint8_t> got, buf(70000);
  absl::Status end = absl::OkStatus();
  for (;;) {
    auto r = ahead.Read(buf.data(), buf.size());
    if (!r.ok()) {
      end = r.status();
      break;
    }
    ASSERT_NE(*r, 0u) << "clean end instead of the error";
    got.insert(got.end(), buf.begin(), buf.begin() + static_cast<ptrdiff_t>(*r));
  }
  EXPECT_TRUE(got == data);
  EXPECT_EQ(end.code(), absl::StatusCode::kUnavailable);
}

// Tests that a consumer that stops early can destroy the prefetcher while the hasher still holds
// chunks (the destructor waits for them) and the hasher stays usable afterwards.
TEST(PrefetchSourceTest, EarlyDestructionWaitsForTheHasher) {
  const auto data = RandomBytes(4 << 20, 6);
  MemorySource inner(data);
  PipelinedSha256 sha;
  {
    PrefetchSource ahead(inner, 65536, 4, &sha);
    std::vector<uint8_t> buf(1000);
    ASSERT_TRUE(ahead.Read(buf.data(), buf.size()).ok());
  }
  EXPECT_EQ(sha.HexDigest().size(), 64u);
}

// Tests the zero check at every length up to a few stripes, with one set byte at every position.
TEST(IsZeroTest, FindsAnySetByte) {
  std::vector<uint8_t> buf(300, 0);
  for (size_t n = 0; n <= buf.size(); ++n) {
    ASSERT_TRUE(IsZero(buf.data(), n)) << n;
    for (size_t at = 0; at < n; ++at) {
      buf[at] = 0x10;
      ASSERT_FALSE(IsZero(buf.data(), n)) << n << " " << at;
      buf[at] = 0;
    }
  }
  std::vector<uint8_t> block(kSparseBlock, 0);
  EXPECT_TRUE(IsZero(block.data(), block.size()));
  block[kSparseBlock / 2 + 3] = 1;
  EXPECT_FALSE(IsZero(block.data(), block.size()));
}

}  // namespace
}  // namespace wisp::populator
